"""Every run() in a process is independent of the earlier ones (issue 8, item 8).

A TF1-style model_fn (``tf.compat.v1.get_variable`` under a variable_scope) is run
TRAIN then EVAL, TRAIN then TRAIN, and as a warm start, in one process; the
weights and metrics are checked against numpy's softmax regression.
"""

import numpy as np
import tensorflow as tf

import moxlite as mox
from tests import runlib

BATCH = 16
LR = 0.5


def get_variable_model_fn(reuse):
    def model_fn(inputs, mode):
        images, labels = inputs
        with tf.compat.v1.variable_scope("softmax", reuse=reuse):
            kernel = tf.compat.v1.get_variable("W", [runlib.NUM_FEATURES, runlib.NUM_CLASSES],
                                               initializer=tf.compat.v1.zeros_initializer())
            bias = tf.compat.v1.get_variable("b", [runlib.NUM_CLASSES],
                                             initializer=tf.compat.v1.zeros_initializer())
        logits = tf.matmul(images, kernel) + bias
        return runlib.spec_for(images, labels, logits)

    return model_fn


def _numpy_eval(images, labels, kernel, bias):
    logits = images.astype(np.float64) @ kernel + bias
    probabilities = runlib.softmax_probabilities(logits)
    loss = -np.mean(np.log(probabilities[np.arange(len(labels)), labels]))
    return loss, np.mean(np.argmax(logits, axis=1) == labels)


def test_get_variable_train_eval_train_in_one_process(tmp_path):
    images, labels = runlib.mnist_rows(160)
    input_fn = runlib.input_fn_for(images, labels)
    log_dir = str(tmp_path / "run")
    for reuse in (tf.compat.v1.AUTO_REUSE, None):
        model_fn = get_variable_model_fn(reuse)
        directory = f"{log_dir}-{reuse}"
        train = dict(input_fn=input_fn, model_fn=model_fn, run_mode=mox.ModeKeys.TRAIN, batch_size=BATCH,
                     log_dir=directory, optimizer_fn=mox.get_optimizer_fn("sgd", LR))
        mox.run(max_number_of_steps=5, **train)
        kernel, bias = runlib.numpy_softmax_regression(images, labels, BATCH, 5, LR)
        metrics = mox.run(input_fn=input_fn, model_fn=model_fn, run_mode=mox.ModeKeys.EVAL,
                          batch_size=BATCH, log_dir=directory)
        loss, accuracy = _numpy_eval(images, labels, kernel, bias)
        assert metrics["global_step"] == 5
        np.testing.assert_allclose(metrics["loss"], loss, rtol=1e-4)
        np.testing.assert_allclose(metrics["accuracy"], accuracy, atol=1e-6)
        # TRAIN again: resumes at 5 and goes on to 12, as 12 uninterrupted numpy steps.
        assert mox.run(max_number_of_steps=12, **train)["global_step"] == 12
        kernel, bias = runlib.numpy_softmax_regression(images, labels, BATCH, 12, LR)
        restored = dict(zip(["b", "W"], runlib.checkpoint_variables(directory)))
        if restored["b"].shape != bias.shape:
            restored = dict(zip(["W", "b"], runlib.checkpoint_variables(directory)))
        np.testing.assert_allclose(restored["W"], kernel, atol=2e-5)
        np.testing.assert_allclose(restored["b"], bias, atol=2e-5)


def test_get_variable_warm_start_in_the_same_process(tmp_path):
    images, labels = runlib.mnist_rows(160)
    input_fn = runlib.input_fn_for(images, labels)
    model_fn = get_variable_model_fn(tf.compat.v1.AUTO_REUSE)
    common = dict(input_fn=input_fn, model_fn=model_fn, run_mode=mox.ModeKeys.TRAIN, batch_size=BATCH,
                  optimizer_fn=mox.get_optimizer_fn("sgd", LR))
    mox.run(log_dir=str(tmp_path / "base"), max_number_of_steps=4, **common)
    metrics = mox.run(input_fn=input_fn, model_fn=model_fn, run_mode=mox.ModeKeys.EVAL, batch_size=BATCH,
                      log_dir=str(tmp_path / "eval"), checkpoint_path=str(tmp_path / "base"))
    kernel, bias = runlib.numpy_softmax_regression(images, labels, BATCH, 4, LR)
    np.testing.assert_allclose(metrics["loss"], _numpy_eval(images, labels, kernel, bias)[0], rtol=1e-4)
    # Warm start: weights of step 4, a fresh optimizer and step 0, then 3 more steps.
    mox.run(log_dir=str(tmp_path / "tuned"), checkpoint_path=str(tmp_path / "base"), max_number_of_steps=3,
            **common)
    assert runlib.checkpoint_step(str(tmp_path / "tuned")) == 3
    expected = runlib.numpy_softmax_regression(images, labels, BATCH, 7, LR)
    # The warm start read from step 0 of the input again: numpy's batches 0..3 then 0..2.
    kernel_w, bias_w = _continue(images, labels, kernel, bias, 3)
    tuned = sorted(runlib.checkpoint_variables(str(tmp_path / "tuned")), key=lambda a: a.ndim)
    np.testing.assert_allclose(tuned[1], kernel_w, atol=2e-5)
    np.testing.assert_allclose(tuned[0], bias_w, atol=2e-5)
    assert not np.allclose(tuned[1], expected[0], atol=2e-5)  # a different path than 7 steps in a row


def _continue(images, labels, kernel, bias, num_steps):
    kernel, bias = kernel.copy(), bias.copy()
    for step in range(num_steps):
        x = images[step * BATCH:(step + 1) * BATCH].astype(np.float64)
        y = labels[step * BATCH:(step + 1) * BATCH]
        probabilities = runlib.softmax_probabilities(x @ kernel + bias)
        probabilities[np.arange(BATCH), y] -= 1.0
        kernel -= LR * x.T @ probabilities / BATCH
        bias -= LR * probabilities.mean(axis=0)
    return kernel, bias
