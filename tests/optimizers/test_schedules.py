"""Learning rates: MoXing's epoch strings and the global-step clock."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from moxlite import context, errors
from moxlite.optimizers import current_learning_rate, get_optimizer_fn, get_optimizer_wrapper_fn
from moxlite.optimizers import schedules

SPEC = "5:0.1->0.4,10:0.4=>0.8,15:0.8,20:0.08"


def _hand_formula(epoch):
    """The documented meaning of SPEC, written out piece by piece."""
    if epoch < 5:
        return 0.1 + (0.4 - 0.1) * epoch / 5
    if epoch < 10:
        return 0.4 * 2.0 ** ((epoch - 5) / 5)
    if epoch < 15:
        return 0.8
    return 0.08


def _run_context(step_variable, num_samples=1000, global_batch_size=100):
    return context.RunContext(global_step=step_variable, global_batch_size=global_batch_size,
                              num_samples=num_samples)


@pytest.mark.parametrize("step", [0, 1, 25, 49, 50, 51, 75, 99, 100, 149, 150, 199, 200, 400])
def test_epoch_string_values_equal_the_formula(step):
    # 1000 samples / 100 per step: 10 steps per epoch.
    global_step = tf.Variable(step, dtype=tf.int64)
    with context.activate(_run_context(global_step)):
        optimizer = get_optimizer_fn("momentum", SPEC)()
    assert float(current_learning_rate(optimizer)) == pytest.approx(_hand_formula(step / 10), rel=1e-6)


def test_epoch_string_pieces_and_python_value_agree_with_the_formula():
    pieces = schedules.parse_piecewise(SPEC)
    assert [(p[0], p[1], p[4]) for p in pieces] == [(0, 5, "linear"), (5, 10, "exponential"), (10, 15, "hold"),
                                                    (15, 20, "hold")]
    for epoch in np.linspace(0, 25, 51):
        assert schedules.piecewise_value(pieces, epoch) == pytest.approx(_hand_formula(epoch))


def test_learning_rate_follows_the_global_step_variable():
    global_step = tf.Variable(0, dtype=tf.int64)
    with context.activate(_run_context(global_step)):
        optimizer = get_optimizer_fn("sgd", SPEC)()
    seen = []
    for step in (0, 30, 70, 120):
        global_step.assign(step)
        seen.append(float(current_learning_rate(optimizer)))
    assert seen == pytest.approx([_hand_formula(s / 10) for s in (0, 30, 70, 120)], rel=1e-6)
    assert int(optimizer.iterations) == 0  # the optimizer's own counter played no part


def test_keras_schedule_inside_a_run_counts_applied_updates_of_the_global_step():
    decay = keras.optimizers.schedules.ExponentialDecay(1.0, decay_steps=1, decay_rate=0.5)
    global_step = tf.Variable(0, dtype=tf.int64)
    with context.activate(_run_context(global_step)):
        plain = get_optimizer_fn("sgd", decay)()
        accumulated = get_optimizer_wrapper_fn(
            "batch_gradients", get_optimizer_wrapper_fn("batch_gradients", get_optimizer_fn("sgd", decay),
                                                        num_batches=2), num_batches=3)()
    global_step.assign(13)
    assert float(current_learning_rate(plain)) == pytest.approx(0.5 ** 13)
    # Two stacked accumulations of 2 and 3: one update per 6 micro-steps, 13 // 6 = 2.
    assert float(current_learning_rate(accumulated)) == pytest.approx(0.5 ** 2)


def test_epoch_string_counts_samples_even_under_accumulation():
    global_step = tf.Variable(70, dtype=tf.int64)
    with context.activate(_run_context(global_step)):
        stack = get_optimizer_wrapper_fn("batch_gradients", get_optimizer_fn("sgd", SPEC), num_batches=4)()
    assert float(current_learning_rate(stack)) == pytest.approx(_hand_formula(7.0), rel=1e-6)


def test_outside_a_run_keras_schedules_key_on_iterations():
    decay = keras.optimizers.schedules.ExponentialDecay(1.0, decay_steps=1, decay_rate=0.5)
    optimizer = get_optimizer_fn("sgd", decay)()
    optimizer.iterations.assign(3)
    assert float(current_learning_rate(optimizer)) == pytest.approx(0.125)


def test_applied_step_uses_the_global_step_learning_rate():
    # One SGD step on loss = sum(w * x): w moves by lr(global step) * x exactly.
    global_step = tf.Variable(120, dtype=tf.int64)
    with context.activate(_run_context(global_step)):
        optimizer = get_optimizer_fn("sgd", SPEC)()
    weight = tf.Variable([1.0, 2.0])
    x = tf.constant([0.5, -1.0])
    optimizer.apply_gradients([(x, weight)])
    np.testing.assert_allclose(weight.numpy(), [1.0, 2.0] - 0.8 * x.numpy(), rtol=1e-6)


def test_epoch_string_outside_a_run_says_what_is_missing():
    factory = get_optimizer_fn("sgd", SPEC)
    with pytest.raises(errors.OptimizerError, match="build the optimizer inside moxlite.run"):
        factory()


def test_epoch_string_without_num_samples_says_what_is_missing():
    factory = get_optimizer_fn("sgd", SPEC)
    with context.activate(_run_context(tf.Variable(0, dtype=tf.int64), num_samples=None)):
        with pytest.raises(errors.OptimizerError, match="needs the number of training samples"):
            factory()


@pytest.mark.parametrize("spec, message", [
    ("5:0.1,3:0.2", "epoch 3 in piece '3:0.2' must be greater than the previous piece's end 5"),
    ("5:0.1->0", "non-positive learning rate"),
    ("5:0.1,,10:0.2", "piece '' of"),
    ("inf:0.1", "must be finite"),
])
def test_malformed_epoch_strings_name_the_piece(spec, message):
    with pytest.raises(errors.OptimizerError, match=message):
        schedules.parse_piecewise(spec)


def test_global_step_learning_rate_round_trips_inside_and_outside_a_run():
    global_step = tf.Variable(50, dtype=tf.int64)
    with context.activate(_run_context(global_step)):
        optimizer = get_optimizer_fn("sgd", SPEC)()
        rebuilt = keras.optimizers.SGD.from_config(optimizer.get_config())
        assert float(current_learning_rate(rebuilt)) == pytest.approx(_hand_formula(5.0), rel=1e-6)
    outside = keras.optimizers.SGD.from_config(optimizer.get_config())
    outside.iterations.assign(50)
    assert isinstance(outside._learning_rate, schedules.PiecewiseEpochSchedule)
    assert float(current_learning_rate(outside)) == pytest.approx(_hand_formula(5.0), rel=1e-6)


def test_exponential_ramp_is_geometric():
    schedule = schedules.PiecewiseEpochSchedule("4:1.0=>16.0", steps_per_epoch=1)
    assert [float(schedule(s)) for s in range(5)] == pytest.approx([1.0, 2.0, 4.0, 8.0, 16.0])
    assert math.isclose(float(schedule(2.5)), 4.0 * 2 ** 0.5, rel_tol=1e-6)
