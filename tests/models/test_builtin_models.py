"""Built-in models: network sizes against independent counts, model_fn outputs against numpy."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from moxlite import ExportSpec, ModeKeys, ModelSpec
from moxlite.models import build_model_fn, networks


def conv_bn_params(k, c_in, c_out):
    """Parameters of a bias-free k x k convolution followed by BatchNormalization (4 per channel)."""
    return k * k * c_in * c_out + 4 * c_out


def test_mlp_has_the_dense_layers_it_was_asked_for():
    model = networks.mlp((28, 28, 1), 10, hidden_units=[64, 32])
    assert model.count_params() == (784 * 64 + 64) + (64 * 32 + 32) + (32 * 10 + 10)
    assert model(np.zeros((3, 28, 28, 1), np.float32)).shape == (3, 10)


def test_lenet_parameter_count_matches_its_layers():
    model = networks.lenet((28, 28, 1), 10, filters=[6, 16], kernel_size=5, dense_units=120)
    convs = (5 * 5 * 1 * 6 + 6) + (5 * 5 * 6 * 16 + 16)
    dense = (7 * 7 * 16) * 120 + 120 + 120 * 10 + 10  # 'same' padding: 28 -> 14 -> 7
    assert model.count_params() == convs + dense


def test_small_resnet20_matches_he_et_al_layout():
    model = networks.small_resnet((32, 32, 3), 10, depth=20, base_width=16)
    expected = conv_bn_params(3, 3, 16)
    width_in = 16
    for stage, width in enumerate((16, 32, 64)):
        for block in range(3):
            expected += conv_bn_params(3, width_in, width) + conv_bn_params(3, width, width)
            if width_in != width:
                expected += conv_bn_params(1, width_in, width)  # projection shortcut
            width_in = width
    expected += 64 * 10 + 10
    assert model.count_params() == expected
    assert model(np.zeros((2, 32, 32, 3), np.float32)).shape == (2, 10)
    convs = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D) and layer.kernel_size == (3, 3)]
    assert len(convs) + 1 == 20  # 19 conv layers + the classifier


def test_resnet50_has_keras_applications_parameters_and_logits():
    ours = networks.resnet50((64, 64, 3), 7)
    reference = keras.applications.ResNet50(weights=None, input_shape=(64, 64, 3), classes=7)
    assert ours.count_params() == reference.count_params()
    logits = ours(np.random.RandomState(0).rand(2, 64, 64, 3).astype(np.float32))
    assert logits.shape == (2, 7)
    assert not np.allclose(np.sum(logits, axis=-1), 1.0)  # logits, not softmax


def numpy_cross_entropy(logits, labels):
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -log_softmax[np.arange(len(labels)), labels].mean()


def test_model_fn_loss_accuracy_and_outputs_match_numpy():
    model_fn = build_model_fn("mlp", num_classes=4, hidden_units=[8])
    rng = np.random.RandomState(1)
    images = tf.constant(rng.rand(16, 5, 5, 1).astype(np.float32))
    labels = tf.constant(rng.randint(0, 4, size=16).astype(np.int32))
    spec = model_fn([images, labels], ModeKeys.EVAL)
    assert isinstance(spec, ModelSpec) and isinstance(spec.export_spec, ExportSpec)
    logits = model_fn.network()(images).numpy()
    np.testing.assert_allclose(spec.output_info["logits"], logits, rtol=1e-6)
    np.testing.assert_allclose(spec.loss.numpy(), numpy_cross_entropy(logits, labels.numpy()), rtol=1e-5)
    np.testing.assert_allclose(spec.log_info["accuracy"].numpy(), np.mean(logits.argmax(1) == labels.numpy()))
    softmax = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(spec.output_info["probabilities"], softmax, rtol=1e-5)
    np.testing.assert_array_equal(spec.output_info["classes"], logits.argmax(1))
    assert set(spec.export_spec.inputs_dict) == {"images"}
    assert set(spec.export_spec.outputs_dict) == {"probabilities", "classes"}


def test_model_fn_weight_decay_adds_l2_of_kernels_only():
    rng = np.random.RandomState(2)
    images = tf.constant(rng.rand(8, 3, 3, 1).astype(np.float32))
    labels = tf.constant(rng.randint(0, 3, size=8).astype(np.int32))
    model_fn = build_model_fn("mlp", num_classes=3, weight_decay=0.01, hidden_units=[4])
    loss = model_fn([images, labels], ModeKeys.TRAIN).loss.numpy()
    network = model_fn.network()
    kernels = [layer.kernel.numpy() for layer in network.layers if isinstance(layer, keras.layers.Dense)]
    logits = network(images).numpy()
    expected = numpy_cross_entropy(logits, labels.numpy()) + 0.01 * sum((k ** 2).sum() for k in kernels)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


def test_model_fn_builds_its_network_once_across_calls_and_modes():
    model_fn = build_model_fn("lenet", num_classes=10, filters=[4], dense_units=8)
    images = tf.zeros((2, 28, 28, 1))
    labels = tf.zeros((2,), tf.int32)
    model_fn([images, labels], ModeKeys.TRAIN)
    network = model_fn.network()
    variables = [id(v) for v in network.weights]
    spec = model_fn([images], ModeKeys.PREDICT)
    assert model_fn.network() is network and [id(v) for v in network.weights] == variables
    assert spec.loss is None and set(spec.output_info) == {"logits", "probabilities", "classes"}


def test_unknown_built_in_model_is_a_user_error():
    from moxlite import errors

    with pytest.raises(errors.ArgumentError, match="model 'vgg' is not built in"):
        build_model_fn("vgg", num_classes=10)
