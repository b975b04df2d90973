"""The MNIST sample bundled with moxlite (5,000 real digits, 500 per class).

Shipped inside the package (``mnist_5k.npz``) so that an installed moxlite
trains offline. MNIST is by Yann LeCun, Corinna Cortes and Christopher
Burges, CC BY-SA 3.0; see ``LICENSE-MNIST.txt`` beside the data.
"""

import functools
import os

import numpy as np

NUM_CLASSES = 10
IMAGE_SHAPE = (28, 28)
_PATH = os.path.join(os.path.dirname(__file__), "mnist_5k.npz")


@functools.lru_cache(maxsize=1)
def _load():
    with np.load(_PATH) as data:
        return data["images"], data["labels"]


def load_arrays():
    """All 5,000 images (uint8, [5000, 28, 28]) and labels (uint8, [5000]), sorted by label."""
    images, labels = _load()
    return images.copy(), labels.copy()


def split(validation_fraction=0.2, seed=0):
    """A fixed, shuffled, class-balanced train/validation split.

    Returns ``(train_images, train_labels), (val_images, val_labels)`` with
    images as float32 in [0, 1] and labels as int32. The rows are stored
    sorted by label, so they are shuffled with ``seed`` before splitting.
    """
    images, labels = _load()
    order = np.random.RandomState(seed).permutation(len(labels))
    images = images[order].astype(np.float32) / 255.0
    labels = labels[order].astype(np.int32)
    num_val = int(round(len(labels) * validation_fraction))
    return (images[num_val:], labels[num_val:]), (images[:num_val], labels[:num_val])
