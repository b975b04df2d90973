"""Start local clusters from tests: tools/launch_local.py in its own process group.

Every launch is bounded (the launcher's --timeout plus a hard wait limit
here) and ``Launch.kill()`` removes the whole process group, so a failing
test leaves no TensorFlow server behind.
"""

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(ROOT, "tools", "launch_local.py")
SCRIPTS = os.path.join(ROOT, "tests", "dist_scripts")
WARMSTART = os.path.join(ROOT, "tests", "warmstart.py")


# ---- tasks forked warm (tests/warmstart.py) ---------------------------------------------------

_servers = {}   # import-time environment -> (server Popen, socket path)


def _stop_servers():
    for process, _ in _servers.values():
        process.stdin.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    _servers.clear()


atexit.register(_stop_servers)


def _server_address(environ):
    """The socket of a warmstart server started with ``environ`` (started now if needed)."""
    from tests import warmstart

    key = tuple(warmstart.import_time_environment(environ))
    if key in _servers and _servers[key][0].poll() is not None:
        del _servers[key]
    if key not in _servers:
        path = os.path.join(tempfile.mkdtemp(prefix="warmstart-"), "socket")
        process = subprocess.Popen([sys.executable, WARMSTART, "--serve", path], env=environ, cwd=ROOT,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
        if process.stdout.readline() != b"ready\n":
            process.kill()
            process.wait()
            raise RuntimeError("tests/distlib.py: the warmstart server did not start")
        _servers[key] = (process, path)
    return _servers[key][1]


def warm(command, environ):
    """(command, environ) that run a training script of tests/dist_scripts through tests/warmstart.py
    (forked from a server that has imported TensorFlow); any other command as it is.
    ``MOXLITE_TEST_FORK=0`` in the environment: always as it is."""
    is_python = bool(command) and os.path.basename(command[0]) in ("python", "python3", os.path.basename(sys.executable))
    script = command[1] if len(command) > 1 else ""
    if (not is_python or environ.get("MOXLITE_TEST_FORK") == "0" or os.path.dirname(script) != SCRIPTS
            or not os.path.basename(script).startswith("train_")):
        return command, environ
    environ = dict(environ)
    from tests import warmstart

    environ[warmstart.ADDRESS_VARIABLE] = _server_address(environ)
    return [sys.executable, WARMSTART, *command[1:]], environ


def script(name):
    """Path of a helper script under tests/dist_scripts."""
    return os.path.join(SCRIPTS, name)


class Launch:
    """A running ``launch_local.py``; its output is collected in ``lines``."""

    def __init__(self, launcher_args, command, timeout, extra_env=None, sigint_ignored=False):
        """``sigint_ignored``: start the launcher with SIGINT ignored, as a non-interactive shell
        starts a background job."""
        environ = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
        environ["PYTHONPATH"] = ROOT + os.pathsep + environ.get("PYTHONPATH", "")
        environ.pop("TF_CONFIG", None)
        environ.update(extra_env or {})
        self.timeout = timeout
        command, environ = warm(command, environ)
        shell = ["sh", "-c", 'trap "" INT; exec "$@"', "sh"] if sigint_ignored else []
        self.process = subprocess.Popen(
            [*shell, sys.executable, LAUNCHER, *launcher_args, f"--timeout={timeout}", "--", *command],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environ, cwd=ROOT,
            start_new_session=True, text=True)
        self.lines = []

    def read_until(self, predicate, seconds):
        """Read lines until ``predicate(line)`` holds; return that line (None at EOF/limit)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                return None
            self.lines.append(line.rstrip("\n"))
            if predicate(line):
                return line
        return None

    def wait(self):
        """Read to the end; return the launcher's exit code (bounded by its timeout + 60 s)."""
        deadline = time.monotonic() + self.timeout + 60
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            self.lines.append(line.rstrip("\n"))
        try:
            return self.process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("launch_local did not finish:\n" + self.output())

    def kill(self):
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()

    def output(self):
        return "\n".join(self.lines)

    def results(self):
        """task name -> the JSON a helper script printed as ``RESULT {...}``."""
        found = {}
        for line in self.lines:
            if "] RESULT " in line:
                task, payload = line.split("] RESULT ", 1)
                found[task.lstrip("[")] = json.loads(payload)
        return found


def stopped_and_resumed_sync_run(directory, per_replica=16, more_steps=40):
    """One synchronous cluster stopped by SIGTERM and resumed, for the tests that check either half.

    Two workers (TF_CONFIG) run ``train_mnist.py`` towards a million steps, saving every 10;
    after the step-10 checkpoint the launcher gets SIGTERM, which it forwards: the workers
    save at their current step and exit. The same command then resumes to ``more_steps``
    past that checkpoint, and the reference is one process trained as many steps at the
    global batch. Failures are recorded, not raised: the tests show them with the output.
    """
    from moxlite import flags
    import keras
    import tensorflow as tf

    from tests import runlib
    from tests.dist_scripts import train_mnist

    log_dir = os.path.join(str(directory), "cluster")
    base = ["python", script("train_mnist.py"), f"--log_dir={log_dir}", f"--batch={per_replica}", "--save_steps=10"]
    launcher = ["--workers=2", "--sync", "--use-tf-config"]
    found = types.SimpleNamespace(log_dir=log_dir, per_replica=per_replica, stopped_at=None, second=None,
                                  second_code=None, reference=None)
    found.first = Launch(launcher, base + ["--steps=1000000"], timeout=150)
    try:
        found.reached = found.first.read_until(lambda line: "Saved checkpoint for step 10" in line, 120) is not None
        if found.reached:
            found.first.process.send_signal(signal.SIGTERM)
        found.first_code = found.first.wait() if found.reached else None
    finally:
        found.first.kill()
    latest = tf.train.latest_checkpoint(log_dir)
    if found.first_code != 128 + signal.SIGTERM or latest is None:
        return found
    found.stopped_at = int(latest.rsplit("-", 1)[1])
    found.steps = found.stopped_at + more_steps
    found.second = Launch(launcher, base + [f"--steps={found.steps}"], timeout=150)
    try:
        found.second_code = found.second.wait()
    finally:
        found.second.kill()
    flags.reset_flags()
    keras.backend.clear_session()
    single = os.path.join(str(directory), "single")
    train_mnist.train(single, found.steps, 2 * per_replica)
    found.reference = runlib.checkpoint_variables(single)
    return found


def alive(pid):
    """True while ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


class Tasks:
    """Processes started the way a scheduler starts them: one command, one environment per task.

    srun or Kubeflow's training operator start every task themselves; here each is a
    subprocess in its own session, given ``environments[i]`` over a clean base (no
    TF_CONFIG, no SLURM_* of the calling shell). ``wait()`` is bounded by ``timeout``
    and ``kill()`` removes every process group, so a failing test leaves nothing behind.
    """

    def __init__(self, command, environments, timeout, output_dir):
        base = {name: value for name, value in os.environ.items()
                if name != "TF_CONFIG" and not name.startswith("SLURM_")}
        base.update(TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1",
                    PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.timeout = timeout
        self.logs = [os.path.join(str(output_dir), f"task{index}.log") for index in range(len(environments))]
        self.processes = []
        for log, environment in zip(self.logs, environments):
            task_command, task_environ = warm(command, dict(base, **environment))
            with open(log, "w") as stream:
                self.processes.append(subprocess.Popen(
                    task_command, stdout=stream, stderr=subprocess.STDOUT, env=task_environ, cwd=ROOT,
                    start_new_session=True))

    def wait(self, count=None):
        """The exit codes of the first ``count`` tasks (all by default), in order; then every task is
        killed (servers never exit by themselves). A task still running at the deadline has code None."""
        deadline = time.monotonic() + self.timeout
        codes = []
        for process in self.processes[:count]:
            try:
                codes.append(process.wait(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                codes.append(None)
        self.kill()
        return codes

    def kill(self):
        for process in self.processes:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()

    def output(self, index=None):
        """One task's output, or every task's with a header each."""
        if index is not None:
            with open(self.logs[index]) as stream:
                return stream.read()
        return "\n".join(f"--- task {i} ---\n{self.output(i)}" for i in range(len(self.logs)))
