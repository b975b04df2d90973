"""The run's build call of model_fn leaves the model's state as it found it.

moxlite calls model_fn once on zeros to create its variables; in TRAIN mode a BatchNorm with
training=True would take that batch of zeros as one update. The reference is Keras's update
rule in numpy, m <- momentum m + (1 - momentum) statistic, applied to the real batches only.
"""

import keras
import numpy as np
import pytest

import moxlite as mox
from tests import runlib

MOMENTUM = 0.5
BATCH = 8
STEPS = 2


def bn_net():
    net = keras.Sequential([keras.layers.Dense(4, kernel_initializer="glorot_uniform"),
                            keras.layers.BatchNormalization(momentum=MOMENTUM)])
    net.build((None, 784))
    return net


def numpy_statistics(images, kernel, bias, mean, variance, replicas=1):
    """Keras's update from each step's batch; on several replicas (statistics averaged across
    them) the mean of the replicas' batch means and of their batch variances."""
    for step in range(STEPS):
        z = images[step * BATCH:(step + 1) * BATCH].astype(np.float64) @ kernel + bias
        parts = np.split(z, replicas)
        mean = MOMENTUM * mean + (1 - MOMENTUM) * np.mean([p.mean(0) for p in parts], axis=0)
        variance = MOMENTUM * variance + (1 - MOMENTUM) * np.mean([p.var(0) for p in parts], axis=0)
    return mean, variance


def train(tmp_path, model_fn, images, labels, replicas=1):
    # A rate far below float32's resolution of the weights: the Dense kernel stays as it was,
    # so the numpy reference can use it, while the moving statistics follow the batches.
    runlib.train(tmp_path, runlib.input_fn_for(images, labels), model_fn,
                 mox.get_optimizer_fn("sgd", learning_rate=1e-30), steps=STEPS, batch_size=BATCH // replicas)


def test_a_closed_over_pretrained_batchnorm_keeps_its_statistics_through_the_build(tmp_path):
    images, labels = runlib.mnist_rows(BATCH * STEPS)
    net = bn_net()
    bn = net.layers[1]
    bn.moving_mean.assign(np.full(4, 3.0, np.float32))      # "pretrained" statistics
    bn.moving_variance.assign(np.full(4, 7.0, np.float32))
    kernel, bias = net.layers[0].kernel.numpy(), net.layers[0].bias.numpy()

    def model_fn(inputs, mode):
        x, y = inputs
        logits = keras.layers.Dense(runlib.NUM_CLASSES)(net(x, training=mode == mox.ModeKeys.TRAIN))
        return runlib.spec_for(x, y, logits)

    train(tmp_path, model_fn, images, labels)
    mean, variance = numpy_statistics(images, kernel, bias, np.full(4, 3.0), np.full(4, 7.0))
    np.testing.assert_allclose(bn.moving_mean.numpy(), mean, rtol=1e-5)
    np.testing.assert_allclose(bn.moving_variance.numpy(), variance, rtol=1e-5)
    saved = runlib.checkpoint_by_name(str(tmp_path))
    np.testing.assert_allclose(saved[bn.moving_variance.path], variance, rtol=1e-5)


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_batchnorm_built_inside_starts_from_its_initial_statistics(tmp_path, replicas):
    images, labels = runlib.mnist_rows(BATCH * STEPS)

    def model_fn(inputs, mode):
        x, y = inputs
        net = bn_net()
        logits = keras.layers.Dense(runlib.NUM_CLASSES)(net(x, training=mode == mox.ModeKeys.TRAIN))
        return runlib.spec_for(x, y, logits)

    mox.set_flag("num_gpus", replicas)
    train(tmp_path, model_fn, images, labels, replicas)
    saved = runlib.checkpoint_by_name(str(tmp_path))
    kernel = next(v for k, v in saved.items() if k.endswith("dense/kernel") and v.shape == (784, 4))
    bias = next(v for k, v in saved.items() if k.endswith("dense/bias") and v.shape == (4,))
    mean_key = next(k for k in saved if k.endswith("moving_mean"))
    variance_key = next(k for k in saved if k.endswith("moving_variance"))
    mean, variance = numpy_statistics(images, kernel, bias, np.zeros(4), np.ones(4), replicas)
    np.testing.assert_allclose(saved[mean_key], mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(saved[variance_key], variance, rtol=1e-5)
