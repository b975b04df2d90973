"""Shared pieces for tests that drive ``moxlite.run`` on the bundled MNIST sample.

The reference model is softmax regression, whose SGD/momentum steps a few lines
of numpy reproduce exactly; small MLPs check what numpy cannot easily follow
against another moxlite run (one device vs two, interrupted vs not).
"""

import hashlib
import os

import keras
import numpy as np
import tensorflow as tf

import moxlite as mox

NUM_FEATURES = 784
NUM_CLASSES = 10


def mnist_rows(count, offset=0):
    """``count`` MNIST rows as float32 [count, 784] in [0, 1] and int32 labels, shuffled once."""
    from moxlite.data import mnist

    (images, labels), _ = mnist.split(validation_fraction=0.2, seed=0)
    rows = images.reshape(-1, NUM_FEATURES)[offset:offset + count]
    return rows, labels[offset:offset + count]


def input_fn_for(images, labels, repeat=True, shuffle_seed=None):
    """An input_fn over the given arrays (single samples: auto_batch)."""

    def input_fn(mode):
        dataset = tf.data.Dataset.from_tensor_slices((images, labels))
        if shuffle_seed is not None:
            dataset = dataset.shuffle(len(labels), seed=shuffle_seed, reshuffle_each_iteration=True)
        return dataset.repeat() if repeat and mode == mox.ModeKeys.TRAIN else dataset

    return input_fn


def accuracy_of(logits, labels):
    predicted = tf.argmax(logits, axis=1, output_type=tf.int32)
    return tf.reduce_mean(tf.cast(tf.equal(predicted, tf.cast(labels, tf.int32)), tf.float32))


def cross_entropy(logits, labels):
    return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))


def spec_for(images, labels, logits):
    loss = cross_entropy(logits, labels)
    return mox.ModelSpec(
        loss=loss,
        log_info={"loss": loss, "accuracy": accuracy_of(logits, labels)},
        output_info={"logits": logits},
        export_spec=mox.ExportSpec(inputs_dict={"images": images}, outputs_dict={"logits": logits}))


def softmax_model_fn(inputs, mode):
    """Style 2: Keras layers built inside model_fn (zeros: a numpy-reproducible start)."""
    images, labels = inputs
    logits = keras.layers.Dense(NUM_CLASSES, kernel_initializer="zeros", bias_initializer="zeros")(images)
    return spec_for(images, labels, logits)


def mlp_model_fn(inputs, mode):
    """A small MLP with seeded initialisers, so separate runs start from the same weights."""
    images, labels = inputs
    hidden = keras.layers.Dense(32, activation="relu",
                                kernel_initializer=keras.initializers.GlorotUniform(seed=1))(images)
    logits = keras.layers.Dense(NUM_CLASSES, kernel_initializer=keras.initializers.GlorotUniform(seed=2))(hidden)
    return spec_for(images, labels, logits)


def train(log_dir, input_fn, model_fn, optimizer_fn, *, steps, batch_size=None, **arguments):
    """``mox.run`` in TRAIN mode: ``steps`` steps of ``input_fn``'s batches of ``batch_size``
    samples (per replica) through ``model_fn`` and ``optimizer_fn``, into ``log_dir``.

    The tests' one way to train: every other argument of ``mox.run`` (log cadence,
    checkpoints, ``jit_compile`` ...) is passed as given. Returns ``mox.run``'s result.
    """
    return mox.run(input_fn=input_fn, model_fn=model_fn, optimizer_fn=optimizer_fn, run_mode=mox.ModeKeys.TRAIN,
                   batch_size=batch_size, log_dir=str(log_dir), max_number_of_steps=steps, **arguments)


def checkpoint_variables(log_dir):
    """model_fn's variables from the newest checkpoint in ``log_dir``, in creation order
    (the order the checkpoint records next to its name-keyed variables)."""
    return list(checkpoint_by_name(log_dir).values())


def checkpoint_by_name(log_dir):
    """{stable name: value} of model_fn's variables in the newest checkpoint, in creation order."""
    from moxlite.training.state.checkpoints import ORDER_KEY

    reader = tf.train.load_checkpoint(log_dir)
    order = reader.get_tensor(f"{ORDER_KEY}/.ATTRIBUTES/VARIABLE_VALUE")
    escaped = {k: k for k in reader.get_variable_to_shape_map()}
    result = {}
    for key in (name.decode() for name in order):
        # TF writes '.' as '..' and '/' as '.S' in object names.
        stored = "model/" + key.replace(".", "..").replace("/", ".S") + "/.ATTRIBUTES/VARIABLE_VALUE"
        result[key] = reader.get_tensor(escaped[stored])
    return result


def checkpoint_step(log_dir):
    return int(tf.train.load_checkpoint(log_dir).get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE"))


def softmax_probabilities(logits):
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


def numpy_softmax_regression(images, labels, batch_size, num_steps, learning_rate, momentum=0.0,
                             clip=0.0, clip_type="global_norm"):
    """Weights after ``num_steps`` of (momentum) SGD on mean cross-entropy, batches in order.

    Keras's SGD with momentum: v = momentum * v - lr * g; w += v. With ``clip``, gradients
    are first scaled to norm ``clip`` when larger: jointly (global_norm) or each on its own.
    ``images`` are the regression's inputs: MNIST rows, or features a frozen layer computed.
    """
    kernel = np.zeros((images.shape[1], NUM_CLASSES), np.float64)
    bias = np.zeros(NUM_CLASSES, np.float64)
    velocity_k, velocity_b = np.zeros_like(kernel), np.zeros_like(bias)
    count = len(labels)
    for step in range(num_steps):
        index = np.arange(step * batch_size, (step + 1) * batch_size) % count
        x, y = images[index].astype(np.float64), labels[index]
        probabilities = softmax_probabilities(x @ kernel + bias)
        probabilities[np.arange(batch_size), y] -= 1.0
        grad_k = x.T @ probabilities / batch_size
        grad_b = probabilities.mean(axis=0)
        if clip and clip_type == "global_norm":
            norm = np.sqrt(np.sum(grad_k ** 2) + np.sum(grad_b ** 2))
            grad_k, grad_b = (grad_k * clip / norm, grad_b * clip / norm) if norm > clip else (grad_k, grad_b)
        elif clip:
            grad_k = grad_k * min(1.0, clip / np.linalg.norm(grad_k))
            grad_b = grad_b * min(1.0, clip / np.linalg.norm(grad_b))
        velocity_k = momentum * velocity_k - learning_rate * grad_k
        velocity_b = momentum * velocity_b - learning_rate * grad_b
        kernel += velocity_k
        bias += velocity_b
    return kernel, bias


def get_variable_softmax_model_fn(weight_name="kernel", bias_name="bias"):
    """A model_fn of softmax regression on ``tf.compat.v1.get_variable`` variables (zeros), named
    as given: the TF1 style of model_fn, whose variables are not Keras variables."""
    def model_fn(inputs, mode):
        images, labels = inputs
        weights = tf.compat.v1.get_variable(weight_name, shape=[NUM_FEATURES, NUM_CLASSES],
                                            initializer=tf.compat.v1.zeros_initializer())
        bias = tf.compat.v1.get_variable(bias_name, shape=[NUM_CLASSES],
                                         initializer=tf.compat.v1.zeros_initializer())
        return spec_for(images, labels, tf.matmul(images, weights) + bias)

    return model_fn


def tree_bytes(path):
    """{relative path: sha256} of every file below ``path`` (byte-for-byte state)."""
    state = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            with open(full, "rb") as handle:
                state[os.path.relpath(full, path)] = hashlib.sha256(handle.read()).hexdigest()
    return state


def directory_state(path):
    """File names, sizes and modification times below ``path`` (to prove nothing was written)."""
    state = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            info = os.stat(full)
            state[os.path.relpath(full, path)] = (info.st_size, info.st_mtime_ns)
    return state


@tf.custom_gradient
def poison_gradient(values, poison):
    """Identity forward; backward, an infinite gradient for the samples with poison > 0, so
    the loss stays finite while the gradient does not (as in a float16 overflow)."""
    def gradient(upstream):
        factor = tf.where(poison[:, None] > 0, tf.constant(np.inf, upstream.dtype), tf.ones_like(upstream))
        return upstream * factor, tf.zeros_like(poison)
    return tf.identity(values), gradient
