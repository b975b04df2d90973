"""Optimizer wrappers and sharded variables under parameter servers, on real loopback clusters
(tools/launch_local.py), checked against single-process runs and numpy losses; plus the
accumulation interface between the asynchronous loop and the wrapper stack, in process."""

import keras
import numpy as np
import pytest

import moxlite as mox
from moxlite import errors
from moxlite.optimizers import accumulation
from moxlite.training.trainers.async_trainer import AsyncTrainer
from tests import distlib, runlib
from tests.dist_scripts import train_embedding, train_mnist

pytestmark = pytest.mark.slow  # real multi-process clusters on loopback

MNIST = ["python", distlib.script("train_mnist.py")]
EMBEDDING = ["python", distlib.script("train_embedding.py")]
STACK = ["--optimizer=momentum_lars"]


def _stack(num_batches):
    return train_mnist.optimizer_fn_for("momentum_lars", num_batches)()


# ---- the interface, in process ----------------------------------------------------------------

def test_outermost_batch_gradients_is_lifted_and_its_inner_stack_applies():
    stack = _stack(4)
    plan = accumulation.accumulation_of(stack)
    assert plan.num_batches == 4 and plan.apply_optimizer is stack.inner_optimizer
    assert accumulation.nested_batch_gradients(plan.apply_optimizer) is None
    plain = _stack(1)
    assert accumulation.accumulation_of(plain) == accumulation.Accumulation(1, plain)


def test_batch_gradients_below_another_wrapper_is_refused_by_the_async_loop():
    inner = mox.get_optimizer_wrapper_fn("batch_gradients", mox.get_optimizer_fn("momentum", 0.1, momentum=0.9),
                                         num_batches=4)
    stack = mox.get_optimizer_wrapper_fn("lars", inner)()
    assert accumulation.nested_batch_gradients(stack) is stack.inner_optimizer

    class Step:
        optimizers = [stack]

    with pytest.raises(errors.OptimizerError, match="outermost wrapper"):
        AsyncTrainer._accumulations_of(Step())


def test_loss_scaled_batch_gradients_applies_the_unscaled_mean_on_the_shared_scale():
    weights = keras.Variable(np.array([1.0, -2.0], np.float32))
    outer = keras.optimizers.LossScaleOptimizer(
        mox.get_optimizer_wrapper_fn("batch_gradients", mox.get_optimizer_fn("momentum", 0.1, momentum=0.9),
                                     num_batches=3)(), initial_scale=8.0)
    outer.build([weights])
    plan = accumulation.accumulation_of(outer)
    assert plan.num_batches == 3
    mean_gradient = np.array([0.5, 0.25], np.float32)
    plan.apply_optimizer.apply_gradients([(mean_gradient * 8.0, weights)])   # gradients of the scaled loss
    plan.apply_optimizer.apply_gradients([(np.array([np.inf, 0.0], np.float32), weights)])  # overflow: skipped
    # Momentum by hand: v = -lr*g, w += v, on the unscaled gradient; the skipped step halves the scale.
    np.testing.assert_allclose(weights.numpy(), np.array([1.0, -2.0]) - 0.1 * mean_gradient, rtol=1e-6)
    assert float(outer.dynamic_scale.numpy()) == 4.0


# ---- real clusters ----------------------------------------------------------------------------

def test_async_batch_gradients_on_one_worker_equals_a_single_process_run_at_the_whole_batch(launches, tmp_path):
    num_batches, micro_batch, updates = 4, 8, 4
    steps = updates * num_batches
    run = launches(["--workers=1", "--ps=1", "--async"],
                   MNIST + STACK + [f"--log_dir={tmp_path / 'cluster'}", f"--steps={steps}", f"--batch={micro_batch}",
                                    f"--num_batches={num_batches}", f"--save_steps={steps}", "--log_every=4"],
                   timeout=120)
    assert run.wait() == 0, run.output()
    assert run.results()["worker:0"]["global_step"] == steps  # one per micro-batch
    # The reference: momentum -> lars without accumulation, one process, batch N*B, K steps, same order.
    train_mnist.train(str(tmp_path / "single"), updates, num_batches * micro_batch, save_steps=updates,
                      optimizer="momentum_lars")
    cluster = runlib.checkpoint_variables(str(tmp_path / "cluster"))
    reference = runlib.checkpoint_variables(str(tmp_path / "single"))
    assert len(cluster) == len(reference) == 4
    for got, want in zip(cluster, reference):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_tf1_rate_of_the_global_step_follows_it_on_a_parameter_server_worker(launches, tmp_path):
    """optimizer_fn's piecewise rate of TF1's global step, on 1 worker and 1 ps (asynchronous):
    the same weights as one process (whose rates equal a TF1 Session's, test_tf1_step_rates),
    and not those of the step-0 rate held for the whole run."""
    steps, batch = 8, 16
    run = launches(["--workers=1", "--ps=1", "--async"],
                   MNIST + ["--model=softmax", "--optimizer=tf1_step_rate", f"--log_dir={tmp_path / 'cluster'}",
                            f"--steps={steps}", f"--batch={batch}", f"--save_steps={steps}", "--log_every=4"],
                   timeout=120)
    assert run.wait() == 0, run.output()
    train_mnist.train(str(tmp_path / "single"), steps, batch, model="softmax", save_steps=steps,
                      optimizer="tf1_step_rate")
    train_mnist.LEARNING_RATE, saved_rate = 0.3, train_mnist.LEARNING_RATE
    try:
        train_mnist.train(str(tmp_path / "frozen"), steps, batch, model="softmax", save_steps=steps)
    finally:
        train_mnist.LEARNING_RATE = saved_rate
    cluster, single, frozen = (runlib.checkpoint_variables(str(tmp_path / name))
                               for name in ("cluster", "single", "frozen"))
    for got, want in zip(cluster, single):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert max(np.abs(got - held).max() for got, held in zip(cluster, frozen)) > 1e-3


def _mlp_loss(checkpoint_prefix):
    """Mean cross-entropy of a saved ``runlib.mlp_model_fn`` on the training rows, in numpy."""
    kernel1, bias1, kernel2, bias2 = (v.astype(np.float64) for v in runlib.checkpoint_variables(checkpoint_prefix))
    images, labels = runlib.mnist_rows(train_mnist.NUM_ROWS)
    hidden = np.maximum(images @ kernel1 + bias1, 0.0)
    probabilities = runlib.softmax_probabilities(hidden @ kernel2 + bias2)
    return float(-np.log(probabilities[np.arange(len(labels)), labels]).mean())


def test_async_batch_gradients_on_two_workers_counts_every_micro_batch_and_lowers_the_loss(launches, tmp_path):
    num_batches, updates_per_worker = 4, 3
    steps_per_worker = updates_per_worker * num_batches
    run = launches(["--workers=2", "--ps=1", "--async"],
                   MNIST + STACK + [f"--log_dir={tmp_path}", f"--steps={steps_per_worker}", "--batch=8",
                                    f"--num_batches={num_batches}", "--save_steps=8", "--log_every=4"],
                   timeout=120)
    assert run.wait() == 0, run.output()
    assert run.results()["worker:0"]["global_step"] == steps_per_worker * 2  # exactly one per micro-batch
    losses = [_mlp_loss(str(tmp_path / f"model.ckpt-{step}")) for step in (8, 16, 24)]
    # The loss over all training rows falls between consecutive checkpoints (measured: 2.322, 2.287, 2.256).
    assert losses[0] > losses[1] > losses[2], losses


def test_large_embedding_is_sharded_over_both_ps_and_trains_as_in_one_process(launches, tmp_path):
    steps, batch = 30, 16
    run = launches(["--workers=1", "--ps=2", "--async"],
                   EMBEDDING + [f"--log_dir={tmp_path / 'cluster'}", f"--steps={steps}", f"--batch={batch}",
                                "--save_steps=10"],
                   timeout=120)
    assert run.wait() == 0, run.output()
    result = run.results()["worker:0"]
    assert result["global_step"] == steps
    rows = train_embedding.VOCABULARY // 2
    assert result["shards"] == [[[rows, train_embedding.EMBEDDING_DIM], f"/job:ps/replica:0/task:{task}/device:CPU:0"]
                                for task in (0, 1)]
    losses = [train_embedding.numpy_loss(str(tmp_path / "cluster" / f"model.ckpt-{step}")) for step in (10, 30)]
    assert losses[1] < losses[0] - 0.1, losses
    # One worker reads the rows in order, so the sharded run must match an unsharded process.
    train_embedding.train(str(tmp_path / "single"), steps, batch, save_steps=steps)
    cluster = runlib.checkpoint_variables(str(tmp_path / "cluster"))
    reference = runlib.checkpoint_variables(str(tmp_path / "single"))
    assert [w.shape for w in cluster] == [w.shape for w in reference] == [(50_000, 16), (16, 10), (10,)]
    for got, want in zip(cluster, reference):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
