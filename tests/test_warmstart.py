"""tests/warmstart.py: a task forked warm behaves as the same script started cold.

The reference is the script run by ``python <script>``: the same argv, working directory,
environment, stdin and stdout, the same exit code; signals sent to the stand-in's pid (what a
launcher knows) reach the script; a SIGKILL of either process ends both.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests import distlib, warmstart

PROBE = """
import json, os, signal, sys, time
if sys.argv[1] == "report":
    print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "probe": os.environ.get("PROBE"),
                      "path0": sys.path[0], "stdin": sys.stdin.read(), "name": __name__,
                      "tf_config": os.environ.get("TF_CONFIG")}), flush=True)
    sys.exit(3)
if sys.argv[1] == "wait":
    signal.signal(signal.SIGTERM, lambda *_: (print("terminated", flush=True), os._exit(7)))
    print(f"PID {os.getpid()} SIGINT {'ignored' if signal.getsignal(signal.SIGINT) == signal.SIG_IGN else 'kept'}",
          flush=True)
    time.sleep(120)
"""


def _environ(**extra):
    environ = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1", PROBE="seen")
    environ["PYTHONPATH"] = distlib.ROOT + os.pathsep + environ.get("PYTHONPATH", "")
    environ.pop("TF_CONFIG", None)
    return dict(environ, **extra)


def _start(script, args, environ, warm=True, stdin=subprocess.DEVNULL, preexec_fn=None):
    if warm:
        environ = dict(environ, **{warmstart.ADDRESS_VARIABLE: distlib._server_address(environ)})
        command = [sys.executable, distlib.WARMSTART, str(script), *args]
    else:
        command = [sys.executable, str(script), *args]
    return subprocess.Popen(command, env=environ, cwd=str(script.parent), stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=preexec_fn)


@pytest.fixture
def probe(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text(PROBE)
    return path


def _report(probe, warm, environ):
    process = _start(probe, ["report", "x y"], environ, warm=warm, stdin=subprocess.PIPE)
    out, err = process.communicate("from stdin", timeout=120)
    return process.returncode, json.loads(out), err


def test_a_forked_script_sees_what_a_cold_one_sees_and_exits_with_its_code(probe):
    environ = _environ(TF_CONFIG=json.dumps({"task": {"type": "worker", "index": 1}}))
    cold = _report(probe, False, environ)
    forked = _report(probe, True, environ)
    assert cold[0] == forked[0] == 3
    assert forked[1] == cold[1]
    assert forked[1]["tf_config"] is not None and forked[1]["stdin"] == "from stdin"


def test_signals_to_the_stand_in_reach_the_script_and_it_ends_as_the_script_ends(probe):
    process = _start(probe, ["wait"], _environ())
    line = process.stdout.readline()
    child = int(line.split()[1])
    assert child != process.pid                     # forked from the server, not started cold
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(timeout=60) == 7
    assert "terminated" in process.stdout.read()
    # A SIGKILL of the script's own pid (what it printed): the stand-in dies of the same signal.
    process = _start(probe, ["wait"], _environ())
    child = int(process.stdout.readline().split()[1])
    os.kill(child, signal.SIGKILL)
    assert process.wait(timeout=60) == -signal.SIGKILL


def test_a_killed_stand_in_takes_its_script_with_it(probe):
    process = _start(probe, ["wait"], _environ())
    child = int(process.stdout.readline().split()[1])
    assert distlib.alive(child)
    process.kill()
    process.wait(timeout=60)
    deadline = time.monotonic() + 10
    while distlib.alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not distlib.alive(child)


def test_an_ignored_sigint_stays_ignored(probe):
    ignore = lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)  # noqa: E731  (as a background shell job)
    process = _start(probe, ["wait"], _environ(), preexec_fn=ignore)
    line = process.stdout.readline()
    assert "SIGINT ignored" in line, line
    os.kill(process.pid, signal.SIGINT)             # ignored by the stand-in, not forwarded
    time.sleep(0.5)
    assert process.poll() is None
    process.kill()
    process.wait(timeout=60)


def test_another_import_time_environment_starts_the_script_cold(probe):
    environ = _environ()
    address = distlib._server_address(environ)
    other = dict(environ, TF_ENABLE_ONEDNN_OPTS="0" if environ.get("TF_ENABLE_ONEDNN_OPTS") != "0" else "1",
                 **{warmstart.ADDRESS_VARIABLE: address})
    process = subprocess.Popen([sys.executable, distlib.WARMSTART, str(probe), "wait"], env=other,
                               cwd=str(probe.parent), stdout=subprocess.PIPE, text=True)
    child = int(process.stdout.readline().split()[1])
    assert child == process.pid                     # refused by the server: the stand-in became the script
    process.kill()
    process.wait(timeout=60)
