"""Read and decode the first records of a data set before a run writes anything.

``moxlite.data.sources`` checks what a file's first bytes tell without
TensorFlow; this module reads the first records of the first files with it,
so a file that is not what its data set claims (not TFRecord, not a
tf.train.Example, not an image, a label out of range) is one line naming the
file and what was expected, raised while ``input_fn`` is still being built,
instead of an ``IteratorGetNext`` traceback after ``log_dir`` was written.

Each check takes ``fail(message)``, which returns the exception to raise, so
the built-in data sets raise their ``DataOptionError`` (a recipe points at the
option's line) and MoXing's helpers their ``ArgumentError`` naming the class.
"""

import numpy as np
import tensorflow as tf
from google.protobuf.message import DecodeError

from moxlite.data import sources

PROBE_FILES = 8      # files whose first records are read
PROBE_RECORDS = 2    # records read from each of them
PROBE_CLASSES = 32   # class folders whose first image is decoded


def first_line(error):
    """The first line of a TensorFlow error's message (its op traceback follows)."""
    text = str(getattr(error, "message", None) or error).strip().splitlines()
    return text[0][:200] if text else type(error).__name__


def gfile_head(path, size):
    """The first ``size`` bytes of ``path`` through tf.io.gfile (any file system TensorFlow reads)."""
    with tf.io.gfile.GFile(path, "rb") as handle:
        return handle.read(size)


def check_tfrecord_paths(paths, fail):
    """Every path is a file that starts a TFRecord (read through tf.io.gfile)."""
    for path in paths:
        if tf.io.gfile.isdir(path):
            raise fail(f"{path!r} is a directory; match the TFRecord files in it, e.g. with '<folder>/*'")
        problem = sources.tfrecord_header_problem(gfile_head(path, sources.TFRECORD_HEADER_BYTES))
        if problem:
            raise fail(f"{path!r} {problem}")


def first_records(paths, fail, files=PROBE_FILES, per_file=PROBE_RECORDS):
    """[(path, index, serialized record)]: the first ``per_file`` records of the first ``files`` paths."""
    found = []
    for path in list(paths)[:files]:
        try:
            records = [record.numpy() for record in tf.data.TFRecordDataset(path).take(per_file)]
        except tf.errors.OpError as error:
            raise fail(f"{path!r} is not a readable TFRecord file ({first_line(error)}); expected "
                       f"tf.train.Example records written by tf.io.TFRecordWriter") from None
        if not records:
            raise fail(f"{path!r} holds no record; expected tf.train.Example records")
        found.extend((path, index, record) for index, record in enumerate(records))
    return found


def parse_example(path, index, record, fail):
    """The tf.train.Example of a serialized record, or ``fail`` naming the file."""
    try:
        return tf.train.Example.FromString(record)
    except DecodeError:
        raise fail(f"record {index} of {path!r} is not a tf.train.Example; expected Example records "
                   f"(tf.train.Example(...).SerializeToString())") from None


def feature_kinds(example):
    """{feature key: 'bytes' / 'int64' / 'float'} of a tf.train.Example."""
    kinds = {}
    for key, feature in example.features.feature.items():
        kinds[key] = {"bytes_list": "bytes", "int64_list": "int64", "float_list": "float"}.get(
            feature.WhichOneof("kind"), "empty")
    return kinds


def feature_value(example, key, kind, path, index, option, fail):
    """The single ``kind`` value of feature ``key``, or ``fail`` naming the features the record has."""
    kinds = feature_kinds(example)
    if kinds.get(key) != kind:
        listed = ", ".join(f"{k!r} ({v})" for k, v in sorted(kinds.items())) or "none"
        had = "has no feature" if key not in kinds else f"has feature {key!r} as {kinds[key]}, not {kind}:"
        raise fail(f"record {index} of {path!r} {had} {key!r}; its features are {listed}; set {option} "
                   f"to the {kind} feature")
    values = getattr(example.features.feature[key], f"{kind}_list").value
    if len(values) != 1:
        raise fail(f"record {index} of {path!r}: feature {key!r} holds {len(values)} values; expected one")
    return values[0]


def decode_problem(decode, data):
    """None when ``decode(tf.constant(data))`` runs eagerly; else TensorFlow's first line."""
    try:
        decode(tf.constant(data))
    except (tf.errors.InvalidArgumentError, ValueError) as error:
        return first_line(error)
    return None


def check_images_decode(paths, labels, channels, fail, classes=PROBE_CLASSES):
    """Decode the first image of each of the first ``classes`` classes as tf.io.decode_image does."""
    seen = set()
    for path, label in zip(paths, labels):
        if label in seen or len(seen) >= classes:
            continue
        seen.add(label)
        data = gfile_head(path, -1)
        problem = sources.image_header_problem(data[:8]) or decode_problem(
            lambda tensor: tf.io.decode_image(tensor, channels=channels, expand_animations=False), data)
        if problem:
            if not problem.startswith("is "):
                problem = f"does not decode as {sources.IMAGE_FORMATS} ({problem})"
            raise fail(f"{path!r} {problem}; replace it, or move it out of the class folder")


def check_label(value, offset, num_classes, path, index, fail):
    """A record's label, after ``offset``, is a class index in [0, num_classes)."""
    label = int(value) + int(offset)
    if not 0 <= label < num_classes:
        raise fail(f"record {index} of {path!r} has label {int(value)}, which with label_offset {offset} is "
                   f"{label}, outside [0, {num_classes}); set num_classes, or label_offset (-1 for labels "
                   f"counted from 1)")


def raw_size_problem(data, shape):
    """None when ``data`` holds exactly the uint8 pixels of ``shape``; else what is wrong."""
    needed = int(np.prod(shape))
    if len(data) == needed:
        return None
    return (f"holds {len(data)} bytes, and raw images of image_shape {list(shape)} need {needed}; set "
            f"image_shape, or image_format: encoded for JPEG/PNG bytes")
