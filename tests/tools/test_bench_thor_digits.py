"""tools/bench_thor.py's digits runs: a setting that diverges is a result of the sweep, not its end."""

import os
import sys

from tests import ROOT
sys.path.insert(0, os.path.join(ROOT, "tools"))
import bench_thor  # noqa: E402


def test_a_diverging_setting_is_recorded_as_never_at_the_target_and_the_sweep_goes_on(tmp_path):
    """Momentum at lr 1e6 overflows within a few steps: train_once returns the run as diverged, final
    accuracy 0, and the sweep's ranking puts it below a run that trained."""
    from moxlite.data import mnist

    (train_images, train_labels), (test_images, test_labels) = mnist.split(0.2, 0)
    data = ((train_images[:256, ..., None], train_labels[:256]), (test_images[:64, ..., None], test_labels[:64]))
    run = bench_thor.train_once("mlp", "momentum", 1e6, 0, 20, 2, data, str(tmp_path))
    assert run["diverged"].startswith("non-finite loss or gradient at global step"), run["diverged"]
    assert run["final"] == 0.0 and bench_thor.reach(run["curve"], 0.5) is None
    trained = bench_thor.train_once("mlp", "momentum", 0.05, 0, 20, 10, data, str(tmp_path))
    assert "diverged" not in trained and trained["final"] > 0.5, trained["final"]
