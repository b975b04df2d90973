"""Serve a ps or worker task: no user code runs in these processes.

In asynchronous (parameter-server) training the coordinator sends every
function to the workers and keeps variables on the ps tasks; those processes
only run a ``tf.distribute.Server`` until they are killed. In synchronous
training a ps task has nothing to do and returns at once.

Run directly to serve one task by itself (a coordinator started as worker 0 serves worker 0
in its own process instead: ``serve_worker0_in_process``)::

    python -m moxlite.distribute.server --job_name=worker --task_index=0 \
        --worker_hosts=... --ps_hosts=... --chief_hosts=... --nosync_replicas
"""

import signal
import sys
import threading

from moxlite import logs
from moxlite.distribute import cluster


def serve_forever(view):
    """Run this task's server until the process is killed."""
    if view.kind != "parameter_server":
        logs.get_logger().info("%s:%d is not needed in %s training; exiting",
                               view.task_type, view.task_index, view.kind)
        return
    from moxlite.distribute import devices
    import tensorflow as tf

    if view.task_type == "worker":
        devices.configure_local_devices(view.num_gpus)
    cluster.check_port_free(view)
    server = tf.distribute.Server(
        tf.train.ClusterSpec(view.training_jobs()), job_name=view.task_type,
        task_index=view.task_index, protocol="grpc", start=True)
    _end_at_stop_signals()   # before the line that tells a launcher (or a test) the task serves
    logs.get_logger().info("serving %s:%d at %s", view.task_type, view.task_index, view.address())
    server.join()


def _end_at_stop_signals():
    """SIGTERM and SIGINT end this serving process at once: there is nothing to save here.

    A Python-level handler (moxlite-run's SIGTERM-as-exception, Python's KeyboardInterrupt)
    never runs while the main thread blocks in ``server.join()``, so without this a server
    outlived every SIGTERM and Ctrl-C until SIGKILL: launch_local's kill grace (3 s),
    Kubernetes' termination grace (30 s) or Slurm's KillWait, at the end of every run.
    """
    if threading.current_thread() is not threading.main_thread():
        return   # signal handlers belong to the main thread; a server joined elsewhere keeps them
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)


def serve_worker0_in_process(view):
    """Start worker 0's server in this (coordinator) process; it serves until the process ends.

    TensorFlow runs several tasks' servers in one process (its own parameter-server tests do):
    the coordinator's functions reach worker 0 over gRPC on loopback as they reach any other
    worker. A child process would pay TensorFlow's import again (about 3.5 CPU s) for the same
    server; in-process it also ends with the coordinator, whatever kills it.
    """
    from moxlite.distribute import devices
    import tensorflow as tf

    devices.configure_local_devices(view.num_gpus)
    return tf.distribute.Server(
        tf.train.ClusterSpec(view.training_jobs()), job_name="worker", task_index=0, protocol="grpc", start=True)


def main():
    """Entry point: resolve the cluster from the flags and serve."""
    from moxlite import errors

    try:
        view = cluster.resolve()
    except errors.MoxliteError as error:
        print(f"moxlite.distribute.server: {error}", file=sys.stderr)
        return error.exit_code
    if not view.serves_only:
        print(f"moxlite.distribute.server: {view.task_type}:{view.task_index} is a {view.role}, "
              "which runs the training script, not a server", file=sys.stderr)
        return 2
    serve_forever(view)
    return 0


if __name__ == "__main__":
    sys.exit(main())
