"""RunConfig: the one frozen, typed thing the runner reads; a recipe fills it and sets no flag."""

import dataclasses
import os

import pytest

from moxlite import errors, flags
from moxlite.contract import ModeKeys
from moxlite.recipes import cli
from moxlite.training import config

from tests import ROOT as REPO

QUICK_START = os.path.join(REPO, "recipes", "mnist_mlp.yaml")


def _input_fn(mode):
    raise AssertionError("not called")


def _model_fn(inputs, mode):
    raise AssertionError("not called")


def _all_flags():
    return {name: flags.flag_value(name) for name in flags.FLAG_TABLE}


def test_a_recipe_run_sets_no_flag_and_ignores_the_scripts_flags(capsys, tmp_path):
    # A script's flags, none of which the recipe below may see or change.
    flags.set_flag("num_gpus", 1)
    flags.set_flag("gradient_clip_type", "not-a-clip-type")
    flags.set_flag("loss_scale", "garbage")
    flags.set_flag("batch_size", 3)
    flags.set_flag("trainable_exclude_patterns", "dense")   # would leave nothing to train
    before = _all_flags()
    code = cli.main([QUICK_START, "--set", f"run.log_dir={tmp_path / 'run'}", "--set", "run.steps=20",
                     "--set", "run.save_model_steps=20", "--set", "run.log_every_n_steps=10",
                     "--set", "model.mlp.hidden_units=[16]", "--set", "distribute.num_gpus=2",
                     "--set", "precision.gradient_clip=5", "--set", "run.evaluate=false"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert _all_flags() == before
    # The recipe's fields took effect: two replicas, batch 64 per replica, to step 20.
    assert "Training: 2 replica(s), batch 64 per replica, global batch 128, from step 0" in captured.out
    import tensorflow as tf

    saved = tf.train.load_checkpoint(str(tmp_path / "run"))
    assert saved.get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE") == 20


def _config(**changes):
    fields = dict(input_fn=_input_fn, model_fn=_model_fn, run_mode=ModeKeys.TRAIN, batch_size=8, log_dir="/tmp/x",
                  optimizer_fn=(lambda: None,))
    fields.update(changes)
    return config.RunConfig(**fields)


def test_run_config_is_frozen():
    run_config = _config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        run_config.batch_size = 16
    with pytest.raises(dataclasses.FrozenInstanceError):
        run_config.distribution.num_gpus = 2
    assert dataclasses.replace(run_config, batch_size=16).batch_size == 16 and run_config.batch_size == 8


@pytest.mark.parametrize("field, value, expected", [
    ("batch_size", "8", "RunConfig.batch_size='8' is not valid; pass an integer or None"),
    ("batch_size", True, "RunConfig.batch_size=True is not valid; pass an integer or None"),
    ("auto_batch", 1, "RunConfig.auto_batch=1 is not valid; pass True or False"),
    ("log_dir", 5, "RunConfig.log_dir=5 is not valid; pass a string or None"),
    ("optimizer_fn", [print], "RunConfig.optimizer_fn=[<built-in function print>] is not valid; pass a tuple of a callable"),
    ("model_fn", "net", "RunConfig.model_fn='net' is not valid; pass a callable"),
    ("nonfinite_policy", "skip", "RunConfig.nonfinite_policy='skip' is not valid; pass a Policy"),
])
def test_a_bad_field_is_one_line_naming_it(field, value, expected):
    with pytest.raises(errors.ArgumentError) as raised:
        _config(**{field: value})
    assert str(raised.value) == expected


def test_a_bad_distribution_field_names_it():
    with pytest.raises(errors.ArgumentError, match=r"^Distribution.num_gpus='2' is not valid; pass an integer$"):
        config.Distribution(num_gpus="2")


def test_run_arguments_take_their_defaults_from_the_flags_and_settings_win():
    arguments = dict(input_fn=_input_fn, model_fn=_model_fn, run_mode=ModeKeys.EVAL)
    flags.set_flag("batch_size", 12)
    flags.set_flag("steps_per_loop", 4)
    flags.set_flag("gradient_clip", 2.0)
    flags.set_flag("nonfinite_policy", "skip")
    flags.set_flag("num_gpus", 2)
    from_flags = config.from_run_arguments(arguments)
    assert (from_flags.batch_size, from_flags.steps_per_loop, from_flags.precision.gradient_clip,
            from_flags.nonfinite_policy.action, from_flags.distribution.num_gpus) == (12, 4, 2.0, "skip", 2)
    given = config.from_run_arguments(dict(arguments, batch_size=5), settings={"gradient_clip": 0.5, "num_gpus": 1})
    assert (given.batch_size, given.precision.gradient_clip, given.distribution.num_gpus) == (5, 0.5, 1)
    with pytest.raises(errors.ArgumentError, match="^RunConfig settings \\['no_such_flag'\\] are not MoXing flags"):
        config.from_run_arguments(arguments, settings={"no_such_flag": 1})
    # A bad flag is still reported as the flag it is.
    flags.set_flag("gradient_clip_type", "diagonal")
    with pytest.raises(errors.ArgumentError, match="^--gradient_clip_type='diagonal' is not valid"):
        config.from_run_arguments(arguments)
