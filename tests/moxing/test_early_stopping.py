"""``mox.EarlyStoppingHook`` as MoXing documents it, against the rule replayed on numpy's accuracies.

Softmax regression trains on MNIST rows in order; every epoch the hook
evaluates accuracy on the first ``samples_in_eval`` held-out rows. numpy
replays the same SGD, computes those accuracies at the same steps and applies
the documented rule (the first evaluation sets the best; stop after
``patience`` evaluations in a row that do not beat it by more than
``min_delta``); the run must stop at that step, having logged each evaluation.
"""

import math
import re

import numpy as np
import pytest

import moxlite as mox
from moxlite import errors
from tests import runlib

BATCH, TRAIN, EVAL, LEARNING_RATE = 16, 48, 32, 0.05


def _run(tmp_path, patience, min_delta, inter_mode=mox.ModeKeys.EVAL, max_steps=300, endless_eval=False):
    train_images, train_labels = runlib.mnist_rows(TRAIN)
    eval_images, eval_labels = runlib.mnist_rows(200, offset=1000)

    def input_fn(mode):
        if mode == mox.ModeKeys.TRAIN:
            return runlib.input_fn_for(train_images, train_labels)(mode)
        dataset = runlib.input_fn_for(eval_images, eval_labels)(mode)
        return dataset.repeat() if endless_eval else dataset   # MoXing's example: num_epochs=None in EVAL too

    def model_fn(inputs, mode):
        spec = runlib.softmax_model_fn(inputs, mode)
        accuracy = spec.log_info["accuracy"]
        hook = mox.EarlyStoppingHook(monitor_info={"accuracy": accuracy}, monitor="accuracy", batch_size=BATCH,
                                     samples_in_train=TRAIN, samples_in_eval=EVAL, evaluate_every_n_epochs=1,
                                     min_delta=min_delta, patience=patience, prefix="[EarlyStopping]")
        return mox.ModelSpec(loss=spec.loss, log_info={"loss": spec.loss}, hooks=[hook])

    runlib.train(tmp_path / "log", input_fn, model_fn, mox.get_optimizer_fn("sgd", LEARNING_RATE),
                 steps=max_steps, batch_size=BATCH, inter_mode=inter_mode, log_every_n_steps=1000)
    return train_images, train_labels, eval_images[:EVAL], eval_labels[:EVAL]


def _expected_stop(train_images, train_labels, eval_images, eval_labels, patience, min_delta, max_steps):
    every = math.ceil(TRAIN / BATCH)
    best, wait, history = None, 0, []
    for step in range(every, max_steps + 1, every):
        kernel, bias = runlib.numpy_softmax_regression(train_images, train_labels, BATCH, step, LEARNING_RATE)
        accuracy = float(np.mean((eval_images @ kernel + bias).argmax(axis=1) == eval_labels))
        history.append((step, accuracy))
        if best is None or accuracy > best + min_delta:
            best, wait = accuracy, 0
        else:
            wait += 1
            if wait >= patience:
                return step, history
    return max_steps, history


@pytest.mark.parametrize("patience, min_delta, endless_eval", [(2, 0.0, False), (1, 0.05, True)])
def test_training_stops_where_the_documented_rule_says(tmp_path, capfd, patience, min_delta, endless_eval):
    data = _run(tmp_path, patience, min_delta, endless_eval=endless_eval)
    expected_step, history = _expected_stop(*data, patience, min_delta, 300)
    assert expected_step < 300, "the reference never stops: the test would not test stopping"
    assert runlib.checkpoint_step(str(tmp_path / "log")) == expected_step
    logged = [(int(step), float(value)) for step, value in
              re.findall(r"\[EarlyStopping\] step: (\d+) accuracy: ([0-9.]+)", "".join(capfd.readouterr()))]
    assert [step for step, _ in logged] == [step for step, _ in history]
    np.testing.assert_allclose([value for _, value in logged], [value for _, value in history], atol=5e-4)


def test_the_hook_needs_inter_mode_eval(tmp_path):
    with pytest.raises(errors.ArgumentError, match=r"pass run\(inter_mode=mox.ModeKeys.EVAL\)"):
        _run(tmp_path, 1, 0.0, inter_mode=None)


def test_bad_hook_arguments_are_one_line_errors():
    with pytest.raises(errors.ArgumentError, match="samples_in_train=None must be a positive integer"):
        mox.EarlyStoppingHook(monitor_info={}, monitor="accuracy", batch_size=8, samples_in_eval=8)
    with pytest.raises(errors.ArgumentError, match="monitor=None must name the metric"):
        mox.EarlyStoppingHook(monitor_info={}, batch_size=8, samples_in_train=8, samples_in_eval=8)
