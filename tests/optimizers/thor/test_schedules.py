"""THOR's schedules against MindSpore's formulas written out in plain Python, and bound to the run's global step."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite import context, errors
from moxlite.optimizers import current_learning_rate, get_optimizer_fn, get_optimizer_wrapper_fn
from moxlite.optimizers.thor import schedules as thor_schedules
from tests import runlib


def mindspore_lr_table(lr_init, decay, total_epochs, steps_per_epoch, decay_epochs):
    """get_thor_lr's table (one value per step), from its documented formula, in float64 then float32."""
    table = []
    for step in range(int(steps_per_epoch * total_epochs)):
        epoch = (step + 1) / steps_per_epoch
        value = lr_init * (1.0 - epoch / total_epochs) ** decay
        if epoch >= decay_epochs:
            value *= 0.5
        if epoch >= decay_epochs + 1:
            value *= 0.5
        table.append(value)
    return np.array(table, np.float32)


def mindspore_damping_table(damping_init, decay_rate, total_epochs, steps_per_epoch):
    return np.array([damping_init * decay_rate ** (((step + 1) / steps_per_epoch) / 10)
                     for step in range(total_epochs * steps_per_epoch)], np.float32)


def mindspore_poly_table(start, end, total_steps, power):
    """_get_poly_lr with no warm-up: the step itself (not step + 1), clipped at 0."""
    return np.array([max((start - end) * (1.0 - step / total_steps) ** power + end, 0.0)
                     for step in range(total_steps)], np.float32)


def values(schedule, steps):
    return np.array([float(schedule(tf.constant(step, tf.int64))) for step in steps], np.float32)


def test_thor_learning_rate_equals_mindspore_table_at_every_step():
    # 7 steps an epoch, zero at epoch 6, halved from epoch 4 and again from epoch 5.
    schedule = thor_schedules.ThorLearningRate(0.05803, 4.04839, lr_end_epoch=6, steps_per_epoch=7, decay_epochs=4)
    table = mindspore_lr_table(0.05803, 4.04839, 6, 7, 4)
    steps = np.arange(len(table))
    np.testing.assert_allclose(values(schedule, steps), table, rtol=1e-6, atol=0)
    # The two halvings are really there: step 27 ends epoch 4, step 34 ends epoch 5.
    unhalved = 0.05803 * (1 - (28 / 7) / 6) ** 4.04839
    assert table[27] == pytest.approx(unhalved / 2, rel=1e-6)
    assert table[34] == pytest.approx(0.05803 * (1 - 5 / 6) ** 4.04839 / 4, rel=1e-6)
    # MindSpore's table ends at lr_end_epoch (value 0); here the value stays 0 instead of going NaN.
    assert values(schedule, [len(table) - 1, len(table), 10 * len(table)]).tolist() == [0.0, 0.0, 0.0]


def test_published_resnet50_learning_rate_at_chosen_steps():
    config = thor_schedules.RESNET50_ASCEND
    schedule = thor_schedules.ThorLearningRate(config["lr_init"], config["lr_decay"], config["lr_end_epoch"], 5004,
                                               decay_epochs=config["decay_epochs"])
    for step in (0, 5003, 5004, 100_000, 39 * 5004 - 2, 39 * 5004 - 1, 40 * 5004 - 1, 45 * 5004 - 1):
        epoch = (step + 1) / 5004
        expected = config["lr_init"] * (1 - epoch / 53) ** config["lr_decay"]
        expected *= 0.5 ** ((epoch >= 39) + (epoch >= 40))
        assert float(schedule(step)) == pytest.approx(expected, rel=1e-6), step


def test_thor_damping_equals_mindspore_table():
    schedule = thor_schedules.ThorDamping(0.02714, 0.50036, steps_per_epoch=5)
    table = mindspore_damping_table(0.02714, 0.50036, 70, 5)
    np.testing.assert_allclose(values(schedule, np.arange(len(table))), table, rtol=1e-6, atol=0)
    # Ten epochs decay by exactly decay_rate.
    assert float(schedule(50 + 4)) / float(schedule(4)) == pytest.approx(0.50036, rel=1e-6)


@pytest.mark.parametrize("factory, start, end", [
    (thor_schedules.bert_thor_learning_rate, 3.4e-3, 3.244e-5),
    (thor_schedules.bert_thor_damping, 5e-2, 1e-6),
])
def test_bert_polynomial_variants_equal_mindspore_table(factory, start, end):
    schedule = factory(total_steps=300)
    table = mindspore_poly_table(start, end, 300, 1.0)
    np.testing.assert_allclose(values(schedule, np.arange(300)), table, rtol=1e-6, atol=0)
    assert float(schedule(300)) == pytest.approx(end, rel=1e-6)
    assert float(schedule(10_000)) == pytest.approx(end, rel=1e-6)
    squared = thor_schedules.ThorPolynomialDecay(start, end, 300, power=2.0)
    np.testing.assert_allclose(values(squared, [0, 100, 299]), mindspore_poly_table(start, end, 300, 2.0)[[0, 100, 299]],
                               rtol=1e-6)


def test_warmup_steps_scale_the_polynomial_decay_by_step_plus_one_over_warmup():
    start, end, total, warmup = 0.04, 0.004, 600, 50
    steps = np.arange(700)
    decay = mindspore_poly_table(start, end, total, 1.0)
    decay = np.concatenate([decay, np.full(100, end)])
    expected = decay * np.minimum(1.0, (steps + 1) / warmup)
    schedule = thor_schedules.ThorPolynomialDecay(start, end, total, warmup_steps=warmup)
    np.testing.assert_allclose(values(schedule, steps), expected, rtol=1e-6, atol=0)
    assert float(schedule(0)) == pytest.approx(start / warmup, rel=1e-6)
    traced = tf.function(schedule)   # as the optimizer reads it, inside the step's graph, of an int32 step too
    assert float(traced(tf.constant(10, tf.int32))) == pytest.approx(expected[10], rel=1e-6)
    # without warm-up the values are MindSpore's table, and the config (so a saved optimizer) is unchanged
    plain = thor_schedules.ThorPolynomialDecay(start, end, total)
    np.testing.assert_allclose(values(plain, steps[:total]), decay[:total], rtol=1e-6)
    assert "warmup_steps" not in plain.get_config()
    restored = thor_schedules.ThorPolynomialDecay.from_config(schedule.get_config())
    np.testing.assert_allclose(values(restored, steps), expected, rtol=1e-6)
    assert repr(schedule).endswith("warmup_steps=50)")


def test_inside_a_run_the_optimizer_reads_the_global_step_in_applied_updates():
    schedule = thor_schedules.ThorLearningRate(0.1, 2.0, lr_end_epoch=3, steps_per_epoch=4, decay_epochs=2)
    table = mindspore_lr_table(0.1, 2.0, 3, 4, 2)
    global_step = tf.Variable(0, dtype=tf.int64)
    run = context.RunContext(global_step=global_step, global_batch_size=10, num_samples=40)
    with context.activate(run):
        plain = get_optimizer_fn("momentum", schedule, momentum=0.9)()
        accumulated = get_optimizer_wrapper_fn("batch_gradients", get_optimizer_fn("sgd", schedule), num_batches=2)()
    for step in (0, 3, 7, 9):
        global_step.assign(step)
        assert float(current_learning_rate(plain)) == pytest.approx(float(table[step]), rel=1e-6)
        assert float(current_learning_rate(accumulated)) == pytest.approx(float(table[step // 2]), rel=1e-6)
    assert int(plain.iterations) == 0


def test_schedules_round_trip_through_keras_serialization():
    for schedule in (thor_schedules.ThorLearningRate(0.05, 4.0, 50, 100, 39),
                     thor_schedules.ThorDamping(0.03, 0.5, 100), thor_schedules.bert_thor_damping()):
        copy = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
        assert type(copy) is type(schedule) and copy.get_config() == schedule.get_config()
        assert float(copy(1234)) == float(schedule(1234))



def test_repr_names_the_schedule_and_every_setting_so_it_rebuilds_the_same_values():
    """repr reads as the recipe block that builds the schedule: rebuilt from its text, the values agree."""
    for schedule in (thor_schedules.ThorLearningRate(0.05803, 4.04839, 53, 5004, 39),
                     thor_schedules.ThorDamping(0.02714, 0.50036, 5004), thor_schedules.bert_thor_learning_rate()):
        text = repr(schedule)
        name, _, settings = text.partition("(")
        assert settings.endswith(")") and "object at" not in text
        arguments = dict(item.split("=") for item in settings[:-1].split(", "))
        assert sorted(arguments) == sorted(schedule.get_config())
        rebuilt = thor_schedules.SCHEDULE_CLASSES[name](**{key: float(value) for key, value in arguments.items()})
        for step in (0, 777, 29999):
            assert float(rebuilt(step)) == float(schedule(step)), (text, step)

@pytest.mark.parametrize("build, fragment", [
    (lambda: thor_schedules.ThorLearningRate(0, 4.0, 50, 100), "thor: lr_init=0 is out of range; expected a finite number > 0"),
    (lambda: thor_schedules.ThorLearningRate(0.1, 4.0, 50, "5004"), "thor: steps_per_epoch='5004' is out of range; expected a finite number > 0"),
    (lambda: thor_schedules.ThorLearningRate(0.1, -1.0, 50, 10), "thor: lr_decay=-1.0 is out of range; expected a finite number >= 0"),
    (lambda: thor_schedules.ThorDamping(0.03, math.nan, 10), "thor_damping: decay_rate=nan is out of range; expected a finite number > 0"),
    (lambda: thor_schedules.ThorDamping(0.03, 0.5, 0), "thor_damping: steps_per_epoch=0 is out of range; expected a finite number > 0"),
    (lambda: thor_schedules.ThorPolynomialDecay(1e-3, 1e-5, 10.5), "thor_polynomial: total_steps=10.5 is out of range; expected a whole number > 0"),
    (lambda: thor_schedules.ThorPolynomialDecay(1e-3, -1.0, 100), "thor_polynomial: end_value=-1.0 is out of range; expected a finite number >= 0"),
    (lambda: thor_schedules.ThorPolynomialDecay(1e-3, 1e-5, 100, warmup_steps=2.5), "thor_polynomial: warmup_steps=2.5 is out of range; expected a whole number >= 0"),
])
def test_bad_arguments_give_one_line_naming_the_argument(build, fragment):
    with pytest.raises(errors.OptimizerError) as raised:
        build()
    assert fragment in str(raised.value) and "\n" not in str(raised.value)


def numpy_sgd_with_lr_table(images, labels, batch_size, lr_table):
    """Softmax regression under SGD with a per-step learning rate, batches in order."""
    kernel = np.zeros((runlib.NUM_FEATURES, runlib.NUM_CLASSES))
    bias = np.zeros(runlib.NUM_CLASSES)
    for step, learning_rate in enumerate(lr_table):
        index = np.arange(step * batch_size, (step + 1) * batch_size) % len(labels)
        x, y = images[index].astype(np.float64), labels[index]
        probabilities = runlib.softmax_probabilities(x @ kernel + bias)
        probabilities[np.arange(batch_size), y] -= 1.0
        kernel -= learning_rate * x.T @ probabilities / batch_size
        bias -= learning_rate * probabilities.mean(axis=0)
    return kernel, bias


def test_run_applies_update_k_with_the_table_value_at_step_k(tmp_path):
    """Through moxlite.run: update k (from 0) uses MindSpore's value k, no off-by-one."""
    images, labels = runlib.mnist_rows(200)
    schedule = thor_schedules.ThorLearningRate(1.0, 1.5, lr_end_epoch=2, steps_per_epoch=5, decay_epochs=1)
    table = mindspore_lr_table(1.0, 1.5, 2, 5, 1)
    steps = 9
    mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=runlib.softmax_model_fn,
            optimizer_fn=mox.get_optimizer_fn("sgd", learning_rate=schedule), run_mode=mox.ModeKeys.TRAIN,
            batch_size=20, log_dir=str(tmp_path), max_number_of_steps=steps, log_every_n_steps=100)
    kernel, bias = runlib.checkpoint_variables(str(tmp_path))
    ref_kernel, ref_bias = numpy_sgd_with_lr_table(images, labels, 20, table[:steps].astype(np.float64))
    np.testing.assert_allclose(kernel, ref_kernel, atol=2e-5)
    np.testing.assert_allclose(bias, ref_bias, atol=2e-5)
    # A table shifted by one step (the classic off-by-one) is measurably different.
    shifted_kernel, _ = numpy_sgd_with_lr_table(images, labels, 20, table[1:steps + 1].astype(np.float64))
    assert np.abs(shifted_kernel - kernel).max() > 1e-3
