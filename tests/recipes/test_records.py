"""Recipes that must not hurt what is already there (issue 8 items 15, 16, 17).

15: a failed run leaves the record (log_dir/recipe.yaml) of the run whose checkpoints are
    there as it was; a different run keeps the earlier record as a numbered copy.
16: a "billion laughs" recipe of nested YAML aliases fails in under a second, one line, exit 2.
17: no bundled recipe's log_dir can shadow the moxlite package.
"""

import glob
import os
import time

import pytest
import tensorflow as tf
import yaml

from moxlite.recipes import cli, loader

from tests import ROOT as REPO

QUICK_START = os.path.join(REPO, "recipes", "mnist_mlp.yaml")


def run_cli(capsys, *arguments):
    code = cli.main(list(arguments))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def recipe_text(log_dir, name="recipe.yaml"):
    with open(os.path.join(log_dir, name), encoding="utf-8") as handle:
        return handle.read()


def test_a_failed_run_keeps_the_record_and_a_different_run_numbers_the_old_one(capsys, tmp_path):
    log_dir = str(tmp_path / "run")
    quick = ["--set", f"run.log_dir={log_dir}", "--set", "run.eval_steps=1", "--set", "run.log_every_n_steps=100"]
    code, _, err = run_cli(capsys, QUICK_START, *quick, "--set", "run.steps=4")
    assert code == 0, err
    first = recipe_text(log_dir)
    assert "steps: 4" in first

    # Another network on the same log_dir: the restore fails inside run(), after every recipe check.
    code, _, err = run_cli(capsys, QUICK_START, *quick, "--set", "run.steps=8",
                           "--set", "model.mlp.hidden_units=[16]")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert recipe_text(log_dir) == first
    assert glob.glob(os.path.join(log_dir, "recipe.*.yaml")) == []

    # The same recipe again (resume, nothing new to record): still one record.
    code, _, err = run_cli(capsys, QUICK_START, *quick, "--set", "run.steps=4")
    assert code == 0, err
    assert glob.glob(os.path.join(log_dir, "recipe.*.yaml")) == []

    # A run that continues to step 6: its record is recipe.yaml, the first one is kept as recipe.1.yaml.
    code, _, err = run_cli(capsys, QUICK_START, *quick, "--set", "run.steps=6")
    assert code == 0, err
    assert tf.train.load_checkpoint(log_dir).get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE") == 6
    assert "steps: 6" in recipe_text(log_dir)
    assert recipe_text(log_dir, "recipe.1.yaml") == first


BILLION_LAUGHS = "\n".join(
    ["run: {steps: 1, log_dir: LOG_DIR}", 'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
    + ["input: {name: mnist}", "model: {name: mlp}", "optimizer: {name: sgd, kwargs: {x: *i}}"]) + "\n"


def test_nested_aliases_fail_in_seconds_with_one_line(tmp_path, capsys):
    log_dir = tmp_path / "never"
    path = tmp_path / "laughs.yaml"
    path.write_text(BILLION_LAUGHS.replace("LOG_DIR", str(log_dir)))
    assert len(BILLION_LAUGHS) < 1500   # 9**9 = 387 million strings once expanded

    # CPU seconds of this thread, not wall time or the whole process's CPU, so neither other load on
    # the machine nor threads an earlier test in this process left running count: expanding the 387
    # million strings would take minutes of CPU, refusing them a few milliseconds. The bound is 5 s:
    # cli.main took 1.47 s of this thread's CPU in a worker that had run 800 tests (a collection of
    # its heap, the CLI's set-up), which a 1 s bound failed; an expansion still fails 5 s by far.
    started = time.thread_time()
    with pytest.raises(loader.errors.RecipeError, match="expands to more than 20000 values through YAML aliases"):
        loader.load([str(path)])
    assert time.thread_time() - started < 5.0

    started = time.thread_time()
    code = cli.main([str(path)])
    assert time.thread_time() - started < 5.0
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"moxlite-run: error: {path}:"), captured.err
    assert not log_dir.exists()


def test_a_recursive_alias_is_one_line_too(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text("run: &r {steps: 1, log_dir: x, again: *r}\n")
    with pytest.raises(loader.errors.RecipeError, match="through YAML aliases"):
        loader.load([str(path)])


def test_ordinary_aliases_still_work(tmp_path):
    path = tmp_path / "aliases.yaml"
    path.write_text(f"run: {{steps: &n 3, eval_steps: *n, log_dir: {tmp_path / 'x'}}}\n"
                    "input: {name: mnist}\nmodel: {name: mlp}\noptimizer: {name: sgd}\n")
    assert loader.load([str(path)]).recipe.run.eval_steps == 3


@pytest.mark.parametrize("recipe", sorted(glob.glob(os.path.join(REPO, "recipes", "*.yaml"))),
                         ids=os.path.basename)
def test_bundled_log_dirs_cannot_shadow_the_package(recipe):
    with open(recipe, encoding="utf-8") as handle:
        log_dir = (yaml.safe_load(handle).get("run") or {}).get("log_dir")
    assert not os.path.isabs(log_dir) and log_dir.split("/")[0] == "runs"
    # From any directory, including /tmp and the recipe's own, the first component is runs/.
    for cwd in ("/tmp", os.path.dirname(recipe), REPO):
        assert loader.shadowed_package(log_dir, cwd) is None


def test_a_log_dir_named_like_the_package_in_the_current_directory_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, QUICK_START, "--set", "run.log_dir=moxlite/mnist", "--dry-run")
    assert code == 2
    assert "run.log_dir: 'moxlite/mnist' would make a directory 'moxlite' in the current directory" in err
    assert not (tmp_path / "moxlite").exists()
    code, _, err = run_cli(capsys, QUICK_START, "--set", f"run.log_dir={tmp_path / 'runs' / 'moxlite'}",
                           "--dry-run")
    assert code == 0, err   # a 'moxlite' below runs/ hides nothing
