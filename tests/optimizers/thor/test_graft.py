"""THOR's ``graft``: each preconditioned kernel's update rescaled to its plain gradient's Frobenius
norm (THOR's direction, SGD's step size), against thorlib's numpy THOR with the same rescaling, on
1 replica and on 2, over refresh and stale updates, and with a kernel whose gradient is zero."""

import numpy as np
import pytest

import moxlite as mox
from moxlite import errors
from tests import runlib, thorlib

BATCH = 16
STEPS = 5
# Refreshes at updates 0 and 3, stale inverses at 1, 2 and 4; the Dense A (108 wide) in two 64-blocks.
SETTINGS = dict(lr=0.05, momentum=0.9, damping=0.05, frequency=3, block_size=64, weight_decay=5e-4)


def _run(log_dir, images, labels, batch):
    optimizer_fn = thorlib.thor_optimizer_fn(graft=True, **SETTINGS)
    runlib.train(log_dir, runlib.input_fn_for(images, labels), thorlib.conv_model_fn("same"), optimizer_fn,
                 steps=STEPS, batch_size=batch, log_every_n_steps=100)
    return thorlib.model_variables(log_dir)


@pytest.mark.parametrize("replicas", [1, 2])
def test_grafted_conv_and_dense_updates_equal_numpy(tmp_path, replicas):
    images, labels = thorlib.small_digits(BATCH * STEPS)
    start = thorlib.initial_conv_weights("same")
    if replicas > 1:
        mox.set_flag("num_gpus", replicas)
    trained = _run(tmp_path / "graft", images, labels, BATCH // replicas)
    expected = thorlib.numpy_thor_conv(images, labels, start, BATCH, STEPS, padding="same", graft=True, **SETTINGS)
    ungrafted = thorlib.numpy_thor_conv(images, labels, start, BATCH, STEPS, padding="same", **SETTINGS)
    # The reference tells grafting apart: without it both kernels move elsewhere.
    for index in (0, 2):
        gap = np.abs((expected[index] - start[index]) - (ungrafted[index] - start[index])).max()
        assert gap > 0.2 * np.abs(expected[index] - start[index]).max(), (index, gap)
    for got, want in zip(trained, expected):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_a_kernel_whose_gradient_is_zero_stays_put_and_the_others_equal_numpy(tmp_path):
    """Blank images: the convolution's inputs, so its kernel's gradient and preconditioned gradient,
    are exactly zero (0/0 in the rescaling), while its bias and the Dense layer still learn."""
    images, labels = thorlib.small_digits(BATCH * STEPS)
    images[:] = 0.0
    start = thorlib.initial_conv_weights("same")
    trained = _run(tmp_path / "graft", images, labels, BATCH)
    expected = thorlib.numpy_thor_conv(images, labels, start, BATCH, STEPS, padding="same", graft=True, **SETTINGS)
    # Only weight decay moves the convolution's kernel: 5 momentum steps of lr * 5e-4 * w.
    assert np.abs(trained[0] - start[0]).max() < 1e-3 * np.abs(start[0]).max()
    assert np.abs(trained[2] - start[2]).max() > 1e-3
    for got, want in zip(trained, expected):
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_graft_is_off_by_default_and_a_bad_value_is_a_one_line_error():
    inner = mox.get_optimizer_fn("momentum", learning_rate=0.1, momentum=0.9)
    assert mox.get_optimizer_wrapper_fn("thor", inner)().graft is False
    with pytest.raises(errors.OptimizerError, match="thor: graft=") as caught:
        mox.get_optimizer_wrapper_fn("thor", inner, graft="yes")()
    assert "\n" not in str(caught.value)
