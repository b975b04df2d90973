"""Item handlers for ``get_tfrecord``: what MoXing scripts took from ``slim.tfexample_decoder``.

``get_tfrecord(keys_to_features=..., items_to_handlers=...)`` parses each
tf.train.Example with ``keys_to_features`` and builds every item from the
parsed tensors its handler names. TF2 has no ``tf.contrib.slim``; these three
handlers keep slim's names and arguments, so a port changes
``slim.tfexample_decoder.Tensor`` to ``mox.tfexample_decoder.Tensor``. Any
object with slim's protocol (a ``keys`` list and ``tensors_to_item(dict)``),
``tf_slim``'s handlers included, works as well.
"""

import tensorflow as tf

from moxlite import errors


def _dense(tensor, default_value):
    if isinstance(tensor, tf.SparseTensor):
        return tf.sparse.to_dense(tensor, default_value=default_value)
    return tensor


class ItemHandler:
    """One item built from the parsed tensors named by ``keys``."""

    def __init__(self, keys):
        self.keys = [keys] if isinstance(keys, str) else list(keys)

    def tensors_to_item(self, keys_to_tensors):
        raise NotImplementedError


class Tensor(ItemHandler):
    """The parsed tensor ``tensor_key``, densified and reshaped to ``shape`` when given."""

    def __init__(self, tensor_key, shape=None, shape_keys=None, default_value=0):
        if shape is not None and shape_keys is not None:
            raise errors.ArgumentError(
                f"tfexample_decoder.Tensor({tensor_key!r}): give shape or shape_keys, not both")
        self.tensor_key = tensor_key
        self.shape = shape
        self.shape_keys = [shape_keys] if isinstance(shape_keys, str) else shape_keys
        self.default_value = default_value
        super().__init__([tensor_key] + list(self.shape_keys or []))

    def tensors_to_item(self, keys_to_tensors):
        tensor = keys_to_tensors[self.tensor_key]
        shape = self.shape
        if self.shape_keys:
            shape = tf.concat([tf.reshape(tf.cast(_dense(keys_to_tensors[key], 0), tf.int64), [-1])
                               for key in self.shape_keys], 0)
        tensor = _dense(tensor, self.default_value)
        if shape is not None:
            tensor = tf.reshape(tensor, shape)
        return tensor


class Image(ItemHandler):
    """The image encoded in ``image_key`` (JPEG, PNG, GIF or BMP), decoded to ``dtype`` with ``channels``."""

    def __init__(self, image_key=None, format_key=None, shape=None, channels=3, dtype=tf.uint8, repeated=False,
                 dct_method=""):
        if repeated:
            raise errors.ArgumentError("tfexample_decoder.Image(repeated=True) is not supported; store one "
                                       "image per Example")
        self.image_key = image_key or "image/encoded"
        self.format_key = format_key or "image/format"
        self.shape = shape
        self.channels = channels
        self.dtype = dtype
        super().__init__([self.image_key, self.format_key])

    def tensors_to_item(self, keys_to_tensors):
        data = _dense(keys_to_tensors[self.image_key], "")
        image = tf.io.decode_image(tf.reshape(data, []), channels=self.channels, dtype=self.dtype,
                                   expand_animations=False)
        if self.shape is not None:
            image = tf.reshape(image, self.shape)
        else:
            image.set_shape([None, None, self.channels])
        return image


class ItemHandlerCallback(ItemHandler):
    """An item computed by ``func(keys_to_tensors)`` from the parsed tensors named by ``keys``."""

    def __init__(self, keys, func):
        super().__init__(keys)
        self.func = func

    def tensors_to_item(self, keys_to_tensors):
        return self.func(keys_to_tensors)
