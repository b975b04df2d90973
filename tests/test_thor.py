"""THOR through moxlite.run against numpy references of its update (thor.md's formulas)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite.optimizers import thor_factors
from tests import runlib, thorlib

BATCH = 16


def _train(log_dir, model_fn, inputs, labels, optimizer_fn, steps, batch=BATCH):
    return mox.run(input_fn=runlib.input_fn_for(inputs, labels), model_fn=model_fn, optimizer_fn=optimizer_fn,
                   run_mode=mox.ModeKeys.TRAIN, batch_size=batch, log_dir=str(log_dir),
                   max_number_of_steps=steps, log_every_n_steps=100)


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_conv_and_dense_updates_equal_numpy_over_refresh_and_stale_steps(tmp_path, padding):
    """7 steps at frequency 3: refreshes at updates 0, 3, 6, stale inverses in between;
    64-blocks: the Dense A factor (d_in 108 same, 75 valid) is inverted as two diagonal blocks."""
    images, labels = thorlib.small_digits(BATCH * 7)
    settings = dict(lr=0.05, momentum=0.9, damping=0.05, frequency=3, block_size=64, weight_decay=5e-4)
    optimizer_fn = thorlib.thor_optimizer_fn(**settings)
    start = thorlib.initial_conv_weights(padding)
    _train(tmp_path / "thor", thorlib.conv_model_fn(padding), images, labels, optimizer_fn, 7)
    trained = thorlib.model_variables(tmp_path / "thor")
    expected = thorlib.numpy_thor_conv(images, labels, start, BATCH, 7, padding=padding, **settings)
    assert not np.allclose(start[2], trained[2], atol=1e-3)
    for got, want in zip(trained, expected):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_embedding_update_equals_numpy(tmp_path):
    images, labels = thorlib.small_digits(BATCH * 5)
    tokens = thorlib.tokens_of(images)
    settings = dict(lr=0.1, momentum=0.9, damping=0.03, frequency=2)
    _train(tmp_path / "thor", thorlib.embedding_model_fn, tokens, labels,
           thorlib.thor_optimizer_fn(block_size=0, **settings), 5)
    start = thorlib.initial_embedding_weights()
    trained = thorlib.model_variables(tmp_path / "thor")
    expected = thorlib.numpy_thor_embedding(tokens, labels, start, BATCH, 5, **settings)
    assert not np.allclose(start[0], trained[0], atol=1e-3)
    for got, want in zip(trained, expected):
        np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("padding,strides,dilation,kernel", [
    ("same", 2, 1, (5, 3)), ("valid", 2, 1, (5, 3)), ("same", 1, 2, (3, 3)), ("valid", 1, 1, (1, 1))])
def test_im2col_rows_times_reshaped_kernel_equal_the_conv2d_output(padding, strides, dilation, kernel):
    images, _ = thorlib.small_digits(4)
    x = tf.constant(np.stack([images, images[::-1]], -1).reshape(4, thorlib.SIDE, thorlib.SIDE, 2))
    layer = keras.layers.Conv2D(3, kernel, strides=strides, padding=padding, dilation_rate=dilation,
                                use_bias=False)
    out = layer(x)
    record = type("Record", (), {"layer": layer, "kernel": layer.kernel, "kind": "Conv2D", "probe": out})()
    geometry, reason = thor_factors.geometry_of(record)
    assert reason is None and geometry.spatial == out.shape[1] * out.shape[2]
    rows = thor_factors.im2col(x, geometry.conv)
    product = rows @ tf.reshape(layer.kernel, [geometry.d_in, geometry.d_out])
    np.testing.assert_allclose(product.numpy().reshape(out.shape), out.numpy(), atol=1e-5)
    if dilation == 1:
        numpy_rows, _ = thorlib.numpy_im2col(x.numpy(), kernel[0], strides, padding) if kernel[0] == kernel[1] \
            else (rows.numpy(), None)
        np.testing.assert_allclose(rows.numpy(), numpy_rows, atol=1e-6)
