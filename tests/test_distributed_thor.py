"""thor on real loopback clusters (tools/launch_local.py) against a single-process run."""

import numpy as np
import pytest

from tests import distlib, thorlib
from tests.dist_scripts import train_thor

pytestmark = pytest.mark.slow  # real multi-process clusters on loopback

SCRIPT = ["python", distlib.script("train_thor.py")]
STEPS = 7   # refreshes at updates 0, 3, 6 and stale steps between


def test_two_sync_workers_equal_one_process_at_the_global_batch(launches, tmp_path):
    """MultiWorkerMirrored, 2 workers x 8: the factors are all-reduced, so it equals 1 x 16."""
    run = launches(["--workers=2", "--sync"],
                   SCRIPT + [f"--log_dir={tmp_path / 'cluster'}", f"--steps={STEPS}", "--batch=8"], timeout=180)
    assert run.wait() == 0, run.output()
    assert "thor: preconditioning 2 layer(s)" in run.output()
    train_thor.train(str(tmp_path / "single"), STEPS, 16)
    for got, want in zip(thorlib.model_variables(tmp_path / "cluster"), thorlib.model_variables(tmp_path / "single")):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_one_worker_and_one_ps_equal_one_process(launches, tmp_path):
    """Parameter servers: the inverses are shared state on the ps, refreshed by the worker."""
    run = launches(["--workers=1", "--ps=1", "--async"],
                   SCRIPT + [f"--log_dir={tmp_path / 'cluster'}", f"--steps={STEPS}", "--batch=16"], timeout=180)
    assert run.wait() == 0, run.output()
    assert run.results()["worker:0"]["global_step"] == STEPS
    train_thor.train(str(tmp_path / "single"), STEPS, 16)
    for got, want in zip(thorlib.model_variables(tmp_path / "cluster"), thorlib.model_variables(tmp_path / "single")):
        np.testing.assert_allclose(got, want, atol=1e-5)
