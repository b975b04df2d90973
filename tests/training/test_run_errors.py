"""Bad input to moxlite.run: one clear error naming the argument and the fix; log_dir untouched."""

import shutil

import keras
import pytest
import tensorflow as tf

import moxlite as mox
from tests import runlib


@pytest.fixture(scope="module")
def earlier_run(tmp_path_factory):
    """A log_dir holding an earlier run's checkpoint and summaries."""
    log_dir = tmp_path_factory.mktemp("earlier")
    images, labels = runlib.mnist_rows(100)
    runlib.train(log_dir, runlib.input_fn_for(images, labels), runlib.softmax_model_fn,
                 mox.get_optimizer_fn("sgd", learning_rate=0.1), steps=3, batch_size=10, save_summary_steps=1)
    return log_dir


@pytest.fixture
def log_dir(earlier_run, tmp_path):
    copy = tmp_path / "log_dir"
    shutil.copytree(earlier_run, copy)
    return copy


def _no_loss_model_fn(inputs, mode):
    spec = runlib.softmax_model_fn(inputs, mode)
    spec.loss = None
    return spec


def _no_log_info_model_fn(inputs, mode):
    spec = runlib.softmax_model_fn(inputs, mode)
    spec.log_info = None
    return spec


IMAGES, LABELS = runlib.mnist_rows(100)
GOOD = dict(input_fn=runlib.input_fn_for(IMAGES, LABELS), model_fn=runlib.softmax_model_fn,
            optimizer_fn=mox.get_optimizer_fn("sgd", learning_rate=0.1), run_mode=mox.ModeKeys.TRAIN,
            batch_size=10, max_number_of_steps=6)

CASES = {
    "optimizer instance": (dict(optimizer_fn=keras.optimizers.SGD(0.1)),
                           mox.errors.OptimizerError, r"optimizer_fn is an optimizer instance \(SGD\).*lambda: opt"),
    "missing optimizer_fn": (dict(optimizer_fn=None),
                             mox.errors.OptimizerError, r"optimizer_fn is required in TRAIN mode; pass e\.g\."),
    "no loss in TRAIN": (dict(model_fn=_no_loss_model_fn),
                         mox.errors.ModelFnError, r"ModelSpec\(loss=None\) in TRAIN mode; return the training loss"),
    "no log_info in EVAL": (dict(model_fn=_no_log_info_model_fn, run_mode=mox.ModeKeys.EVAL, optimizer_fn=None),
                            mox.errors.ModelFnError, r"log_info=None\) in EVAL mode; return the metrics"),
    "non-callable input_fn": (dict(input_fn=tf.data.Dataset.range(3)),
                              mox.errors.ArgumentError, r"input_fn=.* is not callable; pass a function input_fn\(mode\)"),
    "unknown run_mode": (dict(run_mode="TRIAN"),
                         mox.errors.ArgumentError, r"run_mode='TRIAN' is not valid; use one of moxlite.ModeKeys"),
    "negative steps": (dict(max_number_of_steps=-1),
                       mox.errors.ArgumentError, r"max_number_of_steps=-1 is not valid; pass a non-negative integer"),
    "optimizer_fn returns no optimizer": (dict(optimizer_fn=lambda: "sgd"),
                                          mox.errors.OptimizerError, r"optimizer_fn returned 'sgd', not an optimizer"),
    "optimizer_fn returns the class": (dict(optimizer_fn=lambda: keras.optimizers.SGD),
                                       mox.errors.OptimizerError, r"optimizer_fn returned .*SGD.*, not an optimizer"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_argument_fails_clearly_and_leaves_log_dir_as_it_was(log_dir, case):
    changes, error_class, message = CASES[case]
    before = runlib.directory_state(str(log_dir))
    with pytest.raises(error_class, match=message) as caught:
        mox.run(**{**GOOD, "log_dir": str(log_dir), **changes})
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, mox.errors.UserInputError)
    assert runlib.directory_state(str(log_dir)) == before


def test_eval_without_any_checkpoint_names_both_places_to_look(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(mox.errors.CheckpointError,
                       match=r"run_mode=EVAL needs a trained model, but log_dir=.* holds no checkpoint"):
        mox.run(**{**GOOD, "run_mode": mox.ModeKeys.EVAL, "log_dir": str(empty)})
    assert list(empty.iterdir()) == []


def test_unknown_optimizer_name_lists_the_valid_ones():
    with pytest.raises(mox.errors.OptimizerError, match=r"'adamax2'.*momentum.*sgd"):
        mox.get_optimizer_fn("adamax2", learning_rate=0.1)
