"""What the benchmarks in tools/ share: the MLP model_fn they all train through moxlite.run.

The scripts run as ``python tools/<script>.py``, so this module is importable as
``benchlib`` from them (Python puts the script's folder first on the path).
"""

import keras
import tensorflow as tf

import moxlite as mox

HIDDEN = 256


def mlp_model_fn(inputs, mode):
    """A 784-256-10 MLP on flattened digits; log_info carries the loss for the log lines."""
    x, y = inputs
    logits = keras.layers.Dense(10)(keras.layers.Dense(HIDDEN, activation="relu")(x))
    loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))
    return mox.ModelSpec(loss=loss, log_info={"loss": loss})
