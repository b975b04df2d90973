"""What ported scripts took from ``tensorflow.examples.tutorials.mnist.input_data`` (gone in TF2).

``read_data_sets(folder, one_hot=True)`` reads the four MNIST idx files
(``train-images-idx3-ubyte.gz`` ...) of ``folder`` into ``.train`` and ``.test``
sets with ``images`` (float32 [n, 784] in [0, 1]), ``labels`` and
``next_batch(n)`` (reshuffled every epoch), as the tutorial module did.
"""

import gzip
import os

import numpy as np


def _read(path, header, dtype=np.uint8):
    with gzip.open(path, "rb") as stream:
        data = stream.read()
    return np.frombuffer(data, dtype, offset=header)


class DataSet:
    def __init__(self, images, labels, seed):
        self.images, self.labels = images, labels
        self.num_examples = len(images)
        self._rng = np.random.RandomState(seed)
        self._order, self._next = self._rng.permutation(self.num_examples), 0

    def next_batch(self, batch_size):
        if self._next + batch_size > self.num_examples:
            self._order, self._next = self._rng.permutation(self.num_examples), 0
        index = self._order[self._next:self._next + batch_size]
        self._next += batch_size
        return self.images[index], self.labels[index]


class Datasets:
    pass


def read_data_sets(folder, one_hot=False):
    sets = Datasets()
    for name, prefix in (("train", "train"), ("test", "t10k")):
        images = _read(os.path.join(folder, f"{prefix}-images-idx3-ubyte.gz"), 16).reshape(-1, 784)
        labels = _read(os.path.join(folder, f"{prefix}-labels-idx1-ubyte.gz"), 8).astype(np.int64)
        if one_hot:
            labels = np.eye(10, dtype=np.float32)[labels]
        setattr(sets, name, DataSet(images.astype(np.float32) / 255.0, labels, seed=0))
    return sets
