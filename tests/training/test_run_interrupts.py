"""Ctrl-C and SIGTERM save the work (issue 8, item 12).

Real subprocesses, real signals: ``moxlite-run`` interrupted mid-training
saves a checkpoint at the current step, says where in one line and exits
130/143; the next run resumes from it and ends with the weights of an
uninterrupted run. Under ``tools/launch_local.py`` (two synchronous workers)
the launcher forwards SIGTERM and the workers stop together at one step. A task
that only serves (a ps, an asynchronous worker) has nothing to save and ends at
SIGTERM or Ctrl-C at once.
"""

import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

from moxlite.distribute import cluster
from moxlite.recipes import cli
from tests import runlib
from tests import ROOT


def _recipe_args(log_dir, steps):
    return ["recipes/mnist_mlp.yaml", "--set", f"run.log_dir={log_dir}", "--set", f"run.steps={steps}",
            "--set", "run.log_every_n_steps=10", "--set", "run.save_model_steps=1000000",
            "--set", "run.evaluate=false"]


def _start_cli(log_dir, steps):
    environ = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
    environ["PYTHONPATH"] = ROOT + os.pathsep + environ.get("PYTHONPATH", "")
    return subprocess.Popen([sys.executable, "-m", "moxlite", *_recipe_args(log_dir, steps)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ)


@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_cli_interrupted_saves_at_the_current_step_and_resumes_as_if_never_stopped(tmp_path, signum, code):
    log_dir = tmp_path / "run"
    process = _start_cli(log_dir, 1000000)
    try:
        for line in process.stdout:
            if "global step: 40)" in line:
                break
        process.send_signal(signum)
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    name = signal.Signals(signum).name
    assert process.returncode == code, err
    saved = re.findall(rf"Interrupted by {name} at global step (\d+): saved checkpoint (\S+); run again with "
                       rf"the same log_dir to resume", out)
    assert len(saved) == 1, out
    step, path = int(saved[0][0]), saved[0][1]
    assert step >= 40 and path == f"{log_dir}/model.ckpt-{step}"
    assert "Traceback" not in err and err.strip().splitlines()[-1] == f"moxlite-run: stopped by {name}"
    assert runlib.checkpoint_step(str(log_dir)) == step
    if signum == signal.SIGTERM:
        return   # resuming is the same whichever signal stopped the run: checked once, below
    # Resume to step + 20, and compare with one uninterrupted run of as many steps.
    assert cli.main(_recipe_args(log_dir, step + 20)) == 0
    assert cli.main(_recipe_args(tmp_path / "straight", step + 20)) == 0
    resumed = runlib.checkpoint_by_name(str(log_dir))
    straight = runlib.checkpoint_by_name(str(tmp_path / "straight"))
    assert runlib.checkpoint_step(str(log_dir)) == runlib.checkpoint_step(str(tmp_path / "straight")) == step + 20
    for name in straight:
        np.testing.assert_allclose(resumed[name], straight[name], atol=1e-6, err_msg=name)


@pytest.mark.slow
@pytest.mark.cluster   # sync_run_stopped_by_sigterm starts it through tests.distlib
def test_launch_local_forwards_sigterm_and_sync_workers_stop_together(sync_run_stopped_by_sigterm):
    # The cluster (tests.distlib.stopped_and_resumed_sync_run, shared with
    # tests/distribute/test_training.py's resume test): two synchronous workers, SIGTERM to the
    # launcher after the step-10 checkpoint, then the same command resumed 40 steps past the
    # checkpoint the workers saved.
    run = sync_run_stopped_by_sigterm
    assert run.reached, run.first.output()
    assert run.first_code == 128 + signal.SIGTERM, run.first.output()
    saved = re.findall(r"\[worker:0\] INFO:moxlite:Interrupted by SIGTERM at global step (\d+): saved checkpoint",
                       run.first.output())
    assert len(saved) == 1, run.first.output()
    step = int(saved[0])
    assert run.stopped_at == step   # the checkpoint the first run left is the interrupt's
    assert run.second_code == 0, run.second.output()
    assert f"from step {step}" in run.second.output()
    for got, want in zip(runlib.checkpoint_variables(run.log_dir), run.reference):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_serving_task_ends_at_sigterm_and_at_ctrl_c_without_waiting_for_sigkill():
    """A ps started by moxlite-run (which turns SIGTERM into an exception) and worker 0 served by
    `python -m moxlite.distribute.server` (Python's own Ctrl-C handler): neither handler can run
    while the process blocks in the server's join, so before, both outlived the signal until a
    SIGKILL came (the launcher's 3 s, a Kubernetes pod's 30 s grace). Both start at once: one
    TensorFlow start-up each."""
    environ = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
    environ["PYTHONPATH"] = ROOT + os.pathsep + environ.get("PYTHONPATH", "")
    environ.pop("TF_CONFIG", None)
    ps, worker, chief = (f"127.0.0.1:{cluster.free_port()}" for _ in range(3))
    hosts = [f"--ps_hosts={ps}", f"--worker_hosts={worker}"]
    commands = {
        signal.SIGTERM: [sys.executable, "-m", "moxlite", "recipes/mnist_mlp.yaml", "--job_name=ps", "--task_index=0",
                         "--sync_replicas=false", *hosts],
        signal.SIGINT: [sys.executable, "-m", "moxlite.distribute.server", "--job_name=worker", "--task_index=0",
                        "--nosync_replicas", f"--chief_hosts={chief}", *hosts],
    }
    processes = {signum: subprocess.Popen(command, cwd=ROOT, env=environ, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True)
                 for signum, command in commands.items()}
    try:
        for signum, process in processes.items():
            lines = []
            for line in process.stdout:
                lines.append(line)
                if "INFO:moxlite:serving " in line:
                    break
            assert "INFO:moxlite:serving " in lines[-1], "".join(lines)
        for signum, process in processes.items():
            process.send_signal(signum)
            try:
                code = process.wait(timeout=20)   # the server is gone, at once
            except subprocess.TimeoutExpired:
                code = "still serving 20 s after the signal"
            assert code == -signum, (signal.Signals(signum).name, code)
    finally:
        for process in processes.values():
            process.kill()
            process.wait()
