"""Run a ported MoXing script the way its user would: its own process, its own flags.

Port scripts live in ``tests/moxing_ports/`` and are complete programs that
import ``moxlite as mox`` where they once imported ``moxing.tensorflow as mox``.
A test runs one with ``run_port`` and then checks what it left behind
(checkpoints, exports, files it wrote) against an independent reference.

The script runs as ``__main__`` of a fresh interpreter, with its folder first on
``sys.path`` and its arguments in ``sys.argv``, as ``python <script> <args>`` runs it; the
one difference is grappler (TensorFlow's graph optimiser) off, as in the pytest
processes (tests/conftest.py): it rewrites each ResNet-50 graph a port traces, about a
fifth of such a port's CPU, for graphs that run a few steps, and changes no op's
semantics. ``MOXLITE_TEST_GRAPPLER=1`` keeps it on here too. ``MOXLITE_TEST_RATE_LOG=<file>``
records the learning rates the script's optimizers read (``tests/rate_probe.py``);
``MOXLITE_TEST_SEED=<int>`` seeds Python, numpy and TensorFlow before the script runs
(``keras.utils.set_random_seed``), for a test whose check depends on the initial weights.
"""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PORTS = os.path.join(ROOT, "tests", "moxing_ports")

_AS_MAIN = (
    "import os, runpy, sys\n"
    "if os.environ.get('MOXLITE_TEST_GRAPPLER') != '1':\n"
    "    import tensorflow as tf\n"
    "    tf.config.optimizer.set_experimental_options({'disable_meta_optimizer': True})\n"
    "if os.environ.get('MOXLITE_TEST_RATE_LOG'):\n"
    "    import tests.rate_probe\n"
    "    tests.rate_probe.install(os.environ['MOXLITE_TEST_RATE_LOG'])\n"
    "if os.environ.get('MOXLITE_TEST_SEED'):\n"
    "    import keras\n"
    "    keras.utils.set_random_seed(int(os.environ['MOXLITE_TEST_SEED']))\n"
    "sys.argv = sys.argv[1:]\n"
    "sys.path[0] = os.path.dirname(sys.argv[0])\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n")


def run_port(name, *args, cwd=None, env=None, timeout=600, expect_code=0):
    """Run ``tests/moxing_ports/<name>`` with ``args``; return the finished process.

    Fails the test, with the script's output, when the exit code is not ``expect_code``.
    """
    environ = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
    environ["PYTHONPATH"] = ROOT + os.pathsep + environ.get("PYTHONPATH", "")
    environ.pop("TF_CONFIG", None)
    environ.update(env or {})
    finished = subprocess.run(
        [sys.executable, "-c", _AS_MAIN, os.path.join(PORTS, name), *args], cwd=cwd or ROOT, env=environ,
        capture_output=True, text=True, timeout=timeout)
    if finished.returncode != expect_code:
        raise AssertionError(
            f"{name} {' '.join(args)} exited {finished.returncode}, expected {expect_code}\n"
            f"--- stdout (tail)\n{finished.stdout[-3000:]}\n--- stderr (tail)\n{finished.stderr[-6000:]}")
    return finished
