"""``statistics: kfac_reduce``'s factor sums (``factors.local_sums`` with ``reduce``) against numpy
written from K-FAC reduce's definition, on a tiny masked sequence: per example, the mean of its
reached input rows and the sum of its ds rows, one outer product each, N the examples with a
reached row; a replica split adds up to the whole batch; a layer without a sequence axis, and an
Embedding, keep ``kfac``'s (expand) sums exactly."""

import numpy as np
import pytest
import tensorflow as tf

from moxlite.optimizers.thor import factors
from moxlite.optimizers.thor import inverse as thor_inverse

D_IN, D_OUT, SCALE = 6, 5, 2.5


def _sequence(seed=0, examples=4, length=5, unreached=(1,)):
    """inputs [examples, length, D_IN], output gradients [examples, length, D_OUT] whose zero rows the
    loss does not reach: some rows of every example, and all of those in ``unreached``."""
    rng = np.random.default_rng(seed)
    inputs = rng.normal(size=(examples, length, D_IN)).astype(np.float32)
    gradients = rng.normal(size=(examples, length, D_OUT)).astype(np.float32)
    reached = rng.random((examples, length)) < 0.5
    reached[:, 0] = True                      # every example has a reached row ...
    reached[list(unreached)] = False          # ... except these
    return inputs, gradients * reached[..., None]


def _numpy_reduce(inputs, gradients, scale):
    """(sum_n a_n a_n^T, sum_n g_n g_n^T, N) in float64, from the definition: for each example n with
    a reached row (output gradient not all zero), a_n = the mean of those rows' inputs, g_n = the sum
    of their output gradients times ``scale``."""
    a_sum, g_sum, count = np.zeros((D_IN, D_IN)), np.zeros((D_OUT, D_OUT)), 0
    for x, s in zip(inputs.reshape(len(inputs), -1, D_IN), gradients.reshape(len(gradients), -1, D_OUT)):
        x, s = x.astype(np.float64), s.astype(np.float64) * scale
        rows = np.any(s != 0, axis=1)
        if not rows.any():
            continue
        a, g = x[rows].mean(axis=0), s[rows].sum(axis=0)
        a_sum += np.outer(a, a)
        g_sum += np.outer(g, g)
        count += 1
    return a_sum, g_sum, count


def _sums(kind, inputs, gradients, reduce, block_size=0, d_in=D_IN, d_out=D_OUT):
    """local_sums of one call as (A blocks, G blocks, rows), numpy."""
    geometry = factors.Geometry(kind, d_in, d_out, (d_in, d_out))
    a_layout, g_layout = thor_inverse.block_layout(d_in, block_size), thor_inverse.block_layout(d_out, block_size)
    call = factors.Call(tf.constant(inputs), tf.constant(gradients), tf.constant(len(inputs)))
    a, g, rows = factors.local_sums(geometry, call, tf.constant(SCALE), a_layout, g_layout, reached_only=True,
                                    reduce=reduce)
    return [p.numpy() for p in a], [p.numpy() for p in g], float(rows)


def _full(pieces, size):
    """The block-diagonal matrix of ``pieces`` as ``factors.piece_shapes`` lists them."""
    blocks = [block for piece in pieces for block in (piece if piece.ndim == 3 else piece[None])]
    matrix, start = np.zeros((size, size)), 0
    for block in blocks:
        matrix[start:start + len(block), start:start + len(block)] = block
        start += len(block)
    assert start == size
    return matrix


def _blocks_of(matrix, block_size):
    """``matrix`` kept to its diagonal blocks of ``block_size`` (all of it for 0)."""
    if not block_size:
        return matrix
    kept = np.zeros_like(matrix)
    for start in range(0, len(matrix), block_size):
        part = slice(start, start + block_size)
        kept[part, part] = matrix[part, part]
    return kept


@pytest.mark.parametrize("kind", ["Dense", "EinsumDense"])
@pytest.mark.parametrize("block_size", [0, 4])
def test_reduce_sums_equal_numpy_per_example_mean_inputs_and_summed_gradients(kind, block_size):
    inputs, gradients = _sequence()
    a, g, rows = _sums(kind, inputs, gradients, reduce=True, block_size=block_size)
    a_want, g_want, count = _numpy_reduce(inputs, gradients, SCALE)
    assert rows == count == 3                 # 4 examples, one with no reached row
    np.testing.assert_allclose(_full(a, D_IN), _blocks_of(a_want, block_size), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_full(g, D_OUT), _blocks_of(g_want, block_size), rtol=1e-5, atol=1e-5)
    # ... and they are not expand's: the per-row outer products over the reached rows.
    a_expand, g_expand, rows_expand = _sums(kind, inputs, gradients, reduce=False, block_size=block_size)
    assert rows_expand > rows
    assert np.abs(_full(g_expand, D_OUT) - _full(g, D_OUT)).max() > 0.1 * np.abs(_full(g, D_OUT)).max()


def test_reduce_over_several_sharing_axes_treats_them_as_one_sequence():
    """An EinsumDense input [B, T, heads, width] contracted over its last two axes (an attention output
    projection): each example's rows are its T positions."""
    inputs, gradients = _sequence(seed=1, length=6)
    heads = inputs.reshape(4, 6, 2, 3)
    a, g, rows = _sums("EinsumDense", heads, gradients, reduce=True)
    a_want, g_want, count = _numpy_reduce(inputs, gradients, SCALE)
    assert rows == count
    np.testing.assert_allclose(_full(a, D_IN), a_want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_full(g, D_OUT), g_want, rtol=1e-5, atol=1e-5)
    # A sequence of 3 x 2 positions per example: the same examples, the same sums.
    a_2d, g_2d, rows_2d = _sums("EinsumDense", inputs.reshape(4, 3, 2, D_IN), gradients.reshape(4, 3, 2, D_OUT),
                                reduce=True)
    assert rows_2d == rows
    np.testing.assert_allclose(_full(a_2d, D_IN), _full(a, D_IN), rtol=1e-6, atol=1e-7)


def test_replica_sums_add_up_to_the_whole_batch():
    """Two replicas with half the examples each (one of them the example no row of which is reached):
    their sums, added as the all-reduce adds them, equal one replica's over the whole batch."""
    inputs, gradients = _sequence(seed=2, examples=6, unreached=(1,))
    whole = _sums("Dense", inputs, gradients, reduce=True)
    halves = [_sums("Dense", inputs[part], gradients[part], reduce=True) for part in (slice(0, 3), slice(3, 6))]
    assert [half[2] for half in halves] == [2.0, 3.0] and whole[2] == 5.0
    for index in (0, 1):
        added = [left + right for left, right in zip(halves[0][index], halves[1][index])]
        for got, want in zip(added, whole[index]):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_without_a_sequence_axis_reduce_is_kfac_exactly():
    """Inputs [B, d]: one row per example, so the mean and the sum over it are the row itself."""
    inputs, gradients = _sequence(seed=3, examples=7, length=1, unreached=(2, 5))
    inputs, gradients = inputs[:, 0], gradients[:, 0]
    reduced, expanded = _sums("Dense", inputs, gradients, True), _sums("Dense", inputs, gradients, False)
    assert reduced[2] == expanded[2] == 5.0
    for got, want in zip(reduced[0] + reduced[1], expanded[0] + expanded[1]):
        np.testing.assert_array_equal(got, want)


def test_embedding_keeps_expand_under_reduce():
    """An Embedding's A stays the reached ids' counts (a diagonal), its G expand's, its rows the reached rows."""
    ids = np.array([[3, 1, 4, 1], [5, 9, 2, 6]], np.int32)
    gradients = np.random.default_rng(4).normal(size=(2, 4, D_OUT)).astype(np.float32)
    gradients[1, 2:] = 0.0
    reduced = _sums("Embedding", ids, gradients, True, d_in=10)
    expanded = _sums("Embedding", ids, gradients, False, d_in=10)
    assert reduced[2] == expanded[2] == 6.0
    np.testing.assert_array_equal(reduced[0][0], np.bincount([3, 1, 4, 1, 5, 9], minlength=10))
    for got, want in zip(reduced[1], expanded[1]):
        np.testing.assert_array_equal(got, want)
