"""Checkpoint keys are the Keras paths.

A custom block (sub-layers made in ``__init__``, the Keras guide's way) names every variable
after the outer layer in TensorFlow (``block_0/kernel``), a name a second Dense would share;
its Keras path (``block_0/dense/kernel``) stays the same whatever else the block holds, so a
warm start from a one-Dense block finds the kernel in a two-Dense block. The reference here is
Keras's own ``variable.path``, with made-up names in their fresh-process form.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from tests import runlib

BATCH = 16
WIDTH = 8


class Block(keras.layers.Layer):
    """Dense sub-layers made in __init__, unnamed (Keras makes their names up)."""

    def __init__(self, dense_layers, **kwargs):
        super().__init__(**kwargs)
        self.layers_in_order = [keras.layers.Dense(WIDTH, kernel_initializer=keras.initializers.GlorotUniform(seed=i))
                                for i in range(dense_layers)]

    def call(self, inputs):
        for layer in self.layers_in_order:
            inputs = tf.nn.relu(layer(inputs))
        return inputs


class Outer(keras.layers.Layer):
    """A block inside a block, every name given: its paths do not depend on the process."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.inner = Block(2, name="inner")
        self.scale = self.add_weight(shape=(WIDTH,), initializer="ones", name="scale")

    def call(self, inputs):
        return self.inner(inputs) * self.scale


def block_model_fn(dense_layers, inside):
    """model_fn over ``block_0`` (``dense_layers`` Dense) and a head: built inside model_fn or
    closed over (built before ``run``)."""
    made = {} if inside else {"block": Block(dense_layers, name="block_0"),
                              "head": keras.layers.Dense(runlib.NUM_CLASSES, name="head")}

    def model_fn(inputs, mode):
        images, labels = inputs
        block = Block(dense_layers, name="block_0") if inside else made["block"]
        head = keras.layers.Dense(runlib.NUM_CLASSES, name="head") if inside else made["head"]
        return runlib.spec_for(images, labels, head(block(images)))

    model_fn.made = made
    return model_fn


def _run(log_dir, model_fn, steps, lr=0.05, momentum=0.0, frozen="", **kwargs):
    """TRAIN ``steps``; ``frozen``: the trainable_exclude_patterns flag for this run."""
    mox.set_flag("trainable_exclude_patterns", frozen)
    images, labels = runlib.mnist_rows(64)
    optimizer = mox.get_optimizer_fn("momentum", lr, momentum=momentum) if momentum else mox.get_optimizer_fn("sgd", lr)
    return runlib.train(log_dir, runlib.input_fn_for(images, labels), model_fn, optimizer, steps=steps,
                        batch_size=BATCH, **kwargs)


@pytest.mark.parametrize("inside", [True, False], ids=["built-inside", "closed-over"])
def test_warm_start_from_a_one_dense_block_restores_its_kernel_in_a_two_dense_block(tmp_path, inside):
    keras.layers.Dense(3)   # earlier work in the process moved Keras's name counters
    _run(tmp_path / "one", block_model_fn(1, inside), 2)
    one = runlib.checkpoint_by_name(tmp_path / "one")
    assert list(one) == ["block_0/dense/kernel", "block_0/dense/bias", "head/kernel", "head/bias"]
    # The first Dense frozen, so what the checkpoint holds for it must come back bit for bit.
    mox.set_flag("checkpoint_exclude_patterns", "block_0/dense_1")
    _run(tmp_path / "two", block_model_fn(2, inside), 1, checkpoint_path=str(tmp_path / "one"),
         frozen="block_0/dense")
    two = runlib.checkpoint_by_name(tmp_path / "two")
    assert list(two) == ["block_0/dense/kernel", "block_0/dense/bias", "block_0/dense_1/kernel",
                         "block_0/dense_1/bias", "head/kernel", "head/bias"]
    np.testing.assert_array_equal(two["block_0/dense/kernel"], one["block_0/dense/kernel"])
    np.testing.assert_array_equal(two["block_0/dense/bias"], one["block_0/dense/bias"])


@pytest.mark.parametrize("inside", [True, False], ids=["built-inside", "closed-over"])
def test_keys_of_nested_blocks_are_their_keras_paths(tmp_path, inside):
    keras.layers.Dense(3)   # Keras's counter of Dense names now stands at 1
    first = {}

    def model_fn(inputs, mode):
        images, labels = inputs
        outer = Outer(name="outer") if inside or "outer" not in first else first["outer"]
        head = keras.layers.Dense(runlib.NUM_CLASSES, name="head") if inside or "head" not in first else first["head"]
        first.setdefault("outer", outer)
        first.setdefault("head", head)
        return runlib.spec_for(images, labels, head(outer(images)))

    if not inside:   # built before run: model_fn only calls it
        first.update(outer=Outer(name="outer"), head=keras.layers.Dense(runlib.NUM_CLASSES, name="head"))
    _run(tmp_path / "run", model_fn, 1)
    saved = runlib.checkpoint_by_name(tmp_path / "run")
    paths = [v.path for layer in (first["outer"], first["head"]) for v in layer.weights]
    # Keras made up dense_1, dense_2 for the inner block's layers; a fresh process says dense, dense_1.
    assert "outer/inner/dense_1/kernel" in paths and "outer/inner/dense_2/kernel" in paths
    fresh = {"dense_1": "dense", "dense_2": "dense_1"}
    expected = ["/".join(fresh.get(part, part) for part in path.split("/")) for path in paths]
    assert sorted(saved) == sorted(expected)
    assert {"outer/inner/dense/kernel", "outer/inner/dense_1/bias", "outer/scale", "head/kernel"} <= set(saved)


@pytest.mark.slow   # MobileNetV2 built and traced on 2 CPU cores: about 25 s
def test_a_keras_applications_model_is_keyed_by_its_layer_paths(tmp_path):
    net = keras.applications.MobileNetV2(input_shape=(32, 32, 3), alpha=0.35, weights=None, classes=4)
    images = np.random.RandomState(0).uniform(size=(8, 32, 32, 3)).astype(np.float32)
    labels = np.arange(8, dtype=np.int32) % 4

    def model_fn(inputs, mode):
        x, y = inputs
        probabilities = net(x, training=mode == mox.ModeKeys.TRAIN)
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, probabilities))
        return mox.ModelSpec(loss=loss, log_info={"loss": loss})

    mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=model_fn,
            optimizer_fn=mox.get_optimizer_fn("sgd", 0.01), run_mode=mox.ModeKeys.TRAIN, batch_size=4,
            log_dir=str(tmp_path / "run"), max_number_of_steps=1)
    saved = runlib.checkpoint_by_name(tmp_path / "run")
    assert sorted(saved) == sorted(v.path for v in net.weights)
    assert "Conv1/kernel" in saved and "bn_Conv1/moving_variance" in saved
