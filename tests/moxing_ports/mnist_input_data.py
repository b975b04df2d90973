"""A local stand-in for TF1's ``tensorflow.examples.tutorials.mnist.input_data``.

TF2 no longer ships that module, and the tests have no network. ``read_data_sets``
reads ``mnist_5k.npz`` under ``data_url`` (shuffled once with seed 0, as the other
ports do): the first 1,000 rows are the test set, the next 800 the training set.
``next_batch`` hands out consecutive rows and starts over at the end, as TF1's did with
``shuffle=False``; one-hot labels as float32 rows when ``one_hot``.
"""

import collections
import os

import numpy as np

NUM_TEST = 1000
NUM_TRAIN = 800


class DataSet:
    def __init__(self, images, labels, one_hot):
        self._images = images
        self._labels = np.eye(10, dtype=np.float32)[labels] if one_hot else labels
        self._position = 0

    @property
    def num_examples(self):
        return len(self._images)

    def next_batch(self, batch_size):
        rows = (self._position + np.arange(batch_size)) % self.num_examples
        self._position = (self._position + batch_size) % self.num_examples
        return self._images[rows], self._labels[rows]


Datasets = collections.namedtuple("Datasets", ["train", "test"])


def read_data_sets(data_url, one_hot=False):
    data = np.load(os.path.join(data_url, "mnist_5k.npz"))
    order = np.random.RandomState(0).permutation(len(data["labels"]))
    images = data["images"][order].reshape(-1, 784).astype(np.float32) / 255.0
    labels = data["labels"][order].astype(np.int64)
    test = DataSet(images[:NUM_TEST], labels[:NUM_TEST], one_hot)
    train = DataSet(images[NUM_TEST:NUM_TEST + NUM_TRAIN], labels[NUM_TEST:NUM_TEST + NUM_TRAIN], one_hot)
    return Datasets(train=train, test=test)
