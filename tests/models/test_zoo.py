"""The zoo against the Keras Applications networks themselves: same weights, same logits."""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite import errors
from moxlite.training.capture.shared_variables import SharedVariablesModelFn

SIZE = 32
NUM_CLASSES = 5
REFERENCES = {
    "resnet_v1_50": lambda: keras.applications.ResNet50,
    "resnet_v2_50": lambda: keras.applications.ResNet50V2,
    "vgg_16": lambda: keras.applications.VGG16,
}


def _images(count=3, dtype=np.float32):
    return np.random.default_rng(0).uniform(-1, 1, (count, SIZE, SIZE, 3)).astype(dtype)


def _copy_by_layer_name(reference, variables):
    """Assign the Keras application's weights to ours, matched by layer/variable name."""
    weights = {w.path: w for w in reference.weights}
    assert len(weights) == len(variables)
    for variable in variables:
        path = variable.name.split(":")[0].replace("logits/", "predictions/")
        assert tuple(variable.shape) == tuple(weights[path].shape), path
        variable.assign(weights[path].numpy())


def _template_for(name, mode, weight_decay=0.0, **kwargs):
    """model_fn style 2: get_model_fn inside the body, under moxlite's model template."""
    seen = {}

    def model_fn(inputs, mode):
        network_fn = mox.get_model_fn(name, run_mode=mode, num_classes=NUM_CLASSES, weight_decay=weight_decay,
                                      **kwargs)
        logits, endpoints = network_fn(inputs[0])
        if tf.executing_eagerly():   # (the build also traces model_fn once, to find its variables)
            seen["endpoints"] = endpoints
            seen["regularization"] = mox.get_collection(tf.compat.v1.GraphKeys.REGULARIZATION_LOSSES)
        return mox.ModelSpec(loss=tf.reduce_mean(logits), output_info={"logits": logits})

    return SharedVariablesModelFn(model_fn), seen


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "resnet_v2_50" else n
                                  for n in sorted(REFERENCES)])
def test_logits_equal_the_keras_application_with_the_same_weights(name):
    reference = REFERENCES[name]()(include_top=True, weights=None, input_shape=(SIZE, SIZE, 3),
                                   classes=NUM_CLASSES, classifier_activation=None)
    template, seen = _template_for(name, mox.ModeKeys.EVAL)
    images = _images()
    template.build([tf.constant(images)], mox.ModeKeys.EVAL)
    _copy_by_layer_name(reference, template.variables)
    expected = reference(images, training=False).numpy()

    # A later call (the port test covers traced ones): the template hands it the first call's variables.
    logits = template([tf.constant(images)], mox.ModeKeys.EVAL).output_info["logits"]
    np.testing.assert_allclose(logits.numpy(), expected, rtol=1e-4, atol=1e-4)
    assert len(template.variables) == len(reference.weights)
    probabilities = seen["endpoints"]["predictions"].numpy()
    np.testing.assert_allclose(probabilities, tf.nn.softmax(expected).numpy(), rtol=1e-4, atol=1e-5)


def test_local_weights_file_weight_decay_and_the_logits_pattern(tmp_path):
    backbone = keras.applications.ResNet50(include_top=False, weights=None, input_shape=(SIZE, SIZE, 3),
                                           pooling="avg")
    path = str(tmp_path / "resnet50_notop.weights.h5")
    backbone.save_weights(path)
    template, seen = _template_for("resnet_v1_50", mox.ModeKeys.TRAIN, weight_decay=4e-5, weights=path)
    images = _images()
    template.build([tf.constant(images)], mox.ModeKeys.TRAIN)
    # The file's weights are in: the pooled features equal the saved network's (batch statistics
    # in TRAIN mode on both sides).
    np.testing.assert_allclose(seen["endpoints"]["pre_logits"].numpy(), backbone(images, training=True).numpy(),
                               rtol=1e-4, atol=1e-4)
    # weight_decay: slim's l2_loss of every kernel, in this model_fn call's collection.
    kernels = [v.numpy() for v in template.variables if v.name.split("/")[-1].startswith("kernel")]
    assert len(kernels) == 53 + 1   # ResNet-50's 53 convolutions and the logits layer
    expected = 4e-5 * sum(float(np.sum(k.astype(np.float64) ** 2)) / 2 for k in kernels)
    np.testing.assert_allclose(float(tf.add_n(seen["regularization"])), expected, rtol=1e-5)
    assert len(seen["regularization"]) == 54
    template([tf.constant(images)], mox.ModeKeys.TRAIN)   # a second call sees its own terms only
    assert len(seen["regularization"]) == 54
    assert mox.get_collection(tf.compat.v1.GraphKeys.REGULARIZATION_LOSSES) == []  # outside model_fn
    # get_model_meta's pattern names exactly the classifier's variables.
    meta = mox.get_model_meta("resnet_v1_50")
    assert (meta.default_image_size, meta.default_logits_pattern) == (224, "logits")
    assert mox.get_model_meta(mox.NetworkKeys.INCEPTION_V3).default_image_size == 299
    matched = [v.name for v in template.variables if re.search(meta.default_logits_pattern, v.name)]
    assert matched == ["logits/kernel:0", "logits/bias:0"]


def test_var_scope_keeps_fp32_variables_under_fp16_images():
    """MoXing's idiom: cast the images to fp16, build under var_scope(float32). The result equals
    Keras's own mixed_float16 network with the same weights."""
    def model_fn(inputs, mode):
        with mox.var_scope(force_dtype=tf.float32):
            logits, _ = mox.get_model_fn("mobilenet_v2", mode, NUM_CLASSES)(tf.cast(inputs[0], tf.float16))
        return mox.ModelSpec(loss=tf.reduce_mean(tf.cast(logits, tf.float32)), output_info={"logits": logits})

    template = SharedVariablesModelFn(model_fn)
    images = _images()
    spec = template.build([tf.constant(images)], mox.ModeKeys.EVAL)
    assert spec.output_info["logits"].dtype == tf.float16
    assert {v.dtype for v in template.variables} == {tf.float32}
    assert keras.config.dtype_policy().name == "float32"   # restored
    keras.config.set_dtype_policy("mixed_float16")
    try:
        reference = keras.applications.MobileNetV2(include_top=True, weights=None, input_shape=(SIZE, SIZE, 3),
                                                   classes=NUM_CLASSES, classifier_activation=None)
    finally:
        keras.config.set_dtype_policy("float32")
    _copy_by_layer_name(reference, template.variables)
    ours = template([tf.constant(images)], mox.ModeKeys.EVAL).output_info["logits"]
    np.testing.assert_allclose(ours.numpy().astype(np.float32),
                               reference(images, training=False).numpy().astype(np.float32), rtol=1e-2, atol=1e-2)


def test_bad_names_and_arguments_get_one_line_errors(tmp_path):
    with pytest.raises(errors.ArgumentError, match="'inception_v4' is a MoXing network with no Keras"):
        mox.get_model_fn("inception_v4", mox.ModeKeys.TRAIN, 10)
    with pytest.raises(errors.ArgumentError, match="unknown network 'resnet_50'"):
        mox.get_model_meta("resnet_50")
    with pytest.raises(errors.ArgumentError, match="num_classes=0"):
        mox.get_model_fn("resnet_v1_50", mox.ModeKeys.TRAIN, 0)
    with pytest.raises(errors.ArgumentError, match="nothing can be downloaded"):
        mox.get_model_fn("resnet_v1_50", mox.ModeKeys.TRAIN, 10, weights=str(tmp_path / "missing.h5"))
    with pytest.raises(errors.ArgumentError, match="var_scope: force_dtype=float16 with compute dtype float32"):
        with mox.var_scope(force_dtype=tf.float16):
            pass


def test_var_scope_under_the_use_fp16_flag_through_run(tmp_path):
    """use_fp16 (the O3 precision level) computes in float16 with float32 variables: var_scope(float32)
    composes with it. The levels keep every variable in float32 (master weights), so a
    var_scope(float16) inside a run yields to them; outside a level the scope decides."""
    seen = {}

    def model_fn(inputs, mode):
        images, labels = inputs
        with mox.var_scope(force_dtype=tf.float32):
            hidden = keras.layers.Dense(8, name="fp32_vars")(images)
        with mox.var_scope(force_dtype=tf.float16):
            logits = keras.layers.Dense(3, name="fp16_vars")(hidden)
        seen["dtypes"] = (hidden.dtype, logits.dtype)
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
            labels, tf.cast(logits, tf.float32), from_logits=True))
        return mox.ModelSpec(loss=loss, log_info={"loss": loss})

    rng = np.random.default_rng(0)
    features, labels = rng.normal(size=(32, 4)).astype(np.float32), rng.integers(0, 3, 32).astype(np.int32)
    mox.set_flag("use_fp16", True)
    mox.run(input_fn=lambda mode: tf.data.Dataset.from_tensor_slices((features, labels)).repeat(),
            model_fn=model_fn, optimizer_fn=mox.get_optimizer_fn("sgd", 0.1), run_mode=mox.ModeKeys.TRAIN,
            batch_size=8, log_dir=str(tmp_path), max_number_of_steps=2, log_every_n_steps=100)
    assert seen["dtypes"] == (tf.float16, tf.float16)   # fp16 compute in both layers
    from tests import runlib
    stored = runlib.checkpoint_by_name(str(tmp_path))
    assert stored["fp32_vars/kernel"].dtype == np.float32 and stored["fp16_vars/kernel"].dtype == np.float32
    assert not np.array_equal(stored["fp32_vars/kernel"], np.zeros((4, 8)))
    keras.config.set_dtype_policy("float16")   # no precision level: the scope decides
    try:
        with mox.var_scope(force_dtype=tf.float32):
            layer = keras.layers.Dense(2)
            layer.build((None, 4))
    finally:
        keras.config.set_dtype_policy("float32")
    assert (layer.kernel.dtype, layer.compute_dtype) == ("float32", "float16")
