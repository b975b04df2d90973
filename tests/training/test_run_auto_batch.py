"""auto_batch=False and the batch a run announces (issue 31 items 2 and 6).

MoXing: with ``auto_batch=False`` input_fn's values are the batch as they are, tensors and
datasets alike. ModelArts-Lab's MNIST notebook predicts on one ``[784]`` image with
``batch_size=1, auto_batch=False`` and gets one prediction; moxlite used to cut the image into
784 one-number batches. The reference is numpy: softmax regression trained on the one batch
(the TF1 graph evaluated the same tensors at every step), its loss and its prediction.
"""

import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite import context, errors
from tests import runlib

ROWS = 8


@pytest.fixture(scope="module")
def data():
    return runlib.mnist_rows(ROWS)


def test_tensors_are_one_batch_in_every_mode(tmp_path, data):
    images, labels = data

    def input_fn(mode):   # tensors, as a TF1 input_fn returned them: the whole batch
        if mode == mox.ModeKeys.PREDICT:
            return tf.constant(images[0])   # one [784] image, as the notebook's
        return tf.constant(images), tf.constant(labels)

    shapes = []

    def model_fn(inputs, mode):
        shapes.append([tuple(tensor.shape) for tensor in inputs])
        if mode == mox.ModeKeys.PREDICT:
            kernel = tf.compat.v1.get_variable("dense/kernel", [784, 10])
            bias = tf.compat.v1.get_variable("dense/bias", [10])
            logits = tf.matmul(inputs, kernel) + bias   # the notebook's: a list of one [784] is [1, 784]
            return mox.ModelSpec(output_info={"predict": tf.argmax(logits, 1)})
        return runlib.softmax_model_fn(inputs, mode)

    common = dict(input_fn=input_fn, model_fn=model_fn, batch_size=ROWS, auto_batch=False, log_dir=str(tmp_path))
    trained = mox.run(optimizer_fn=mox.get_optimizer_fn("sgd", 0.5), run_mode=mox.ModeKeys.TRAIN,
                      max_number_of_steps=3, **common)
    assert trained["global_step"] == 3   # the batch is read at every step
    kernel, bias = runlib.numpy_softmax_regression(images, labels, ROWS, 3, 0.5)
    saved = list(runlib.checkpoint_by_name(str(tmp_path)).values())
    np.testing.assert_allclose(saved[0], kernel, atol=2e-5)

    metrics = mox.run(run_mode=mox.ModeKeys.EVAL, **common)
    logits = images @ kernel + bias
    assert metrics["num_samples"] == ROWS
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(metrics["loss"], -log_probabilities[np.arange(ROWS), labels].mean(), rtol=1e-4)

    exported = mox.run(run_mode=mox.ModeKeys.EXPORT, checkpoint_path=str(tmp_path), **common)
    serving = tf.saved_model.load(exported).signatures["serving_default"]
    served = list(serving(images=tf.constant(images[:3])).values())[0].numpy()   # any batch size serves
    np.testing.assert_allclose(served, logits[:3], atol=1e-4)

    outputs = []
    mox.run(input_fn=input_fn, model_fn=model_fn, output_fn=outputs.append, run_mode=mox.ModeKeys.PREDICT,
            batch_size=1, auto_batch=False, max_number_of_steps=1, output_every_n_steps=1,
            checkpoint_path=str(tmp_path))
    assert [tuple(shape) for shape in shapes[-1]] == [(784,)]   # as input_fn returned it
    predicted = [int(value) for output in outputs for item in output for value in np.ravel(item["predict"])]
    assert predicted == [int(np.argmax(images[0] @ kernel + bias))]


def test_the_announced_batch_is_the_batch_that_trains(tmp_path, data, capsys):
    images, labels = data
    rows = np.concatenate([images] * 7)[:50], np.concatenate([labels] * 7)[:50]

    def input_fn(mode):   # ready batches of 50 samples
        return tf.data.Dataset.from_tensors(rows).repeat()

    told = []

    def optimizer_fn():   # what the run tells optimizer factories (and its sample/sec) is its batch
        told.append(context.current().global_batch_size)
        return mox.get_optimizer_fn("sgd", 0.5)()

    mox.run(input_fn=input_fn, model_fn=runlib.softmax_model_fn, optimizer_fn=optimizer_fn,
            run_mode=mox.ModeKeys.TRAIN, batch_size=32, auto_batch=False, log_dir=str(tmp_path),
            max_number_of_steps=2)
    assert told == [50]
    lines = [line.removeprefix("INFO:moxlite:") for line in capsys.readouterr().out.splitlines()]
    assert [line for line in lines if "not batch_size=32" in line] == [
        "input_fn's TRAIN batches hold 50 samples, not batch_size=32 (auto_batch=False: its elements are the "
        "batches); the run trains and counts batches of 50"]
    assert any(line.startswith("Training: 1 replica(s), batch 50 per replica, global batch 50") for line in lines)


def test_a_train_run_that_ends_before_its_first_step_is_an_error_naming_the_sizes(tmp_path, data):
    images, labels = data

    def input_fn(mode):   # a pre-batched generator, with batch_size=100 added: no whole batch forms
        def batches():
            yield images, labels
        return tf.data.Dataset.from_generator(batches, output_signature=(
            tf.TensorSpec([None, 784], tf.float32), tf.TensorSpec([None], tf.int32)))

    def model_fn(inputs, mode):   # the script's model flattens whatever batches it gets
        images, labels = inputs
        return runlib.softmax_model_fn([tf.reshape(images, [-1, 784]), tf.reshape(labels, [-1])], mode)

    with pytest.raises(errors.ArgumentError) as raised:
        mox.run(input_fn=input_fn, model_fn=model_fn, optimizer_fn=mox.get_optimizer_fn("sgd", 0.5),
                run_mode=mox.ModeKeys.TRAIN, batch_size=100, log_dir=str(tmp_path), max_number_of_steps=5)
    assert str(raised.value) == (
        "input_fn's TRAIN input ended before the first step: it holds 1 sample(s) (elements of shape "
        "((None, 784), (None,))) and a step takes a whole batch of batch_size=100 per replica (1 replica(s), "
        "100 samples); give input_fn more samples (e.g. repeat() its dataset), a smaller batch_size, or, if its "
        "elements are batches already, auto_batch=False")
    assert raised.value.exit_code == 2   # what moxlite-run exits with (recipes/cli.py)


def twenty_samples_input_fn(mode):
    """Twenty MNIST rows, once: fewer than one batch of 100 (the recipe below names this function)."""
    images, labels = runlib.mnist_rows(20)
    return tf.data.Dataset.from_tensor_slices((images, labels))


RECIPE = """
run: {mode: train, steps: 5, batch_size: 100, log_dir: %(log_dir)s}
input: {name: "tests.training.test_run_auto_batch:twenty_samples_input_fn", num_samples: 20}
model: {name: "tests.runlib:softmax_model_fn"}
optimizer: {name: sgd, learning_rate: 0.5}
"""


def test_moxlite_run_exits_2_when_training_ends_before_its_first_step(tmp_path, capsys):
    from moxlite.recipes import cli

    recipe = tmp_path / "short.yaml"
    recipe.write_text(RECIPE % {"log_dir": tmp_path / "log"})
    code = cli.main([str(recipe)])
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]
    assert ("input_fn's TRAIN input ended before the first step: it holds 20 sample(s) (elements of shape "
            "((784,), ())) and a step takes a whole batch of batch_size=100 per replica") in err
