"""The local devices a worker trains on, from ``num_gpus``.

With GPUs, the first ``num_gpus`` GPUs are used. Without GPUs,
``num_gpus=N > 1`` splits the CPU into N logical devices, so that two
logical CPUs stand in for two GPUs (same replica semantics, no speed-up).
The split must happen before TensorFlow initialises its runtime; if the
runtime is already up with fewer logical CPUs, the error says how to fix it.
"""

import tensorflow as tf

from moxlite import errors


def configure_local_devices(num_gpus):
    """Names of the ``num_gpus`` local devices replicas run on ("/gpu:0" or "/cpu:0" ...).

    ``num_gpus`` comes from a checked ClusterView (moxlite.distribute.cluster.resolve).
    """
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        if len(gpus) < num_gpus:
            raise errors.ClusterError(
                f"--num_gpus={num_gpus}: this machine has {len(gpus)} GPU(s); "
                f"set --num_gpus to at most {len(gpus)}")
        return [f"/gpu:{index}" for index in range(num_gpus)]
    if num_gpus > 1:
        _split_cpu(num_gpus)
    return [f"/cpu:{index}" for index in range(num_gpus)]


def _split_cpu(count):
    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu)
    if current is not None and len(current) >= count:
        return
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
    except RuntimeError:
        have = len(tf.config.list_logical_devices("CPU"))
        if have < count:
            raise errors.ClusterError(
                f"--num_gpus={count}: no GPU here, so the CPU must be split into {count} logical devices, "
                f"but TensorFlow is already initialised with {have}; set num_gpus before any TensorFlow "
                "op runs (on the command line, or call moxlite.distribute.setup() first)") from None
