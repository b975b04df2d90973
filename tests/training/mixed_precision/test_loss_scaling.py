"""Loss scaling and clipping through moxlite.run, against numpy: overflow skips, scales, clipping order.

A non-finite gradient is injected on one chosen step by an identity whose gradient
is infinite for "poisoned" samples: the loss stays finite, as in a real float16
overflow of the backward pass.
"""

import numpy as np
import pytest
import tensorflow as tf

import keras
import moxlite as mox
from moxlite.optimizers import loss_scaling
from moxlite.training.trainers import nonfinite
from tests import runlib
from tests.training.test_run_logs import read_scalars

BATCH = 20
STEPS = 6
LEARNING_RATE = 0.5


def model_fn(inputs, mode):
    images, labels, poison = inputs
    logits = keras.layers.Dense(runlib.NUM_CLASSES, kernel_initializer="zeros", bias_initializer="zeros")(images)
    return runlib.spec_for(images, labels, runlib.poison_gradient(logits, poison))


def data(poisoned_step=None, poisoned_sample=0, count=400):
    images, labels = runlib.mnist_rows(count)
    poison = np.zeros(count, np.float32)
    if poisoned_step is not None:
        poison[poisoned_step * BATCH + poisoned_sample] = 1.0
    return images, labels, poison


def train(log_dir, arrays, num_gpus=1, optimizer_fn=None, steps=STEPS):
    mox.set_flag("num_gpus", num_gpus)

    def input_fn(mode):
        return tf.data.Dataset.from_tensor_slices(arrays).repeat()

    return runlib.train(log_dir, input_fn, model_fn,
                        optimizer_fn or mox.get_optimizer_fn("sgd", learning_rate=LEARNING_RATE), steps=steps,
                        batch_size=BATCH // num_gpus, log_every_n_steps=1, save_summary_steps=1)


def numpy_sgd(images, labels, steps, skipped=(), clip=0.0, clip_type="global_norm", accumulate=1):
    """SGD on mean cross-entropy; ``skipped`` steps consume their batch and change nothing.

    With ``accumulate`` = N, the mean of N consecutive batch gradients is clipped and applied
    every N-th step.
    """
    kernel = np.zeros((runlib.NUM_FEATURES, runlib.NUM_CLASSES))
    bias = np.zeros(runlib.NUM_CLASSES)
    sums = [np.zeros_like(kernel), np.zeros_like(bias)]
    for step in range(steps):
        if step in skipped:
            continue
        x = images[step * BATCH:(step + 1) * BATCH].astype(np.float64)
        y = labels[step * BATCH:(step + 1) * BATCH]
        p = runlib.softmax_probabilities(x @ kernel + bias)
        p[np.arange(BATCH), y] -= 1.0
        sums[0] += x.T @ p / BATCH
        sums[1] += p.mean(axis=0)
        if (step + 1) % accumulate:
            continue
        grads = [g / accumulate for g in sums]
        sums = [np.zeros_like(kernel), np.zeros_like(bias)]
        if clip and clip_type == "global_norm":
            norm = np.sqrt(sum(np.sum(g ** 2) for g in grads))
            grads = [g * min(1.0, clip / norm) for g in grads]
        elif clip:
            grads = [g * min(1.0, clip / np.linalg.norm(g)) for g in grads]
        kernel -= LEARNING_RATE * grads[0]
        bias -= LEARNING_RATE * grads[1]
    return kernel, bias


def loss_scale_state(log_dir):
    """The LossScale wrapper's variables in the newest checkpoint, by name."""
    reader = tf.train.load_checkpoint(str(log_dir))
    found = {}
    for key in reader.get_variable_to_shape_map():
        for name in ("scale", "skipped_steps", "clean_steps"):
            if key.endswith(f"/{name}/.ATTRIBUTES/VARIABLE_VALUE") and "optimizer" in key:
                found[name] = reader.get_tensor(key)
    return found


def assert_weights(log_dir, kernel, bias, atol=2e-6):
    got_kernel, got_bias = runlib.checkpoint_variables(log_dir)
    np.testing.assert_allclose(got_kernel, kernel, atol=atol)
    np.testing.assert_allclose(got_bias, bias, atol=atol)


@pytest.mark.parametrize("num_gpus, poisoned_sample", [(1, 0), (2, 0), (2, BATCH - 1)])
def test_an_overflow_skips_the_step_on_every_replica_and_halves_the_dynamic_scale(
        tmp_path, capsys, num_gpus, poisoned_sample):
    images, labels, poison = data(poisoned_step=2, poisoned_sample=poisoned_sample)
    mox.set_flag("loss_scale", "dynamic")
    result = train(tmp_path, (images, labels, poison), num_gpus=num_gpus)
    assert result["global_step"] == STEPS                 # the skipped step counts as a step
    assert_weights(tmp_path, *numpy_sgd(images, labels, STEPS, skipped={2}))
    state = loss_scale_state(tmp_path)
    assert state["scale"] == 2.0 ** 14 and state["skipped_steps"] == 1
    assert "INFO:moxlite:loss scale 32768 -> 16384, step 3 skipped\n" in capsys.readouterr().out
    scalars = read_scalars(tmp_path)
    assert scalars["loss_scale"][3] == 16384 and scalars["loss_scale"][2] == 32768
    assert scalars["skipped_steps"][3] == 1 and scalars["skipped_steps"][STEPS] == 1


def test_a_fixed_scale_skips_the_overflowing_step_and_never_changes(tmp_path):
    images, labels, poison = data(poisoned_step=1)
    mox.set_flag("loss_scale", "1024")
    train(tmp_path, (images, labels, poison))
    assert_weights(tmp_path, *numpy_sgd(images, labels, STEPS, skipped={1}))
    state = loss_scale_state(tmp_path)
    assert state["scale"] == 1024 and state["skipped_steps"] == 1


def test_a_fixed_scale_without_drop_overflow_update_applies_the_overflowing_step(tmp_path):
    images, labels, poison = data(poisoned_step=1)
    mox.set_flag("loss_scale", "1024")
    mox.set_flag("drop_overflow_update", False)
    # The infinite gradient was applied, so the weights are no longer finite: the run stops
    # with that, before its report of step 2, and keeps no checkpoint of them (nothing at
    # step 2, where the dropping run above saves its finite weights).
    with pytest.raises(nonfinite.NonFiniteError, match="after global step 1 and by step 2: the loss stayed finite"):
        train(tmp_path, (images, labels, poison), steps=2)
    saved = tf.train.latest_checkpoint(str(tmp_path))
    assert saved is None or int(saved.rsplit("-", 1)[1]) < 2


def test_a_dynamic_scale_doubles_after_its_growth_steps_and_refuses_to_apply_overflow():
    optimizer = loss_scaling.LossScale(keras.optimizers.SGD(0.1), initial_scale=8.0, growth_steps=2)
    variable = keras.Variable(np.ones(3, np.float32))
    optimizer.build([variable])
    for gradient in ([1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [np.inf, 0.0, 0.0], [1.0, 1.0, 1.0]):
        optimizer.apply_gradients([(tf.constant(gradient, tf.float32) * 8.0, variable)])
    # 8 -> 16 after two clean steps, then the overflow halves it to 8.
    assert float(optimizer.scale.numpy()) == 8.0 and int(optimizer.skipped_steps.numpy()) == 1
    assert int(optimizer.iterations.numpy()) == 3       # applied updates only
    with pytest.raises(ValueError, match="drop_overflow_update=False needs a fixed scale"):
        loss_scaling.LossScale(keras.optimizers.SGD(0.1), drop_overflow_update=False)


def test_nodrop_overflow_update_needs_a_fixed_scale(tmp_path):
    mox.set_flag("loss_scale", "dynamic")
    mox.set_flag("drop_overflow_update", False)
    with pytest.raises(mox.errors.ArgumentError, match=r"--drop_overflow_update=False needs a fixed loss_scale \(a number\); with loss_scale 'dynamic'"):
        train(tmp_path / "never", data())
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize("clip_type", ["global_norm", "norm"])
@pytest.mark.parametrize("num_gpus", [1, 2])
def test_clipping_acts_on_unscaled_gradients_and_on_the_accumulated_mean(tmp_path, clip_type, num_gpus):
    images, labels, poison = data()
    accumulated = numpy_sgd(images, labels, STEPS, clip=0.05, clip_type=clip_type, accumulate=2)
    per_batch = numpy_sgd(images, labels, STEPS, clip=0.05, clip_type=clip_type)
    assert not np.allclose(accumulated[0], numpy_sgd(images, labels, STEPS, accumulate=2)[0], atol=1e-3)
    mox.set_flag("loss_scale", "dynamic")
    mox.set_flag("gradient_clip", 0.05)
    mox.set_flag("gradient_clip_type", clip_type)
    stack = mox.get_optimizer_wrapper_fn("batch_gradients", mox.get_optimizer_fn("sgd", learning_rate=LEARNING_RATE),
                                         num_batches=2)
    train(tmp_path / "accumulated", (images, labels, poison), num_gpus=num_gpus, optimizer_fn=stack)
    assert_weights(tmp_path / "accumulated", *accumulated)
    train(tmp_path / "plain", (images, labels, poison), num_gpus=num_gpus)
    assert_weights(tmp_path / "plain", *per_batch)
