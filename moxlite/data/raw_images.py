"""MoXing's raw-image helpers: ``ImageClassificationRawMetadata`` and ``ImageClassificationRawDataset``.

A raw image data set is a folder with one sub-folder per class
(``base_dir/<label>/<image file>``); classes are numbered in sorted folder
order. Folders are listed through ``tf.io.gfile``, so any file system
TensorFlow knows works. The data set yields the features ``image`` (decoded,
then passed through ``augmentation_fn``), ``label`` (int32) and
``image_name`` (the file's path), as ``dataset.get([...])`` names them.
"""

import tensorflow as tf

from moxlite import compat, errors
from moxlite.data import probe, sources
from moxlite.data.sources import IMAGE_EXTENSIONS
from moxlite.data.feature_dataset import FeatureDataset, positive_int_or_none
from moxlite.file import data_cache


class ImageClassificationRawMetadata:
    """What a class-folder tree holds.

    labels: the class names (sub-folder names, sorted); label i is labels[i].
    num_classes, total_num_samples: counts.
    file_paths, label_ids: every image and its label, in folder then file-name order.
    allow_single_class: accept a folder with one class folder (otherwise an error: a
        classifier needs two classes).

    Every class folder must hold an image, and the first ones of each must start
    like one (JPEG, PNG, BMP or GIF), checked here before a run writes anything.
    """

    def __init__(self, base_dir, redirect_dir=None, labels_filename="labels.txt", allow_single_class=False,
                 **unused):
        if isinstance(base_dir, str):
            base_dir = data_cache.local_copy(base_dir)  # s3:// / obs://: TF reads a local copy
        if not base_dir or not isinstance(base_dir, str) or not tf.io.gfile.isdir(base_dir):
            raise errors.ArgumentError(
                f"ImageClassificationRawMetadata: base_dir={errors.describe(base_dir)} is not a folder; give "
                "a folder with one sub-folder of images per class")
        self.base_dir = base_dir
        self.redirect_dir = redirect_dir
        folders = sorted(name.rstrip("/") for name in tf.io.gfile.listdir(base_dir)
                         if tf.io.gfile.isdir(tf.io.gfile.join(base_dir, name)))
        self.labels = _label_order(base_dir, labels_filename, folders)
        self.labels_list = list(self.labels)
        self.labels_to_names = dict(enumerate(self.labels))
        self.names_to_labels = {name: index for index, name in self.labels_to_names.items()}
        self.file_paths, self.label_ids = [], []
        empty = []
        for label_id, label in enumerate(self.labels):
            folder = tf.io.gfile.join(base_dir, label)
            found = [tf.io.gfile.join(folder, name) for name in sorted(tf.io.gfile.listdir(folder))
                     if name.lower().endswith(IMAGE_EXTENSIONS)]
            if not found:
                empty.append(folder)
            self.file_paths.extend(found)
            self.label_ids.extend([label_id] * len(found))
        if not self.file_paths:
            raise errors.ArgumentError(
                f"ImageClassificationRawMetadata: {base_dir!r} holds no {'/'.join(IMAGE_EXTENSIONS)} image in "
                "class sub-folders; lay it out as base_dir/<class name>/<image>")
        if empty:
            raise errors.ArgumentError(
                f"ImageClassificationRawMetadata: class folder {empty[0]!r} holds no "
                f"{'/'.join(IMAGE_EXTENSIONS)} image; add images or remove the folder")
        fail = _failure("ImageClassificationRawMetadata")
        try:
            sources.check_class_count(len(self.labels), allow_single_class, "base_dir",
                                      f"{base_dir!r} has {len(self.labels)} class folder ({self.labels[0]!r})")
            sources.check_image_headers(self.file_paths, self.label_ids, "base_dir", read=probe.gfile_head)
        except sources.DataOptionError as error:
            raise fail(str(error).replace("allow_single_class", "allow_single_class=True")) from None
        self.num_classes = len(self.labels)
        self.total_num_samples = len(self.file_paths)


def _label_order(base_dir, labels_filename, folders):
    """The class names by label id: ``labels_filename`` (``0: name`` lines) when base_dir has it, else
    the sub-folders sorted by name. The file must name exactly the sub-folders (MoXing's rule)."""
    from moxlite.data.tfrecord_dataset import read_labels_file
    labels = read_labels_file(tf.io.gfile.join(base_dir, labels_filename)) if labels_filename else None
    if labels is None:
        return folders
    names = [labels[index] for index in sorted(labels)]
    if sorted(labels) != list(range(len(labels))) or sorted(names) != folders:
        raise errors.ArgumentError(
            f"ImageClassificationRawMetadata: {labels_filename} in {base_dir!r} names {names} with ids "
            f"{sorted(labels)}; it must give ids 0..{len(folders) - 1} to exactly the sub-folders {folders}")
    return names


def _failure(owner):
    """``fail(message)`` for the probes: an ArgumentError that names ``owner``."""
    return lambda message: errors.ArgumentError(f"{owner}: {message}")


class AsyncRawGenerator:
    """MoXing's asynchronous reader class, accepted as ``reader_class``: tf.data already reads ahead."""


class ImageClassificationRawDataset(FeatureDataset):
    """The images of an ``ImageClassificationRawMetadata``, decoded and augmented on tf.data.

    batch_size: optional; if given it must equal run's per-device batch_size.
    num_epochs: passes over the images; None repeats forever.
    shuffle: shuffle the images every pass (seeded by ``seed``, so every worker
        sees one order and the runner's per-worker shards partition it).
    augmentation_fn: ``image -> image`` on one decoded uint8 RGB image, e.g.
        ``get_data_augmentation_fn(name, mode)``; images must come out of it of
        one size for batching.
    reader_class: accepted for MoXing's signature (``AsyncRawGenerator``).
    image_size: resize every decoded image to it (an int or [height, width]; nearest neighbour, MoXing's
        default), before augmentation_fn; None keeps each image's size.
    label_one_hot: ``label`` as a float one-hot vector of ``metadata.num_classes``.
    Accepted for MoXing's signature and not needed on tf.data: num_readers, shuffle_buffer_size, capacity,
    cache_dir, preprocess_threads, remove_cache_on_finish, private_num_threads, reader_kwargs,
    drop_remainder (the runner drops the last short batch in TRAIN only).
    preprocess_fn (MoXing's batched function of the raw buffers) is refused: give augmentation_fn.
    """

    def __init__(self, metadata, batch_size=None, num_readers=8, num_epochs=None, shuffle=True,
                 shuffle_buffer_size=16, capacity=256, cache_dir=None, preprocess_fn=None, preprocess_threads=12,
                 image_size=None, remove_cache_on_finish=True, private_num_threads=0, reader_class=None,
                 reader_kwargs=None, drop_remainder=False, augmentation_fn=None, label_one_hot=False,
                 num_parallel=None, seed=0, channels=3):
        if preprocess_fn is not None:
            raise errors.ArgumentError(
                "ImageClassificationRawDataset: preprocess_fn (a batched function of the raw image buffers) is "
                "not supported; give augmentation_fn=image -> image, applied to each decoded image")
        super().__init__(batch_size=batch_size, num_parallel=num_parallel)
        self.image_size = [image_size, image_size] if isinstance(image_size, int) else image_size
        self.label_one_hot = bool(label_one_hot)
        self.num_epochs = positive_int_or_none("ImageClassificationRawDataset", "num_epochs", num_epochs,
                                               " or None (repeat forever)")
        if augmentation_fn is not None and not callable(augmentation_fn):
            raise errors.ArgumentError(
                f"ImageClassificationRawDataset: augmentation_fn={errors.describe(augmentation_fn)} is not "
                "callable; give a function image -> image such as mox.get_data_augmentation_fn(name, mode)")
        self.metadata = metadata
        self.shuffle = bool(shuffle)
        self.augmentation_fn = augmentation_fn
        self.seed = seed
        self.channels = channels
        # Decode the first image of each class now: a file that is not one fails here, named,
        # before run() writes anything (not as an IteratorGetNext traceback inside the run).
        probe.check_images_decode(metadata.file_paths, metadata.label_ids, channels,
                                  _failure(type(self).__name__))

    def _records(self):
        records = tf.data.Dataset.from_tensor_slices(
            (self.metadata.file_paths, tf.constant(self.metadata.label_ids, tf.int32)))
        if self.shuffle:
            records = records.shuffle(len(self.metadata.file_paths), seed=self.seed, reshuffle_each_iteration=True)
        return records.repeat(self.num_epochs)

    def _parse(self, path, label):
        return tf.io.read_file(path), label, path

    def _build_features(self, data, label, path):
        image = tf.io.decode_image(data, channels=self.channels, expand_animations=False)
        image.set_shape([None, None, self.channels])
        if self.image_size is not None:
            image = tf.image.resize(image, self.image_size, method="nearest")
        if self.augmentation_fn is not None:
            image = compat.converted_user_function(self.augmentation_fn)(image)
        self._add_feature("image", image)
        self._add_feature("label", tf.one_hot(label, self.metadata.num_classes) if self.label_one_hot else label)
        self._add_feature("image_name", path)
        self._add_feature("label_desc", tf.gather(tf.constant(self.metadata.labels), label))
