"""Cluster tasks forked from an interpreter that has imported TensorFlow, instead of started cold.

Each task of a local cluster (tools/launch_local.py, tests/distlib.py) pays about 4.6 CPU s to
import TensorFlow and Keras before it does anything, and a cluster test starts two to four of
them: most of what such a test costs on this 2-core machine. ``tests/distlib.py`` therefore
runs a training script as

    python tests/warmstart.py <script> <args>

a stand-in that imports nothing heavy. It asks this module's server (``--serve PATH``: started
by tests/distlib.py, one per pytest process, which has imported TensorFlow and Keras and run
nothing else) to fork a child. The child takes the stand-in's stdin, stdout and stderr (passed
over the socket), working directory, environment (TF_CONFIG included) and ignored signals,
then runs the script as ``__main__``, as ``python <script>`` would: its own ``sys.argv``,
its folder first on ``sys.path``, its atexit handlers and exit code.

The stand-in keeps the task's place for the launcher and the tests: it forwards every signal a
launcher or a test sends (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2) to the child, and
ends as the child ends (the same exit code, or killed by the same signal). When the stand-in
is killed (SIGKILL reaches it through the launcher's ``killpg``) the child sees its socket close
and kills itself. A script prints its own pid (the child's): a test that kills that pid kills
the task, and the stand-in then dies of the same signal.

What the child shares with its siblings is what an interpreter fixes at start: the hash seed
and the environment read at import. The server refuses a request whose import-time variables
(``TF_*`` but TF_CONFIG, ``PYTHON*``, ``KERAS_*``, ...) differ from its own, and the stand-in then
starts the script cold; so does it when no server is named (``MOXLITE_TEST_ZYGOTE`` unset) or
reachable. ``MOXLITE_TEST_FORK=0`` turns the forking off in tests/distlib.py.
"""

import json
import os
import signal
import socket
import struct
import sys

ADDRESS_VARIABLE = "MOXLITE_TEST_ZYGOTE"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
# Variables an interpreter, TensorFlow or Keras may read at import; TF_CONFIG is read at run time.
IMPORT_TIME_PREFIXES = ("TF_", "PYTHON", "KERAS_", "OMP_", "MKL", "LD_", "CUDA", "XLA_")
RUN_TIME = ("TF_CONFIG", ADDRESS_VARIABLE)


def import_time_environment(environ):
    return sorted((k, v) for k, v in environ.items() if k.startswith(IMPORT_TIME_PREFIXES) and k not in RUN_TIME)


def _send(connection, payload, fds=()):
    data = json.dumps(payload).encode()
    socket.send_fds(connection, [struct.pack("!I", len(data)) + data], list(fds))


def _receive(connection):
    """(payload, fds) of one ``_send``."""
    head, fds, _, _ = socket.recv_fds(connection, 4, 3)
    if len(head) < 4:
        head += connection.recv(4 - len(head), socket.MSG_WAITALL)
    size = struct.unpack("!I", head)[0]
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ConnectionError("warmstart: request cut short")
        data += chunk
    return json.loads(data), fds


# ---- the stand-in ---------------------------------------------------------------------------

def _cold(argv):
    os.execv(sys.executable, [sys.executable, *argv])


def stand_in(argv):
    """Run ``argv`` ([script, args...]) in a child of the server; end as it ends."""
    address = os.environ.get(ADDRESS_VARIABLE)
    if not address:
        _cold(argv)
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(address)
    except OSError:
        _cold(argv)
    ignored = [int(s) for s in FORWARDED if signal.getsignal(s) == signal.SIG_IGN]
    environ = {k: v for k, v in os.environ.items() if k != ADDRESS_VARIABLE}
    _send(connection, {"argv": argv, "cwd": os.getcwd(), "env": environ, "ignored": ignored}, (0, 1, 2))
    answers = connection.makefile("rb")
    first = answers.readline().strip()
    if not first.isdigit():          # refused (another import-time environment): start cold
        connection.close()
        _cold(argv)
    child = int(first)

    def forward(signum, frame):
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass
    for signum in FORWARDED:
        if int(signum) not in ignored:
            signal.signal(signum, forward)
    status = answers.readline().strip()
    code = int(status) if status else -int(signal.SIGKILL)
    if code < 0:
        if -code not in (signal.SIGKILL, signal.SIGSTOP):   # those two cannot be handled anyway
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


# ---- the server -----------------------------------------------------------------------------

def _exit_when_stdin_closes():
    """The server lives as long as the pytest process that started it holds its stdin."""
    import threading

    def watch():
        while os.read(0, 1024):
            pass
        os._exit(0)
    threading.Thread(target=watch, daemon=True).start()


def _report_exit(connection, pid):
    import threading

    def wait():
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        try:
            connection.sendall(f"{code}\n".encode())
        except OSError:
            pass
        connection.close()
    threading.Thread(target=wait, daemon=True).start()


def serve(address):
    """Accept requests until stdin closes; in a forked child, return (connection, fds, request)."""
    import keras  # noqa: F401  (the point of the server: imported once, before any fork)
    import tensorflow  # noqa: F401

    own = import_time_environment(os.environ)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(16)
    _exit_when_stdin_closes()
    os.write(1, b"ready\n")
    while True:
        connection, _ = listener.accept()
        try:
            request, fds = _receive(connection)
        except (OSError, ValueError):
            connection.close()
            continue
        if import_time_environment(request["env"]) != own or len(fds) != 3:
            connection.sendall(b"refused\n")
            connection.close()
            for fd in fds:
                os.close(fd)
            continue
        pid = os.fork()
        if pid == 0:
            listener.close()
            return connection, fds, request
        for fd in fds:
            os.close(fd)
        connection.sendall(f"{pid}\n".encode())
        _report_exit(connection, pid)


def become_task(connection, fds, request):
    """In the forked child: take the stand-in's place, then hand over to the script (top level)."""
    import threading

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for signum in request["ignored"]:
        signal.signal(signum, signal.SIG_IGN)

    def lifeline():
        try:
            while connection.recv(64):
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGKILL)   # the stand-in is gone: so is the task
    threading.Thread(target=lifeline, daemon=True).start()
    import numpy

    numpy.random.seed()   # fresh entropy, as in a new interpreter (Python reseeds `random` at fork)
    sys.argv = list(request["argv"])
    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        _task = serve(sys.argv[2])
        become_task(*_task)
        del _task
        import runpy

        runpy.run_path(sys.argv[0], run_name="__main__")
    else:
        stand_in(sys.argv[1:])
