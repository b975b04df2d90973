"""Shared test set-up: two logical CPU devices stand in for two GPUs.

The logical devices must be configured before TensorFlow initialises its
runtime, so this happens at import time, before any test module runs.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

NUM_LOGICAL_DEVICES = 2

_cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    _cpu, [tf.config.LogicalDeviceConfiguration()] * NUM_LOGICAL_DEVICES)


@pytest.fixture
def two_device_strategy():
    """The MirroredStrategy over the two logical CPU devices (the one moxlite.run uses too)."""
    from moxlite.distribute.strategy import mirrored_strategy

    return mirrored_strategy(["/cpu:0", "/cpu:1"])


@pytest.fixture(autouse=True)
def _fresh_flags_and_keras():
    """Every test starts from default flags and fresh Keras names."""
    from moxlite import flags
    import keras

    flags.reset_flags()
    keras.backend.clear_session()
    yield
    flags.reset_flags()


@pytest.fixture(scope="session")
def mnist_arrays():
    """The bundled MNIST sample, as float32 images in [0, 1] and int32 labels."""
    from moxlite.data import mnist

    images, labels = mnist.load_arrays()
    return images.astype(np.float32) / 255.0, labels.astype(np.int32)


@pytest.fixture
def launches():
    """Start local clusters with tools/launch_local.py: ``launch(launcher_args, command, timeout)``.

    Every cluster started is killed (process groups included) when the test ends.
    """
    from tests import distlib

    started = []

    def launch(args, command, timeout):
        started.append(distlib.Launch(args, command, timeout))
        return started[-1]

    yield launch
    for one in started:
        one.kill()


# Under pytest-xdist (the README's test command: -n 2 --dist loadgroup), the tests that
# start a multi-process cluster on loopback run one at a time, in one xdist group, while
# the other workers take the rest. Two clusters at once on two cores would each run at
# half speed against their bounded waits. A test is in the group if it uses the
# `launches` fixture or is marked `cluster` (it starts one through tests.distlib itself).
CLUSTER_GROUP = "clusters"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "launches" in item.fixturenames or item.get_closest_marker("cluster"):
            item.add_marker(pytest.mark.xdist_group(CLUSTER_GROUP))
