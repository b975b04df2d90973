"""Build the ``tf.distribute`` strategy a ``ClusterView`` calls for.

=========================  ==================================================
cluster                    strategy
=========================  ==================================================
one process, one device    ``tf.distribute.get_strategy()`` (the default)
one process, N devices     ``MirroredStrategy`` over N GPUs or N logical CPUs
workers, synchronous       ``MultiWorkerMirroredStrategy`` (all-reduce)
workers + ps, async        ``ParameterServerStrategy`` + ``ClusterCoordinator``
TPU address                ``TPUStrategy`` via ``TPUClusterResolver``
=========================  ==================================================

Nothing here waits without a bound: peers are probed on plain sockets with a
deadline before TensorFlow's constructors (which wait forever) are called,
and collectives get ``CommunicationOptions(timeout_seconds=...)``.
"""

import tensorflow as tf

from moxlite import errors
from moxlite.distribute import cluster, devices

# Shard a variable across parameter servers once it exceeds this size, so that
# large embedding tables spread over every ps instead of loading one.
DEFAULT_MIN_SHARD_BYTES = 256 << 10


def cluster_resolver(view):
    """A ClusterResolver for this process's place in ``view.training_jobs()``."""
    if view.source == "tf_config" and view.kind == "multi_worker_mirrored" and "ps" not in view.jobs:
        return tf.distribute.cluster_resolver.TFConfigClusterResolver()
    spec = tf.train.ClusterSpec(view.training_jobs())
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        spec, task_type=view.task_type, task_id=view.task_index, rpc_layer="grpc")


def make_partitioner(view, variable_partitioner="min_size"):
    """How ParameterServerStrategy shards variables over the ps tasks.

    ``"min_size"`` (default): MinSizePartitioner with shards of at least
    256 KiB and at most one shard per ps; ``"fixed"``: every variable in
    exactly one shard per ps; ``None``: no sharding; or a Partitioner object.
    With a single ps there is nothing to shard and None is returned.
    """
    num_ps = len(view.jobs.get("ps", []))
    if variable_partitioner is None or num_ps < 2:
        return None
    if variable_partitioner == "min_size":
        return tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=DEFAULT_MIN_SHARD_BYTES, max_shards=num_ps)
    if variable_partitioner == "fixed":
        return tf.distribute.experimental.partitioners.FixedShardsPartitioner(num_shards=num_ps)
    if isinstance(variable_partitioner, str):
        raise errors.ClusterError(
            f"variable_partitioner={variable_partitioner!r}: use 'min_size', 'fixed', None "
            "or a tf.distribute.experimental.partitioners.Partitioner")
    return variable_partitioner


_MIRRORED_STRATEGIES = {}


def mirrored_strategy(device_names):
    """The process's one MirroredStrategy over ``device_names``.

    Every MirroredStrategy numbers its collective ops from the same starting keys, so a second
    instance over the same devices in one process (a script or test suite calling run() twice)
    reuses the first one's collective instances and fails with a shape mismatch. Reusing one
    strategy per device set avoids that (measured: the second run failed before this cache).
    """
    key = tuple(device_names)
    if key not in _MIRRORED_STRATEGIES:
        _MIRRORED_STRATEGIES[key] = tf.distribute.MirroredStrategy(list(key))
    return _MIRRORED_STRATEGIES[key]


def build(view, timeout_seconds, variable_partitioner="min_size"):
    """(strategy, coordinator) for a process that runs training code."""
    kind = view.kind
    if kind == "default":
        devices.configure_local_devices(1)
        return tf.distribute.get_strategy(), None
    if kind == "mirrored":
        return mirrored_strategy(devices.configure_local_devices(view.num_gpus)), None
    if kind == "tpu":
        return build_tpu(view.tpu), None
    if kind == "multi_worker_mirrored":
        return build_multi_worker(view, timeout_seconds), None
    return build_parameter_server(view, timeout_seconds, variable_partitioner)


def build_multi_worker(view, timeout_seconds):
    """MultiWorkerMirroredStrategy after a bounded rendezvous of the workers."""
    if view.num_gpus > 1 and not tf.config.list_physical_devices("GPU"):
        raise errors.ClusterError(
            f"--num_gpus={view.num_gpus} with synchronous multi-worker training on a machine without GPUs: "
            "MultiWorkerMirroredStrategy uses one CPU device per worker; set --num_gpus=1")
    peers = [(job, index) for job, hosts in view.training_jobs().items() for index in range(len(hosts))
             if (job, index) != (view.task_type, view.task_index)]
    listener = cluster.open_rendezvous_listener(view)
    try:
        cluster.wait_until_reachable(view, peers, timeout_seconds)
    finally:
        listener.close()
    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=timeout_seconds)
    return tf.distribute.MultiWorkerMirroredStrategy(
        cluster_resolver=cluster_resolver(view), communication_options=options)


def build_parameter_server(view, timeout_seconds, variable_partitioner="min_size"):
    """ParameterServerStrategy and its ClusterCoordinator, on the coordinator."""
    cluster.check_port_free(view)
    remote = [(job, index) for job in ("worker", "ps") for index in range(len(view.jobs[job]))]
    cluster.wait_until_reachable(view, remote, timeout_seconds)
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        cluster_resolver(view), variable_partitioner=make_partitioner(view, variable_partitioner))
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    return strategy, coordinator


def check_tpu_address(tpu):
    """A TPU is a name ('my-tpu'), 'local', or 'grpc://host:port'."""
    if tpu.startswith("grpc://"):
        cluster.parse_hosts("--tpu", tpu[len("grpc://"):])
        return
    if "://" in tpu or ":" in tpu or any(char.isspace() for char in tpu):
        raise errors.ClusterError(
            f"--tpu={tpu!r}: give a TPU name, 'local', or an address written grpc://host:port")


def build_tpu(tpu):
    """TPUStrategy for the TPU named or addressed by ``tpu`` (needs a TPU)."""
    check_tpu_address(tpu)
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)
