"""BatchNorm's moving statistics on 2 replicas x 4 against 1 x 8 (moxlite/distribute/averaged_state.py).

Keras creates them without an aggregation, so each replica kept the statistics of its own
half of every batch and the checkpoint held replica 0's (the moving mean 0.37 off the
single-device run here). moxlite now creates them with aggregation MEAN: the replicas hold one
value, the moving mean is the single-device one, and the moving variance is the mean of the
replicas' batch variances. Keras's BatchNormalization(synchronized=True) gives the
single-device variance too. BatchNorm sits on the inputs, so its batch statistics depend on
the data alone and numpy computes them.

Tolerances: each statistic is a sum of at most 8 float32 values of magnitude below 20 and 4
momentum steps; a few ulps (6e-8 relative) per operation stay under 1e-6 relative, and
rtol=1e-5 leaves a tenfold margin. The gap asserted apart is above 0.1.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from tests import runlib

MOMENTUM = 0.5
STEPS = 4
GLOBAL_BATCH = 8
RTOL = 1e-5
RNG = np.random.RandomState(0)
FEATURES = (3.0 + 2.0 * RNG.randn(GLOBAL_BATCH * STEPS, 6)).astype(np.float32)
LABELS = RNG.randint(0, 3, GLOBAL_BATCH * STEPS).astype(np.int32)


def input_fn(mode):
    return tf.data.Dataset.from_tensor_slices((FEATURES, LABELS)).repeat()


def network(synchronized):
    return keras.Sequential([
        keras.Input((6,)),
        keras.layers.BatchNormalization(momentum=MOMENTUM, synchronized=synchronized, name="bn"),
        keras.layers.Dense(3, kernel_initializer=keras.initializers.GlorotUniform(seed=2), name="head"),
    ])


def spec(net, inputs):
    features, labels = inputs
    logits = net(features, training=True)
    loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))
    return mox.ModelSpec(loss=loss, log_info={"loss": loss})


def built_inside(synchronized):
    return lambda inputs, mode: spec(network(synchronized), inputs)


def train(log_dir, num_gpus, model_fn):
    mox.set_flag("num_gpus", num_gpus)
    runlib.train(log_dir, input_fn, model_fn, mox.get_optimizer_fn("sgd", learning_rate=0.1), steps=STEPS,
                 batch_size=GLOBAL_BATCH // num_gpus)
    return runlib.checkpoint_by_name(str(log_dir))


def numpy_moving_statistics(num_replicas):
    """Keras's update, m <- momentum m + (1 - momentum) batch statistic, of the mean over replicas
    of each replica's batch mean and (biased) variance; one replica sees the global batch.

    The run's build call of model_fn leaves the statistics at their initial values
    (tests/training/test_build_call_state.py).
    """
    mean = np.zeros(6)
    variance = np.ones(6)
    for step in range(STEPS):
        batch = FEATURES[step * GLOBAL_BATCH:(step + 1) * GLOBAL_BATCH].astype(np.float64)
        parts = np.split(batch, num_replicas)
        mean = MOMENTUM * mean + (1 - MOMENTUM) * np.mean([p.mean(0) for p in parts], axis=0)
        variance = MOMENTUM * variance + (1 - MOMENTUM) * np.mean([p.var(0) for p in parts], axis=0)
    return mean, variance


@pytest.fixture(scope="module")
def single_device(tmp_path_factory):
    return train(tmp_path_factory.mktemp("one"), 1, built_inside(synchronized=False))


def test_one_device_follows_the_numpy_update(single_device):
    mean, variance = numpy_moving_statistics(1)
    np.testing.assert_allclose(single_device["sequential/bn/moving_mean"], mean, rtol=RTOL)
    np.testing.assert_allclose(single_device["sequential/bn/moving_variance"], variance, rtol=RTOL)


def test_two_replicas_hold_the_single_device_moving_mean(single_device, tmp_path):
    two = train(tmp_path, 2, built_inside(synchronized=False))
    np.testing.assert_allclose(two["sequential/bn/moving_mean"], single_device["sequential/bn/moving_mean"],
                               rtol=RTOL)
    # The variance is the mean of the replicas' batch variances: the spread of their means is left out.
    _, replica_variance = numpy_moving_statistics(2)
    np.testing.assert_allclose(two["sequential/bn/moving_variance"], replica_variance, rtol=RTOL)
    assert np.abs(replica_variance - single_device["sequential/bn/moving_variance"]).max() > 0.1


def test_replicas_of_a_model_built_in_strategy_scope_hold_one_value(single_device, tmp_path):
    mox.set_flag("num_gpus", 2)
    with mox.strategy_scope():
        net = network(synchronized=False)
    train(tmp_path, 2, lambda inputs, mode: spec(net, inputs))
    for variable in (net.get_layer("bn").moving_mean, net.get_layer("bn").moving_variance):
        first, second = (component.numpy() for component in variable.value.values)
        np.testing.assert_allclose(first, second, rtol=RTOL)   # averaged back at the end of each call
    np.testing.assert_allclose(net.get_layer("bn").moving_mean.numpy(),
                               single_device["sequential/bn/moving_mean"], rtol=RTOL)


def test_synchronized_batchnorm_on_two_replicas_equals_one_device(tmp_path):
    one = train(tmp_path / "one", 1, built_inside(synchronized=True))
    two = train(tmp_path / "two", 2, built_inside(synchronized=True))
    assert sorted(one) == sorted(two)
    for key in one:
        np.testing.assert_allclose(two[key], one[key], rtol=RTOL, atol=1e-7, err_msg=key)
    mean, variance = numpy_moving_statistics(1)
    np.testing.assert_allclose(two["sequential/bn/moving_variance"], variance, rtol=RTOL)
