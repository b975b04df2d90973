"""lars against an independent numpy implementation of You et al. 2017 with momentum."""

import numpy as np
import pytest
import tensorflow as tf

from moxlite.optimizers import get_optimizer_fn, get_optimizer_wrapper_fn
from moxlite.optimizers.lars import DEFAULT_EXCLUDE
from tests.optimizer_loop import Trainer, max_difference, mnist_rows

LEARNING_RATE, MOMENTUM, RATIO, WEIGHT_DECAY = 0.5, 0.9, 0.02, 0.001


def _numpy_gradients(kernel, bias, images, labels):
    logits = images @ kernel + bias
    logits -= logits.max(axis=1, keepdims=True)
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    probabilities[np.arange(len(labels)), labels] -= 1.0
    dlogits = probabilities / len(labels)
    return images.T @ dlogits, dlogits.sum(axis=0)


def _numpy_lars_momentum(weights, batches, excluded):
    """trust = ratio*|w|/(|g|+wd*|w|), 1 if a norm is 0; v = mu*v - lr*trust*(g+wd*w); w += v."""
    weights = [w.astype(np.float64) for w in weights]
    velocities = [np.zeros_like(w) for w in weights]
    for images, labels in batches:
        grads = _numpy_gradients(weights[0], weights[1], images.astype(np.float64), labels)
        for i, (w, g) in enumerate(zip(weights, grads)):
            if not excluded[i]:
                w_norm, g_norm = np.linalg.norm(w), np.linalg.norm(g)
                trust = RATIO * w_norm / (g_norm + WEIGHT_DECAY * w_norm) if w_norm > 0 and g_norm > 0 else 1.0
                g = trust * (g + WEIGHT_DECAY * w)
            velocities[i] = MOMENTUM * velocities[i] - LEARNING_RATE * g
            weights[i] = w + velocities[i]
    return weights


def _lars_fn(exclude):
    return get_optimizer_wrapper_fn("lars", get_optimizer_fn("momentum", LEARNING_RATE, momentum=MOMENTUM),
                                    ratio=RATIO, weight_decay=WEIGHT_DECAY, exclude=exclude)


@pytest.mark.parametrize("exclude, excluded", [(DEFAULT_EXCLUDE, [False, True]), ((), [False, False])])
def test_lars_momentum_equals_numpy_over_several_steps(mnist_arrays, exclude, excluded):
    images, labels = mnist_rows(mnist_arrays, 128)
    batches = [(images[s:s + 32], labels[s:s + 32]) for s in range(0, 128, 32)]
    trainer = Trainer(tf.distribute.get_strategy(), _lars_fn(exclude))
    expected = _numpy_lars_momentum(trainer.weights(), batches, excluded)
    for batch in batches:
        trainer.step(*batch)
    # float32 against float64 over 4 steps.
    assert max_difference(trainer.weights(), expected) < 2e-6


def test_lars_norms_are_of_the_all_reduced_gradient(mnist_arrays, two_device_strategy):
    images, labels = mnist_rows(mnist_arrays, 128)
    one = Trainer(tf.distribute.get_strategy(), _lars_fn(()))
    two = Trainer(two_device_strategy, _lars_fn(()))
    expected = _numpy_lars_momentum(one.weights(), [(images[s:s + 64], labels[s:s + 64]) for s in (0, 64)],
                                    [False, False])
    # Each replica sees 32 rows of each 64-row step; per-replica norms would differ.
    assert max_difference(one.train(images, labels, 64), expected) < 2e-6
    assert max_difference(two.train(images, labels, 64), expected) < 2e-6


def test_trust_ratio_is_one_when_a_norm_is_zero():
    lars = get_optimizer_wrapper_fn("lars", get_optimizer_fn("sgd", 0.1))()
    zeros, ones = tf.zeros([3]), tf.ones([3])
    assert float(lars.trust_ratio(ones, zeros)) == 1.0
    assert float(lars.trust_ratio(zeros, ones)) == 1.0
    w, g = tf.constant([3.0, 4.0]), tf.constant([0.0, 1.0])
    assert float(lars.trust_ratio(g, w)) == pytest.approx(0.001 * 5 / (1 + 0.0001 * 5))
