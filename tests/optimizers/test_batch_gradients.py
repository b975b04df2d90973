"""batch_gradients: N micro-batches of B equal one batch of N*B, with few reductions, resumable."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from moxlite.optimizers import get_optimizer_fn, get_optimizer_wrapper_fn
from tests.optimizer_loop import Trainer, max_difference, mnist_rows

NUM_BATCHES, MICRO_BATCH, CYCLES = 4, 16, 2
# float32 sums of 4 micro-batch gradients in another order than one batch's:
# measured differences are ~1e-7; Adam divides by sqrt(v) and amplifies them.
TOLERANCE = {"sgd": 1e-6, "momentum": 1e-6, "adam": 1e-5, "momentum_lars": 1e-6}


def _inner_fn(kind):
    if kind == "sgd":
        return get_optimizer_fn("sgd", 0.5)
    if kind == "momentum":
        return get_optimizer_fn("momentum", 0.5, momentum=0.9)
    if kind == "adam":
        return get_optimizer_fn("adam", 0.01)
    return get_optimizer_wrapper_fn("lars", get_optimizer_fn("momentum", 0.5, momentum=0.9), ratio=0.05)


def _accumulating_fn(kind, **kwargs):
    return get_optimizer_wrapper_fn("batch_gradients", _inner_fn(kind), num_batches=NUM_BATCHES, **kwargs)


def _data(mnist_arrays):
    return mnist_rows(mnist_arrays, NUM_BATCHES * MICRO_BATCH * CYCLES)


@pytest.fixture(scope="module")
def reference_weights(mnist_arrays):
    """Weights after CYCLES steps at batch N*B on one device, per inner optimizer."""
    images, labels = _data(mnist_arrays)
    return {kind: Trainer(tf.distribute.get_strategy(), _inner_fn(kind)).train(images, labels,
                                                                                NUM_BATCHES * MICRO_BATCH)
            for kind in TOLERANCE}


@pytest.mark.parametrize("kind", sorted(TOLERANCE))
def test_n_micro_batches_equal_one_large_batch_on_one_device(mnist_arrays, reference_weights, kind):
    images, labels = _data(mnist_arrays)
    trainer = Trainer(tf.distribute.get_strategy(), _accumulating_fn(kind))
    assert max_difference(trainer.train(images, labels, MICRO_BATCH), reference_weights[kind]) < TOLERANCE[kind]
    assert int(trainer.optimizer.iterations.numpy()) == CYCLES


@pytest.mark.parametrize("kind, sync_on_apply, accumulate_on", [
    ("sgd", True, "device"), ("momentum", True, "device"), ("adam", True, "device"),
    ("momentum_lars", True, "device"), ("momentum", False, "device"), ("momentum_lars", True, "cpu")])
def test_n_micro_batches_equal_one_large_batch_on_two_devices(
        mnist_arrays, reference_weights, two_device_strategy, kind, sync_on_apply, accumulate_on):
    images, labels = _data(mnist_arrays)
    trainer = Trainer(two_device_strategy,
                      _accumulating_fn(kind, sync_on_apply=sync_on_apply, accumulate_on=accumulate_on))
    # Each step: MICRO_BATCH rows split over the two replicas.
    assert max_difference(trainer.train(images, labels, MICRO_BATCH), reference_weights[kind]) < TOLERANCE[kind]
    assert int(trainer.optimizer.iterations.numpy()) == CYCLES


def _count_executed_reductions(strategy, monkeypatch):
    """Patch the strategy so every executed batch_reduce_to/reduce_to adds 1 to a counter.

    The increment is an op inside whatever branch performs the reduction, so it
    counts reductions run, not reductions traced. The patch goes with the test (monkeypatch):
    the strategy is the one moxlite.run caches for these devices, and a counter left on it was
    read by the traces of later tests' runs in this process, which then refused it as a
    variable made outside the strategy.
    """
    counter = tf.Variable(0, dtype=tf.int64, trainable=False)
    extended = strategy.extended
    for method in ("_batch_reduce_to", "_reduce_to"):
        original = getattr(extended, method)

        def counting(*args, _original=original, **kwargs):
            counter.assign_add(1)
            return _original(*args, **kwargs)

        monkeypatch.setattr(extended, method, counting)
    return counter


@pytest.mark.parametrize("sync_on_apply, per_cycle", [(True, 1), (False, NUM_BATCHES)])
def test_reductions_per_cycle(mnist_arrays, two_device_strategy, monkeypatch, sync_on_apply, per_cycle):
    images, labels = _data(mnist_arrays)
    trainer = Trainer(two_device_strategy, _accumulating_fn("momentum_lars", sync_on_apply=sync_on_apply))
    counter = _count_executed_reductions(two_device_strategy, monkeypatch)
    trainer.train(images, labels, MICRO_BATCH)
    assert int(counter.numpy()) == per_cycle * CYCLES


def test_plain_optimizer_reduces_every_step_as_counted(mnist_arrays, two_device_strategy, monkeypatch):
    # The counter also sees Keras's own all-reduce: one per step without a wrapper.
    images, labels = _data(mnist_arrays)
    trainer = Trainer(two_device_strategy, _inner_fn("momentum"))
    counter = _count_executed_reductions(two_device_strategy, monkeypatch)
    trainer.train(images[:3 * MICRO_BATCH], labels[:3 * MICRO_BATCH], MICRO_BATCH)
    assert int(counter.numpy()) == 3


@pytest.mark.parametrize("saved_after", [1, 3])
def test_checkpoint_mid_accumulation_resumes_exactly(mnist_arrays, two_device_strategy, tmp_path, saved_after):
    images, labels = _data(mnist_arrays)
    steps = [(images[s:s + MICRO_BATCH], labels[s:s + MICRO_BATCH]) for s in range(0, len(labels), MICRO_BATCH)]
    uninterrupted = Trainer(two_device_strategy, _accumulating_fn("momentum_lars"))
    for batch in steps:
        uninterrupted.step(*batch)

    first = Trainer(two_device_strategy, _accumulating_fn("momentum_lars"))
    for batch in steps[:saved_after]:
        first.step(*batch)
    path = tf.train.Checkpoint(model=first.model, optimizer=first.optimizer).save(str(tmp_path / "ckpt"))

    resumed = Trainer(two_device_strategy, _accumulating_fn("momentum_lars"))
    tf.train.Checkpoint(model=resumed.model, optimizer=resumed.optimizer).restore(path).assert_consumed()
    for batch in steps[saved_after:]:
        resumed.step(*batch)
    assert max_difference(resumed.weights(), uninterrupted.weights()) < 1e-6
    assert int(resumed.optimizer.iterations.numpy()) == CYCLES


def test_keras_own_accumulation_fails_under_mirrored_where_batch_gradients_works(
        mnist_arrays, reference_weights, two_device_strategy):
    images, labels = _data(mnist_arrays)
    keras_accumulating = Trainer(two_device_strategy,
                                 lambda: keras.optimizers.SGD(0.5, gradient_accumulation_steps=NUM_BATCHES))
    with pytest.raises(Exception, match="merge_call"):
        keras_accumulating.train(images, labels, MICRO_BATCH)
    ours = Trainer(two_device_strategy, _accumulating_fn("sgd"))
    assert max_difference(ours.train(images, labels, MICRO_BATCH), reference_weights["sgd"]) < TOLERANCE["sgd"]


def test_num_batches_one_is_the_inner_optimizer(mnist_arrays, two_device_strategy):
    images, labels = _data(mnist_arrays)
    plain = Trainer(tf.distribute.get_strategy(), _inner_fn("momentum")).train(images, labels, MICRO_BATCH)
    wrapped = Trainer(two_device_strategy, get_optimizer_wrapper_fn(
        "batch_gradients", _inner_fn("momentum"), num_batches=1)).train(images, labels, MICRO_BATCH)
    assert max_difference(wrapped, plain) < 1e-6


def test_accumulators_are_per_replica_and_hold_the_running_sum(mnist_arrays, two_device_strategy):
    images, labels = _data(mnist_arrays)
    trainer = Trainer(two_device_strategy, _accumulating_fn("sgd"))
    trainer.step(images[:MICRO_BATCH], labels[:MICRO_BATCH])
    accumulator = trainer.optimizer._accumulators[0].value
    assert isinstance(accumulator, tf.distribute.DistributedValues)
    # Read in cross-replica context, the ON_READ accumulator is the sum over replicas:
    # the gradient of the first micro-batch's mean loss.
    with tf.GradientTape() as tape:
        logits = trainer.model(images[:MICRO_BATCH])
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels[:MICRO_BATCH], logits,
                                                                           from_logits=True))
    expected = tape.gradient(loss, trainer.model.trainable_variables)[0]
    np.testing.assert_allclose(accumulator.read_value().numpy(), expected.numpy(), atol=1e-6)


def test_wrapping_the_same_optimizer_twice_leaves_it_and_its_schedule_unchanged():
    # A factory around an optimizer instance, called twice: each wrapper counts one update per
    # 2 micro-steps, and the inner optimizer alone still counts every step.
    from moxlite import context
    from moxlite.optimizers import current_learning_rate

    decay = keras.optimizers.schedules.ExponentialDecay(1.0, decay_steps=1, decay_rate=0.5)
    global_step = tf.Variable(13, dtype=tf.int64)
    with context.activate(context.RunContext(global_step=global_step, global_batch_size=1, num_samples=None)):
        inner = get_optimizer_fn("sgd", decay)()
        factory = get_optimizer_wrapper_fn("batch_gradients", inner, num_batches=2)
        first, second = factory(), factory()
    assert float(current_learning_rate(inner)) == pytest.approx(0.5 ** 13)
    assert float(current_learning_rate(first)) == pytest.approx(0.5 ** 6)
    assert float(current_learning_rate(second)) == pytest.approx(0.5 ** 6)
    # The applied update uses the per-update rate too: two micro-steps, then w -= 0.5**6 * mean(g).
    weight = tf.Variable([1.0, 2.0])
    for gradient in ([0.5, -1.0], [1.5, 1.0]):
        second.apply_gradients([(tf.constant(gradient), weight)])
    np.testing.assert_allclose(weight.numpy(), [1.0 - 0.5 ** 6 * 1.0, 2.0], rtol=1e-6)
