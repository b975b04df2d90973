"""TRAIN through moxlite.run: numbers against numpy and against other moxlite runs."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from tests import runlib

BATCH = 20
STEPS = 12


def train(log_dir, model_fn=runlib.softmax_model_fn, input_fn=None, optimizer_fn=None, **kwargs):
    images, labels = runlib.mnist_rows(400)
    steps = kwargs.pop("max_number_of_steps", STEPS)
    kwargs = {"batch_size": BATCH, "log_every_n_steps": 4, **kwargs}
    return runlib.train(log_dir, input_fn or runlib.input_fn_for(images, labels), model_fn,
                        optimizer_fn or mox.get_optimizer_fn("sgd", learning_rate=0.5), steps=steps, **kwargs)


@pytest.mark.parametrize("name, kwargs, momentum", [
    ("sgd", {}, 0.0),
    ("momentum", {"momentum": 0.9}, 0.9),
])
def test_linear_model_steps_equal_numpy(tmp_path, name, kwargs, momentum):
    result = train(tmp_path, optimizer_fn=mox.get_optimizer_fn(name, learning_rate=0.5, **kwargs))
    kernel, bias = runlib.checkpoint_variables(tmp_path)
    images, labels = runlib.mnist_rows(400)
    ref_kernel, ref_bias = runlib.numpy_softmax_regression(images, labels, BATCH, STEPS, 0.5, momentum)
    assert result["global_step"] == STEPS
    np.testing.assert_allclose(kernel, ref_kernel, atol=2e-5)
    np.testing.assert_allclose(bias, ref_bias, atol=2e-5)


def test_two_devices_with_batch_b_equal_one_device_with_batch_2b(tmp_path):
    one = tmp_path / "one"
    two = tmp_path / "two"
    train(one, model_fn=runlib.mlp_model_fn, batch_size=2 * BATCH)
    mox.set_flag("num_gpus", 2)
    result = train(two, model_fn=runlib.mlp_model_fn, batch_size=BATCH)
    assert result["global_step"] == STEPS
    for single, mirrored in zip(runlib.checkpoint_variables(one), runlib.checkpoint_variables(two)):
        np.testing.assert_allclose(single, mirrored, atol=1e-5)


def test_steps_per_loop_changes_nothing_but_speed(tmp_path):
    train(tmp_path / "a", model_fn=runlib.mlp_model_fn, steps_per_loop=1)
    train(tmp_path / "b", model_fn=runlib.mlp_model_fn, steps_per_loop=5)
    for a, b in zip(runlib.checkpoint_variables(tmp_path / "a"), runlib.checkpoint_variables(tmp_path / "b")):
        np.testing.assert_allclose(a, b, atol=1e-6)


def _closure_model_fn():
    dense = keras.layers.Dense(runlib.NUM_CLASSES, kernel_initializer="zeros")

    def model_fn(inputs, mode):
        images, labels = inputs
        return runlib.spec_for(images, labels, dense(images))

    return model_fn


@pytest.mark.parametrize("num_gpus", [1, 2])
@pytest.mark.parametrize("style", ["closure", "layers_inside", "get_variable"])
def test_three_model_fn_styles_create_variables_once_and_train_alike(tmp_path, style, num_gpus):
    model_fn = {"closure": _closure_model_fn(), "layers_inside": runlib.softmax_model_fn,
                "get_variable": runlib.get_variable_softmax_model_fn()}[style]
    mox.set_flag("num_gpus", num_gpus)
    train(tmp_path, model_fn=model_fn, batch_size=BATCH // num_gpus)
    variables = runlib.checkpoint_variables(tmp_path)
    assert [v.shape for v in variables] == [(runlib.NUM_FEATURES, runlib.NUM_CLASSES), (runlib.NUM_CLASSES,)]
    images, labels = runlib.mnist_rows(400)
    ref_kernel, ref_bias = runlib.numpy_softmax_regression(images, labels, BATCH, STEPS, 0.5)
    np.testing.assert_allclose(variables[0], ref_kernel, atol=2e-5)
    np.testing.assert_allclose(variables[1], ref_bias, atol=2e-5)


def test_model_fn_that_creates_new_variables_on_a_later_call_is_refused(tmp_path):
    calls = []

    def model_fn(inputs, mode):
        calls.append(mode)
        images, labels = inputs
        logits = keras.layers.Dense(runlib.NUM_CLASSES)(images)
        if len(calls) > 1:  # a bug: a layer only the traced call builds
            logits = keras.layers.Dense(runlib.NUM_CLASSES)(logits)
        return runlib.spec_for(images, labels, logits)

    with pytest.raises(mox.errors.ModelFnError, match="created variable .* on a later call"):
        train(tmp_path, model_fn=model_fn)


def test_finite_input_ends_the_run_when_exhausted(tmp_path):
    images, labels = runlib.mnist_rows(100)
    result = train(tmp_path, input_fn=runlib.input_fn_for(images, labels, repeat=False),
                   max_number_of_steps=1000, steps_per_loop=3)
    assert result["global_step"] == 100 // BATCH
    assert runlib.checkpoint_step(tmp_path) == 100 // BATCH


def test_input_fn_receives_batch_size_only_when_it_accepts_it(tmp_path):
    images, labels = runlib.mnist_rows(400)
    seen = {}

    def batched_input_fn(mode, batch_size):
        seen["batch_size"] = batch_size
        return tf.data.Dataset.from_tensor_slices((images, labels)).batch(batch_size, drop_remainder=True).repeat()

    result = train(tmp_path, input_fn=batched_input_fn, auto_batch=False)
    assert seen["batch_size"] == BATCH
    kernel, _ = runlib.checkpoint_variables(tmp_path)
    ref_kernel, _ = runlib.numpy_softmax_regression(images, labels, BATCH, STEPS, 0.5)
    np.testing.assert_allclose(kernel, ref_kernel, atol=2e-5)
    assert result["global_step"] == STEPS


def test_two_losses_train_their_own_variable_scopes(tmp_path):
    """A GAN-shaped run: loss_a trains scope 'a' with one optimizer, loss_b scope 'b' with another."""
    images, labels = runlib.mnist_rows(400)

    def model_fn(inputs, mode):
        x, y = inputs
        with tf.compat.v1.variable_scope("a"):
            kernel_a = tf.compat.v1.get_variable("kernel", [runlib.NUM_FEATURES, runlib.NUM_CLASSES],
                                                 initializer=tf.compat.v1.zeros_initializer())
        with tf.compat.v1.variable_scope("b"):
            kernel_b = tf.compat.v1.get_variable("kernel", [runlib.NUM_FEATURES, runlib.NUM_CLASSES],
                                                 initializer=tf.compat.v1.zeros_initializer())
        # Each loss also reads the other scope's kernel: var_scopes must keep it out of that step.
        loss_a = runlib.cross_entropy(tf.matmul(x, kernel_a) + 0.0 * tf.matmul(x, kernel_b), y)
        loss_b = runlib.cross_entropy(tf.matmul(x, kernel_b) + 0.0 * tf.matmul(x, kernel_a), y)
        return mox.ModelSpec(loss=[loss_a, loss_b], var_scopes=[["a/"], ["b/"]],
                             log_info={"loss_a": loss_a, "loss_b": loss_b})

    train(tmp_path, model_fn=model_fn, optimizer_fn=[mox.get_optimizer_fn("sgd", learning_rate=0.5),
                                                     mox.get_optimizer_fn("sgd", learning_rate=0.1)])
    kernel_a, kernel_b = runlib.checkpoint_variables(tmp_path)
    # This model has no bias, so the reference is softmax regression without one.
    np.testing.assert_allclose(kernel_a, _without_bias_reference(images, labels, 0.5), atol=2e-5)
    np.testing.assert_allclose(kernel_b, _without_bias_reference(images, labels, 0.1), atol=2e-5)
    assert not np.allclose(kernel_a, kernel_b)


def _without_bias_reference(images, labels, learning_rate):
    kernel = np.zeros((runlib.NUM_FEATURES, runlib.NUM_CLASSES))
    for step in range(STEPS):
        index = np.arange(step * BATCH, (step + 1) * BATCH) % len(labels)
        x, y = images[index].astype(np.float64), labels[index]
        p = runlib.softmax_probabilities(x @ kernel)
        p[np.arange(BATCH), y] -= 1.0
        kernel -= learning_rate * x.T @ p / BATCH
    return kernel
