"""Runs that once left interpreter exit waiting forever now end by themselves.

moxlite-run used to end its own process with os._exit, which also skipped
atexit handlers. Two cases hung before: a 2-replica run of a model with
BatchNormalization, and a MultiWorkerMirroredStrategy run whose input goes
through tf.py_function. Each runs here in its own process, with no os._exit
anywhere, and must exit with code 0 within the time limit, after its atexit
handlers ran.
"""

import os
import subprocess
import sys

import pytest

from tests import distlib

pytestmark = pytest.mark.slow  # whole training processes

ROOT = distlib.ROOT
SECONDS = 240
# moxlite-run's own entry point, with an atexit handler that proves normal interpreter exit.
CLI_WITH_ATEXIT = ("import atexit, sys; atexit.register(lambda: print('ATEXIT RAN', flush=True)); "
                   "from moxlite.recipes.cli import main; sys.exit(main())")


def test_two_replica_batchnorm_recipe_run_exits_by_itself_and_runs_atexit(tmp_path):
    environ = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    command = [sys.executable, "-c", CLI_WITH_ATEXIT, os.path.join(ROOT, "recipes", "benchmark.yaml"),
               "--set", f"run.log_dir={tmp_path}", "--set", "run.steps=4", "--set", "run.batch_size=8",
               "--set", "model.small_resnet.depth=8", "--set", "input.synthetic.image_shape=[16, 16, 3]",
               "--set", "input.synthetic.num_samples=256", "--set", "distribute.num_gpus=2"]
    finished = subprocess.run(command, cwd=str(tmp_path), env=environ, capture_output=True, text=True,
                              timeout=SECONDS)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "2 replica(s)" in finished.stderr + finished.stdout
    assert finished.stdout.rstrip().endswith("ATEXIT RAN")


@pytest.mark.cluster   # two workers through tests.distlib, without the launches fixture
def test_multi_worker_run_with_py_function_input_exits_by_itself(tmp_path):
    # Each worker's shell prints its exit code; a worker that hung would be killed by the
    # launcher after the chief's exit and print nothing.
    command = ["sh", "-c", '"$@"; echo "EXIT $?"', "sh", sys.executable,
               distlib.script("train_py_function.py"), f"--log_dir={tmp_path}", "--steps=4"]
    run = distlib.Launch(["--workers=2", "--sync"], command, timeout=SECONDS)
    try:
        assert run.wait() == 0, run.output()
    finally:
        run.kill()
    for worker in ("worker:0", "worker:1"):
        assert f"[{worker}] TRAINED" in run.lines, run.output()
        assert f"[{worker}] EXIT 0" in run.lines, run.output()
