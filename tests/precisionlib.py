"""A model closed over by model_fn for the precision and THOR-name tests: a composite block
(MultiHeadAttention and a Dense, keras-hub style) between two named Dense layers."""

import keras

from tests import runlib

FEATURES = 24


class Block(keras.layers.Layer):
    """A composite layer: attention (four EinsumDense projections) and a Dense, keras-hub style."""

    def __init__(self, dtype=None, **kwargs):
        super().__init__(dtype=dtype, **kwargs)
        self.attention = keras.layers.MultiHeadAttention(2, 4, name="attention", seed=3, dtype=dtype)
        self.dense = keras.layers.Dense(8, name="dense", dtype=dtype,
                                        kernel_initializer=keras.initializers.GlorotUniform(seed=4))

    def call(self, x):
        return self.dense(x + self.attention(x, x))


def make_model(dtype=None):
    """A model built before run (closed over by model_fn), in ``dtype`` (None: the global policy)."""
    return keras.Sequential([
        keras.Input((runlib.NUM_FEATURES,), dtype=dtype or "float32"),
        keras.layers.Dense(FEATURES, name="stem", dtype=dtype,
                           kernel_initializer=keras.initializers.GlorotUniform(seed=1)),
        keras.layers.Reshape((3, 8), dtype=dtype),
        Block(name="block0", dtype=dtype),
        keras.layers.Flatten(dtype=dtype),
        keras.layers.Dense(runlib.NUM_CLASSES, name="head", dtype=dtype,
                           kernel_initializer=keras.initializers.GlorotUniform(seed=2)),
    ], name="net")
