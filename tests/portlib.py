"""Run a ported MoXing script the way its user would: its own process, its own flags.

Port scripts live in ``tests/moxing_ports/`` and are complete programs that
import ``moxlite as mox`` where they once imported ``moxing.tensorflow as mox``.
A test runs one with ``run_port`` and then checks what it left behind
(checkpoints, exports, files it wrote) against an independent reference.
"""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PORTS = os.path.join(ROOT, "tests", "moxing_ports")


def run_port(name, *args, cwd=None, env=None, timeout=600, expect_code=0):
    """Run ``tests/moxing_ports/<name>`` with ``args``; return the finished process.

    Fails the test, with the script's output, when the exit code is not ``expect_code``.
    """
    environ = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
    environ["PYTHONPATH"] = ROOT + os.pathsep + environ.get("PYTHONPATH", "")
    environ.pop("TF_CONFIG", None)
    environ.update(env or {})
    finished = subprocess.run(
        [sys.executable, os.path.join(PORTS, name), *args], cwd=cwd or ROOT, env=environ,
        capture_output=True, text=True, timeout=timeout)
    if finished.returncode != expect_code:
        raise AssertionError(
            f"{name} {' '.join(args)} exited {finished.returncode}, expected {expect_code}\n"
            f"--- stdout (tail)\n{finished.stdout[-3000:]}\n--- stderr (tail)\n{finished.stderr[-6000:]}")
    return finished
