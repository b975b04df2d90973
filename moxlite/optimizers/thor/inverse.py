"""Damped, block-diagonal, guarded inverses of THOR's factors.

A factor F [d, d] is inverted on its diagonal blocks of ``block_size``
(MindSpore's "hardware-driven" split; 0 = one block, the full inverse), the
last block padded with the identity. Only those blocks are ever formed
(``factors.block_grams``). The inverse is kept as blocks
[d_blocks, b, b] and applied blockwise, which also bounds the per-step cost.

TensorFlow's Cholesky returns NaN (it does not raise) on a matrix that is not
positive definite, so every inversion is guarded: float32 Cholesky; if the
result is not finite, float64; if still not, float64 with ten times the
damping (plus a floor relative to the trace, for undamped factors); if still
not, the caller keeps the previous inverse. The guard reports how far it had
to go (0 = float32 worked, 1 = a retry worked, 2 = keep the previous).
"""

import tensorflow as tf


def block_layout(size, block_size):
    """(number of blocks, block side) for a factor of side ``size``."""
    if size == 0:
        return 0, 0
    if block_size <= 0 or block_size >= size:
        return 1, size
    return -(-size // block_size), block_size


def identity_padded(blocks, size):
    """Diagonal blocks [blocks, side, side] of a factor of side ``size`` whose last block is
    zero-padded beyond ``size``: the padding's diagonal set to 1 (the padded
    directions are left untouched by the inverse)."""
    count, side = blocks.shape[0], blocks.shape[-1]
    padding = count * side - size
    if not padding:
        return blocks
    diagonal = tf.concat([tf.zeros([size], blocks.dtype), tf.ones([padding], blocks.dtype)], 0)
    return blocks + tf.linalg.diag(tf.reshape(diagonal, [count, side]))


def _cholesky_inverse(blocks):
    lower = tf.linalg.cholesky(blocks)
    identity = tf.eye(blocks.shape[-1], batch_shape=[blocks.shape[0]], dtype=blocks.dtype)
    return tf.linalg.cholesky_solve(lower, identity)


def _all_finite(tensor):
    return tf.reduce_all(tf.math.is_finite(tensor))


def guarded_inverse(factor_blocks, damping_sqrt, previous):
    """Inverse blocks of ``factor_blocks + damping_sqrt * I`` (float32), and the guard's level.

    factor_blocks: [blocks, side, side] float32, the undamped diagonal blocks.
    previous: the inverse blocks to keep when every attempt fails.
    """
    side = factor_blocks.shape[-1]
    eye = tf.eye(side, batch_shape=[factor_blocks.shape[0]])
    damping_sqrt = tf.cast(damping_sqrt, tf.float32)
    first = _cholesky_inverse(factor_blocks + damping_sqrt * eye)
    input_finite = _all_finite(factor_blocks)

    def retry():
        blocks64 = tf.cast(factor_blocks, tf.float64)
        eye64 = tf.cast(eye, tf.float64)
        again = _cholesky_inverse(blocks64 + tf.cast(damping_sqrt, tf.float64) * eye64)

        def more_damping():
            trace_floor = tf.reduce_mean(tf.linalg.diag_part(blocks64), axis=-1)[:, None, None] * 1e-3 + 1e-6
            stronger = 10.0 * tf.cast(damping_sqrt, tf.float64) + trace_floor
            return _cholesky_inverse(blocks64 + stronger * eye64)

        again = tf.cond(_all_finite(again), lambda: again, more_damping)
        again32 = tf.cast(again, tf.float32)
        usable = tf.logical_and(_all_finite(again32), input_finite)
        return (tf.where(usable, again32, previous), tf.where(usable, 1, 2))

    usable = tf.logical_and(_all_finite(first), input_finite)
    return tf.cond(usable, lambda: (first, tf.constant(0)), retry)


def apply_left(inverse_blocks, matrix):
    """inverse_blocks (block-diagonal, [blocks, side, side]) times ``matrix`` [size, k]."""
    blocks, side = inverse_blocks.shape[0], inverse_blocks.shape[1]
    size, columns = matrix.shape[0], matrix.shape[1]
    padding = blocks * side - size
    if padding:
        matrix = tf.pad(matrix, [[0, padding], [0, 0]])
    if blocks == 1:
        product = tf.matmul(inverse_blocks[0], matrix)
    else:
        product = tf.reshape(tf.matmul(inverse_blocks, tf.reshape(matrix, [blocks, side, columns])),
                             [blocks * side, columns])
    return product[:size] if padding else product


def apply_right(inverse_blocks, matrix):
    """``matrix`` [k, size] times the (symmetric) block-diagonal inverse."""
    return tf.transpose(apply_left(inverse_blocks, tf.transpose(matrix)))
