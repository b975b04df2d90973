"""thor on real loopback clusters (tools/launch_local.py) against a single-process run."""

import types

import numpy as np
import pytest
import tensorflow as tf

from tests import distlib, thorlib
from tests.dist_scripts import train_thor

pytestmark = pytest.mark.slow  # real multi-process clusters on loopback

SCRIPT = ["python", distlib.script("train_thor.py")]
STEPS = 7   # refreshes at updates 0, 3, 6 and stale steps between


@pytest.fixture(scope="module")
def one_process_16(tmp_path_factory):
    """The single-process reference two tests compare with: STEPS steps at batch 16, constant
    damping. Trained once per worker (the tests only read its checkpoint)."""
    from moxlite import flags
    import keras

    log_dir = tmp_path_factory.mktemp("one_process_16")
    flags.reset_flags()
    keras.backend.clear_session()
    train_thor.train(str(log_dir), STEPS, 16)
    return thorlib.model_variables(log_dir)


def test_two_sync_workers_equal_one_process_at_the_global_batch(launches, tmp_path, one_process_16):
    """MultiWorkerMirrored, 2 workers x 8: the factors are all-reduced, so it equals 1 x 16."""
    run = launches(["--workers=2", "--sync"],
                   SCRIPT + [f"--log_dir={tmp_path / 'cluster'}", f"--steps={STEPS}", "--batch=8"], timeout=180)
    assert run.wait() == 0, run.output()
    assert "thor: preconditioning 2 layer(s)" in run.output()
    assert run.results()["worker:0"]["traces"] == 1   # the loop body, with THOR's state made before
    cluster = thorlib.model_variables(tmp_path / "cluster")
    assert len(cluster) == len(one_process_16)
    for got, want in zip(cluster, one_process_16):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_two_sync_workers_train_a_tiny_bert_as_one_process_at_the_global_batch(launches, tmp_path):
    """A keras-hub BERT masked-LM built in model_fn (sequences of unknown length, a tied head),
    MultiWorkerMirrored 2 x 4 against 1 x 8: a refresh, a stale step, a refresh."""
    from tests import thorbertlib

    steps = 3
    script = ["python", distlib.script("train_thor_bert.py")]
    run = launches(["--workers=2", "--sync"], script + [f"--log_dir={tmp_path / 'cluster'}", f"--steps={steps}",
                                                        "--batch=4"], timeout=300)
    assert run.wait() == 0, run.output()
    assert "thor: preconditioning 14 layer(s)" in run.output()
    thorbertlib.train_masked_lm(str(tmp_path / "single"), steps, 8)
    cluster, single = (thorlib.model_variables(tmp_path / name) for name in ("cluster", "single"))
    assert len(cluster) == len(single)
    for got, want in zip(cluster, single):
        np.testing.assert_allclose(got, want, atol=1e-5)


PS_DECAY = 0.6   # the 1 worker + 1 ps run's damping schedule: 0.05 * 0.6^step


@pytest.fixture(scope="module")
def one_worker_and_one_ps(tmp_path_factory):
    """1 worker + 1 ps, STEPS steps at batch 16 under a damping schedule, and the single-process run
    it must equal: one cluster (three TensorFlow processes) for the two tests below. A constant
    damping is the schedule's special case (thor reads a callable's value where it reads a
    constant), so one schedule run proves the shared inverses and the step the schedule reads."""
    from moxlite import flags
    import keras

    log_dir = tmp_path_factory.mktemp("one_worker_and_one_ps")
    run = distlib.Launch(["--workers=1", "--ps=1", "--async"],
                         SCRIPT + [f"--log_dir={log_dir / 'cluster'}", f"--steps={STEPS}", "--batch=16",
                                   f"--damping_decay={PS_DECAY}"], timeout=180)
    try:
        code = run.wait()
    finally:
        run.kill()
    flags.reset_flags()
    keras.backend.clear_session()
    train_thor.train(str(log_dir / "single"), STEPS, 16, damping=train_thor.decaying_damping(PS_DECAY))
    cluster = thorlib.model_variables(log_dir / "cluster") if code == 0 else None   # else: the tests show why
    single = thorlib.model_variables(log_dir / "single")
    return types.SimpleNamespace(code=code, run=run, cluster=cluster, single=single)


@pytest.mark.cluster   # one_worker_and_one_ps starts it through tests.distlib
def test_one_worker_and_one_ps_equal_one_process(one_worker_and_one_ps):
    """Parameter servers: the inverses are shared state on the ps, refreshed by the worker."""
    ps = one_worker_and_one_ps
    assert ps.code == 0, ps.run.output()
    assert ps.run.results()["worker:0"]["global_step"] == STEPS
    # THOR's per-layer state exists before the first schedule traces the step: traced once, not twice.
    assert ps.run.results()["worker:0"]["traces"] == 1
    assert "thor: preconditioning 2 layer(s)" in ps.run.output()
    assert len(ps.cluster) == len(ps.single)
    for got, want in zip(ps.cluster, ps.single):
        np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.cluster
def test_one_worker_and_one_ps_with_a_damping_schedule_equal_one_process(one_worker_and_one_ps, one_process_16):
    """The damping schedule reads the run's global step (as the learning rate does), not Keras's
    iterations, which lose increments on a ps: 1 worker + 1 ps still equals one process."""
    ps = one_worker_and_one_ps
    assert ps.code == 0, ps.run.output()
    for got, want in zip(ps.cluster, ps.single):
        np.testing.assert_allclose(got, want, atol=1e-5)
    # The schedule matters: a constant damping (the shared reference run) ends elsewhere.
    assert max(np.abs(a - b).max() for a, b in zip(ps.single, one_process_16)) > 1e-4


def test_batch_gradients_over_thor_on_one_worker_and_one_ps_equals_one_process(launches, tmp_path):
    """Async accumulation (N micro-batches read inside one scheduled step): thor's factors are summed
    over the N micro-batches in the step, so it equals the synchronous batch_gradients(thor) run,
    which equals one N*B batch (tests/optimizers/thor/test_thor.py)."""
    steps = 12   # 6 updates of 2 micro-batches; refreshes at updates 0 and 3
    run = launches(["--workers=1", "--ps=1", "--async"],
                   SCRIPT + [f"--log_dir={tmp_path / 'cluster'}", f"--steps={steps}", "--batch=8",
                             "--num_batches=2", "--damping_decay=0.6"], timeout=180)
    assert run.wait() == 0, run.output()
    assert run.results()["worker:0"]["global_step"] == steps
    assert run.results()["worker:0"]["traces"] == 1   # the accumulated step, with THOR's state made before
    assert "thor: preconditioning 2 layer(s)" in run.output()
    train_thor.train(str(tmp_path / "single"), steps, 8, num_batches=2, damping=train_thor.decaying_damping(0.6))
    train_thor.train(str(tmp_path / "plain"), steps, 8, num_batches=2, damping=train_thor.decaying_damping(0.6),
                     thor=False)
    cluster, single = (thorlib.model_variables(tmp_path / name) for name in ("cluster", "single"))
    for got, want in zip(cluster, single):
        np.testing.assert_allclose(got, want, atol=1e-5)
    # Preconditioned: the same stack without statistics (plain gradients) ends elsewhere.
    assert max(np.abs(a - b).max() for a, b in zip(single, thorlib.model_variables(tmp_path / "plain"))) > 1e-3


DECAY = 0.9   # the two-worker test's damping schedule: 0.05 * 0.9^step


def _group_conv_inverses(batch, groups, steps):
    """{(group, step): the Conv2D A-factor inverse input group ``group`` alone gives at a refresh on
    update ``step``}."""
    images, _ = thorlib.small_digits(train_thor.NUM_ROWS)
    inverses = {}
    for group in range(groups):
        x = images[group * batch:(group + 1) * batch].reshape(-1, thorlib.SIDE, thorlib.SIDE, 1)
        patches, (ho, wo) = thorlib.numpy_im2col(x.astype(np.float64), thorlib.KERNEL, 2, "same")
        for step in range(steps):
            damping_sqrt = np.sqrt(train_thor.THOR["damping"] * DECAY ** step / (ho * wo))
            inverses[group, step] = thorlib.block_inverse(patches.T @ patches / len(patches), damping_sqrt, 0)
    return inverses


def test_two_async_workers_each_refresh_from_their_own_batch(launches, tmp_path):
    """2 workers + 1 ps, frequency 2, 2 steps scheduled per loop (the workers run concurrently),
    every batch one of 6 distinguishable groups read in each worker's own random order, a damping
    schedule. In every checkpoint (one per loop, at global step S) the stored Conv2D A inverse is
    the inverse of one group's factor (one worker's own batch, never two batches pooled) damped
    at update S-2 or S-1 (the loop's two steps: the damping follows the exact global step);
    nothing is NaN; the refresh counter counts every update (a Keras assign_add lost some)."""
    batch, groups, steps, every = 16, 6, 10, 2   # 10 steps per worker (async: 20 global steps)
    run = launches(["--workers=2", "--ps=1", "--async"],
                   SCRIPT + [f"--log_dir={tmp_path / 'cluster'}", f"--steps={steps}", f"--batch={batch}",
                             f"--groups={groups}", f"--steps_per_loop={every}", f"--save_every={every}",
                             "--frequency=2", f"--damping_decay={DECAY}"], timeout=300)
    assert run.wait() == 0, run.output()
    expected = _group_conv_inverses(batch, groups, 2 * steps)
    paths = tf.train.get_checkpoint_state(str(tmp_path / "cluster")).all_model_checkpoint_paths
    assert len(paths) == 2 * steps // every
    nearest, counters = {}, {}
    for path in paths:
        reader = tf.train.load_checkpoint(path)
        shapes = reader.get_variable_to_shape_map()
        for key in shapes:
            value = reader.get_tensor(key)
            if isinstance(value, np.ndarray) and value.dtype.kind == "f":
                assert np.all(np.isfinite(value)), (path, key)
        # The conv A factor's [1, 9, 9] variables: its inverse and its accumulator, which only a
        # batch_gradients above thor would use (the factors never pass through shared state here).
        blocks = [reader.get_tensor(k)[0] for k, shape in shapes.items()
                  if k.startswith("optimizer/") and shape == [1, 9, 9]]
        stored = [value for value in blocks if np.all(np.diag(value) > 0)]
        assert len(stored) == 1 and all(not np.any(value) for value in blocks if value is not stored[0]), blocks
        counters[path] = [int(reader.get_tensor(f"{key}/.ATTRIBUTES/VARIABLE_VALUE"))
                          for key in ("optimizer/_updates", "global_step")]
        distance, group, step = min((np.abs(stored[0] - inverse).max() / np.abs(inverse).max(), group, step)
                                    for (group, step), inverse in expected.items())
        nearest[path] = (distance, counters[path][1] - step)
    assert all(distance < 1e-4 and 1 <= behind <= 2 for distance, behind in nearest.values()), nearest
    assert all(updates == step for updates, step in counters.values()), counters
