"""MoXing's TFRecord helpers: metadata, ``BaseTFRecordDataset``, ``ImageClassificationTFRecordDataset``, ``get_tfrecord``.

Scripts subclass ``BaseTFRecordDataset`` with their own feature keys and
``tf.io.FixedLenFeature`` / ``VarLenFeature`` values, override
``_build_features(self, *parsed)`` (one argument per feature key, in order)
and call ``self._add_feature(name, tensor)``; ``dataset.get([...])`` then
names the features ``input_fn`` returns (see ``feature_dataset``).

The hooks a subclass may override, all of MoXing's that moxlite knows:
``_build_features`` (or its other spelling ``_build_feature``: one of the two),
and ``_parser(self, record)``, which replaces the Example parsing (MoXing's
older form, with no ``feature_keys``/``feature_values``): it returns a tuple of
tensors handed to ``_build_features``, or a dict whose items become features
as they are. Any other private ``_parse*``/``_build*``/``_decode*`` method a
subclass defines would be silently unused, so it is refused, naming these.

Files are listed and read through ``tf.io.gfile``, so any file system
TensorFlow knows (local, or object storage through a local copy) works.
Shuffling is seeded (``seed=0`` by default) so that every worker sees the same
order and the runner's per-worker shards are disjoint and complete.
"""

import tensorflow as tf

from moxlite import compat, errors, logs
from moxlite.data import probe
from moxlite.data.feature_dataset import FeatureDataset, positive_int_or_none
from moxlite.file import data_cache

DEFAULT_SHUFFLE_BUFFER = 10000
SUPPORTED_HOOKS = ("_build_features", "_build_feature", "_parser")
_HOOK_PREFIXES = ("_pars", "_build", "_decode")


def read_labels_file(path):
    """``{label id: name}`` from a MoXing labels file (``0: daisy`` per line), or None when absent.

    ``path`` may be local or on object storage (read through ``mox.file``).
    """
    from moxlite import file as mox_file
    if not mox_file.exists(path):
        return None
    labels = {}
    for number, line in enumerate(mox_file.read(path).splitlines(), 1):
        if not line.strip():
            continue
        index, sep, name = line.partition(":")
        if not sep or not index.strip().isdigit():
            raise errors.ArgumentError(
                f"labels file {path!r} line {number}: {line.strip()!r} is not '<id>: <name>'")
        labels[int(index)] = name.strip()
    return labels


def _failure(owner):
    """``fail(message)`` for the probes: an ArgumentError that names ``owner``."""
    return lambda message: errors.ArgumentError(f"{owner}: {message}")


class ImageClassificationTFRecordMetadata:
    """Where the TFRecord files are and how many samples they hold.

    base_dir: the folder of the files (``data_dir`` is accepted too).
    file_pattern: a glob relative to base_dir (e.g. ``'train-*'``); ``file_patterns`` is accepted,
        as MoXing's documentation example spells it.
    num_samples: records in all files; None counts them (reading every file once, as MoXing did).
    num_classes: optional; else the number of names in ``label_map_file``, else 0.
    redirect_dir: accepted for MoXing's signature; moxlite reads base_dir (a local copy when remote).
    label_map_file: ``labels.txt`` in base_dir, ``0: name`` per line, read into ``labels_to_names``.
    allow_single_class: accept a known ``num_classes`` of 1 (otherwise an error: a classifier needs two).

    Every matched file must start a TFRecord (checked on its first 12 bytes) before anything else reads it.
    """

    def __init__(self, base_dir=None, file_pattern=None, num_samples=None, redirect_dir=None, num_classes=0,
                 label_map_file="labels.txt", data_dir=None, file_patterns=None, allow_single_class=False):
        base_dir = base_dir if base_dir is not None else data_dir
        file_pattern = file_pattern if file_pattern is not None else file_patterns
        if not base_dir or not isinstance(base_dir, str):
            raise errors.ArgumentError(
                f"ImageClassificationTFRecordMetadata: base_dir={errors.describe(base_dir)} must be a folder path")
        if not file_pattern or not isinstance(file_pattern, str):
            raise errors.ArgumentError(
                f"ImageClassificationTFRecordMetadata: file_pattern={errors.describe(file_pattern)} must be a glob "
                "of TFRecord files relative to base_dir, e.g. '*train*.tfrecord'")
        num_samples = positive_int_or_none("ImageClassificationTFRecordMetadata", "num_samples", num_samples,
                                           " (the number of records in the files), or None to count them")
        self.base_dir = self.data_dir = base_dir
        self.file_pattern = file_pattern
        self.redirect_dir = redirect_dir
        local_dir = data_cache.local_copy(base_dir, file_pattern)  # s3:// / obs://: TF reads a local copy
        self.file_paths = sorted(tf.io.gfile.glob(tf.io.gfile.join(local_dir, file_pattern)))
        if not self.file_paths:
            raise errors.ArgumentError(
                f"ImageClassificationTFRecordMetadata: file_pattern {file_pattern!r} matches no file in "
                f"{base_dir!r}; give a glob of TFRecord files relative to base_dir")
        fail = _failure("ImageClassificationTFRecordMetadata")
        probe.check_tfrecord_paths(self.file_paths, fail)
        if num_samples is None:
            logs.get_logger().info("Counting the records of %d TFRecord file(s) in %s; pass num_samples to skip this",
                                   len(self.file_paths), base_dir)
            num_samples = int(tf.data.TFRecordDataset(self.file_paths).reduce(
                tf.constant(0, tf.int64), lambda count, _: count + 1).numpy())
        self.num_samples = self.total_num_samples = num_samples
        labels = read_labels_file(base_dir.rstrip("/") + "/" + label_map_file) if label_map_file else None
        self.labels_to_names = labels
        self.num_classes = int(num_classes or (len(labels) if labels else 0))
        if 0 < self.num_classes < 2 and not allow_single_class:   # 0: not known
            raise fail(f"num_classes={self.num_classes}; a classifier needs at least 2 classes: "
                       f"give their number, or pass allow_single_class=True if one class is meant")


def _own_hooks(cls):
    """Private methods named like a data-set hook that ``cls`` (below BaseTFRecordDataset) defines."""
    names = set()
    for klass in cls.__mro__:
        if klass is BaseTFRecordDataset or klass is FeatureDataset or klass is object:
            break
        for name, value in vars(klass).items():
            if (callable(value) and name.startswith(_HOOK_PREFIXES) and not name.startswith("__")
                    and name not in SUPPORTED_HOOKS):
                names.add(name)
    return sorted(names)


def _overrides(instance, name):
    return getattr(type(instance), name) is not getattr(BaseTFRecordDataset, name)


class BaseTFRecordDataset(FeatureDataset):
    """tf.train.Example records parsed into named features by ``_build_features``.

    meta: an ``ImageClassificationTFRecordMetadata`` (or anything with ``file_paths``).
    feature_keys, feature_values: the Example keys and their ``tf.io`` feature specs; both may be
        left out when the subclass overrides ``_parser(self, record)``.
    shuffle: shuffle file order and records (seeded by ``seed``).
    num_parallel: parallel parse calls (default: tf.data's autotuning).
    num_epochs: passes over the files; None repeats forever (``max_number_of_steps`` decides).
    batch_size: optional; if given it must equal run's per-device batch_size.

    Without an override, ``_build_features`` adds every parsed feature under its key.
    """

    def __init__(self, meta, feature_keys=None, feature_values=None, shuffle=True, num_parallel=None,
                 num_epochs=None, batch_size=None, shuffle_buffer_size=DEFAULT_SHUFFLE_BUFFER, seed=0, **unused):
        super().__init__(batch_size=batch_size, num_parallel=num_parallel)
        owner = type(self).__name__
        unknown = _own_hooks(type(self))
        if unknown:
            raise errors.ArgumentError(
                f"{owner} overrides {', '.join(unknown)}, which moxlite never calls; the hooks it calls are "
                f"_parser(self, record) and _build_features(self, *parsed) (or _build_feature): rename yours")
        if _overrides(self, "_build_feature") and _overrides(self, "_build_features"):
            raise errors.ArgumentError(
                f"{owner} overrides both _build_feature and _build_features; they are one hook, keep one")
        self._custom_parser = _overrides(self, "_parser")
        if feature_keys is None and feature_values is None and not self._custom_parser:
            raise errors.ArgumentTypeError(
                f"{owner}: no feature_keys/feature_values and no _parser; give feature_keys=[...] and "
                f"feature_values=[tf.io.FixedLenFeature(...), ...], or override _parser(self, record)")
        feature_keys, feature_values = list(feature_keys or []), list(feature_values or [])
        if len(feature_keys) != len(feature_values) or (not feature_keys and not self._custom_parser):
            raise errors.ArgumentError(
                f"{owner}: {len(feature_keys)} feature_keys and {len(feature_values)} "
                "feature_values; give one tf.io.FixedLenFeature/VarLenFeature per key")
        self.num_epochs = positive_int_or_none(owner, "num_epochs", num_epochs, " or None (repeat forever)")
        self.meta = meta
        self.feature_keys, self.feature_values = feature_keys, feature_values
        self.shuffle = bool(shuffle)
        self.shuffle_buffer_size = shuffle_buffer_size
        self.seed = seed
        self._parsed_names = list(feature_keys)
        if tf.executing_eagerly():   # input_fn traced again per sample (tensor work on get()) probed already
            self._probe_parse()

    def _probe_parse(self):
        """Parse the first records of the first files with the feature specs, now: a file that is not
        TFRecord, or whose records lack a key, fails here, named, before run() writes anything. A
        subclass with its own ``_parser`` and no feature specs gets the TFRecord check alone."""
        fail = _failure(type(self).__name__)
        specs = dict(zip(self.feature_keys, self.feature_values))
        for path, index, record in probe.first_records(getattr(self.meta, "file_paths", []), fail):
            if not specs:
                continue
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
        if self._custom_parser:
            parsed = self._parser(record)
            if isinstance(parsed, dict):
                self._parsed_names = list(parsed)
                return tuple(parsed.values())
            return tuple(parsed) if isinstance(parsed, (tuple, list)) else (parsed,)
        parsed = tf.io.parse_single_example(record, dict(zip(self.feature_keys, self.feature_values)))
        return tuple(parsed[key] for key in self.feature_keys)

    def _parser(self, record):
        """MoXing's parsing hook: one serialized Example -> a tuple (or dict) of tensors; override to replace."""
        parsed = tf.io.parse_single_example(record, dict(zip(self.feature_keys, self.feature_values)))
        return tuple(parsed[key] for key in self.feature_keys)

    def _build_feature(self, *parsed):
        """MoXing's other spelling of ``_build_features``: a subclass overrides one of the two."""
        return self._default_build(*parsed)

    def _build_features(self, *parsed):
        if _overrides(self, "_build_feature"):
            return self._build_feature(*parsed)
        return self._default_build(*parsed)

    def _default_build(self, *parsed):
        if len(self._parsed_names) != len(parsed):
            raise errors.ArgumentError(
                f"{type(self).__name__}._parser returned {len(parsed)} tensors and no names for them; return a "
                f"dict {{name: tensor}}, or override _build_features(self, *parsed) to name them")
        for key, value in zip(self._parsed_names, parsed):
            self._add_feature(key, value)


class ImageClassificationTFRecordDataset(BaseTFRecordDataset):
    """Image-classification TFRecords (``image/encoded``, ``image/class/label``) as ``image`` and ``label``.

    metadata (or ``meta``): an ``ImageClassificationTFRecordMetadata``.
    image_size: resize every decoded image to it (an int or [height, width]; nearest neighbour, as
        MoXing's default); None keeps the size.
    augmentation_fn: ``image -> image`` on one decoded uint8 image, after the resize.
    label_one_hot: ``label`` as a float one-hot vector of ``metadata.num_classes``.
    custom_feature_keys / custom_feature_values: more Example keys, each added as a feature of its name.
    Accepted for MoXing's signature and not needed on tf.data: cache_dir, remove_cache_on_finish,
    private_num_threads, drop_remainder (the runner drops the last short batch in TRAIN only).
    preprocess_fn (MoXing's batched queue-reader function) is refused: give augmentation_fn.
    """

    def __init__(self, metadata=None, batch_size=None, shuffle=True, shuffle_buffer_size=6400, num_parallel=8,
                 num_epochs=None, cache_dir=None, preprocess_fn=None, image_size=None, remove_cache_on_finish=True,
                 private_num_threads=0, custom_feature_keys=None, custom_feature_values=None, drop_remainder=False,
                 augmentation_fn=None, label_one_hot=False, meta=None, seed=0, image_key="image/encoded",
                 label_key="image/class/label", channels=3):
        if preprocess_fn is not None:
            raise errors.ArgumentError(
                "ImageClassificationTFRecordDataset: preprocess_fn (a batched queue-reader function) is not "
                "supported; give augmentation_fn=image -> image, applied to each decoded image")
        metadata = metadata if metadata is not None else meta
        if metadata is None:
            raise errors.ArgumentError("ImageClassificationTFRecordDataset: give metadata="
                                       "ImageClassificationTFRecordMetadata(base_dir, file_pattern)")
        if augmentation_fn is not None and not callable(augmentation_fn):
            raise errors.ArgumentError(
                f"ImageClassificationTFRecordDataset: augmentation_fn={errors.describe(augmentation_fn)} is not "
                "callable; give a function image -> image such as mox.get_data_augmentation_fn(name, mode)")
        custom_keys, custom_values = list(custom_feature_keys or []), list(custom_feature_values or [])
        if len(custom_keys) != len(custom_values):
            raise errors.ArgumentError(
                f"ImageClassificationTFRecordDataset: {len(custom_keys)} custom_feature_keys and "
                f"{len(custom_values)} custom_feature_values; give one feature spec per key")
        if label_one_hot and not getattr(metadata, "num_classes", 0):
            raise errors.ArgumentError(
                "ImageClassificationTFRecordDataset(label_one_hot=True) needs the number of classes: give "
                "ImageClassificationTFRecordMetadata(num_classes=...) or a labels.txt")
        super().__init__(metadata, feature_keys=[image_key, label_key] + custom_keys,
                         feature_values=[tf.io.FixedLenFeature([], tf.string),
                                         tf.io.FixedLenFeature([], tf.int64)] + custom_values,
                         shuffle=shuffle, num_parallel=num_parallel, num_epochs=num_epochs, batch_size=batch_size,
                         shuffle_buffer_size=shuffle_buffer_size, seed=seed)
        self.metadata = metadata
        self.image_size = [image_size, image_size] if isinstance(image_size, int) else image_size
        self.augmentation_fn = augmentation_fn
        self.label_one_hot = bool(label_one_hot)
        self.custom_keys = custom_keys
        self.channels = channels

    def _build_features(self, data, label, *custom):
        image = tf.io.decode_image(data, channels=self.channels, expand_animations=False)
        image.set_shape([None, None, self.channels])
        if self.image_size is not None:
            image = tf.image.resize(image, self.image_size, method="nearest")
        if self.augmentation_fn is not None:
            image = compat.converted_user_function(self.augmentation_fn)(image)
        label = tf.cast(tf.reshape(label, []), tf.int32)
        if self.label_one_hot:
            label = tf.one_hot(label, self.metadata.num_classes)
        self._add_feature("image", image)
        self._add_feature("label", label)
        for key, value in zip(self.custom_keys, custom):
            self._add_feature(key, value)


class TFRecordItemsDataset(BaseTFRecordDataset):
    """What ``get_tfrecord`` returns: one feature per item of ``items_to_handlers``."""

    def __init__(self, meta, keys_to_features, items_to_handlers, **kwargs):
        super().__init__(meta, feature_keys=list(keys_to_features), feature_values=list(keys_to_features.values()),
                         **kwargs)
        for item, handler in items_to_handlers.items():
            keys = getattr(handler, "keys", None)
            if keys is None or not callable(getattr(handler, "tensors_to_item", None)):
                raise errors.ArgumentError(
                    f"get_tfrecord: items_to_handlers[{item!r}] is {errors.describe(handler)}; give an item handler "
                    f"such as mox.tfexample_decoder.Tensor('key') or .Image()")
            missing = [key for key in keys if key not in keys_to_features]
            if missing and not isinstance(handler, _image_handler_types()):
                raise errors.ArgumentError(
                    f"get_tfrecord: items_to_handlers[{item!r}] reads {missing}, which keys_to_features does not "
                    f"parse; add them to keys_to_features")
        self.items_to_handlers = dict(items_to_handlers)

    def _build_features(self, *parsed):
        tensors = dict(zip(self.feature_keys, parsed))
        for item, handler in self.items_to_handlers.items():
            self._add_feature(item, handler.tensors_to_item(tensors))


def _image_handler_types():
    from moxlite.data import tfexample_decoder
    return (tfexample_decoder.Image,)   # its format key is optional: decode_image reads the format itself


def get_tfrecord(dataset_dir, file_pattern, num_samples=None, keys_to_features=None, items_to_handlers=None,
                 shuffle=True, num_epochs=None, num_readers=None, num_parallel=None, batch_size=None, seed=0,
                 **unused):
    """MoXing's ``mox.get_tfrecord``: the items of TFRecord files, read with slim-style handlers.

    ``keys_to_features`` maps Example keys to ``tf.io`` feature specs; ``items_to_handlers`` maps each
    item name to a handler (``mox.tfexample_decoder.Tensor``/``Image``/``ItemHandlerCallback``);
    ``dataset.get([...items])`` names what ``input_fn`` returns. ``num_samples`` None counts the records.
    """
    if not isinstance(keys_to_features, dict) or not keys_to_features:
        raise errors.ArgumentError(
            f"get_tfrecord: keys_to_features={errors.describe(keys_to_features)} must be a dict "
            "{example key: tf.io.FixedLenFeature(...)}")
    if not isinstance(items_to_handlers, dict) or not items_to_handlers:
        raise errors.ArgumentError(
            f"get_tfrecord: items_to_handlers={errors.describe(items_to_handlers)} must be a dict "
            "{item name: mox.tfexample_decoder.Tensor(key)}")
    meta = ImageClassificationTFRecordMetadata(dataset_dir, file_pattern, num_samples=num_samples)
    return TFRecordItemsDataset(meta, keys_to_features, items_to_handlers, shuffle=shuffle, num_epochs=num_epochs,
                                num_parallel=num_parallel or num_readers, batch_size=batch_size, seed=seed)
