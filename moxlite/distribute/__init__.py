"""Distributed training for moxlite: one call resolves the cluster and builds the strategy.

    setup = moxlite.distribute.setup()      # reads MoXing's flags or TF_CONFIG
    if setup.serves_only:
        setup.serve_forever()                # ps (and, async, worker) tasks
    with setup.strategy.scope(): ...

    with moxlite.strategy_scope():           # the same strategy object run() will use
        backbone = keras_hub.models.BertBackbone(...)   # a model built before run()

See ``cluster`` for how MoXing's per-process flags map onto TensorFlow's
chief/worker/ps roles, ``strategy`` for which strategy each cluster gets,
and ``tools/launch_local.py`` to start a whole cluster on one machine.
"""

import contextlib
import dataclasses
from typing import Any, Optional

from moxlite import logs
from moxlite.distribute import cluster as cluster_module
from moxlite.distribute.cluster import ClusterView, resolve


__all__ = ["DistributionSetup", "setup", "scope", "ClusterView", "resolve"]


@dataclasses.dataclass
class DistributionSetup:
    """What the training loop needs to know about distribution.

    strategy: the ``tf.distribute.Strategy`` (None in a process that only serves).
    coordinator: the ``ClusterCoordinator`` in parameter-server mode, else None.
    kind: 'default', 'mirrored', 'multi_worker_mirrored', 'parameter_server' or 'tpu'.
    role: 'single', 'chief', 'worker', 'ps' or 'coordinator'.
    task_index: index of this task within its job.
    is_chief: this process writes checkpoints, summaries and exports.
    num_workers: processes computing gradients.
    num_replicas_in_sync: replicas in one step: devices per worker x workers
        when synchronous, devices per worker under parameter servers.
    sync_replicas: synchronous (True) or asynchronous (False) training.
    serves_only: this process must call ``serve_forever()`` and never train.
    view: the resolved ``ClusterView``.
    worker0_server: worker 0's ``tf.distribute.Server``, run in this process when it is a
        coordinator started as worker 0 (``server.serve_worker0_in_process``), else None.
    """

    strategy: Any
    coordinator: Any
    kind: str
    role: str
    task_index: int
    is_chief: bool
    num_workers: int
    num_replicas_in_sync: int
    sync_replicas: bool
    serves_only: bool
    view: ClusterView
    worker0_server: Optional[Any] = None

    def serve_forever(self):
        """Run this task's server (ps / async worker) until killed."""
        from moxlite.distribute import server

        server.serve_forever(self.view)

    def describe(self):
        """Multi-line summary for ``--dry-run``."""
        view = self.view
        lines = [
            f"distribution: {self.kind}",
            f"cluster from: {cluster_module.SOURCE_NAMES[view.source]}",
            f"this process: {self.role} (task {view.task_type or 'single'}:{self.task_index}), "
            f"chief={self.is_chief}, serves_only={self.serves_only}",
            f"sync_replicas: {self.sync_replicas}",
            f"workers: {self.num_workers}, replicas in sync per step: {self.num_replicas_in_sync}",
        ]
        if view.tpu:
            lines.append(f"tpu: {view.tpu}")
        lines += ["cluster " + line for line in cluster_module.describe_jobs(view)]
        if self.kind == "parameter_server":
            lines.append("roles: chief runs the script as coordinator; worker and ps tasks serve only")
        if self.strategy is not None:
            lines.append("devices of this process: " + ", ".join(_devices_of(self.strategy)))
        else:
            lines.append(f"devices of this process: {view.num_gpus} (served)")
        if self.worker0_server is not None:
            lines.append("worker:0 is served in this process")
        return "\n".join(lines)


def _devices_of(strategy):
    try:
        return list(strategy.extended.worker_devices)
    except (RuntimeError, AttributeError):  # NotImplemented* is a RuntimeError
        # The default strategy and ParameterServerStrategy do not list devices.
        return ["(default device)" if strategy.num_replicas_in_sync == 1 else "(remote workers)"]


_CLUSTER_FLAGS = ("job_name", "ps_hosts", "worker_hosts", "chief_hosts", "cluster")
_SETUPS = {}


def setup(timeout_seconds=None, variable_partitioner="min_size", get_flag=None, environ=None,
          local_only=False):
    """Resolve the cluster from the flags / TF_CONFIG and build what this process needs.

    timeout_seconds: how long to wait for peer tasks and collectives
        (default: MOXLITE_CLUSTER_TIMEOUT or 120 s).
    variable_partitioner: sharding of variables over several ps tasks
        ('min_size', 'fixed', None or a Partitioner; see ``strategy.make_partitioner``).
    local_only: ignore the cluster (flags and TF_CONFIG) and use this process's own devices:
        evaluation, prediction and export run in one process.

    A process builds each cluster once: calling again with the same resolved cluster returns
    the same set-up (MultiWorkerMirroredStrategy can only be configured once per process).
    """
    if local_only:
        if get_flag is None:
            from moxlite.flags import flag_value
        else:
            flag_value = get_flag

        def get_flag(name):  # noqa: F811 - the local view of the same flags
            return "" if name in _CLUSTER_FLAGS else flag_value(name)

        environ = {}
    view = resolve(get_flag=get_flag, environ=environ)
    key = (repr(view), variable_partitioner if isinstance(variable_partitioner, (str, type(None))) else id(
        variable_partitioner))
    if key not in _SETUPS:
        _SETUPS[key] = _build_setup(view, timeout_seconds, variable_partitioner, environ)
    return _SETUPS[key]


def _build_setup(view, timeout_seconds, variable_partitioner, environ):
    if timeout_seconds is None:
        timeout_seconds = cluster_module.timeout_from_environ(environ)
    worker0_server = None
    if view.serves_only:
        strategy, coordinator = None, None
        replicas = view.num_gpus if view.kind == "parameter_server" else 0
    else:
        from moxlite.distribute import server, strategy as strategy_module

        if view.coordinator_spawns_worker0:
            worker0_server = server.serve_worker0_in_process(view)
            logs.get_logger().info("coordinator at %s; worker:0 served in this process at %s",
                                   view.address(), view.jobs["worker"][0])
        strategy, coordinator = strategy_module.build(view, timeout_seconds, variable_partitioner)
        replicas = strategy.num_replicas_in_sync
    return DistributionSetup(
        strategy=strategy, coordinator=coordinator, kind=view.kind, role=view.role,
        task_index=view.task_index, is_chief=view.is_chief, num_workers=view.num_workers,
        num_replicas_in_sync=replicas, sync_replicas=view.sync_replicas if view.jobs else True,
        serves_only=view.serves_only, view=view, worker0_server=worker0_server)


@contextlib.contextmanager
def scope(get_flag=None, environ=None):
    """Enter the scope of the strategy a TRAIN ``run()`` of this process will use; yields that strategy.

    Exported as ``moxlite.strategy_scope()``. A model whose variables are made before
    ``run`` (a keras-hub ``from_preset`` or constructor, a Keras model called once) must be
    made inside it to train on several replicas: ``setup()`` resolves the same flags or
    TF_CONFIG that ``run`` reads, and returns the same set-up (one per resolved cluster), so
    ``run`` trains with this very strategy object and the variables are already mirrored.
    Set the flags (``num_gpus``, the cluster flags) or TF_CONFIG before entering it.

    In a task that only serves (a parameter server, or an asynchronous worker) there is no
    strategy: the scope does nothing and yields None, and ``run`` there serves.
    """
    import tensorflow as tf

    from moxlite.distribute import prebuilt

    found = setup(get_flag=get_flag, environ=environ)
    if found.serves_only:
        yield None
        return
    with found.strategy.scope(), tf.variable_creator_scope(prebuilt.recording_creator):
        yield found.strategy
