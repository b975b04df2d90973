#!/usr/bin/env python
"""Start a whole moxlite cluster on this machine, one subprocess per task.

    python tools/launch_local.py --workers 2 --ps 1 --async -- python train.py --num_gpus=1

Each task runs the command with MoXing's cluster flags appended
(``--job_name --task_index --ps_hosts --worker_hosts --sync_replicas``) or,
with ``--use-tf-config``, with the ``TF_CONFIG`` environment variable set.
Ports are free loopback ports picked here. Every line a task prints is
echoed with its task as prefix (``[worker:0] ...``). The launcher returns the
chief's exit code and, when the run ends, times out or is interrupted
(SIGINT/SIGTERM), kills every task's process group: nothing outlives it.
An interrupt is first forwarded to the tasks that train, which save a
checkpoint at their current step and exit (up to SAVE_GRACE_SECONDS, or --save-grace).

Who runs the script as chief:
* ``--sync``: all workers train; worker 0 is the chief. ps tasks, if any, exit at once.
* ``--async`` with flags: worker 0's process becomes the coordinator and
  serves worker 0 from a child process; the other workers and the ps serve.
* ``--async --use-tf-config``: an extra ``chief`` task is the coordinator;
  every worker and ps serves.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

# Seconds a task gets to exit after SIGTERM before SIGKILL. TensorFlow
# processes blocked in a collective or a server join may ignore SIGTERM.
KILL_GRACE_SECONDS = 3.0
# Seconds the training tasks get to save a checkpoint after a forwarded SIGINT/SIGTERM.
SAVE_GRACE_SECONDS = 60.0
# Seconds the other synchronous workers get to finish after the chief did.
PEER_EXIT_SECONDS = 30.0


def free_ports(count, host="127.0.0.1"):
    """``count`` distinct ports nothing listens on (held open together so they differ)."""
    sockets = []
    try:
        for _ in range(count):
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            probe.bind((host, 0))
            sockets.append(probe)
        return [probe.getsockname()[1] for probe in sockets]
    finally:
        for probe in sockets:
            probe.close()


class Task:
    """One task of the cluster: its name, command, environment and process."""

    def __init__(self, job, index, command, environ):
        self.job, self.index = job, index
        self.command, self.environ = command, environ
        self.process = None

    @property
    def name(self):
        return f"{self.job}:{self.index}"


def plan(workers, ps, sync, use_tf_config, command, host="127.0.0.1"):
    """The tasks to start and the name of the chief, without starting anything."""
    if workers < 1:
        raise SystemExit("launch_local: --workers must be at least 1")
    if not sync and ps < 1:
        raise SystemExit("launch_local: --async needs --ps 1 or more (parameter servers)")
    if sync and ps and use_tf_config:
        raise SystemExit("launch_local: --sync with --use-tf-config takes no ps tasks (TF_CONFIG with "
                         "'ps' means parameter-server training); drop --ps or use --async")
    with_chief = use_tf_config and not sync
    ports = iter(free_ports(workers + ps + int(with_chief), host))
    cluster = {"worker": [f"{host}:{next(ports)}" for _ in range(workers)]}
    if ps:
        cluster["ps"] = [f"{host}:{next(ports)}" for _ in range(ps)]
    if with_chief:
        cluster["chief"] = [f"{host}:{next(ports)}"]
    jobs = [(job, index) for job in ("chief", "ps", "worker") for index in range(len(cluster.get(job, [])))]
    tasks = []
    for job, index in jobs:
        environ = dict(os.environ)
        environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        environ["PYTHONUNBUFFERED"] = "1"
        task_command = list(command)
        if use_tf_config:
            environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": job, "index": index}})
        else:
            environ.pop("TF_CONFIG", None)
            task_command += [
                f"--job_name={job}", f"--task_index={index}",
                f"--ps_hosts={','.join(cluster.get('ps', []))}",
                f"--worker_hosts={','.join(cluster['worker'])}",
                f"--sync_replicas={'true' if sync else 'false'}",
            ]
        tasks.append(Task(job, index, task_command, environ))
    chief = "chief:0" if with_chief else "worker:0"
    return tasks, chief


def _stream(task, out):
    for line in iter(task.process.stdout.readline, b""):
        out.write(f"[{task.name}] {line.decode(errors='replace').rstrip()}\n")
        out.flush()


def start(tasks, out=sys.stdout):
    """Start every task in its own process group and echo its output."""
    threads = []
    for task in tasks:
        # Own session: one killpg reaches the task and anything it started.
        task.process = subprocess.Popen(task.command, env=task.environ, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        thread = threading.Thread(target=_stream, args=(task, out), daemon=True)
        thread.start()
        threads.append(thread)
    return threads


def stop(tasks):
    """SIGTERM every task's process group, then SIGKILL what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for task in tasks:
            if task.process is not None:
                try:
                    os.killpg(task.process.pid, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + KILL_GRACE_SECONDS
        while sig == signal.SIGTERM and time.monotonic() < deadline:
            if all(task.process is None or task.process.poll() is not None for task in tasks):
                break
            time.sleep(0.1)
    for task in tasks:
        if task.process is not None:
            task.process.wait()


def forward(tasks, chief, sync, signum, grace=SAVE_GRACE_SECONDS):
    """Send ``signum`` to the processes that run the training loop and wait (up to ``grace``
    seconds) for them to exit.

    Synchronous: every worker (they agree on the step to stop at). Asynchronous: only the
    chief, the coordinator; the servers it trains on must stay up while it saves. Only the
    task's own process is signalled (an asynchronous chief's child serves worker 0).
    """
    trainers = [t for t in tasks if t.process is not None and
                (t.name == chief or (sync and t.job in ("worker", "chief")))]
    for task in trainers:
        try:
            os.kill(task.process.pid, signum)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(t.process.poll() is None for t in trainers):
        time.sleep(0.1)


def supervise(tasks, chief, sync, timeout, out=sys.stdout):
    """Wait for the chief; return its exit code (124 on timeout).

    In synchronous mode a failing worker dooms the step's all-reduce, so the
    run ends at once with that worker's code. In asynchronous mode a worker
    may die: the coordinator reschedules its work on the others.
    """
    by_name = {task.name: task for task in tasks}
    deadline = time.monotonic() + timeout
    while True:
        code = by_name[chief].process.poll()
        if code is not None:
            break
        if sync:
            for task in tasks:
                failed = task.process.poll()
                if task.job == "worker" and failed not in (None, 0):
                    out.write(f"[launch_local] {task.name} exited with {failed}; stopping the run\n")
                    return failed
        if time.monotonic() > deadline:
            out.write(f"[launch_local] timeout after {timeout:g} s; stopping every task\n")
            return 124
        time.sleep(0.2)
    if sync and code == 0:
        # Let the other workers finish their last step and exit on their own.
        peers_deadline = time.monotonic() + PEER_EXIT_SECONDS
        while time.monotonic() < min(peers_deadline, deadline):
            if all(task.process.poll() is not None for task in tasks if task.job != "ps"):
                break
            time.sleep(0.2)
    return code


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="worker tasks (default 2)")
    parser.add_argument("--ps", type=int, default=0, help="parameter-server tasks (default 0)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--sync", dest="sync", action="store_true", default=True,
                      help="synchronous all-reduce training (default)")
    mode.add_argument("--async", dest="sync", action="store_false",
                      help="asynchronous parameter-server training")
    parser.add_argument("--use-tf-config", action="store_true",
                        help="describe the cluster with TF_CONFIG instead of MoXing's flags")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before every task is killed")
    parser.add_argument("--save-grace", type=float, default=SAVE_GRACE_SECONDS,
                        help="seconds the training tasks get to save and exit after an interrupt "
                             f"(default {SAVE_GRACE_SECONDS:g})")
    parser.add_argument("--dry-run", action="store_true", help="print each task's command and stop")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- command to run in every task")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --, e.g. -- python train.py")
    tasks, chief = plan(args.workers, args.ps, args.sync, args.use_tf_config, command)
    if args.dry_run:
        for task in tasks:
            prefix = f"TF_CONFIG='{task.environ['TF_CONFIG']}' " if args.use_tf_config else ""
            print(f"[{task.name}] {prefix}{subprocess.list2cmdline(task.command)}")
        return 0

    def interrupted(signum, _frame):
        raise KeyboardInterrupt(signum)

    signal.signal(signal.SIGTERM, interrupted)
    # SIGINT too: a background job of a non-interactive shell starts with SIGINT ignored (POSIX),
    # and without a handler of its own the launcher let `kill -INT` pass until its --timeout. The
    # tasks started after this get SIGINT's default again (a handler is reset at exec, SIG_IGN is not).
    signal.signal(signal.SIGINT, interrupted)
    code, threads = 130, []
    try:
        threads = start(tasks)
        sys.stdout.write(f"[launch_local] started {', '.join(t.name for t in tasks)}; chief is {chief}\n")
        code = supervise(tasks, chief, args.sync, args.timeout)
    except KeyboardInterrupt as interrupt:
        signum = interrupt.args[0] if interrupt.args else signal.SIGINT
        code = 128 + int(signum)
        sys.stdout.write(f"[launch_local] interrupted by signal {int(signum)}; forwarding it to the tasks that "
                         f"train, which save a checkpoint and exit, then stopping every task\n")
        sys.stdout.flush()
        forward(tasks, chief, args.sync, signum, args.save_grace)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        stop(tasks)
    for thread in threads:
        thread.join(timeout=2)
    sys.stdout.write(f"[launch_local] {chief} exit code {code}\n")
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
