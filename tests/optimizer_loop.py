"""A minimal training loop for optimizer tests, following moxlite's loop contract.

Like ``moxlite.training``: the optimizer is built eagerly under the strategy's
scope, and each step runs ``strategy.run`` inside a ``tf.function``, where
each replica takes the gradient of loss / replicas and calls
``optimizer.apply_gradients`` with its own, unreduced gradients. A global
step (int64 tf.Variable) is incremented once per step after it.
"""

import keras
import numpy as np
import tensorflow as tf

from moxlite import context

NUM_CLASSES = 10


def mnist_rows(mnist_arrays, count, offset=0):
    """``count`` MNIST images flattened to rows of 784 floats, with their labels."""
    images, labels = mnist_arrays
    order = np.random.RandomState(0).permutation(len(labels))[offset:offset + count]
    return images[order].reshape(count, -1), labels[order]


def linear_model(seed=1):
    """A softmax regression (one Dense layer) with small random kernel and zero bias."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.Input((784,)),
        keras.layers.Dense(NUM_CLASSES, kernel_initializer=keras.initializers.RandomNormal(stddev=0.05, seed=seed)),
    ])


def mean_cross_entropy(model, images, labels):
    logits = model(images)
    return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))


class Trainer:
    """Owns a model, an optimizer and a traced step; ``step(images, labels)`` trains once."""

    def __init__(self, strategy, optimizer_fn, model_fn=linear_model, run_context=None):
        self.strategy = strategy
        with strategy.scope():
            self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False)
            self.model = model_fn()
            run_context = run_context or context.RunContext(
                global_step=self.global_step, global_batch_size=0, num_replicas=strategy.num_replicas_in_sync,
                strategy=strategy)
            run_context.global_step = self.global_step
            with context.activate(run_context):
                self.optimizer = optimizer_fn()
            self.optimizer.build(self.model.trainable_variables)
        self._step = tf.function(self._distributed_step)

    def _replica_step(self, images, labels):
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            replicas = tf.distribute.get_replica_context().num_replicas_in_sync
            loss = mean_cross_entropy(self.model, images, labels) / replicas
        grads = tape.gradient(loss, variables)
        self.optimizer.apply_gradients(zip(grads, variables))

    def _distributed_step(self, images, labels):
        self.strategy.run(self._replica_step, args=(images, labels))
        self.global_step.assign_add(1)

    def step(self, images, labels):
        """One step on ``images``/``labels`` split into equal contiguous shares, one per replica."""
        replicas = self.strategy.num_replicas_in_sync
        share = len(labels) // replicas
        if replicas == 1:
            self._step(tf.constant(images), tf.constant(labels))
            return
        images, labels = self.strategy.experimental_distribute_values_from_function(
            lambda ctx: (tf.constant(images[ctx.replica_id_in_sync_group * share:][:share]),
                         tf.constant(labels[ctx.replica_id_in_sync_group * share:][:share])))
        self._step(images, labels)

    def train(self, images, labels, batch_size):
        """Consecutive steps over ``images`` in batches of ``batch_size``."""
        for start in range(0, len(labels), batch_size):
            self.step(images[start:start + batch_size], labels[start:start + batch_size])
        return self.weights()

    def weights(self):
        return [v.numpy() for v in self.model.trainable_variables]


def max_difference(weights_a, weights_b):
    return max(float(np.abs(a - b).max()) for a, b in zip(weights_a, weights_b))
