"""Checkpoints keyed by stable names (issue 8, item 5).

Restore and warm start match variables by name and shape, checked against the
checkpoint's own contents: a layer inserted before the head, layers created in
the other order, Keras made-up names across runs in one process, what does not
match, and checkpoints written by the earlier creation-order format.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite import errors
from tests import runlib

BATCH = 16
TINY_LR = 1e-12   # one step that leaves restored weights where they were, to within float32


def _dense(units, name, seed):
    return keras.layers.Dense(units, name=name, kernel_initializer=keras.initializers.GlorotUniform(seed=seed))


def base_model_fn(inputs, mode):
    images, labels = inputs
    hidden = _dense(32, "hidden", 1)(images)
    return runlib.spec_for(images, labels, _dense(runlib.NUM_CLASSES, "head", 2)(tf.nn.relu(hidden)))


def inserted_model_fn(inputs, mode):
    """A layer inserted before the head: creation order shifts, names do not."""
    images, labels = inputs
    hidden = _dense(32, "hidden", 1)(images)
    extra = _dense(32, "inserted", 3)(tf.nn.relu(hidden))
    return runlib.spec_for(images, labels, _dense(runlib.NUM_CLASSES, "head", 2)(tf.nn.relu(extra)))


def swapped_model_fn(inputs, mode):
    """Two layers of equal shapes created in the other order than in the checkpoint."""
    images, labels = inputs
    second = _dense(runlib.NUM_CLASSES, "b_branch", 5)(images)   # Keras creates variables on call
    first = _dense(runlib.NUM_CLASSES, "a_branch", 4)(images)
    return runlib.spec_for(images, labels, first + second)


def ordered_model_fn(inputs, mode):
    images, labels = inputs
    first = _dense(runlib.NUM_CLASSES, "a_branch", 4)
    second = _dense(runlib.NUM_CLASSES, "b_branch", 5)
    return runlib.spec_for(images, labels, first(images) + second(images))


def unnamed_model_fn(inputs, mode):
    images, labels = inputs
    hidden = keras.layers.Dense(32, kernel_initializer=keras.initializers.GlorotUniform(seed=1))(images)
    return runlib.spec_for(images, labels, keras.layers.Dense(runlib.NUM_CLASSES)(tf.nn.relu(hidden)))


def unnamed_inserted_model_fn(inputs, mode):
    images, labels = inputs
    hidden = keras.layers.Dense(32)(images)
    extra = keras.layers.Dense(16)(tf.nn.relu(hidden))
    return runlib.spec_for(images, labels, keras.layers.Dense(runlib.NUM_CLASSES)(tf.nn.relu(extra)))


def _run(log_dir, model_fn, steps, lr=0.05, **kwargs):
    images, labels = runlib.mnist_rows(128)
    return runlib.train(log_dir, runlib.input_fn_for(images, labels), model_fn,
                        mox.get_optimizer_fn("sgd", lr), steps=steps, batch_size=BATCH, **kwargs)


def test_warm_start_with_an_inserted_layer_restores_each_variable_by_name(tmp_path):
    _run(tmp_path / "base", base_model_fn, 3)
    source = runlib.checkpoint_by_name(tmp_path / "base")
    assert list(source) == ["hidden/kernel", "hidden/bias", "head/kernel", "head/bias"]
    mox.set_flag("checkpoint_exclude_patterns", "inserted")
    _run(tmp_path / "tuned", inserted_model_fn, 1, lr=TINY_LR, checkpoint_path=str(tmp_path / "base"))
    tuned = runlib.checkpoint_by_name(tmp_path / "tuned")
    for name in source:
        np.testing.assert_allclose(tuned[name], source[name], atol=1e-6, err_msg=name)
    assert tuned["inserted/kernel"].shape == (32, 32)


def test_layers_created_in_the_other_order_restore_by_name(tmp_path):
    _run(tmp_path / "base", ordered_model_fn, 3)
    source = runlib.checkpoint_by_name(tmp_path / "base")
    assert not np.allclose(source["a_branch/kernel"], source["b_branch/kernel"])
    _run(tmp_path / "tuned", swapped_model_fn, 1, lr=TINY_LR, checkpoint_path=str(tmp_path / "base"))
    tuned = runlib.checkpoint_by_name(tmp_path / "tuned")
    assert list(tuned)[0] == "b_branch/kernel"   # created first this time
    for name in source:
        np.testing.assert_allclose(tuned[name], source[name], atol=1e-6, err_msg=name)
    # Resuming the same log_dir with the other creation order also reads by name.
    _run(tmp_path / "base", swapped_model_fn, 3)
    np.testing.assert_allclose(runlib.checkpoint_by_name(tmp_path / "base")["a_branch/kernel"],
                               source["a_branch/kernel"], atol=1e-6)


def test_made_up_keras_names_match_across_runs_in_one_process(tmp_path):
    """Unnamed layers get dense, dense_1 in the checkpoint whatever Keras's counters say."""
    keras.layers.Dense(3)   # moves Keras's name counter, as earlier work in a process would
    _run(tmp_path / "run", unnamed_model_fn, 3)
    saved = runlib.checkpoint_by_name(tmp_path / "run")
    assert list(saved) == ["dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"]
    images, labels = runlib.mnist_rows(128)
    metrics = mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=unnamed_model_fn,
                      run_mode=mox.ModeKeys.EVAL, batch_size=BATCH, log_dir=str(tmp_path / "run"))
    hidden = np.maximum(images @ saved["dense/kernel"] + saved["dense/bias"], 0)
    logits = hidden @ saved["dense_1/kernel"] + saved["dense_1/bias"]
    np.testing.assert_allclose(metrics["accuracy"], np.mean(logits.argmax(1) == labels), atol=1e-6)


def test_unmatched_names_fail_with_the_lists_and_write_nothing(tmp_path):
    _run(tmp_path / "base", unnamed_model_fn, 2)
    before = runlib.directory_state(tmp_path / "base")
    with pytest.raises(errors.CheckpointError) as raised:
        _run(tmp_path / "tuned", unnamed_inserted_model_fn, 1, checkpoint_path=str(tmp_path / "base"))
    message = str(raised.value)
    assert "\n" not in message
    assert "not in the checkpoint: [dense_2/kernel, dense_2/bias]" in message
    assert "shape differs" in message and "dense_1/kernel (32, 16) vs (32, 10)" in message
    assert "checkpoint_exclude_patterns" in message
    assert runlib.directory_state(tmp_path / "base") == before


def _write_creation_order_checkpoint(directory, arrays, step):
    """A checkpoint as the earlier moxlite wrote it: model/v0000... in creation order."""
    variables = {f"v{i:04d}": tf.Variable(a) for i, a in enumerate(arrays)}
    checkpoint = tf.train.Checkpoint(global_step=tf.Variable(step, dtype=tf.int64), model=variables)
    tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=1,
                               checkpoint_name="model.ckpt").save(checkpoint_number=step)


def test_checkpoints_keyed_by_creation_order_still_read_or_say_how_to_convert(tmp_path):
    rng = np.random.RandomState(0)
    arrays = [rng.rand(784, 32).astype(np.float32), rng.rand(32).astype(np.float32),
              rng.rand(32, 10).astype(np.float32), rng.rand(10).astype(np.float32)]
    _write_creation_order_checkpoint(tmp_path / "old", arrays, step=7)
    images, labels = runlib.mnist_rows(128)
    metrics = mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=base_model_fn,
                      run_mode=mox.ModeKeys.EVAL, batch_size=BATCH, log_dir=str(tmp_path / "old"))
    logits = np.maximum(images @ arrays[0] + arrays[1], 0) @ arrays[2] + arrays[3]
    assert metrics["global_step"] == 7
    np.testing.assert_allclose(metrics["accuracy"], np.mean(logits.argmax(1) == labels), atol=1e-6)
    with pytest.raises(errors.CheckpointError, match="keyed variables by creation order.*convert it first"):
        _run(tmp_path / "tuned", inserted_model_fn, 1, checkpoint_path=str(tmp_path / "old"))


def asymmetric_model_fn(inputs, mode):
    """Two equal-shaped layers whose gradients differ (b_branch goes through a relu)."""
    images, labels = inputs
    first = _dense(runlib.NUM_CLASSES, "a_branch", 4)(images)
    second = _dense(runlib.NUM_CLASSES, "b_branch", 5)(images)
    return runlib.spec_for(images, labels, first + tf.nn.relu(second))


def asymmetric_swapped_model_fn(inputs, mode):
    images, labels = inputs
    second = _dense(runlib.NUM_CLASSES, "b_branch", 5)(images)
    first = _dense(runlib.NUM_CLASSES, "a_branch", 4)(images)
    return runlib.spec_for(images, labels, first + tf.nn.relu(second))


def _momentum():
    return mox.get_optimizer_fn("momentum", 0.05, momentum=0.9)


OPTIMIZER_STACKS = {
    "momentum": _momentum,
    # lars keeps its own state through momentum; batch_gradients adds an accumulator per variable.
    "batch_gradients(lars(momentum))": lambda: mox.get_optimizer_wrapper_fn(
        "batch_gradients", mox.get_optimizer_wrapper_fn("lars", _momentum(), ratio=0.01), num_batches=2),
    # thor adds per-layer factors and inverses, created when it first sees the layers called.
    "thor(momentum)": lambda: mox.get_optimizer_wrapper_fn("thor", _momentum(), damping=0.05, frequency=2),
}


def _run_stack(log_dir, model_fn, steps, stack):
    images, labels = runlib.mnist_rows(128)
    return runlib.train(log_dir, runlib.input_fn_for(images, labels), model_fn, OPTIMIZER_STACKS[stack](),
                        steps=steps, batch_size=BATCH, save_model_steps=1)


@pytest.mark.parametrize("stack", list(OPTIMIZER_STACKS))
def test_resume_with_layers_created_in_the_other_order_keeps_each_optimizer_slot_on_its_variable(tmp_path, stack):
    """Slots follow names: a resumed run whose model_fn creates two equal-shaped layers in the
    other order ends where the uninterrupted run does (a_branch's momentum, accumulator and
    factors stay a_branch's). Before, they were restored by position, onto b_branch."""
    _run_stack(tmp_path / "whole", asymmetric_model_fn, 6, stack)
    _run_stack(tmp_path / "resumed", asymmetric_model_fn, 3, stack)
    _run_stack(tmp_path / "resumed", asymmetric_swapped_model_fn, 6, stack)
    whole = runlib.checkpoint_by_name(tmp_path / "whole")
    resumed = runlib.checkpoint_by_name(tmp_path / "resumed")
    assert list(resumed)[0] == "b_branch/kernel"   # created first by the resuming model_fn
    assert not np.allclose(whole["a_branch/kernel"], whole["b_branch/kernel"])
    for name in whole:
        np.testing.assert_allclose(resumed[name], whole[name], atol=1e-5, err_msg=name)


def _write_creation_order_slots(monkeypatch, log_dir, model_fn, steps):
    """A checkpoint as the moxlite before this change wrote it: optimizer slots in creation
    order and no marker saying they follow names."""
    from moxlite.training.state import checkpoints
    from moxlite.training.capture import shared_variables as template

    with monkeypatch.context() as patch:
        patch.setattr(template.SharedVariablesModelFn, "slot_order", lambda self, variables: list(variables))
        patch.setattr(checkpoints, "SLOTS_BY_NAME_KEY", "unrelated_marker")
        _run_stack(log_dir, model_fn, steps, "momentum")


def test_checkpoint_with_slots_in_creation_order_resumes_only_in_that_order(tmp_path, monkeypatch):
    _run_stack(tmp_path / "whole", asymmetric_model_fn, 4, "momentum")
    _write_creation_order_slots(monkeypatch, tmp_path / "old", asymmetric_model_fn, 2)
    before = runlib.directory_state(tmp_path / "old")
    with pytest.raises(errors.CheckpointError, match="slots .* in variable creation order.*another order"):
        _run_stack(tmp_path / "old", asymmetric_swapped_model_fn, 4, "momentum")
    assert runlib.directory_state(tmp_path / "old") == before
    # The order that wrote it keeps its slots in creation order and ends where a new run does.
    _run_stack(tmp_path / "old", asymmetric_model_fn, 4, "momentum")
    whole, old = runlib.checkpoint_by_name(tmp_path / "whole"), runlib.checkpoint_by_name(tmp_path / "old")
    for name in whole:
        np.testing.assert_allclose(old[name], whole[name], atol=1e-5, err_msg=name)


def closed_over_model_fn():
    """A model_fn closing over a keras.Sequential built before run(), unnamed layers and all,
    as a script that pre-trains and then fine-tunes in one process builds it twice."""
    net = keras.Sequential([keras.layers.Dense(32, activation="relu",
                                               kernel_initializer=keras.initializers.GlorotUniform(seed=1)),
                            keras.layers.Dense(runlib.NUM_CLASSES,
                                               kernel_initializer=keras.initializers.GlorotUniform(seed=2))])

    def model_fn(inputs, mode):
        images, labels = inputs
        return runlib.spec_for(images, labels, net(images))

    model_fn.net = net
    return model_fn


def test_a_closed_over_model_built_again_in_one_process_fits_its_checkpoint(tmp_path):
    """sequential_1/dense_2 (the second build) fits sequential/dense: the names a fresh process gives."""
    keras.Sequential()   # earlier work in the process moved Keras's counters
    keras.layers.Dense(3)
    _run(tmp_path / "pretrain", closed_over_model_fn(), 3)
    saved = runlib.checkpoint_by_name(tmp_path / "pretrain")
    assert list(saved) == ["sequential/dense/kernel", "sequential/dense/bias",
                           "sequential/dense_1/kernel", "sequential/dense_1/bias"]
    images, labels = runlib.mnist_rows(128)
    metrics = mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=closed_over_model_fn(),
                      run_mode=mox.ModeKeys.EVAL, batch_size=BATCH, log_dir=str(tmp_path / "pretrain"))
    hidden = np.maximum(images @ saved["sequential/dense/kernel"] + saved["sequential/dense/bias"], 0)
    logits = hidden @ saved["sequential/dense_1/kernel"] + saved["sequential/dense_1/bias"]
    np.testing.assert_allclose(metrics["accuracy"], np.mean(logits.argmax(1) == labels), atol=1e-6)
    # A warm start of a third build, then one step too small to move the weights.
    _run(tmp_path / "tuned", closed_over_model_fn(), 1, checkpoint_path=str(tmp_path / "pretrain"),
         lr=TINY_LR)
    tuned = runlib.checkpoint_by_name(tmp_path / "tuned")
    assert list(tuned) == list(saved)
    for name in saved:
        np.testing.assert_allclose(tuned[name], saved[name], atol=1e-6, err_msg=name)


def test_a_checkpoint_keyed_by_the_made_up_names_themselves_still_restores(tmp_path):
    """Before made-up names ahead of model_fn took their fresh-process form, a closed-over
    model's checkpoint held them as Keras gave them (sequential_7/dense_12/...): still read."""
    from moxlite import compat
    from moxlite.training.state import checkpoints

    keras.Sequential([keras.layers.Dense(3)])   # earlier work in the process moved Keras's counters
    model_fn = closed_over_model_fn()
    model_fn.net.build((None, runlib.NUM_FEATURES))
    variables = [compat.backing_variable(v) for v in model_fn.net.variables]
    assert not variables[0].name.startswith("sequential/dense/")   # the counters moved in this process
    rng = np.random.RandomState(0)
    values = [rng.normal(size=v.shape).astype(np.float32) for v in variables]
    for variable, value in zip(variables, values):
        variable.assign(value)
    checkpoints.Checkpointer(str(tmp_path / "old"), tf.Variable(5, dtype=tf.int64), variables).save(5)
    for variable in variables:
        variable.assign(tf.zeros_like(variable))
    images, labels = runlib.mnist_rows(128)
    metrics = mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=model_fn,
                      run_mode=mox.ModeKeys.EVAL, batch_size=BATCH, checkpoint_path=str(tmp_path / "old"))
    logits = np.maximum(images @ values[0] + values[1], 0) @ values[2] + values[3]
    assert metrics["global_step"] == 5
    np.testing.assert_allclose(metrics["accuracy"], np.mean(logits.argmax(1) == labels), atol=1e-6)


def test_names_made_up_before_the_call_come_first_and_those_of_the_call_after_them():
    from moxlite.training.state import checkpoint_keys as naming

    counters = {"sequential": 4, "dense": 7}        # Keras's, after model_fn's first call
    during_call = {"dense_6": "dense"}               # made_up_names: the call's first dense
    names = ["sequential_3/dense_4/kernel", "sequential_3/dense_5/kernel", "dense_6/kernel", "head/kernel",
             "dense_9/kernel", "W"]
    renamed = naming.made_up_before(names, counters, during_call)
    assert [naming.stable_key(name, renamed) for name in names] == [
        "sequential/dense/kernel", "sequential/dense_1/kernel", "dense_2/kernel", "head/kernel",
        "dense_9/kernel",   # a name Keras never handed out is the user's own
        "W"]
