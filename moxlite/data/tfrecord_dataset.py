"""MoXing's TFRecord helpers: ``ImageClassificationTFRecordMetadata`` and ``BaseTFRecordDataset``.

Scripts subclass ``BaseTFRecordDataset`` with their own feature keys and
``tf.io.FixedLenFeature`` / ``VarLenFeature`` values, override
``_build_features(self, *parsed)`` (one argument per feature key, in order)
and call ``self._add_feature(name, tensor)``; ``dataset.get([...])`` then
names the features ``input_fn`` returns (see ``feature_dataset``).

Files are listed and read through ``tf.io.gfile``, so any file system
TensorFlow knows (local, or object storage through its plugins) works.
Shuffling is seeded (``seed=0`` by default) so that every worker sees the same
order and the runner's per-worker shards are disjoint and complete.
"""

import tensorflow as tf

from moxlite import errors
from moxlite.data import probe
from moxlite.data.feature_dataset import FeatureDataset, positive_int_or_none
from moxlite.file import data_cache

DEFAULT_SHUFFLE_BUFFER = 10000


def _failure(owner):
    """``fail(message)`` for the probes: an ArgumentError that names ``owner``."""
    return lambda message: errors.ArgumentError(f"{owner}: {message}")


class ImageClassificationTFRecordMetadata:
    """Where the TFRecord files are and how many samples they hold.

    data_dir: the folder of the files.
    file_pattern: a glob relative to data_dir (e.g. ``'train-*'``).
    num_samples: samples in all files (needed by epoch-based learning rates;
        counting them would read every file).
    num_classes: optional, for scripts that read ``meta.num_classes``.
    redirect_dir: accepted for MoXing's signature; moxlite reads data_dir directly.
    allow_single_class: accept ``num_classes`` below 2 (otherwise an error).

    Every matched file must start a TFRecord (checked on its first 12 bytes).
    """

    def __init__(self, data_dir, file_pattern, num_samples=None, num_classes=None, redirect_dir=None,
                 allow_single_class=False):
        if not data_dir or not isinstance(data_dir, str):
            raise errors.ArgumentError(
                f"ImageClassificationTFRecordMetadata: data_dir={errors.describe(data_dir)} must be a folder path")
        num_samples = positive_int_or_none("ImageClassificationTFRecordMetadata", "num_samples", num_samples,
                                           " (the number of records in the files), or None")
        self.data_dir = data_dir
        self.file_pattern = file_pattern
        self.num_samples = self.total_num_samples = num_samples
        self.num_classes = num_classes
        self.redirect_dir = redirect_dir
        local_dir = data_cache.local_copy(data_dir, file_pattern)  # s3:// / obs://: TF reads a local copy
        self.file_paths = sorted(tf.io.gfile.glob(tf.io.gfile.join(local_dir, file_pattern)))
        if not self.file_paths:
            raise errors.ArgumentError(
                f"ImageClassificationTFRecordMetadata: file_pattern {file_pattern!r} matches no file in "
                f"{data_dir!r}; give a glob of TFRecord files relative to data_dir")
        fail = _failure("ImageClassificationTFRecordMetadata")
        if num_classes is not None and num_classes < 2 and not allow_single_class:
            raise fail(f"num_classes={errors.describe(num_classes)}; a classifier needs at least 2 classes: "
                       f"give their number, or pass allow_single_class=True if one class is meant")
        probe.check_tfrecord_paths(self.file_paths, fail)


class BaseTFRecordDataset(FeatureDataset):
    """tf.train.Example records parsed into named features by ``_build_features``.

    meta: an ``ImageClassificationTFRecordMetadata`` (or anything with ``file_paths``).
    feature_keys, feature_values: the Example keys and their ``tf.io`` feature specs.
    shuffle: shuffle file order and records (seeded by ``seed``).
    num_parallel: parallel parse calls (default: tf.data's autotuning).
    num_epochs: passes over the files; None repeats forever (``max_number_of_steps`` decides).
    batch_size: optional; if given it must equal run's per-device batch_size.

    Without an override, ``_build_features`` adds every parsed feature under its key.
    """

    def __init__(self, meta, feature_keys, feature_values, shuffle=True, num_parallel=None, num_epochs=None,
                 batch_size=None, shuffle_buffer_size=DEFAULT_SHUFFLE_BUFFER, seed=0, **unused):
        super().__init__(batch_size=batch_size, num_parallel=num_parallel)
        feature_keys, feature_values = list(feature_keys), list(feature_values)
        if len(feature_keys) != len(feature_values) or not feature_keys:
            raise errors.ArgumentError(
                f"{type(self).__name__}: {len(feature_keys)} feature_keys and {len(feature_values)} "
                "feature_values; give one tf.io.FixedLenFeature/VarLenFeature per key")
        self.num_epochs = positive_int_or_none(type(self).__name__, "num_epochs", num_epochs,
                                               " or None (repeat forever)")
        self.meta = meta
        self.feature_keys, self.feature_values = feature_keys, feature_values
        self.shuffle = bool(shuffle)
        self.shuffle_buffer_size = shuffle_buffer_size
        self.seed = seed
        self._probe_parse()

    def _probe_parse(self):
        """Parse the first records of the first files with the feature specs, now: a file that is not
        TFRecord, or whose records lack a key, fails here, named, before run() writes anything."""
        fail = _failure(type(self).__name__)
        specs = dict(zip(self.feature_keys, self.feature_values))
        for path, index, record in probe.first_records(getattr(self.meta, "file_paths", []), fail):
            try:
                tf.io.parse_single_example(record, specs)
            except (tf.errors.InvalidArgumentError, ValueError, TypeError) as error:
                raise fail(f"record {index} of {path!r} does not parse with feature_keys {self.feature_keys} and "
                           f"their feature_values ({probe.first_line(error)}); make them match the records' "
                           f"features") from None

    def _records(self):
        paths = list(self.meta.file_paths)
        files = tf.data.Dataset.from_tensor_slices(paths)
        if not self.shuffle:
            return tf.data.TFRecordDataset(files).repeat(self.num_epochs)
        files = files.shuffle(len(paths), seed=self.seed, reshuffle_each_iteration=True)
        records = files.interleave(tf.data.TFRecordDataset, cycle_length=min(len(paths), 4),
                                   num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        records = records.shuffle(self.shuffle_buffer_size, seed=self.seed, reshuffle_each_iteration=True)
        return records.repeat(self.num_epochs)

    def _parse(self, record):
        parsed = tf.io.parse_single_example(record, dict(zip(self.feature_keys, self.feature_values)))
        return tuple(parsed[key] for key in self.feature_keys)

    def _build_features(self, *parsed):
        for key, value in zip(self.feature_keys, parsed):
            self._add_feature(key, value)
