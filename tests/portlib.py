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

The interpreter is forked, not started: each pytest process keeps one helper process that has
imported TensorFlow (about 4.5 CPU s, paid once instead of at every run) and has run nothing
else, and forks it for each script. From the fork on the child is the script's own process: its
own working directory, environment, stdin (/dev/null), stdout and stderr, process group and exit
code; Python's ``random`` (reseeded by Python at every fork) and numpy's global generator
(reseeded here) start from fresh entropy, as in a new interpreter, and TensorFlow's runtime
starts in the child, where its first op runs. What the child shares with its siblings is what
an interpreter fixes at start: its hash seed, and the environment TensorFlow read at import;
a run whose ``TF_*``, ``PYTHON*`` or ``KERAS_*`` variables differ gets a helper of its own.
``MOXLITE_TEST_FORK=0`` starts a fresh interpreter for every run instead.
"""

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile

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


# The helper: imports TensorFlow, then forks one child per request line ({argv, cwd, env, stdout,
# stderr}); it answers each with the child's pid, then its exit code. The child leaves the loop
# and runs _AS_MAIN at the top level of this interpreter, so that it ends as a script's process
# does (atexit handlers, flushed files, the exit code of SystemExit or of an uncaught exception).
_FORK_SERVER = (
    "import json, os, sys\n"
    "import tensorflow\n"
    "_requests = os.fdopen(os.dup(0), 'r')\n"
    "_answers = os.dup(1)\n"
    "_null = os.open(os.devnull, os.O_RDWR)\n"
    "os.dup2(_null, 0)\n"
    "os.dup2(_null, 1)\n"
    "os.close(_null)\n"
    "while True:\n"
    "    _line = _requests.readline()\n"
    "    if not _line:\n"
    "        os._exit(0)\n"
    "    _request = json.loads(_line)\n"
    "    _pid = os.fork()\n"
    "    if _pid == 0:\n"
    "        break\n"
    "    os.write(_answers, f'{_pid}\\n'.encode())\n"
    "    os.write(_answers, f'{os.waitstatus_to_exitcode(os.waitpid(_pid, 0)[1])}\\n'.encode())\n"
    "_requests.close()\n"
    "os.close(_answers)\n"
    "os.setsid()\n"
    "os.chdir(_request['cwd'])\n"
    "os.environ.clear()\n"
    "os.environ.update(_request['env'])\n"
    "for _fd, _path in ((1, _request['stdout']), (2, _request['stderr'])):\n"
    "    _file = os.open(_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)\n"
    "    os.dup2(_file, _fd)\n"
    "    os.close(_file)\n"
    "import numpy\n"
    "numpy.random.seed()\n"
    "sys.argv = _request['argv']\n"
    "del _request, _requests, _answers, _line, _pid, _fd, _path, _file\n"
) + _AS_MAIN

# Variables an interpreter or TensorFlow's import may read: a helper serves runs that agree on them.
_IMPORT_TIME_PREFIXES = ("TF_", "PYTHON", "KERAS_", "OMP_", "MKL", "LD_", "CUDA", "XLA_")

_server = None   # (the helper's Popen, the environment key it was started for)


def _environment_key(environ):
    return tuple(sorted((k, v) for k, v in environ.items() if k.startswith(_IMPORT_TIME_PREFIXES)))


def _stop_server():
    global _server
    if _server is not None:
        process, _ = _server
        _server = None
        process.stdin.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


atexit.register(_stop_server)


def _fork_server(environ):
    global _server
    key = _environment_key(environ)
    if _server is not None and (_server[1] != key or _server[0].poll() is not None):
        _stop_server()
    if _server is None:
        process = subprocess.Popen([sys.executable, "-c", _FORK_SERVER], cwd=ROOT, env=environ,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        _server = (process, key)
    return _server[0]


def _read_answer(process, timeout):
    """The helper's next line, or None when ``timeout`` seconds pass first."""
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    if not ready:
        return None
    line = process.stdout.readline()
    if not line:
        raise RuntimeError("tests/portlib.py: the fork helper ended (see the test's stderr)")
    return int(line)


def _run_forked(argv, cwd, environ, timeout):
    process = _fork_server(environ)
    with tempfile.TemporaryDirectory(prefix="port-") as folder:
        out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        request = {"argv": argv, "cwd": cwd, "env": environ, "stdout": out, "stderr": err}
        process.stdin.write(json.dumps(request) + "\n")
        process.stdin.flush()
        pid = _read_answer(process, 60)
        code = _read_answer(process, timeout)
        if code is None:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _read_answer(process, 60)

        def read(path):
            with open(path, errors="replace") as stream:
                return stream.read()
        if code is None:
            raise subprocess.TimeoutExpired(argv, timeout, output=read(out), stderr=read(err))
        return subprocess.CompletedProcess(argv, code, read(out), read(err))


def run_port(name, *args, cwd=None, env=None, timeout=600, expect_code=0):
    """Run ``tests/moxing_ports/<name>`` with ``args``; return the finished process.

    Fails the test, with the script's output, when the exit code is not ``expect_code``.
    """
    environ = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
    environ["PYTHONPATH"] = ROOT + os.pathsep + environ.get("PYTHONPATH", "")
    environ.pop("TF_CONFIG", None)
    environ.update(env or {})
    script = os.path.join(PORTS, name)
    if environ.get("MOXLITE_TEST_FORK") == "0":
        finished = subprocess.run(
            [sys.executable, "-c", _AS_MAIN, script, *args], cwd=cwd or ROOT, env=environ,
            capture_output=True, text=True, timeout=timeout)
    else:
        finished = _run_forked(["-c", script, *args], str(cwd or ROOT), environ, timeout)
    if finished.returncode != expect_code:
        raise AssertionError(
            f"{name} {' '.join(args)} exited {finished.returncode}, expected {expect_code}\n"
            f"--- stdout (tail)\n{finished.stdout[-3000:]}\n--- stderr (tail)\n{finished.stderr[-6000:]}")
    return finished
