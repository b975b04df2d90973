"""Gradient clipping, loss scaling and fp16 compute through moxlite.run, against numpy."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from tests import runlib

BATCH = 20
STEPS = 6


def train(log_dir, model_fn=runlib.softmax_model_fn, num_gpus=1):
    mox.set_flag("num_gpus", num_gpus)
    images, labels = runlib.mnist_rows(400)
    return runlib.train(log_dir, runlib.input_fn_for(images, labels), model_fn,
                        mox.get_optimizer_fn("sgd", learning_rate=0.5), steps=STEPS,
                        batch_size=BATCH // num_gpus)


def reference(**kwargs):
    images, labels = runlib.mnist_rows(400)
    return runlib.numpy_softmax_regression(images, labels, BATCH, STEPS, 0.5, **kwargs)


@pytest.mark.parametrize("num_gpus", [1, 2])
@pytest.mark.parametrize("clip_type", ["global_norm", "norm"])
def test_gradient_clipping_equals_numpy_on_the_global_batch_gradient(tmp_path, clip_type, num_gpus):
    unclipped_kernel, _ = reference()
    clipped_kernel, clipped_bias = reference(clip=0.05, clip_type=clip_type)
    assert not np.allclose(unclipped_kernel, clipped_kernel, atol=1e-3)   # the threshold bites
    mox.set_flag("gradient_clip", 0.05)
    mox.set_flag("gradient_clip_type", clip_type)
    train(tmp_path, num_gpus=num_gpus)
    kernel, bias = runlib.checkpoint_variables(tmp_path)
    np.testing.assert_allclose(kernel, clipped_kernel, atol=2e-6)
    np.testing.assert_allclose(bias, clipped_bias, atol=2e-6)


@pytest.mark.parametrize("num_gpus", [1, 2])
@pytest.mark.parametrize("loss_scale", ["dynamic", "1024"])
def test_loss_scaling_leaves_float32_training_unchanged(tmp_path, loss_scale, num_gpus):
    mox.set_flag("loss_scale", loss_scale)
    mox.set_flag("gradient_clip", 0.05)   # the threshold must follow the scale
    train(tmp_path, num_gpus=num_gpus)
    expected_kernel, expected_bias = reference(clip=0.05)
    kernel, bias = runlib.checkpoint_variables(tmp_path)
    np.testing.assert_allclose(kernel, expected_kernel, atol=2e-6)
    np.testing.assert_allclose(bias, expected_bias, atol=2e-6)


def test_fp16_computes_in_half_precision_and_keeps_float32_variables(tmp_path):
    seen = {}

    def model_fn(inputs, mode):
        images, labels = inputs
        logits = keras.layers.Dense(runlib.NUM_CLASSES, kernel_initializer="zeros")(images)
        seen["compute"] = logits.dtype
        return runlib.spec_for(images, labels, tf.cast(logits, tf.float32))

    mox.set_flag("use_fp16", True)
    train(tmp_path, model_fn=model_fn)
    kernel, bias = runlib.checkpoint_variables(tmp_path)
    assert seen["compute"] == tf.float16 and kernel.dtype == np.float32
    assert keras.config.dtype_policy().name == "float32"   # restored after the run
    expected_kernel, expected_bias = reference()
    np.testing.assert_allclose(kernel, expected_kernel, atol=3e-3)   # fp16 has ~3 decimal digits
    np.testing.assert_allclose(bias, expected_bias, atol=3e-3)


@pytest.mark.parametrize("flag, value, message", [
    ("loss_scale", "big", r"--loss_scale='big' is out of range; expected 0 \(off\), a finite number > 0, 'dynamic'"),
    ("gradient_clip", -1.0, r"--gradient_clip=-1.0 is out of range; expected a finite number >= 0"),
    ("gradient_clip_type", "value", r"--gradient_clip_type='value' is not valid; use 'global_norm'"),
])
def test_bad_precision_flags_are_refused_before_any_work(tmp_path, flag, value, message):
    mox.set_flag(flag, value)
    with pytest.raises(mox.errors.ArgumentError, match=message):
        train(tmp_path / "never")
    assert not (tmp_path / "never").exists()
