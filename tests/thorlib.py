"""Shared pieces for the THOR tests: small models on the bundled digits, and THOR in numpy.

The numpy reference is written from thor.md's formulas, independently of
moxlite's code: its im2col walks the output positions with TensorFlow's
padding rule, its inverses are numpy's, and its gradients are hand-derived.
"""

import keras
import numpy as np
import tensorflow as tf

import moxlite as mox
from tests import runlib

SIDE = 12          # digits subsampled to 12x12 (every other pixel of the 28x28 centre crop)
FILTERS = 3
KERNEL = 3


def small_digits(count, offset=0):
    images, labels = runlib.mnist_rows(count, offset)
    images = images.reshape(-1, 28, 28)[:, 2:26:2, 2:26:2].reshape(-1, SIDE * SIDE)
    return images.astype(np.float32), labels


def tokens_of(images, length=6, vocabulary=16):
    """Token sequences from the digits: quantized pixels along the middle row."""
    row = images.reshape(-1, SIDE, SIDE)[:, SIDE // 2, 3:3 + length]
    return np.minimum((row * vocabulary).astype(np.int32), vocabulary - 1)


def conv_model_fn(padding):
    def model_fn(inputs, mode):
        x, y = inputs
        h = tf.reshape(x, [-1, SIDE, SIDE, 1])
        h = keras.layers.Conv2D(FILTERS, KERNEL, strides=2, padding=padding, activation="relu",
                                kernel_initializer=keras.initializers.GlorotUniform(seed=1),
                                bias_initializer=keras.initializers.RandomUniform(-0.1, 0.1, seed=3))(h)
        h = keras.layers.Flatten()(h)
        logits = keras.layers.Dense(10, kernel_initializer=keras.initializers.GlorotUniform(seed=2))(h)
        return runlib.spec_for(x, y, logits)
    return model_fn


def embedding_model_fn(inputs, mode):
    tokens, y = inputs
    e = keras.layers.Embedding(16, 5, embeddings_initializer=keras.initializers.RandomNormal(seed=4))(tokens)
    h = tf.reduce_mean(e, axis=1)
    logits = keras.layers.Dense(10, kernel_initializer=keras.initializers.GlorotUniform(seed=2))(h)
    loss = runlib.cross_entropy(logits, y)
    return mox.ModelSpec(loss=loss, log_info={"loss": loss})


def initial_conv_weights(padding):
    """The seeded initial weights of conv_model_fn, in creation order."""
    out = (SIDE + 1) // 2 if padding == "same" else (SIDE - KERNEL) // 2 + 1
    return [np.asarray(keras.initializers.GlorotUniform(seed=1)((KERNEL, KERNEL, 1, FILTERS))),
            np.asarray(keras.initializers.RandomUniform(-0.1, 0.1, seed=3)((FILTERS,))),
            np.asarray(keras.initializers.GlorotUniform(seed=2)((out * out * FILTERS, 10))),
            np.zeros(10, np.float32)]


def initial_embedding_weights():
    return [np.asarray(keras.initializers.RandomNormal(seed=4)((16, 5))),
            np.asarray(keras.initializers.GlorotUniform(seed=2)((5, 10))),
            np.zeros(10, np.float32)]


def thor_optimizer_fn(lr=0.05, momentum=0.9, **thor):
    def optimizer_fn():
        opt = mox.get_optimizer_fn("momentum", learning_rate=lr, momentum=momentum)()
        return mox.get_optimizer_wrapper_fn("thor", opt, **thor)()
    return optimizer_fn


def model_variables(log_dir):
    """model_fn's variables in the newest checkpoint, in creation order."""
    return runlib.checkpoint_variables(str(log_dir))


# ---- numpy THOR -------------------------------------------------------------------------------

def _same_padding(size, kernel, stride):
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return out, total // 2


def numpy_im2col(images, kernel, stride, padding):
    """[N, H, W, C] -> rows [N*Ho*Wo, kernel*kernel*C] ordered (ky, kx, c), and (Ho, Wo)."""
    n, h, w, c = images.shape
    if padding == "same":
        ho, top = _same_padding(h, kernel, stride)
        wo, left = _same_padding(w, kernel, stride)
    else:
        ho, wo, top, left = (h - kernel) // stride + 1, (w - kernel) // stride + 1, 0, 0
    rows = np.zeros((n, ho, wo, kernel, kernel, c))
    for i in range(ho):
        for j in range(wo):
            for ky in range(kernel):
                for kx in range(kernel):
                    y, x = i * stride + ky - top, j * stride + kx - left
                    if 0 <= y < h and 0 <= x < w:
                        rows[:, i, j, ky, kx, :] = images[:, y, x, :]
    return rows.reshape(n * ho * wo, -1), (ho, wo)


def block_inverse(matrix, damping_sqrt, block_size):
    size = matrix.shape[0]
    damped = matrix + damping_sqrt * np.eye(size)
    if block_size <= 0 or block_size >= size:
        return np.linalg.inv(damped)
    inverse = np.zeros_like(damped)
    for start in range(0, size, block_size):
        stop = min(start + block_size, size)
        inverse[start:stop, start:stop] = np.linalg.inv(damped[start:stop, start:stop])
    return inverse


def softmax_cross_entropy_grad(logits, labels):
    """Mean cross-entropy's gradient with respect to the logits."""
    p = runlib.softmax_probabilities(logits)
    p[np.arange(len(labels)), labels] -= 1.0
    return p / len(labels)


def _grafted(preconditioned, gradient, graft):
    if not graft:
        return preconditioned
    norm = np.linalg.norm(preconditioned)
    return preconditioned * (np.linalg.norm(gradient) / norm) if norm > 0 else np.zeros_like(preconditioned)


def numpy_thor_conv(images, labels, weights, batch, steps, lr, momentum, damping, frequency,
                    block_size, weight_decay, padding, preconditioned=("conv", "dense"), pi_damping=False,
                    graft=False):
    """Conv2D(stride 2, relu) -> Dense, THOR(momentum); ``weights`` = [conv_k, conv_b, dense_k, dense_b].

    damping: a number or a function of the step; preconditioned: which of the two kernels;
    pi_damping: K-FAC's split, pi = sqrt((tr A/dim A)/(tr G/dim G)) from the full factors;
    graft: each preconditioned kernel's P rescaled to its gradient's norm, P·||g||/||P|| (0 if P is 0)."""
    damping_at = damping if callable(damping) else (lambda step: damping)
    conv_k, conv_b, dense_k, dense_b = [w.astype(np.float64) for w in weights]
    params = [conv_k, conv_b, dense_k, dense_b]
    velocity = [np.zeros_like(p) for p in params]
    inverses = {}
    for step in range(steps):
        index = np.arange(step * batch, (step + 1) * batch) % len(labels)
        x = images[index].astype(np.float64).reshape(-1, SIDE, SIDE, 1)
        y = labels[index]
        patches, (ho, wo) = numpy_im2col(x, KERNEL, 2, padding)
        pre = patches @ conv_k.reshape(-1, FILTERS) + conv_b                   # [B*Ho*Wo, F]
        hidden = np.maximum(pre, 0).reshape(batch, -1)                         # (ho, wo, f) order
        logits = hidden @ dense_k + dense_b
        d_logits = softmax_cross_entropy_grad(logits, y)
        g_dense_k = hidden.T @ d_logits
        g_dense_b = d_logits.sum(0)
        d_hidden = (d_logits @ dense_k.T).reshape(-1, FILTERS) * (pre > 0)
        g_conv_k = (patches.T @ d_hidden).reshape(conv_k.shape)
        g_conv_b = d_hidden.sum(0)
        spatial = ho * wo
        if step % frequency == 0:
            damping = damping_at(step)
            ds_conv = d_hidden * batch                    # per-sample gradients (loss was a mean)
            ds_dense = d_logits * batch
            rows = batch * spatial
            factors = {"conv": (patches.T @ patches / rows, ds_conv.T @ ds_conv / rows, np.sqrt(damping / spatial)),
                       "dense": (hidden.T @ hidden / batch, ds_dense.T @ ds_dense / batch, np.sqrt(damping))}
            for name, (a, g, root) in factors.items():
                pi = np.sqrt((np.trace(a) / len(a)) / (np.trace(g) / len(g))) if pi_damping else 1.0
                inverses[name] = (block_inverse(a, root * pi, block_size), block_inverse(g, root / pi, block_size))
        if "conv" in preconditioned:
            a_inv, g_inv = inverses["conv"]
            g_conv_k = _grafted((a_inv @ g_conv_k.reshape(-1, FILTERS) @ g_inv / spatial).reshape(conv_k.shape),
                                g_conv_k, graft)
        if "dense" in preconditioned:
            a_inv, g_inv = inverses["dense"]
            g_dense_k = _grafted(a_inv @ g_dense_k @ g_inv, g_dense_k, graft)
        grads = [g_conv_k + weight_decay * conv_k, g_conv_b, g_dense_k + weight_decay * dense_k, g_dense_b]
        for i, (p, g) in enumerate(zip(params, grads)):
            velocity[i] = momentum * velocity[i] - lr * g
            p += velocity[i]
    return params


def numpy_thor_embedding(tokens, labels, weights, batch, steps, lr, momentum, damping, frequency):
    """Embedding -> mean over tokens -> Dense, THOR(momentum), full inverses."""
    table, dense_k, dense_b = [w.astype(np.float64) for w in weights]
    params = [table, dense_k, dense_b]
    velocity = [np.zeros_like(p) for p in params]
    vocabulary, length = table.shape[0], tokens.shape[1]
    inverses = {}
    for step in range(steps):
        index = np.arange(step * batch, (step + 1) * batch) % len(labels)
        t, y = tokens[index], labels[index]
        embedded = table[t]                                  # [B, T, D]
        hidden = embedded.mean(1)
        logits = hidden @ dense_k + dense_b
        d_logits = softmax_cross_entropy_grad(logits, y)
        g_dense_k, g_dense_b = hidden.T @ d_logits, d_logits.sum(0)
        d_embedded = np.repeat((d_logits @ dense_k.T)[:, None, :] / length, length, axis=1)
        g_table = np.zeros_like(table)
        np.add.at(g_table, t.reshape(-1), d_embedded.reshape(-1, table.shape[1]))
        if step % frequency == 0:
            sq = np.sqrt(damping)
            ds = d_embedded.reshape(-1, table.shape[1]) * batch
            rows = batch * length
            counts = np.bincount(t.reshape(-1), minlength=vocabulary) / rows
            inverses["embedding"] = (1.0 / (counts + sq), np.linalg.inv(ds.T @ ds / rows + sq * np.eye(ds.shape[1])))
            ds_dense = d_logits * batch
            inverses["dense"] = (np.linalg.inv(hidden.T @ hidden / batch + sq * np.eye(hidden.shape[1])),
                                 np.linalg.inv(ds_dense.T @ ds_dense / batch + sq * np.eye(10)))
        a_inv, g_inv = inverses["embedding"]
        g_table = a_inv[:, None] * g_table @ g_inv
        a_inv, g_inv = inverses["dense"]
        g_dense_k = a_inv @ g_dense_k @ g_inv
        for i, (p, g) in enumerate(zip(params, [g_table, g_dense_k, g_dense_b])):
            velocity[i] = momentum * velocity[i] - lr * g
            p += velocity[i]
    return params


def numpy_conv_loss(weights, images, labels, padding="same"):
    """Mean cross-entropy of conv_model_fn with ``weights`` on the given digits."""
    conv_k, conv_b, dense_k, dense_b = [w.astype(np.float64) for w in weights]
    patches, _ = numpy_im2col(images.astype(np.float64).reshape(-1, SIDE, SIDE, 1), KERNEL, 2, padding)
    hidden = np.maximum(patches @ conv_k.reshape(-1, FILTERS) + conv_b, 0).reshape(len(labels), -1)
    p = runlib.softmax_probabilities(hidden @ dense_k + dense_b)
    return float(-np.mean(np.log(p[np.arange(len(labels)), labels])))


def position_model_fn(tiled):
    """embedding_model_fn plus a position Embedding(6, 5) looked up with the ids 0..5 as [1, 6]
    (broadcast over the batch by the add, as keras-hub's ViT does) or tiled to [B, 6]."""
    def model_fn(inputs, mode):
        tokens, y = inputs
        e = keras.layers.Embedding(16, 5, embeddings_initializer=keras.initializers.RandomNormal(seed=4))(tokens)
        ids = tf.range(tokens.shape[1])[tf.newaxis]
        if tiled:
            ids = tf.tile(ids, [tf.shape(tokens)[0], 1])
        p = keras.layers.Embedding(tokens.shape[1], 5, embeddings_initializer=keras.initializers.RandomNormal(seed=5))(ids)
        h = tf.reduce_mean(e + p, axis=1)
        logits = keras.layers.Dense(10, kernel_initializer=keras.initializers.GlorotUniform(seed=2))(h)
        loss = runlib.cross_entropy(logits, y)
        return mox.ModelSpec(loss=loss, log_info={"loss": loss})
    return model_fn


def initial_position_weights(length=6):
    return [np.asarray(keras.initializers.RandomNormal(seed=4)((16, 5))),
            np.asarray(keras.initializers.RandomNormal(seed=5)((length, 5))),
            np.asarray(keras.initializers.GlorotUniform(seed=2)((5, 10))),
            np.zeros(10, np.float32)]


def numpy_thor_positions(tokens, labels, weights, batch, steps, lr, momentum, damping, frequency):
    """position_model_fn in numpy, THOR(momentum), full inverses. Every sample looks up every
    position once, so the position table's rows are per sample: B·T rows, each position counted
    B times (the tiled ids' statistics, whatever shape the ids were given in)."""
    table, positions, dense_k, dense_b = [w.astype(np.float64) for w in weights]
    params = [table, positions, dense_k, dense_b]
    velocity = [np.zeros_like(p) for p in params]
    length, width = tokens.shape[1], table.shape[1]
    sq = np.sqrt(damping)
    inverses = {}

    def embedding_inverses(ids, ds, vocabulary):
        counts = np.bincount(ids, minlength=vocabulary) / len(ids)
        return 1.0 / (counts + sq), np.linalg.inv(ds.T @ ds / len(ids) + sq * np.eye(width))

    for step in range(steps):
        index = np.arange(step * batch, (step + 1) * batch) % len(labels)
        t, y = tokens[index], labels[index]
        hidden = (table[t] + positions[np.newaxis]).mean(1)
        logits = hidden @ dense_k + dense_b
        d_logits = softmax_cross_entropy_grad(logits, y)
        g_dense_k, g_dense_b = hidden.T @ d_logits, d_logits.sum(0)
        d_rows = np.repeat((d_logits @ dense_k.T)[:, None, :] / length, length, axis=1)   # [B, T, D]
        g_table = np.zeros_like(table)
        np.add.at(g_table, t.reshape(-1), d_rows.reshape(-1, width))
        g_positions = d_rows.sum(0)
        if step % frequency == 0:
            ds = d_rows.reshape(-1, width) * batch            # per-sample rows (the loss is a mean)
            inverses["table"] = embedding_inverses(t.reshape(-1), ds, len(table))
            inverses["positions"] = embedding_inverses(np.tile(np.arange(length), batch), ds, length)
            ds_dense = d_logits * batch
            inverses["dense"] = (np.linalg.inv(hidden.T @ hidden / batch + sq * np.eye(width)),
                                 np.linalg.inv(ds_dense.T @ ds_dense / batch + sq * np.eye(10)))
        a_inv, g_inv = inverses["table"]
        g_table = a_inv[:, None] * g_table @ g_inv
        a_inv, g_inv = inverses["positions"]
        g_positions = a_inv[:, None] * g_positions @ g_inv
        a_inv, g_inv = inverses["dense"]
        g_dense_k = a_inv @ g_dense_k @ g_inv
        for i, (p, g) in enumerate(zip(params, [g_table, g_positions, g_dense_k, g_dense_b])):
            velocity[i] = momentum * velocity[i] - lr * g
            p += velocity[i]
    return params
