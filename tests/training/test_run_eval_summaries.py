"""Every evaluation's TensorBoard scalars: in ``log_dir/eval``, once per evaluated step, equal
to the evaluation's own means (checked against numpy on the checkpoint), for the
evaluations interleaved with training (inter_mode=EVAL) and for run_mode=EVAL."""

import glob
import os

import numpy as np
import pytest

import moxlite as mox
from tests import runlib
from tests.training.test_run_logs import read_scalars

BATCH = 20


def _numpy_means(log_dir, images, labels):
    """(mean cross-entropy, accuracy) of the newest checkpoint's softmax regression."""
    kernel, bias = runlib.checkpoint_variables(log_dir)
    logits = images @ kernel + bias
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -log_probabilities[np.arange(len(labels)), labels].mean(), (logits.argmax(axis=1) == labels).mean()


def test_interleaved_and_eval_mode_summaries_hold_each_evaluation_once(tmp_path, capsys):
    images, labels = runlib.mnist_rows(100)
    eval_images, eval_labels = runlib.mnist_rows(40, offset=100)

    def input_fn(mode):
        if mode == mox.ModeKeys.TRAIN:
            return runlib.input_fn_for(images, labels)(mode)
        return runlib.input_fn_for(eval_images, eval_labels)(mode)

    train_dir, eval_dir = str(tmp_path / "train"), str(tmp_path / "evaluated")
    common = dict(input_fn=input_fn, model_fn=runlib.softmax_model_fn, batch_size=BATCH)
    mox.run(optimizer_fn=mox.get_optimizer_fn("sgd", learning_rate=0.5), run_mode=mox.ModeKeys.TRAIN,
            inter_mode=mox.ModeKeys.EVAL, log_dir=train_dir, max_number_of_steps=6, save_model_steps=3,
            **common)
    lines = [line for line in capsys.readouterr().out.splitlines() if "[VALIDATION METRICS]" in line]
    assert [line.split("step: ")[1].split()[0] for line in lines] == ["3", "6"]   # the last step once

    interleaved = read_scalars(os.path.join(train_dir, "eval"))
    assert sorted(interleaved) == ["accuracy", "loss"]
    assert sorted(interleaved["accuracy"]) == sorted(interleaved["loss"]) == [3, 6]
    loss, accuracy = _numpy_means(train_dir, eval_images, eval_labels)
    assert interleaved["loss"][6] == pytest.approx(loss, rel=1e-5)
    assert interleaved["accuracy"][6] == pytest.approx(accuracy, abs=1e-6)
    assert f"accuracy: {interleaved['accuracy'][3]:.3f}" in lines[0]

    os.makedirs(eval_dir)
    result = mox.run(run_mode=mox.ModeKeys.EVAL, log_dir=eval_dir, checkpoint_path=train_dir, **common)
    assert read_scalars(os.path.join(eval_dir, "eval")) == {"loss": {6: pytest.approx(result["loss"])},
                                                           "accuracy": {6: pytest.approx(result["accuracy"])}}
    assert result["accuracy"] == pytest.approx(accuracy, abs=1e-6)
    assert not glob.glob(os.path.join(eval_dir, "events.out.tfevents.*"))   # no training summaries
