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


def _model_fn_without_mode(inputs):
    return runlib.softmax_model_fn(inputs, mox.ModeKeys.TRAIN)


def _input_fn_without_mode():
    return tf.data.Dataset.from_tensor_slices((IMAGES, LABELS))


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
    "no log_info for inter_mode=EVAL": (dict(model_fn=_no_log_info_model_fn, inter_mode=mox.ModeKeys.EVAL),
                                        mox.errors.ModelFnError, r"log_info=None\) in EVAL mode; return the metrics"),
    "non-callable input_fn": (dict(input_fn=tf.data.Dataset.range(3)),
                              mox.errors.ArgumentError, r"input_fn=.* is not callable; pass a function input_fn\(mode\)"),
    "unknown run_mode": (dict(run_mode="TRIAN"),
                         mox.errors.ArgumentError, r"run_mode='TRIAN' is not valid; use one of moxlite.ModeKeys"),
    "negative steps": (dict(max_number_of_steps=-1),
                       mox.errors.ArgumentError, r"max_number_of_steps=-1 is not valid; pass a non-negative integer"),
    "model_fn(inputs)": (dict(model_fn=_model_fn_without_mode), TypeError,
                         r"^model_fn=tests\.training\.test_run_errors\._model_fn_without_mode\(inputs\) cannot be called as "
                         r"model_fn\(inputs, mode\): .*; declare def _model_fn_without_mode\(inputs, mode\)$"),
    "input_fn()": (dict(input_fn=_input_fn_without_mode), TypeError,
                   r"^input_fn=tests\.training\.test_run_errors\._input_fn_without_mode\(\) cannot be called as "
                   r"input_fn\(mode\): .*; declare def _input_fn_without_mode\(mode\)$"),
    "input_fn(mode, data_dir)": (dict(input_fn=lambda mode, data_dir: None), TypeError,
                                 r"^input_fn=tests\.training\.test_run_errors\.<lambda>\(mode, data_dir\) cannot be called as input_fn\(mode\): .*; "
                                 r"declare def input_fn\(mode\); it requires mode, data_dir: give the others defaults or bind them"),
    "input_fn(mode, batch_size) is called with batch_size": (
        dict(input_fn=lambda mode, batch_size: [1, 2, 3]), TypeError, r"^input_fn returned \[1, 2, 3\] in mode TRAIN"),
    "input_fn returns a list of scalars": (
        dict(input_fn=lambda mode: [1, 2, 3]), TypeError,
        r"^input_fn returned \[1, 2, 3\] in mode TRAIN: its input 0 \(1\) is a scalar, with no samples to cut "
        r"\(each item of a list or tuple is a separate input\); return a tf\.data\.Dataset, or arrays whose "
        r"first dimension indexes the samples"),
    "input_fn returns arrays of unequal length": (
        dict(input_fn=lambda mode: (IMAGES, LABELS[:-1])), TypeError,
        r"its inputs hold different numbers of samples \(100, 99\); return a tf\.data\.Dataset"),
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
    assert "Traceback" not in str(caught.value) and "tensorflow" not in str(caught.value).lower()
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


# The same mistakes from a recipe: one line, exit 2, before training and before log_dir is written.

recipe_input_fn = runlib.input_fn_for(IMAGES, LABELS)


def recipe_model_fn_without_log_info(inputs, mode):
    return _no_log_info_model_fn(inputs, mode)


def _recipe(tmp_path, model, input_name="tests.training.test_run_errors:recipe_input_fn", model_kwargs="{}"):
    log_dir = tmp_path / "log_dir"
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"run: {{steps: 4, batch_size: 10, eval_steps: 1, log_dir: {log_dir}}}\n"
                      f"input: {{name: '{input_name}'}}\nmodel: {{name: '{model}', kwargs: {model_kwargs}}}\n"
                      "optimizer: {name: sgd, learning_rate: 0.1}\n")
    return recipe, log_dir


def recipe_model_fn_with_scale(inputs, scale):
    return runlib.softmax_model_fn(inputs, "TRAIN")


RECIPE_CASES = {
    "model_fn(inputs)": (dict(model="tests.training.test_run_errors:_model_fn_without_mode"),
                         "model.name: tests.training.test_run_errors:_model_fn_without_mode(inputs) cannot be called "
                         "as model_fn(inputs, mode); declare def _model_fn_without_mode(inputs, mode)"),
    "input_fn()": (dict(model="tests.runlib:softmax_model_fn",
                        input_name="tests.training.test_run_errors:_input_fn_without_mode"),
                   "input.name: tests.training.test_run_errors:_input_fn_without_mode() cannot be called as "
                   "input_fn(mode); declare def _input_fn_without_mode(mode)"),
    "model_fn(inputs, scale) with kwargs": (
        dict(model="tests.training.test_run_errors:recipe_model_fn_with_scale", model_kwargs="{scale: 2}"),
        "model.name: tests.training.test_run_errors:recipe_model_fn_with_scale(inputs, scale) cannot be called as "
        "model_fn(inputs, mode) with kwargs scale; declare def recipe_model_fn_with_scale(inputs, mode, scale)"),
    "no log_info for the evaluation after training": (
        dict(model="tests.training.test_run_errors:recipe_model_fn_without_log_info"),
        "model_fn returned ModelSpec(log_info=None) in EVAL mode, which the recipe runs after training "
        "(run.evaluate: true); return the metrics to average"),
}


@pytest.mark.parametrize("case", sorted(RECIPE_CASES))
def test_a_recipe_with_a_user_function_mistake_exits_2_with_one_line_before_training(tmp_path, capsys, case):
    from moxlite.recipes import cli

    changes, message = RECIPE_CASES[case]
    recipe, log_dir = _recipe(tmp_path, **changes)
    assert cli.main([str(recipe)]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.startswith("moxlite-run: error:")]
    assert len(lines) == 1 and message in lines[0], err
    assert "Traceback" not in err and "Training:" not in err, err
    assert not log_dir.exists()


def test_a_thor_include_that_matches_no_layer_is_refused_before_log_dir_is_written(tmp_path, capsys):
    from moxlite.recipes import cli

    log_dir = tmp_path / "thor"
    code = cli.main(["recipes/mnist_cnn_thor.yaml", "--set", f"run.log_dir={log_dir}", "--set", "run.steps=2",
                     "--set", "optimizer.wrappers.0.include=[nosuch]"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        "moxlite-run: error: thor: include=['nosuch']: 'nosuch' matches no layer of model_fn; use a part of one of "
        "these names: conv2d/kernel, conv2d_1/kernel, dense/kernel, logits/kernel"), err
    assert "Traceback" not in err
    assert not log_dir.exists()
