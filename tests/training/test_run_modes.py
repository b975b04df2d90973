"""EVAL, PREDICT, EXPORT and interleaved evaluation, checked against numpy on restored weights."""

import glob
import os

import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from tests import runlib

BATCH = 25


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A softmax model trained for 30 steps, with its data split."""
    log_dir = str(tmp_path_factory.mktemp("trained"))
    train_images, train_labels = runlib.mnist_rows(600)
    eval_images, eval_labels = runlib.mnist_rows(230, offset=600)  # 230: the last batch is short

    def input_fn(mode):
        if mode == mox.ModeKeys.TRAIN:
            return tf.data.Dataset.from_tensor_slices((train_images, train_labels)).repeat()
        return tf.data.Dataset.from_tensor_slices((eval_images, eval_labels))

    from moxlite import flags
    flags.reset_flags()
    runlib.train(log_dir, input_fn, runlib.softmax_model_fn,
                 mox.get_optimizer_fn("momentum", learning_rate=0.1, momentum=0.9), steps=30,
                 batch_size=BATCH, log_every_n_steps=10)
    kernel, bias = runlib.checkpoint_variables(log_dir)
    return dict(log_dir=log_dir, input_fn=input_fn, kernel=kernel, bias=bias,
                eval_images=eval_images, eval_labels=eval_labels)


def _numpy_logits(trained):
    return trained["eval_images"] @ trained["kernel"] + trained["bias"]


@pytest.mark.parametrize("num_gpus", [1, 2])
def test_eval_averages_over_the_whole_set_like_numpy(trained, num_gpus, capsys):
    mox.set_flag("num_gpus", num_gpus)
    metrics = mox.run(input_fn=trained["input_fn"], model_fn=runlib.softmax_model_fn,
                      run_mode=mox.ModeKeys.EVAL, batch_size=BATCH, checkpoint_path=trained["log_dir"])
    logits = _numpy_logits(trained)
    labels = trained["eval_labels"]
    expected_accuracy = np.mean(logits.argmax(axis=1) == labels)
    probabilities = runlib.softmax_probabilities(logits.astype(np.float64))
    expected_loss = -np.mean(np.log(probabilities[np.arange(len(labels)), labels]))
    assert metrics["num_samples"] == len(labels)
    assert metrics["accuracy"] == pytest.approx(expected_accuracy, abs=1e-6)
    assert metrics["loss"] == pytest.approx(expected_loss, rel=1e-5)
    assert metrics["global_step"] == 30
    line = [l for l in capsys.readouterr().out.splitlines() if "[VALIDATION METRICS]" in l][-1]
    assert line.startswith("INFO:moxlite:[VALIDATION METRICS] step: 30 loss: ")
    assert f"accuracy: {expected_accuracy:.3f}" in line


@pytest.mark.parametrize("num_gpus", [1, 2])
def test_predict_hands_numpy_outputs_to_output_fn_every_n_steps(trained, num_gpus):
    mox.set_flag("num_gpus", num_gpus)
    calls = []
    mox.run(input_fn=trained["input_fn"], model_fn=runlib.softmax_model_fn, run_mode=mox.ModeKeys.PREDICT,
            batch_size=BATCH, checkpoint_path=trained["log_dir"], output_fn=calls.append,
            output_every_n_steps=3)
    num_batches = -(-len(trained["eval_labels"]) // (BATCH * num_gpus))
    assert [len(c) for c in calls[:-1]] == [3 * num_gpus] * (len(calls) - 1)
    assert len(calls) == -(-num_batches // 3)
    logits = np.concatenate([output["logits"] for call in calls for output in call])
    assert all(isinstance(output["logits"], np.ndarray) for call in calls for output in call)
    np.testing.assert_allclose(logits, _numpy_logits(trained), atol=1e-4)


def test_export_writes_versioned_saved_models_that_serve_the_trained_model(trained, tmp_path):
    log_dir = str(tmp_path)
    first = mox.run(input_fn=trained["input_fn"], model_fn=runlib.softmax_model_fn,
                    run_mode=mox.ModeKeys.EXPORT, batch_size=BATCH, log_dir=log_dir,
                    checkpoint_path=trained["log_dir"])
    second = mox.run(input_fn=trained["input_fn"], model_fn=runlib.softmax_model_fn,
                     run_mode=mox.ModeKeys.EXPORT, batch_size=BATCH, log_dir=log_dir,
                     checkpoint_path=trained["log_dir"])
    assert first == os.path.join(log_dir, "model", "1")
    assert second == os.path.join(log_dir, "model", "2")
    served = tf.saved_model.load(first).signatures["serving_default"]
    outputs = served(images=tf.constant(trained["eval_images"][:7]))
    np.testing.assert_allclose(outputs["logits"].numpy(), _numpy_logits(trained)[:7], atol=1e-4)


def test_export_traces_model_fn_once_and_serves_that_trace(trained, tmp_path):
    """The serving function calls the trace that found the ExportSpec's inputs (model_fn was
    traced a second time for it before). The one other trace is the build's, which finds the
    variables model_fn reads (capture/traced_variables.py)."""
    traced = []

    def model_fn(inputs, mode):
        if not tf.executing_eagerly():
            traced.append(mode)
        return runlib.softmax_model_fn(inputs, mode)

    path = mox.run(input_fn=trained["input_fn"], model_fn=model_fn, run_mode=mox.ModeKeys.EXPORT,
                   batch_size=BATCH, log_dir=str(tmp_path), checkpoint_path=trained["log_dir"])
    assert traced == [mox.ModeKeys.EXPORT] * 2   # the build's variable trace, then the probe
    served = tf.saved_model.load(path).signatures["serving_default"]
    outputs = served(images=tf.constant(trained["eval_images"][:7]))
    np.testing.assert_allclose(outputs["logits"].numpy(), _numpy_logits(trained)[:7], atol=1e-4)


def test_export_to_an_existing_named_version_is_refused(trained, tmp_path):
    def model_fn(inputs, mode):
        spec = runlib.softmax_model_fn(inputs, mode)
        spec.export_spec.version = "serving"
        return spec

    arguments = dict(input_fn=trained["input_fn"], model_fn=model_fn, run_mode=mox.ModeKeys.EXPORT,
                     batch_size=BATCH, log_dir=str(tmp_path), checkpoint_path=trained["log_dir"])
    assert mox.run(**arguments).endswith(os.path.join("model", "serving"))
    with pytest.raises(mox.errors.ExportError, match="already exists"):
        mox.run(**arguments)


def test_train_with_inter_mode_eval_and_export(tmp_path, capsys):
    images, labels = runlib.mnist_rows(600)
    eval_images, eval_labels = runlib.mnist_rows(200, offset=600)

    def input_fn(mode):
        if mode == mox.ModeKeys.TRAIN:
            return tf.data.Dataset.from_tensor_slices((images, labels)).repeat()
        return tf.data.Dataset.from_tensor_slices((eval_images, eval_labels))

    result = mox.run(input_fn=input_fn, model_fn=runlib.softmax_model_fn,
                     optimizer_fn=mox.get_optimizer_fn("sgd", learning_rate=0.5),
                     run_mode=mox.ModeKeys.TRAIN, inter_mode=mox.ModeKeys.EVAL, batch_size=BATCH,
                     log_dir=str(tmp_path), max_number_of_steps=20, save_model_steps=10,
                     export_model=mox.ExportKeys.TF_SERVING)
    lines = [l for l in capsys.readouterr().out.splitlines() if "[VALIDATION METRICS]" in l]
    assert [l.split("step: ")[1].split()[0] for l in lines] == ["10", "20"]
    kernel, bias = runlib.checkpoint_variables(str(tmp_path))
    accuracy = np.mean((eval_images @ kernel + bias).argmax(axis=1) == eval_labels)
    assert f"accuracy: {accuracy:.3f}" in lines[-1]
    served = tf.saved_model.load(result["export_path"]).signatures["serving_default"]
    np.testing.assert_allclose(served(images=tf.constant(eval_images[:5]))["logits"].numpy(),
                               eval_images[:5] @ kernel + bias, atol=1e-4)
    assert glob.glob(os.path.join(str(tmp_path), "eval", "events.out.tfevents.*"))
