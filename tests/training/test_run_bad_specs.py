"""Silent wrong results made errors or made right (issue 8, items 4, 6, 7, 13).

var_scopes with one loss trains only its scope (numpy reference); a scope that
matches nothing, a per-example loss, EVAL on an empty input and a log_dir that
is a file are one-line errors that leave log_dir as it was.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite import errors
from moxlite.recipes import cli
from tests import runlib

BATCH = 16


def _two_layer_model_fn(inputs, mode):
    images, labels = inputs
    hidden = keras.layers.Dense(8, name="body", kernel_initializer=keras.initializers.GlorotUniform(seed=1))(images)
    logits = keras.layers.Dense(runlib.NUM_CLASSES, name="head", kernel_initializer="zeros")(hidden)
    return mox.ModelSpec(loss=runlib.cross_entropy(logits, labels), var_scopes=[["head"]],
                         log_info={"loss": runlib.cross_entropy(logits, labels)})


def _train(log_dir, model_fn, steps=3, **kwargs):
    images, labels = runlib.mnist_rows(96)
    return runlib.train(log_dir, runlib.input_fn_for(images, labels), model_fn,
                        mox.get_optimizer_fn("sgd", 0.5), steps=steps, batch_size=BATCH, **kwargs)


def test_var_scopes_with_one_loss_trains_only_that_scope(tmp_path):
    _train(tmp_path, _two_layer_model_fn)
    saved = runlib.checkpoint_by_name(tmp_path)
    initial = keras.initializers.GlorotUniform(seed=1)((runlib.NUM_FEATURES, 8)).numpy()
    np.testing.assert_array_equal(saved["body/kernel"], initial)     # not trained
    np.testing.assert_array_equal(saved["body/bias"], np.zeros(8))
    # The head trains as softmax regression on the frozen body's features (numpy).
    images, labels = runlib.mnist_rows(96)
    kernel, bias = runlib.numpy_softmax_regression(images.astype(np.float64) @ initial, labels, BATCH, 3, 0.5)
    np.testing.assert_allclose(saved["head/kernel"], kernel, atol=1e-4)
    np.testing.assert_allclose(saved["head/bias"], bias, atol=1e-5)


def test_a_scope_that_matches_nothing_names_it_and_the_variables(tmp_path):
    def model_fn(inputs, mode):
        spec = _two_layer_model_fn(inputs, mode)
        spec.var_scopes = [["hed"]]
        return spec

    with pytest.raises(errors.ModelFnError, match=r"scope 'hed' matches no trainable variable; variable names "
                                                  r"are \['body/kernel', 'body/bias', 'head/kernel'"):
        _train(tmp_path / "run", model_fn)
    assert not (tmp_path / "run").exists()


def test_a_per_example_loss_is_an_error_naming_its_shape_and_the_fix(tmp_path):
    def model_fn(inputs, mode):
        images, labels = inputs
        logits = keras.layers.Dense(runlib.NUM_CLASSES)(images)
        per_example = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        return mox.ModelSpec(loss=per_example, log_info={"loss": tf.reduce_mean(per_example)})

    with pytest.raises(errors.ModelFnError) as raised:
        _train(tmp_path / "run", model_fn)
    assert "loss of shape [16], not a scalar" in str(raised.value)
    assert "tf.reduce_mean" in str(raised.value)
    assert not (tmp_path / "run").exists()


def test_eval_on_an_empty_input_is_an_error_and_writes_nothing(tmp_path):
    _train(tmp_path, runlib.softmax_model_fn, steps=2)
    before = runlib.directory_state(tmp_path)
    images, labels = runlib.mnist_rows(96)

    def input_fn(mode):
        return tf.data.Dataset.from_tensor_slices((images, labels)).take(0 if mode == mox.ModeKeys.EVAL else 96)

    with pytest.raises(errors.ArgumentError, match="input_fn returned no samples in mode EVAL"):
        mox.run(input_fn=input_fn, model_fn=runlib.softmax_model_fn, run_mode=mox.ModeKeys.EVAL,
                batch_size=BATCH, log_dir=str(tmp_path))
    assert runlib.directory_state(tmp_path) == before


def test_log_dir_that_is_a_file_is_one_line_in_the_api_and_exit_2_in_the_cli(tmp_path, capsys):
    path = tmp_path / "a_file"
    path.write_text("not a directory")
    with pytest.raises(errors.ArgumentError, match=f"log_dir='{path}' is a file, not a directory"):
        _train(path, runlib.softmax_model_fn)
    code = cli.main(["recipes/mnist_mlp.yaml", "--set", f"run.log_dir={path}", "--set", "run.steps=2"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == [f"moxlite-run: error: log_dir='{path}' is a file, not a directory; "
                                        f"pass a directory (new or of an earlier run) for checkpoints and summaries"]
    assert path.read_text() == "not a directory"


def _closed_over_head_model_fn():
    """A model closed over, so that every path starts with its name: sequential/body, sequential/head."""
    net = keras.Sequential([
        keras.layers.Dense(8, name="body", kernel_initializer=keras.initializers.GlorotUniform(seed=1)),
        keras.layers.Dense(runlib.NUM_CLASSES, name="head", kernel_initializer="zeros"),
        keras.layers.Dense(runlib.NUM_CLASSES, name="header", kernel_initializer="identity")])

    def model_fn(inputs, mode):
        images, labels = inputs
        loss = runlib.cross_entropy(net(images), labels)
        return mox.ModelSpec(loss=loss, var_scopes=[["head"]], log_info={"loss": loss})

    return model_fn


def test_var_scopes_match_whole_components_wherever_they_stand_and_say_so(tmp_path, capsys):
    """var_scopes=[['head']] trains sequential/head (not sequential/header) and says what it matched."""
    _train(tmp_path, _closed_over_head_model_fn())
    saved = runlib.checkpoint_by_name(tmp_path)
    assert sorted(saved) == ["sequential/body/bias", "sequential/body/kernel", "sequential/head/bias",
                             "sequential/head/kernel", "sequential/header/bias", "sequential/header/kernel"]
    initial = keras.initializers.GlorotUniform(seed=1)((runlib.NUM_FEATURES, 8)).numpy()
    np.testing.assert_array_equal(saved["sequential/body/kernel"], initial)          # not trained
    np.testing.assert_array_equal(saved["sequential/header/kernel"], np.eye(runlib.NUM_CLASSES))
    np.testing.assert_array_equal(saved["sequential/header/bias"], np.zeros(runlib.NUM_CLASSES))
    # The head trains on the frozen body's features, under the identity "header" (numpy).
    images, labels = runlib.mnist_rows(96)
    kernel, bias = runlib.numpy_softmax_regression(images.astype(np.float64) @ initial, labels, BATCH, 3, 0.5)
    np.testing.assert_allclose(saved["sequential/head/kernel"], kernel, atol=1e-4)
    np.testing.assert_allclose(saved["sequential/head/bias"], bias, atol=1e-5)
    out = capsys.readouterr()
    assert ("var_scopes[0] (trained by loss 0): 'head' -> [sequential/head/kernel, sequential/head/bias] (2)"
            in out.out + out.err)


def _generator_model_fn(grouping):
    """A GAN-style generator scope as porting.md tells it: Keras 3 layers ignore a TF1
    ``variable_scope``; a named Keras model puts its name in front of its variables'."""

    def model_fn(inputs, mode):
        images, labels = inputs
        if grouping == "variable_scope":
            with tf.compat.v1.variable_scope("generator"):
                hidden = keras.layers.Dense(8)(images)
        else:
            hidden = keras.Sequential([keras.layers.Dense(8)], name="generator")(images)
        loss = runlib.cross_entropy(keras.layers.Dense(runlib.NUM_CLASSES, name="head")(hidden), labels)
        return mox.ModelSpec(loss=loss, var_scopes=[["generator"]], log_info={"loss": loss})

    return model_fn


def test_a_variable_scope_around_keras_layers_names_nothing_and_a_named_keras_model_does(tmp_path):
    with pytest.raises(errors.ModelFnError, match=r"scope 'generator' matches no trainable variable; variable "
                                                  r"names are \['dense/kernel', 'dense/bias', 'head/kernel'"):
        _train(tmp_path / "scoped", _generator_model_fn("variable_scope"), steps=1)
    _train(tmp_path / "named", _generator_model_fn("named"), steps=2)
    assert list(runlib.checkpoint_by_name(tmp_path / "named")) == [
        "generator/dense/kernel", "generator/dense/bias", "head/kernel", "head/bias"]
