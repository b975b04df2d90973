"""Checkpoints: resume equals an uninterrupted run, cadence, retention, priority, exclusions."""

import glob
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from tests import runlib

BATCH = 16


def train(log_dir, steps, model_fn=runlib.mlp_model_fn, optimizer_fn=None, **kwargs):
    images, labels = runlib.mnist_rows(300)
    kwargs = {"batch_size": BATCH, "log_every_n_steps": 5, **kwargs}
    return runlib.train(log_dir, runlib.input_fn_for(images, labels, shuffle_seed=7), model_fn,
                        optimizer_fn or mox.get_optimizer_fn("adam", learning_rate=0.01), steps=steps, **kwargs)


@pytest.mark.parametrize("num_gpus", [1, 2])
def test_interrupted_then_resumed_run_ends_with_the_uninterrupted_weights(tmp_path, num_gpus):
    mox.set_flag("num_gpus", num_gpus)
    train(tmp_path / "straight", 24)
    train(tmp_path / "resumed", 11, save_model_steps=5)   # stops mid-epoch, off the save cadence
    result = train(tmp_path / "resumed", 24, save_model_steps=5)
    assert result["global_step"] == 24
    straight = runlib.checkpoint_variables(tmp_path / "straight")
    resumed = runlib.checkpoint_variables(tmp_path / "resumed")
    for a, b in zip(straight, resumed):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_restored_step_at_or_past_max_ends_at_once(tmp_path, capsys):
    train(tmp_path, 10)
    before = runlib.directory_state(str(tmp_path))
    result = train(tmp_path, 8)
    assert result == {"global_step": 10}
    assert "nothing to train" in capsys.readouterr().out
    assert runlib.directory_state(str(tmp_path)) == before


def test_save_cadence_in_steps_and_bounded_retention(tmp_path):
    train(tmp_path, 20, save_model_steps=4, keep_checkpoint_max=2)
    state = tf.train.get_checkpoint_state(str(tmp_path))
    kept = [int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths]
    assert kept == [16, 20]
    assert len(glob.glob(os.path.join(str(tmp_path), "model.ckpt-*.index"))) == 2


def test_seconds_win_over_steps_when_both_are_given(tmp_path):
    # save_model_secs is an hour: the step cadence must be ignored, leaving only the final save.
    train(tmp_path, 12, save_model_steps=3, save_model_secs=3600)
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert [int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths] == [12]


def test_checkpoint_in_log_dir_wins_over_checkpoint_path(tmp_path, capsys):
    train(tmp_path / "other", 6)
    train(tmp_path / "own", 4)
    result = train(tmp_path / "own", 8, checkpoint_path=str(tmp_path / "other"))
    out = capsys.readouterr().out
    assert "Ignoring --checkpoint_path because a checkpoint already exists in" in out
    assert result["global_step"] == 8   # resumed from its own step 4, not from other's 6


def _named_mlp_model_fn(inputs, mode):
    images, labels = inputs
    hidden = keras.layers.Dense(32, activation="relu", name="hidden",
                                kernel_initializer=keras.initializers.GlorotUniform(seed=1))(images)
    logits = keras.layers.Dense(runlib.NUM_CLASSES, name="logits",
                                kernel_initializer=keras.initializers.GlorotUniform(seed=2))(hidden)
    return runlib.spec_for(images, labels, logits)


def test_warm_start_from_checkpoint_path_skips_excluded_variables(tmp_path):
    train(tmp_path / "source", 10, model_fn=_named_mlp_model_fn)
    source = runlib.checkpoint_variables(tmp_path / "source")
    mox.set_flag("checkpoint_exclude_patterns", "logits")
    result = train(tmp_path / "target", 1, model_fn=_named_mlp_model_fn,
                   checkpoint_path=str(tmp_path / "source"),
                   optimizer_fn=mox.get_optimizer_fn("sgd", learning_rate=1e-12))
    target = runlib.checkpoint_variables(tmp_path / "target")
    assert result["global_step"] == 1   # a warm start begins at step 0
    np.testing.assert_allclose(target[0], source[0], atol=1e-6)   # hidden kernel: restored
    assert not np.allclose(target[2], source[2], atol=1e-3)       # logits kernel: its initial value


def test_exclude_patterns_match_whole_components_anywhere_and_say_what_they_left_out(tmp_path, capsys):
    """'logits' leaves out mlp/logits/* (not mlp/logits_extra/*), inside the path of a closed-over model."""
    def closed_over():
        net = keras.Sequential([
            keras.layers.Dense(32, name="hidden", kernel_initializer=keras.initializers.GlorotUniform(seed=1),
                               activation="relu"),
            keras.layers.Dense(32, name="logits_extra", kernel_initializer=keras.initializers.GlorotUniform(seed=3)),
            keras.layers.Dense(runlib.NUM_CLASSES, name="logits",
                               kernel_initializer=keras.initializers.GlorotUniform(seed=2))], name="mlp")

        def model_fn(inputs, mode):
            images, labels = inputs
            return runlib.spec_for(images, labels, net(images))

        return model_fn

    train(tmp_path / "source", 10, model_fn=closed_over())
    source = runlib.checkpoint_by_name(tmp_path / "source")
    mox.set_flag("checkpoint_exclude_patterns", "logits")
    capsys.readouterr()
    train(tmp_path / "target", 1, model_fn=closed_over(), checkpoint_path=str(tmp_path / "source"),
          optimizer_fn=mox.get_optimizer_fn("sgd", learning_rate=1e-12))
    target = runlib.checkpoint_by_name(tmp_path / "target")
    for name in ("mlp/hidden/kernel", "mlp/logits_extra/kernel", "mlp/logits_extra/bias"):
        np.testing.assert_allclose(target[name], source[name], atol=1e-6, err_msg=name)   # restored
    assert not np.allclose(target["mlp/logits/kernel"], source["mlp/logits/kernel"], atol=1e-3)   # initial
    out = capsys.readouterr()
    assert ("checkpoint_exclude_patterns (not restored): 'logits' -> [mlp/logits/kernel, mlp/logits/bias] (2)"
            in out.out + out.err)
