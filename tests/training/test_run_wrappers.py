"""Optimizer wrapper stacks through moxlite.run, on one and two devices."""

import numpy as np
import pytest

import moxlite as mox
from moxlite import logs
from tests import runlib

MICRO_BATCH = 10
NUM_BATCHES = 4


def stack(num_batches):
    def optimizer_fn():
        opt = mox.get_optimizer_fn("momentum", learning_rate=0.2, momentum=0.9)()
        opt = mox.get_optimizer_wrapper_fn("lars", opt, ratio=0.01, weight_decay=0.0001)()
        if num_batches > 1:
            opt = mox.get_optimizer_wrapper_fn("batch_gradients", opt, num_batches=num_batches,
                                               sync_on_apply=True)()
        return opt
    return optimizer_fn


def train(log_dir, optimizer_fn, batch_size, steps):
    images, labels = runlib.mnist_rows(400)
    return runlib.train(log_dir, runlib.input_fn_for(images, labels), runlib.mlp_model_fn, optimizer_fn,
                        steps=steps, batch_size=batch_size, log_every_n_steps=4)


@pytest.mark.parametrize("num_gpus", [1, 2])
def test_accumulated_stack_equals_the_big_batch_stack(tmp_path, num_gpus):
    """momentum -> lars -> batch_gradients(N) at micro-batch B ends where momentum -> lars does at N*B.

    Tolerance 1e-5: the accumulated mean sums N partial means in float32.
    """
    train(tmp_path / "big", stack(1), MICRO_BATCH * NUM_BATCHES, 3)
    mox.set_flag("num_gpus", num_gpus)
    result = train(tmp_path / "accumulated", stack(NUM_BATCHES), MICRO_BATCH // num_gpus, 3 * NUM_BATCHES)
    assert result["global_step"] == 3 * NUM_BATCHES
    for big, accumulated in zip(runlib.checkpoint_variables(tmp_path / "big"),
                                runlib.checkpoint_variables(tmp_path / "accumulated")):
        np.testing.assert_allclose(big, accumulated, atol=1e-5)


def test_interrupted_mid_accumulation_resumes_to_the_same_weights(tmp_path):
    train(tmp_path / "straight", stack(NUM_BATCHES), MICRO_BATCH, 10)
    train(tmp_path / "resumed", stack(NUM_BATCHES), MICRO_BATCH, 6)     # 6 = 1.5 cycles
    train(tmp_path / "resumed", stack(NUM_BATCHES), MICRO_BATCH, 10)
    for a, b in zip(runlib.checkpoint_variables(tmp_path / "straight"),
                    runlib.checkpoint_variables(tmp_path / "resumed")):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_a_wrapper_on_one_process_logs_no_cluster_warning(tmp_path, caplog):
    """MoXing's sync_replicas warning is about a cluster of workers, not one process."""
    from moxlite.optimizers import wrapper as wrapper_lib

    wrapper_lib._reset_sync_replicas_warning()
    logs.get_logger().addHandler(caplog.handler)   # moxlite's channel does not propagate to the root logger
    try:
        with caplog.at_level("WARNING"):
            train(tmp_path / "a", stack(2), MICRO_BATCH, 2)
            train(tmp_path / "b", stack(2), MICRO_BATCH, 2)
    finally:
        logs.get_logger().removeHandler(caplog.handler)
    message = "Using OptimizerWrapper when sync_replicas is True may cause performance loss."
    assert sum(message in record.getMessage() for record in caplog.records) == 0
