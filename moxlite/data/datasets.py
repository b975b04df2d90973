"""Built-in data sets: each gives an ``input_fn(mode)`` in MoXing's form and the facts a run needs.

``input_fn(mode)`` returns a ``tf.data.Dataset`` of single ``(image, label)``
samples (``run(auto_batch=True)`` batches them): images float32 of shape
``[height, width, channels]``, labels int32 scalars. In TRAIN the training
split is shuffled and repeated ``epochs`` times (forever when None, so that
``max_number_of_steps`` decides); every other mode reads the held-out split
once, in order.

- ``mnist``: the 5,000 real digits bundled with moxlite (moxlite.data.mnist).
- ``synthetic``: generated images of any shape and class count.
- ``tfrecord``: tf.train.Example files (ImageNet layout by default).
- ``image_folder``: one sub-folder of images per class.
- ``text``, ``bert_tfrecord``, ``bert_synthetic``: masked-LM examples, dicts of token ids
  (moxlite.data.text_datasets); their ``DataSet`` is a ``MaskedLMData``.
"""

import dataclasses
from typing import Callable, Optional, Tuple

import numpy as np
import tensorflow as tf

from moxlite import errors
from moxlite.contract import ModeKeys
from moxlite.data import mnist as mnist_data, sources
from moxlite.data.sources import DataOptionError



@dataclasses.dataclass
class DataSet:
    """A data set ready for ``run``.

    input_fn: ``input_fn(mode)`` -> Dataset of single (image, label) samples.
    image_shape: shape of one image, [height, width, channels].
    num_classes: labels are in [0, num_classes).
    num_samples: training samples in one epoch (None when unknown).
    num_eval_samples: held-out samples (None when unknown).
    """

    input_fn: Callable
    image_shape: Tuple[int, ...]
    num_classes: int
    num_samples: Optional[int]
    num_eval_samples: Optional[int]


def _make_input_fn(train, held_out, epochs, shuffle_buffer, seed):
    """input_fn(mode) over two Dataset factories: ``train`` for TRAIN, ``held_out`` otherwise."""

    def input_fn(mode):
        if mode == ModeKeys.TRAIN:
            dataset = train()
            if shuffle_buffer:
                dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
            return dataset.repeat(epochs)
        return held_out()

    return input_fn


# ----------------------------------------------------------------- bundled MNIST

def mnist(validation_fraction=0.2, split_seed=0, epochs=None, shuffle_buffer=10000, seed=0):
    """The bundled MNIST digits: images [28, 28, 1] in [0, 1], 10 classes.

    The split is ``moxlite.data.mnist.split(validation_fraction, split_seed)``:
    4,000 training and 1,000 held-out digits by default.
    """
    (train_images, train_labels), (val_images, val_labels) = mnist_data.split(validation_fraction, split_seed)
    train_images, val_images = train_images[..., None], val_images[..., None]

    def train():
        return tf.data.Dataset.from_tensor_slices((train_images, train_labels))

    def held_out():
        return tf.data.Dataset.from_tensor_slices((val_images, val_labels))

    return DataSet(_make_input_fn(train, held_out, epochs, shuffle_buffer, seed),
                   image_shape=(28, 28, 1), num_classes=mnist_data.NUM_CLASSES,
                   num_samples=len(train_labels), num_eval_samples=len(val_labels))


# ----------------------------------------------------------------- synthetic

def synthetic(image_shape=(28, 28, 1), num_classes=10, num_samples=1024, eval_samples=256, signal=1.0,
              seed=0, epochs=None, shuffle_buffer=10000):
    """Generated images and labels of any shape and class count.

    Sample ``i`` (training samples are 0..num_samples-1, held-out ones follow)
    has label ``uniform{0..num_classes-1}`` and image
    ``signal * prototype[label] + noise_i``, with the prototype and the noise
    standard normal, all drawn by stateless generators from ``seed`` and the
    index: the data are the same on every call and cost no memory, whatever
    the image size.
    """
    shape = tuple(int(s) for s in image_shape)
    if not shape or min(shape) < 1:
        raise DataOptionError("image_shape", f"{list(image_shape)} must be positive sizes, e.g. [32, 32, 3]")
    for name, value in (("num_classes", num_classes), ("num_samples", num_samples), ("eval_samples", eval_samples)):
        if value < 1:
            raise DataOptionError(name, f"{value} must be a positive integer")

    def sample(index):
        label = tf.random.stateless_uniform([], seed=[seed, index], minval=0, maxval=num_classes, dtype=tf.int32)
        noise = tf.random.stateless_normal(shape, seed=[seed + 1, index])
        prototype = tf.random.stateless_normal(shape, seed=[seed + 2, tf.cast(label, tf.int64)])
        return signal * prototype + noise, label

    def indices(start, count):
        return tf.data.Dataset.range(start, start + count).map(sample, num_parallel_calls=tf.data.AUTOTUNE,
                                                               deterministic=True)

    return DataSet(_make_input_fn(lambda: indices(0, num_samples), lambda: indices(num_samples, eval_samples),
                                  epochs, shuffle_buffer, seed),
                   image_shape=shape, num_classes=num_classes, num_samples=num_samples, num_eval_samples=eval_samples)


# ----------------------------------------------------------------- TFRecord files

def _decode_image(data, image_shape, image_format):
    """Encoded (JPEG/PNG) or raw uint8 bytes -> float32 [height, width, channels] in [0, 1]."""
    height, width, channels = image_shape
    if image_format == "raw":
        image = tf.reshape(tf.io.decode_raw(data, tf.uint8), image_shape)
    else:
        image = tf.io.decode_image(data, channels=channels, expand_animations=False)
        image.set_shape([None, None, channels])
        image = tf.image.resize(image, [height, width], method="bilinear")
        image = tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8)
    return tf.cast(image, tf.float32) / 255.0


def tfrecord(train_files, eval_files, image_shape=(224, 224, 3), num_classes=1000, num_samples=None,
             image_key="image/encoded", label_key="image/class/label", image_format="encoded", label_offset=0,
             allow_single_class=False, epochs=None, shuffle_buffer=10000, seed=0):
    """tf.train.Example records with an image and an integer label.

    ``image_format='encoded'`` decodes JPEG/PNG bytes and resizes them to
    ``image_shape``; ``'raw'`` reads uint8 bytes of exactly ``image_shape``.
    ``label_offset`` is added to each label (ImageNet files count from 1).
    ``num_classes`` below 2 is an error unless ``allow_single_class``.
    The first records of the first files are read and decoded here
    (``_probe_records``), so a file that is not what these options say fails
    now, with its name, and not inside the run.
    """
    train_paths, eval_paths = sources.tfrecord_inputs(train_files, eval_files, num_classes, allow_single_class)
    shape = tuple(int(s) for s in image_shape)
    for paths, option in ((train_paths, "train_files"), (eval_paths, "eval_files")):
        _probe_records(paths, option, shape, num_classes, image_key, label_key, image_format, label_offset)
    features = {image_key: tf.io.FixedLenFeature([], tf.string), label_key: tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):
        example = tf.io.parse_single_example(record, features)
        image = _decode_image(example[image_key], shape, image_format)
        return image, tf.cast(example[label_key] + label_offset, tf.int32)

    def read(paths):
        return tf.data.TFRecordDataset(paths).map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

    return DataSet(_make_input_fn(lambda: read(train_paths), lambda: read(eval_paths), epochs, shuffle_buffer, seed),
                   image_shape=shape, num_classes=num_classes, num_samples=num_samples, num_eval_samples=None)


def _probe_records(paths, option, shape, num_classes, image_key, label_key, image_format, label_offset):
    """Read and decode the first records of ``paths`` as ``tfrecord`` will (DataOptionError naming the file)."""
    from moxlite.data import probe

    def fail_on(name):
        return lambda message: DataOptionError(name, message)

    fail = fail_on(option)
    for path, index, record in probe.first_records(paths, fail):
        example = probe.parse_example(path, index, record, fail)
        data = probe.feature_value(example, image_key, "bytes", path, index, "image_key", fail_on("image_key"))
        label = probe.feature_value(example, label_key, "int64", path, index, "label_key", fail_on("label_key"))
        where = f"record {index} of {path!r}: its {image_key!r} bytes"
        if image_format == "raw":
            problem = probe.raw_size_problem(data, shape)
            if problem:
                raise DataOptionError("image_shape", f"{where} {problem}")
        else:
            problem = sources.image_header_problem(data[:8]) or probe.decode_problem(
                lambda tensor: _decode_image(tensor, shape, image_format), data)
            if problem:
                problem = problem[len("is "):] if problem.startswith("is ") else f"fail to decode ({problem})"
                raise DataOptionError(option, f"{where} are {problem}; expected encoded images, or set "
                                              f"image_format: raw for uint8 pixels of image_shape")
        probe.check_label(label, label_offset, num_classes, path, index, fail_on("num_classes"))


def write_tfrecords(path, images, labels, image_format="encoded", image_key="image/encoded",
                    label_key="image/class/label"):
    """Write uint8 images [N, H, W, C] and integer labels to one TFRecord file (PNG or raw bytes)."""
    images = np.asarray(images, dtype=np.uint8)
    with tf.io.TFRecordWriter(path) as writer:
        for image, label in zip(images, labels):
            data = tf.io.encode_png(image).numpy() if image_format == "encoded" else image.tobytes()
            example = tf.train.Example(features=tf.train.Features(feature={
                image_key: tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
                label_key: tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
            }))
            writer.write(example.SerializeToString())


# ----------------------------------------------------------------- image folder

def image_folder(train_dir, eval_dir, image_shape=(224, 224, 3), allow_single_class=False, epochs=None,
                 shuffle_buffer=10000, seed=0):
    """Images in ``<dir>/<class name>/<file>``; classes are numbered in sorted folder order.

    The held-out folder must use class names of the training folder. Every
    class folder must hold an image, and one class folder is an error unless
    ``allow_single_class``. The first image of each class is decoded here, so
    a file that is not an image fails now, with its name.
    """
    from moxlite.data import probe

    class_names, (train_paths, train_labels), (eval_paths, eval_labels) = sources.image_folder_inputs(
        train_dir, eval_dir, allow_single_class)
    shape = tuple(int(s) for s in image_shape)
    for paths, labels, option in ((train_paths, train_labels, "train_dir"), (eval_paths, eval_labels, "eval_dir")):
        probe.check_images_decode(paths, labels, shape[2], lambda message, name=option: DataOptionError(name, message))

    def load(path, label):
        return _decode_image(tf.io.read_file(path), shape, "encoded"), label

    def read(paths, labels):
        def make():
            dataset = tf.data.Dataset.from_tensor_slices((paths, np.asarray(labels, np.int32)))
            return dataset.map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return make

    return DataSet(_make_input_fn(read(train_paths, train_labels), read(eval_paths, eval_labels),
                                  epochs, shuffle_buffer, seed),
                   image_shape=shape, num_classes=len(class_names),
                   num_samples=len(train_paths), num_eval_samples=len(eval_paths))


def _masked_lm(name):
    """The builder of masked-LM data set ``name`` (moxlite.data.text_datasets, imported when built)."""

    def build_text_data(**options):
        from moxlite.data import text_datasets

        return text_datasets.BUILDERS[name](**options)

    return build_text_data


BUILDERS = {"mnist": mnist, "synthetic": synthetic, "tfrecord": tfrecord, "image_folder": image_folder,
            "text": _masked_lm("text"), "bert_tfrecord": _masked_lm("bert_tfrecord"),
            "bert_synthetic": _masked_lm("bert_synthetic")}


def build(name, options: dict, epochs=None, shuffle_buffer=10000, seed=0) -> DataSet:
    """The built-in data set ``name`` with ``options`` (the keyword arguments of its builder)."""
    if name not in BUILDERS:
        raise errors.ArgumentError(f"data set {name!r} is not built in; choose one of {', '.join(BUILDERS)}")
    common = {"epochs": epochs, "shuffle_buffer": shuffle_buffer}
    if "seed" not in options:  # synthetic's (and bert_synthetic's) own seed also seeds its shuffle
        common["seed"] = seed
    return BUILDERS[name](**options, **common)
