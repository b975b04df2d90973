"""A resumed run takes its hyperparameters from optimizer_fn now (issue 8, item 1).

Train at one learning rate, resume the same log_dir at a tenth of it: the
weights equal numpy's steps at the first rate then at the second, for SGD
and for momentum (whose velocity is state and carries over), on 1 and 2
replicas; LARS keeps its momentum slots and takes the new rate.
"""

import numpy as np
import pytest

import moxlite as mox
from moxlite import context
from moxlite.training.state import checkpoints
from tests import runlib

BATCH = 16


def numpy_two_rates(images, labels, first_steps, total_steps, rates, momentum):
    """Keras SGD (v = m v - lr g; w += v) at rates[0] for first_steps, then rates[1]."""
    kernel = np.zeros((runlib.NUM_FEATURES, runlib.NUM_CLASSES))
    bias = np.zeros(runlib.NUM_CLASSES)
    velocity_k, velocity_b = np.zeros_like(kernel), np.zeros_like(bias)
    for step in range(total_steps):
        rate = rates[0] if step < first_steps else rates[1]
        index = np.arange(step * BATCH, (step + 1) * BATCH) % len(labels)
        x, y = images[index].astype(np.float64), labels[index]
        probabilities = runlib.softmax_probabilities(x @ kernel + bias)
        probabilities[np.arange(BATCH), y] -= 1.0
        velocity_k = momentum * velocity_k - rate * x.T @ probabilities / BATCH
        velocity_b = momentum * velocity_b - rate * probabilities.mean(axis=0)
        kernel, bias = kernel + velocity_k, bias + velocity_b
    return kernel, bias


@pytest.mark.parametrize("name,momentum,num_gpus", [("sgd", 0.0, 1), ("momentum", 0.9, 1), ("momentum", 0.9, 2)])
def test_resume_with_a_new_learning_rate_steps_with_it(tmp_path, name, momentum, num_gpus):
    images, labels = runlib.mnist_rows(160)
    mox.set_flag("num_gpus", num_gpus)
    extra = {"momentum": momentum} if momentum else {}

    def train(rate, steps):
        return mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=runlib.softmax_model_fn,
                       optimizer_fn=mox.get_optimizer_fn(name, rate, **extra), run_mode=mox.ModeKeys.TRAIN,
                       batch_size=BATCH // num_gpus, log_dir=str(tmp_path), max_number_of_steps=steps)

    train(0.5, 4)
    train(0.05, 8)
    kernel, bias = numpy_two_rates(images, labels, 4, 8, (0.5, 0.05), momentum)
    saved_kernel, saved_bias = runlib.checkpoint_variables(tmp_path)
    np.testing.assert_allclose(saved_kernel, kernel, atol=2e-5)
    np.testing.assert_allclose(saved_bias, bias, atol=2e-5)
    # The rate saved with step 8 is the one this run used.
    reader = __import__("tensorflow").train.load_checkpoint(str(tmp_path))
    rates = [reader.get_tensor(k) for k in reader.get_variable_to_shape_map() if "learning_rate" in k]
    assert rates and all(np.isclose(r, 0.05) for r in rates)


def test_wrapped_optimizer_keeps_its_slots_and_takes_the_new_rate(tmp_path):
    import tensorflow as tf

    def stack(rate):
        factory = mox.get_optimizer_wrapper_fn("lars", mox.get_optimizer_fn("momentum", rate, momentum=0.9))
        return factory()

    variable = tf.Variable(np.ones((3, 2), np.float32), name="w")
    step = tf.Variable(0, dtype=tf.int64)
    with context.activate(context.RunContext(global_step=step, global_batch_size=1)):
        first = stack(0.5)
        first.build([variable])
        first.apply_gradients([(tf.constant(np.full((3, 2), 0.25, np.float32)), variable)])
        saver = checkpoints.Checkpointer(str(tmp_path), step, [variable], [first])
        saver.save(1)
        slots = {v.path: v.numpy() for v in first.variables if "momentum" in v.path}
        assert slots and any(np.abs(s).sum() > 0 for s in slots.values())
        second = stack(0.05)
        second.build([variable])
        checkpoints.Checkpointer(str(tmp_path), step, [variable], [second]).restore()
    assert np.isclose(float(np.asarray(second.learning_rate)), 0.05)
    for v in second.variables:
        if v.path in slots:
            np.testing.assert_allclose(v.numpy(), slots[v.path])
