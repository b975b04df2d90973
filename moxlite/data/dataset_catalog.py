"""MoXing's built-in data sets by name: ``mox.get_dataset_meta(name)`` and ``mox.get_dataset(name, split_name, dataset_dir)``.

MoXing took these from TF-slim's data-set factory: each is a folder of
TFRecord files of tf.train.Examples with ``image/encoded`` (PNG or JPEG),
``image/format`` and ``image/class/label``, one file pattern per split.
moxlite knows the same four, with slim's file names and split sizes:

- ``mnist``: ``mnist_<split>.tfrecord``, train 60000 / test 10000, 10 classes, 28x28x1.
- ``cifar10``: ``cifar10_<split>.tfrecord``, train 50000 / test 10000, 10 classes, 32x32x3.
- ``flowers``: ``flowers_<split>_*.tfrecord``, train 3320 / validation 350, 5 classes.
- ``imagenet``: ``<split>-*``, train 1281167 / validation 50000, 1001 classes (0 = background).

``splits_to_sizes`` lists the training split first, so MoXing's documented
``split_name_train, split_name_eval = dataset_meta.splits_to_sizes.keys()`` works.
``get_dataset`` returns a data set whose ``get(['image', 'label'])`` gives the
decoded uint8 image and the int32 label (see ``feature_dataset``); its number of
samples is the split's size unless ``num_samples`` is given (a smaller copy).
"""

import collections
import dataclasses

import tensorflow as tf

from moxlite import errors
from moxlite.data.tfrecord_dataset import BaseTFRecordDataset, ImageClassificationTFRecordMetadata

ITEMS = {"image": "A color image of varying size.", "label": "A single integer class label."}


@dataclasses.dataclass(frozen=True)
class DatasetMeta:
    """What ``get_dataset_meta`` returns: slim's facts about one named data set."""

    name: str
    file_pattern: str
    splits_to_sizes: collections.OrderedDict
    num_classes: int
    channels: int
    items_to_descriptions: dict = dataclasses.field(default_factory=lambda: dict(ITEMS))

    def file_pattern_of(self, split_name):
        return self.file_pattern % split_name


_CATALOG = {
    "mnist": DatasetMeta("mnist", "mnist_%s.tfrecord", collections.OrderedDict(train=60000, test=10000), 10, 1),
    "cifar10": DatasetMeta("cifar10", "cifar10_%s.tfrecord", collections.OrderedDict(train=50000, test=10000), 10, 3),
    "flowers": DatasetMeta("flowers", "flowers_%s_*.tfrecord", collections.OrderedDict(train=3320, validation=350),
                           5, 3),
    "imagenet": DatasetMeta("imagenet", "%s-*", collections.OrderedDict(train=1281167, validation=50000), 1001, 3),
}


def get_dataset_meta(name):
    """MoXing's ``mox.get_dataset_meta(name)``: ``num_classes``, ``splits_to_sizes``, ``file_pattern``."""
    if name not in _CATALOG:
        raise errors.ArgumentError(
            f"get_dataset_meta: unknown data set {name!r}; moxlite knows {', '.join(sorted(_CATALOG))}")
    return _CATALOG[name]


class NamedDataset(BaseTFRecordDataset):
    """One split of a named data set: features ``image`` (uint8, decoded) and ``label`` (int32)."""

    def __init__(self, meta, channels, **kwargs):
        super().__init__(meta, feature_keys=["image/encoded", "image/class/label"],
                         feature_values=[tf.io.FixedLenFeature([], tf.string),
                                         tf.io.FixedLenFeature([], tf.int64)], **kwargs)
        self.channels = channels

    def _build_features(self, data, label):
        image = tf.io.decode_image(data, channels=self.channels, expand_animations=False)
        image.set_shape([None, None, self.channels])
        self._add_feature("image", image)
        self._add_feature("label", tf.cast(tf.reshape(label, []), tf.int32))


def get_dataset(name, split_name, dataset_dir, num_samples=None, shuffle=None, num_epochs=None, batch_size=None,
                capacity=None, seed=0, **unused):
    """MoXing's ``mox.get_dataset``: split ``split_name`` of data set ``name``, from ``dataset_dir``.

    shuffle: default True for the training split (the first of ``splits_to_sizes``), else False.
    capacity (MoXing's queue size) is accepted; tf.data prefetches on its own.
    """
    meta = get_dataset_meta(name)
    if split_name not in meta.splits_to_sizes:
        raise errors.ArgumentError(
            f"get_dataset({name!r}): split_name={split_name!r} is not one of {list(meta.splits_to_sizes)}")
    training = split_name == next(iter(meta.splits_to_sizes))
    files = ImageClassificationTFRecordMetadata(
        dataset_dir, meta.file_pattern_of(split_name),
        num_samples=num_samples or meta.splits_to_sizes[split_name], num_classes=meta.num_classes)
    return NamedDataset(files, meta.channels, shuffle=training if shuffle is None else shuffle,
                        num_epochs=num_epochs, batch_size=batch_size, seed=seed)
