"""amp_level O1 with loss scaling and clipping on real loopback clusters: MWMS and parameter servers.

The cluster runs the same stack as one process at the whole batch: momentum -> lars ->
batch_gradients, clipping after accumulation, a dynamic loss scale around it all. Equal
to float16 precision (float16 products are rounded per replica's share of the batch).
"""

import numpy as np
import pytest

from moxlite import flags
from tests import distlib, runlib
from tests.dist_scripts import train_mnist
from tests.training.mixed_precision.test_loss_scaling import loss_scale_state

pytestmark = pytest.mark.slow  # real multi-process clusters on loopback

MNIST = ["python", distlib.script("train_mnist.py")]
PRECISION = ["--amp_level=O1", "--gradient_clip=0.05"]
TOLERANCE = 3e-3


def single_process_reference(log_dir, steps, batch, num_batches, clip=0.05):
    flags.set_flag("amp_level", "O1")
    flags.set_flag("gradient_clip", clip)
    train_mnist.train(str(log_dir), steps, batch, save_steps=steps, optimizer="momentum_lars",
                      num_batches=num_batches)
    return runlib.checkpoint_variables(str(log_dir))


def assert_close(cluster, reference):
    assert len(cluster) == len(reference) == 4
    for got, want in zip(cluster, reference):
        np.testing.assert_allclose(got, want, atol=TOLERANCE)


def test_two_multi_worker_mirrored_workers_equal_one_process_at_double_batch_under_o1(launches, tmp_path):
    steps, batch = 8, 8
    run = launches(["--workers=2", "--sync"],
                   MNIST + ["--optimizer=momentum_lars", f"--log_dir={tmp_path / 'cluster'}", f"--steps={steps}",
                            f"--batch={batch}", "--num_batches=2", f"--save_steps={steps}", "--log_every=4"]
                   + PRECISION, timeout=150)
    assert run.wait() == 0, run.output()
    reference = single_process_reference(tmp_path / "single", steps, 2 * batch, num_batches=2)
    cluster = runlib.checkpoint_variables(str(tmp_path / "cluster"))
    assert_close(cluster, reference)
    assert loss_scale_state(tmp_path / "cluster")["scale"] == 2.0 ** 15    # the cluster ran loss-scaled O1
    unclipped = single_process_reference(tmp_path / "unclipped", steps, 2 * batch, num_batches=2, clip=0.0)
    assert max(np.max(np.abs(a - b)) for a, b in zip(cluster, unclipped)) > 10 * TOLERANCE   # clipping bit


def test_a_parameter_server_worker_equals_one_process_at_the_whole_batch_under_o1(launches, tmp_path):
    num_batches, micro_batch, updates = 2, 8, 4
    steps = updates * num_batches
    run = launches(["--workers=1", "--ps=1", "--async"],
                   MNIST + ["--optimizer=momentum_lars", f"--log_dir={tmp_path / 'cluster'}", f"--steps={steps}",
                            f"--batch={micro_batch}", f"--num_batches={num_batches}", f"--save_steps={steps}",
                            "--log_every=4"] + PRECISION, timeout=150)
    assert run.wait() == 0, run.output()
    reference = single_process_reference(tmp_path / "single", updates, num_batches * micro_batch, num_batches=1)
    assert_close(runlib.checkpoint_variables(str(tmp_path / "cluster")), reference)
    assert loss_scale_state(tmp_path / "cluster")["scale"] == 2.0 ** 15
