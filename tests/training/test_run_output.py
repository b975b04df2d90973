"""What a run prints and writes says what happened: a throughput without tracing, a first line
early on a slow run, one final evaluation, evaluation events only for a new evaluation, and a
loss summary on every run."""

import glob
import os
import re
import time

import pytest

import moxlite as mox
from moxlite.recipes import cli
from moxlite.training import controller
from tests import ROOT, runlib
from tests.training.test_run_logs import LINE, read_scalars

BATCH = 20
MLP = os.path.join(ROOT, "recipes", "mnist_mlp.yaml")


def _train(log_dir, model_fn=runlib.softmax_model_fn, **kwargs):
    images, labels = runlib.mnist_rows(200)
    arguments = dict(log_every_n_steps=5, save_summary_steps=5, max_number_of_steps=10, steps_per_loop=5)
    arguments.update(kwargs)
    return mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=model_fn,
                   optimizer_fn=mox.get_optimizer_fn("sgd", learning_rate=0.5), run_mode=mox.ModeKeys.TRAIN,
                   batch_size=BATCH, log_dir=str(log_dir), **arguments)


def _lines(out):
    return {int(match.group(1)): match for match in map(LINE.match, out.splitlines()) if match}


TRACE_SECONDS = 1.0


def test_the_first_throughput_leaves_out_tracing(tmp_path, capsys):
    """model_fn sleeps 1 s each time it is traced: a first interval of 5 steps that held the
    trace could not exceed 5 x 20 samples / 1 s. Its line and its summary measure more."""
    def slow_to_trace(inputs, mode):
        time.sleep(TRACE_SECONDS)   # Python: at trace time only
        return runlib.softmax_model_fn(inputs, mode)

    _train(tmp_path, slow_to_trace)
    ceiling = 5 * BATCH / TRACE_SECONDS
    first = float(_lines(capsys.readouterr().out)[5].group(3))
    assert first > 2 * ceiling, first
    assert read_scalars(str(tmp_path))["sample_per_sec"][5] > 2 * ceiling


def test_a_slow_run_prints_a_first_line_before_its_first_log_step(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(controller, "FIRST_LINE_SECONDS", 0.0)
    _train(tmp_path, log_every_n_steps=100, max_number_of_steps=12, steps_per_loop="auto")
    lines = _lines(capsys.readouterr().out)
    assert len(lines) == 1, lines
    (step, line), = lines.items()
    assert 1 <= step < 12 and float(line.group(3)) > 0


def test_the_first_line_waits_for_its_seconds(tmp_path, capsys):
    """The real threshold: a run of a few hundred milliseconds has no early line."""
    assert controller.FIRST_LINE_SECONDS >= 5
    _train(tmp_path, log_every_n_steps=100, max_number_of_steps=12, steps_per_loop="auto")
    assert not _lines(capsys.readouterr().out)


def test_a_run_shorter_than_save_summary_steps_writes_its_loss_at_the_last_step(tmp_path):
    result = _train(tmp_path, save_summary_steps=100, max_number_of_steps=7)
    scalars = read_scalars(str(tmp_path))
    assert sorted(scalars["loss"]) == [7]
    assert scalars["loss"][7] == pytest.approx(result["loss"], rel=1e-6)


def test_a_run_that_ends_with_its_input_writes_its_loss_at_the_last_step(tmp_path):
    images, labels = runlib.mnist_rows(3 * BATCH)
    mox.run(input_fn=lambda mode: runlib.input_fn_for(images, labels)(mode).take(3 * BATCH), model_fn=runlib.softmax_model_fn,
            optimizer_fn=mox.get_optimizer_fn("sgd", learning_rate=0.5), run_mode=mox.ModeKeys.TRAIN,
            batch_size=BATCH, log_dir=str(tmp_path), max_number_of_steps=0, save_summary_steps=100)
    assert sorted(read_scalars(str(tmp_path))["loss"]) == [3]


def _events(log_dir):
    return sorted(glob.glob(os.path.join(str(log_dir), "**", "events.out.tfevents.*"), recursive=True))


def test_evaluation_events_are_written_once_per_evaluated_step(tmp_path, capsys):
    """run_mode=EVAL again on the same checkpoint, and a rerun with nothing to train, add no
    events file; the evaluation still runs and prints."""
    _train(tmp_path, save_summary_steps=0)
    images, labels = runlib.mnist_rows(60, offset=200)
    evaluate = dict(input_fn=runlib.input_fn_for(images, labels), model_fn=runlib.softmax_model_fn,
                    run_mode=mox.ModeKeys.EVAL, batch_size=BATCH, log_dir=str(tmp_path))
    first = mox.run(**evaluate)
    written = _events(tmp_path)
    assert [os.path.basename(os.path.dirname(path)) for path in written] == ["eval"]
    assert read_scalars(str(tmp_path / "eval"))["accuracy"] == {10: pytest.approx(first["accuracy"])}
    capsys.readouterr()
    again = mox.run(**evaluate)
    assert again == first and "[VALIDATION METRICS] step: 10" in capsys.readouterr().out
    _train(tmp_path, save_summary_steps=0)   # nothing to train
    assert _events(tmp_path) == written


def _recipe(log_dir, *overrides):
    sets = ["run.steps=20", "run.log_every_n_steps=10", "run.save_model_steps=10", f"run.log_dir={log_dir}",
            *overrides]
    return cli.main([MLP] + [argument for value in sets for argument in ("--set", value)])


def test_a_recipe_evaluating_during_training_evaluates_its_last_step_once(tmp_path, capsys):
    assert _recipe(tmp_path, "run.inter_mode=eval") == 0
    out = capsys.readouterr().out
    assert re.findall(r"\[VALIDATION METRICS\] step: (\d+)", out) == ["10", "20"], out
    validation = re.search(r"\[VALIDATION METRICS\] step: 20 .*accuracy: ([\d.]+)", out).group(1)
    result = re.search(r"\[RESULT\] accuracy: ([\d.]+) .*step 20\)", out).group(1)
    assert f"{float(result):.3f}" == validation
    # The same evaluation as run_mode=EVAL on the checkpoint (what the recipe ran before).
    evaluated = tmp_path / "evaluated"
    assert _recipe(evaluated) == 0
    assert re.search(r"\[RESULT\] accuracy: ([\d.]+) .*step 20\)", capsys.readouterr().out).group(1) == result


def test_a_recipe_rerun_with_nothing_to_train_writes_nothing(tmp_path, capsys):
    assert _recipe(tmp_path) == 0
    before = {path: os.path.getmtime(path) for path in glob.glob(str(tmp_path / "**"), recursive=True)}
    assert _recipe(tmp_path) == 0
    assert "nothing to train" in capsys.readouterr().out
    assert {path: os.path.getmtime(path) for path in glob.glob(str(tmp_path / "**"), recursive=True)} == before
