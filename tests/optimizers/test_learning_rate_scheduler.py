"""learning_rate_scheduler.piecewise_lr: MoXing's import path, numpy's values, the string form's run."""

import numpy as np
import pytest

import moxlite as mox
from moxlite import errors
from moxlite.optimizer import learning_rate_scheduler
from moxlite.optimizers import schedules
from tests import runlib

SPEC = "1:0.2->0.6,2:0.6=>0.05,3:0.3"


def test_values_follow_the_epoch_string_computed_in_numpy():
    schedule = learning_rate_scheduler.piecewise_lr(SPEC, num_samples=1000, global_batch_size=40)
    pieces = schedules.parse_piecewise(SPEC)
    for step in range(0, 100, 3):
        expected = schedules.piecewise_value(pieces, step * 40 / 1000)
        np.testing.assert_allclose(float(schedule(step)), expected, rtol=1e-6)


@pytest.mark.parametrize("wrap", [False, True], ids=["sgd", "batch_gradients"])
def test_run_with_piecewise_lr_equals_run_with_the_same_string(tmp_path, wrap):
    """Both forms inside moxlite.run, the same samples and global batch: the same weights, bit for bit
    (also under batch_gradients, where the string counts micro-steps, not updates)."""
    images, labels = runlib.mnist_rows(64)
    batch_size, steps = 8, 20   # 8 steps an epoch: the lr ramps, then changes at steps 8 and 16

    def optimizer_fn_for(learning_rate):
        factory = mox.get_optimizer_fn("sgd", learning_rate=learning_rate)
        if wrap:
            factory = mox.get_optimizer_wrapper_fn("batch_gradients", factory, num_batches=2)
        return factory

    def string_form():
        return optimizer_fn_for(SPEC)()

    def scheduler_form():
        return optimizer_fn_for(learning_rate_scheduler.piecewise_lr(SPEC, num_samples=64,
                                                                     global_batch_size=batch_size))()

    mox.set_flag("num_samples", 64)  # the string form's epoch length (the input repeats forever)
    results = []
    for name, optimizer_fn in (("string", string_form), ("scheduler", scheduler_form)):
        log_dir = str(tmp_path / name)
        mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=runlib.softmax_model_fn,
                optimizer_fn=optimizer_fn, run_mode=mox.ModeKeys.TRAIN, batch_size=batch_size,
                log_dir=log_dir, max_number_of_steps=steps, log_every_n_steps=100)
        results.append(runlib.checkpoint_variables(log_dir))
    for string_value, scheduler_value in zip(*results):
        np.testing.assert_array_equal(string_value, scheduler_value)
    if not wrap:   # and both equal numpy's SGD with the epoch string's per-step rates
        pieces = schedules.parse_piecewise(SPEC)
        kernel = np.zeros((runlib.NUM_FEATURES, runlib.NUM_CLASSES))
        bias = np.zeros(runlib.NUM_CLASSES)
        for step in range(steps):
            rate = schedules.piecewise_value(pieces, step / 8)
            x, y = images[step * 8 % 64:][:8].astype(np.float64), labels[step * 8 % 64:][:8]
            p = runlib.softmax_probabilities(x @ kernel + bias)
            p[np.arange(8), y] -= 1
            kernel -= rate * x.T @ p / 8
            bias -= rate * p.mean(axis=0)
        np.testing.assert_allclose(results[0][0], kernel, atol=2e-5)
        np.testing.assert_allclose(results[0][1], bias, atol=2e-5)


def test_bad_arguments_name_the_argument():
    with pytest.raises(errors.OptimizerError, match="num_samples=0 must be a positive number"):
        learning_rate_scheduler.piecewise_lr("10:0.1", num_samples=0, global_batch_size=8)
    with pytest.raises(errors.OptimizerError, match="global_batch_size=None"):
        learning_rate_scheduler.piecewise_lr("10:0.1", num_samples=100, global_batch_size=None)
    with pytest.raises(errors.OptimizerError, match="piece '10-0.1'"):
        learning_rate_scheduler.piecewise_lr("10-0.1", num_samples=100, global_batch_size=8)


def test_tf1_momentum_optimizer_follows_piecewise_lr_of_the_global_step(tmp_path):
    """MoXing's script shape: tf.compat.v1.train.MomentumOptimizer(learning_rate=piecewise_lr(...)),
    against numpy's TF1 momentum (accum = m * accum + g; w -= lr * accum) at the string's rates."""
    import tensorflow as tf

    images, labels = runlib.mnist_rows(64)
    steps = 20

    def optimizer_fn():
        lr = learning_rate_scheduler.piecewise_lr(SPEC, num_samples=64, global_batch_size=8)
        return tf.compat.v1.train.MomentumOptimizer(learning_rate=lr, momentum=0.9)

    mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=runlib.softmax_model_fn,
            optimizer_fn=optimizer_fn, run_mode=mox.ModeKeys.TRAIN, batch_size=8,
            log_dir=str(tmp_path), max_number_of_steps=steps, log_every_n_steps=100)
    pieces = schedules.parse_piecewise(SPEC)
    kernel, bias = np.zeros((runlib.NUM_FEATURES, runlib.NUM_CLASSES)), np.zeros(runlib.NUM_CLASSES)
    accum_k, accum_b = np.zeros_like(kernel), np.zeros_like(bias)
    for step in range(steps):
        rate = schedules.piecewise_value(pieces, step / 8)
        x, y = images[step * 8 % 64:][:8].astype(np.float64), labels[step * 8 % 64:][:8]
        p = runlib.softmax_probabilities(x @ kernel + bias)
        p[np.arange(8), y] -= 1
        accum_k = 0.9 * accum_k + x.T @ p / 8
        accum_b = 0.9 * accum_b + p.mean(axis=0)
        kernel -= rate * accum_k
        bias -= rate * accum_b
    got_kernel, got_bias = runlib.checkpoint_variables(str(tmp_path))
    np.testing.assert_allclose(got_kernel, kernel, atol=5e-5)
    np.testing.assert_allclose(got_bias, bias, atol=5e-5)
