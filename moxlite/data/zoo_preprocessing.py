"""``get_data_augmentation_fn(name, run_mode)``: the standard preprocessing of a zoo network.

The returned function takes one image ``[height, width, channels]`` (uint8,
or float on the 0..255 scale; grey images become RGB) and returns float32
``[output_height, output_width, 3]``; given the placeholder that
``dataset.get`` returns, it returns the placeholder of the augmented image.
It works in two parts:

1. Geometry, by the network's family (see ``moxlite.zoo.catalog``):
   - "vgg" (ResNet v1, VGG): in TRAIN the shorter side is resized to a random
     length in [S*256/224, S*512/224], a random S x S window is cut and flipped
     left-right at random; otherwise the shorter side becomes S*256/224 and the
     centre S x S window is kept.
   - "inception" (Inception, ResNet v2, MobileNet, NASNet): in TRAIN a random
     box covering 5-100 % of the image with aspect ratio 3/4 to 4/3 is cut,
     resized to S x S and flipped at random; otherwise the central 87.5 % is
     kept and resized to S x S.
2. Normalisation, as the network's Keras ``preprocess_input`` does it (what
   pretrained Keras weights expect): "caffe" flips RGB to BGR and subtracts the
   ImageNet channel means; "tf" maps 0..255 to -1..1.
"""

import tensorflow as tf

from moxlite import errors
from moxlite.contract import ModeKeys
from moxlite.data import feature_dataset
from moxlite.zoo import catalog

CAFFE_MEANS_BGR = (103.939, 116.779, 123.68)


def get_data_augmentation_fn(name, run_mode, output_height=None, output_width=None, **unused):
    """MoXing's ``mox.get_data_augmentation_fn``: ``image -> preprocessed image`` for network ``name``."""
    found = catalog.entry(name, "get_data_augmentation_fn")
    height = int(output_height or found.image_size)
    width = int(output_width or found.image_size)
    if height < 1 or width < 1:
        raise errors.ArgumentError(
            f"get_data_augmentation_fn: output size {height}x{width} must be positive")
    training = run_mode == ModeKeys.TRAIN
    geometry = _vgg_geometry if found.family == "vgg" else _inception_geometry

    def augmentation_fn(image):
        if isinstance(image, feature_dataset.FeatureColumn):   # MoXing's augmentation in input_fn
            return image.map(augmentation_fn)
        image = tf.convert_to_tensor(image)
        if image.shape.rank != 3:
            raise errors.ArgumentError(
                f"augmentation_fn of {name}: an image must be [height, width, channels], got shape {image.shape}")
        image = tf.cast(image, tf.float32)
        if image.shape[-1] == 1:
            image = tf.image.grayscale_to_rgb(image)
        image = geometry(image, height, width, training, _seeds() if training else None)
        # A random box loses the static shape; batching and the network need it back.
        image = tf.ensure_shape(image, [height, width, 3])
        return normalize(image, found.preprocessing)

    return augmentation_fn


def _seeds():
    """Three [2] seeds for stateless random ops: from the data-set element being built (a
    checkpointable pipeline), else drawn now (a call outside a moxlite data set)."""
    seed = feature_dataset.element_seed()
    if seed is None:
        seed = tf.random.uniform([], maxval=2**62, dtype=tf.int64)
    return [tf.stack([seed, tf.constant(k, tf.int64)]) for k in range(3)]


def normalize(image, mode):
    """0..255 RGB float32 -> the network's input scale (``preprocess_input`` of its Keras module)."""
    if mode == catalog.CAFFE:
        return image[..., ::-1] - tf.constant(CAFFE_MEANS_BGR, tf.float32)
    if mode == catalog.TF:
        return image / 127.5 - 1.0
    raise errors.ArgumentError(f"normalize: unknown mode {mode!r}")


def _resize_shorter_side(image, length):
    shape = tf.cast(tf.shape(image)[:2], tf.float32)
    scale = tf.cast(length, tf.float32) / tf.reduce_min(shape)
    size = tf.cast(tf.round(shape * scale), tf.int32)
    return tf.image.resize(image, size, method="bilinear")


def _vgg_geometry(image, height, width, training, seeds):
    # Slim's rule: the shorter side goes to 256..512 for a 224 crop. A crop that is not square
    # must still fit inside the resized image, so neither bound may fall below its longer side.
    resize_min = max(round(min(height, width) * 256 / 224), height, width)
    resize_max = max(round(min(height, width) * 512 / 224), resize_min)
    if training:
        length = tf.random.stateless_uniform([], seeds[0], resize_min, resize_max + 1, dtype=tf.int32)
        image = _resize_shorter_side(image, length)
        image = tf.image.stateless_random_crop(image, [height, width, 3], seeds[1])
        return tf.image.stateless_random_flip_left_right(image, seeds[2])
    image = _resize_shorter_side(image, resize_min)
    top = (tf.shape(image)[0] - height) // 2
    left = (tf.shape(image)[1] - width) // 2
    return tf.image.crop_to_bounding_box(image, top, left, height, width)


def _inception_geometry(image, height, width, training, seeds):
    if training:
        begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
            tf.shape(image), bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]), seed=seeds[0],
            min_object_covered=0.1, aspect_ratio_range=(0.75, 1.33), area_range=(0.05, 1.0), max_attempts=100,
            use_image_if_no_bounding_boxes=True)
        image = tf.slice(image, begin, size)
        image = tf.image.resize(image, [height, width], method="bilinear")
        return tf.image.stateless_random_flip_left_right(image, seeds[1])
    image = tf.image.central_crop(image, 0.875)
    return tf.image.resize(image, [height, width], method="bilinear")
