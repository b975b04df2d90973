"""tools/loss_trend.py: the slope of a run's last third of training loss, read from moxlite's log lines."""

import os
import sys

import numpy as np

from tests import ROOT
sys.path.insert(0, os.path.join(ROOT, "tools"))
import loss_trend  # noqa: E402


def _log(path, losses, every=100):
    lines = ["INFO:moxlite:Training: 1 replica(s), batch 32 per replica, global batch 32, from step 0"]
    for index, loss in enumerate(losses):
        step = (index + 1) * every
        lines.append(f"INFO:moxlite:step: {step}(global step: {step})\tsample/sec: 250.0\tloss: {loss:.4f}\t"
                     f"masked_lm_loss: {loss + 7:.4f}\tmasked_lm_accuracy: 0.4")
    path.write_text("\n".join(lines) + "\n")
    return np.arange(1, len(losses) + 1) * every


def test_the_slope_of_the_last_third_equals_numpys_fit_and_reads_the_loss_field_only(tmp_path, capsys):
    rng = np.random.default_rng(3)
    losses = 6.0 * np.exp(-np.arange(30) / 12.0) + 1.0 + rng.normal(0, 0.02, 30)
    steps = _log(tmp_path / "run.log", losses)
    assert loss_trend.main([str(tmp_path / "run.log")]) == 0
    keep = steps >= 100 + (3000 - 100) * 2 / 3
    expected = np.polyfit(steps[keep], np.round(losses[keep], 4), 1)[0] * 1000
    printed = capsys.readouterr().out
    assert "steps 2100-3000 (10 logged points)" in printed
    assert f"slope {expected:+.3f} nats per 1,000 steps" in printed
    assert printed.rstrip().endswith(": falling")


def test_a_plateau_is_not_called_falling(tmp_path, capsys):
    rng = np.random.default_rng(0)
    _log(tmp_path / "run.log", 5.1 + rng.normal(0, 0.1, 30))
    assert loss_trend.main([str(tmp_path / "run.log"), "--since", "1000"]) == 0
    assert "not clearly falling" in capsys.readouterr().out


def test_a_resumed_steps_last_value_counts_and_a_file_without_log_lines_is_refused(tmp_path, capsys):
    path = tmp_path / "run.log"
    path.write_text("step: 10(global step: 10)\tloss: 9.0\nstep: 10(global step: 10)\tloss: 3.0\n")
    steps, losses = loss_trend.logged_losses(path.read_text().splitlines())
    assert steps.tolist() == [10] and losses.tolist() == [3.0]
    (tmp_path / "empty.log").write_text("nothing here\n")
    assert loss_trend.main([str(tmp_path / "empty.log")]) == 2
    assert "no 'global step: N) ... loss: L' lines" in capsys.readouterr().err
