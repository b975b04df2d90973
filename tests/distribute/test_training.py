"""moxlite.run on real loopback clusters (tools/launch_local.py), checked against
independent references: a single-process run with the same global batch, an
uninterrupted run, and the numpy cross-entropy of the saved softmax weights."""

import math
import os
import re
import signal
import sys
import time

import numpy as np

from tests import distlib, runlib
from tests.dist_scripts import train_mnist
from tests.training.test_run_logs import read_scalars
import pytest

pytestmark = pytest.mark.slow  # real multi-process clusters on loopback

SCRIPT = ["python", distlib.script("train_mnist.py")]


def _single_process_weights(log_dir, steps, global_batch):
    """The reference: one process, one device, batch = the cluster's global batch."""
    train_mnist.train(str(log_dir), steps, global_batch)
    return runlib.checkpoint_variables(str(log_dir))


def _softmax_loss(checkpoint_prefix):
    """Mean cross-entropy of a saved softmax regression on the training rows, in numpy."""
    kernel, bias = runlib.checkpoint_variables(checkpoint_prefix)
    images, labels = runlib.mnist_rows(train_mnist.NUM_ROWS)
    logits = images.astype(np.float64) @ kernel + bias
    logits -= logits.max(axis=1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return float(-log_probs[np.arange(len(labels)), labels].mean())


def test_sync_two_workers_equal_a_single_process_run_with_the_same_global_batch(launches, tmp_path):
    steps, per_replica = 20, 16
    run = launches(["--workers=2", "--sync"],
                   SCRIPT + [f"--log_dir={tmp_path / 'cluster'}", f"--steps={steps}", f"--batch={per_replica}"],
                   timeout=150)
    assert run.wait() == 0, run.output()
    assert {task: result["global_step"] for task, result in run.results().items()} == {"worker:0": 20, "worker:1": 20}
    assert "global batch 32" in run.output()
    _chief_summaries_match_its_log_lines(run, str(tmp_path / "cluster"), steps)
    cluster_weights = runlib.checkpoint_variables(str(tmp_path / "cluster"))
    reference = _single_process_weights(tmp_path / "single", steps, 2 * per_replica)
    assert len(cluster_weights) == len(reference) == 4
    for got, want in zip(cluster_weights, reference):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.cluster   # sync_run_stopped_by_sigterm starts it through tests.distlib
def test_sync_run_killed_and_restarted_ends_with_the_uninterrupted_weights(sync_run_stopped_by_sigterm):
    # The first run asks for far more steps than it gets: the launcher is stopped by SIGTERM
    # after the step-10 checkpoint and forwards it; the workers save where they are and exit.
    # The restart then asks for 40 steps past the last checkpoint, and the reference is one
    # process run for as many steps (tests.distlib.stopped_and_resumed_sync_run; the same
    # cluster serves test_run_interrupts' forwarding test).
    run = sync_run_stopped_by_sigterm
    assert run.reached, run.first.output()
    assert run.first_code == 128 + signal.SIGTERM, run.first.output()
    stopped_at = run.stopped_at
    assert stopped_at >= 10, run.first.output()
    assert run.second_code == 0, run.second.output()
    assert f"from step {stopped_at}" in run.second.output()
    assert run.second.results()["worker:0"]["global_step"] == stopped_at + 40
    for got, want in zip(runlib.checkpoint_variables(run.log_dir), run.reference):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _chief_summaries_match_its_log_lines(run, log_dir, last_step, every=10):
    """The chief's summaries: every ``every`` steps, loss and accuracy as in its log line at
    that step, the script's constant learning rate, and a throughput."""
    scalars = read_scalars(log_dir)
    steps = list(range(every, last_step + 1, every))
    assert sorted(scalars) == ["accuracy", "learning_rate", "loss", "sample_per_sec"], sorted(scalars)
    assert all(sorted(scalars[tag]) == steps for tag in scalars), scalars
    assert all(rate == pytest.approx(train_mnist.LEARNING_RATE) for rate in scalars["learning_rate"].values())
    line = re.compile(r"^\[worker:0\] INFO:moxlite:step: (\d+)\(.*\tloss: ([\d.]+)\taccuracy: ([\d.]+)$")
    logged = {int(m.group(1)): m for m in map(line.match, run.output().splitlines()) if m}
    for step in steps:
        assert scalars["loss"][step] == pytest.approx(float(logged[step].group(2)), abs=6e-4)
        assert scalars["accuracy"][step] == pytest.approx(float(logged[step].group(3)), abs=6e-4)


def _async_checks(run, log_dir, steps_per_worker, workers=2, killed_workers=0):
    assert run.wait() == 0, run.output()
    results = run.results()
    assert list(results) == ["worker:0"], run.output()  # the coordinator; workers and ps only serve
    # Every scheduled step is counted. A worker killed after its step reached the ps but
    # before it answered has that step re-run elsewhere (at-least-once): at most one extra
    # applied step per killed worker, since a worker runs one step at a time.
    global_step = results["worker:0"]["global_step"]
    assert steps_per_worker * workers <= global_step <= steps_per_worker * workers + killed_workers
    # model_fn's variables once each: kernel and bias of the softmax layer.
    assert [w.shape for w in runlib.checkpoint_variables(log_dir)] == [(784, 10), (10,)]
    saved = sorted(int(name.split("-")[1].split(".")[0]) for name in os.listdir(log_dir) if name.endswith(".index"))
    assert saved[-1] == global_step
    losses = [_softmax_loss(os.path.join(log_dir, f"model.ckpt-{step}")) for step in (saved[0], saved[-1])]
    # Zero weights start at ln(10); later checkpoints must sit lower on the whole training set.
    assert math.log(10) > losses[0] > losses[1], losses


def test_async_two_workers_one_ps_count_every_step_and_lower_the_loss(launches, tmp_path):
    run = launches(["--workers=2", "--ps=1", "--async"],
                   SCRIPT + [f"--log_dir={tmp_path}", "--steps=30", "--batch=16", "--model=softmax"], timeout=150)
    _async_checks(run, str(tmp_path), steps_per_worker=30)
    _chief_summaries_match_its_log_lines(run, str(tmp_path), 60)


def test_async_run_survives_a_worker_killed_mid_run(launches, tmp_path):
    run = launches(["--workers=2", "--ps=1", "--async"],
                   SCRIPT + [f"--log_dir={tmp_path}", "--steps=150", "--batch=16", "--model=softmax",
                             "--save_steps=50"], timeout=150)
    pids = {}
    while "worker:1" not in pids:
        line = run.read_until(lambda text: "] PID " in text, 60)
        assert line is not None, run.output()
        pids[line.split("]")[0].lstrip("[")] = int(line.rsplit(" ", 1)[1])
    assert run.read_until(lambda line: "global step: 10)" in line, 120), run.output()
    os.kill(pids["worker:1"], signal.SIGKILL)
    killed_at = time.monotonic()
    _async_checks(run, str(tmp_path), steps_per_worker=150, killed_workers=1)
    assert not distlib.alive(pids["worker:1"]) and time.monotonic() - killed_at < 150


def test_the_recipe_cli_runs_asynchronously_under_launch_local(launches, tmp_path):
    """The README's command: launch_local appends MoXing's flags to moxlite-run. One worker (and
    one ps): the tests above count the steps of several asynchronous workers; here the recipe
    CLI is the subject, and each worker is one more TensorFlow process."""
    log_dir = tmp_path / "recipe"
    run = launches(["--workers=1", "--ps=1", "--async"],
                   [sys.executable, "-m", "moxlite", "recipes/mnist_mlp.yaml", "--set", "run.steps=15",
                    "--set", f"run.log_dir={log_dir}", "--set", "run.log_every_n_steps=5",
                    "--set", "distribute.sync_replicas=false"], timeout=150)
    assert run.wait() == 0, run.output()
    assert runlib.checkpoint_step(str(log_dir)) in (15, 16, 17)   # 15 per worker, at-least-once
    assert "[worker:0] [RESULT] accuracy:" in run.output()
    assert os.path.exists(log_dir / "recipe.yaml")
