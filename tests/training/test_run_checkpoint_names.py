"""Checkpoints keyed by stable names.

Restore and warm start match variables by name and shape, checked against the
checkpoint's own contents: a layer inserted before the head, layers created in
the other order, Keras made-up names across runs in one process, and what does not
match.
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
    factors stay a_branch's), where slots restored by position would land on b_branch."""
    _run_stack(tmp_path / "whole", asymmetric_model_fn, 6, stack)
    _run_stack(tmp_path / "resumed", asymmetric_model_fn, 3, stack)
    _run_stack(tmp_path / "resumed", asymmetric_swapped_model_fn, 6, stack)
    whole = runlib.checkpoint_by_name(tmp_path / "whole")
    resumed = runlib.checkpoint_by_name(tmp_path / "resumed")
    assert list(resumed)[0] == "b_branch/kernel"   # created first by the resuming model_fn
    assert not np.allclose(whole["a_branch/kernel"], whole["b_branch/kernel"])
    for name in whole:
        np.testing.assert_allclose(resumed[name], whole[name], atol=1e-5, err_msg=name)


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


def test_names_made_up_before_the_call_come_first_and_those_of_the_call_after_them():
    from moxlite.training.state import checkpoint_keys

    counters = {"sequential": 4, "dense": 7}        # Keras's, after model_fn's first call
    during_call = {"dense_6": "dense"}               # made_up_names: the call's first dense
    names = ["sequential_3/dense_4/kernel", "sequential_3/dense_5/kernel", "dense_6/kernel", "head/kernel",
             "dense_9/kernel", "W"]
    renamed = checkpoint_keys.made_up_before(names, counters, during_call)
    assert [checkpoint_keys.stable_key(name, renamed) for name in names] == [
        "sequential/dense/kernel", "sequential/dense_1/kernel", "dense_2/kernel", "head/kernel",
        "dense_9/kernel",   # a name Keras never handed out is the user's own
        "W"]


# ---- a real model whose Keras paths repeat ------------------------------------------------------

T5_VOCABULARY, T5_TOKENS, T5_BATCH = 32, 6, 8


def _t5_model_fn(seed):
    """keras-hub's T5 at tiny size, from its constructor, closed over: its encoder and decoder
    both hold a ``self_attention/embeddings`` (relative position buckets), so two variables share
    that path. The loss: next-token cross entropy of a Dense head on the decoder's output."""
    import keras_hub

    keras.utils.set_random_seed(seed)
    backbone = keras_hub.models.T5Backbone(vocabulary_size=T5_VOCABULARY, num_layers=1, num_heads=2, hidden_dim=8,
                                           intermediate_dim=16, key_value_dim=4, dropout=0.0)
    head = keras.layers.Dense(T5_VOCABULARY, name="lm_head")

    def logits_of(tokens):
        ones = tf.ones_like(tokens)
        outputs = backbone({"encoder_token_ids": tokens, "encoder_padding_mask": ones,
                            "decoder_token_ids": tokens, "decoder_padding_mask": ones})
        return head(outputs["decoder_sequence_output"])

    def model_fn(inputs, mode):
        tokens, targets = inputs
        logits = logits_of(tokens)
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(targets, logits, from_logits=True))
        return mox.ModelSpec(loss=loss, log_info={"loss": loss}, output_info={"logits": logits})

    return model_fn, backbone, logits_of


def _t5_arrays(seed):
    tokens = np.random.default_rng(seed).integers(1, T5_VOCABULARY, size=(T5_BATCH, T5_TOKENS)).astype("int32")
    return tokens, np.roll(tokens, -1, axis=1)


def test_eval_and_predict_of_a_model_with_repeated_paths_read_its_own_checkpoint_exactly(tmp_path):
    import collections

    model_fn, backbone, logits_of = _t5_model_fn(seed=0)
    train, held_out = _t5_arrays(1), _t5_arrays(2)

    def input_fn(mode):
        if mode == mox.ModeKeys.TRAIN:
            return tf.data.Dataset.from_tensor_slices(train).repeat()
        return tf.data.Dataset.from_tensor_slices(held_out)

    mox.run(input_fn=input_fn, model_fn=model_fn, optimizer_fn=mox.get_optimizer_fn("adam", 0.05),
            run_mode=mox.ModeKeys.TRAIN, batch_size=T5_BATCH, log_dir=str(tmp_path / "t5"), max_number_of_steps=3)
    assert runlib.checkpoint_step(str(tmp_path / "t5")) == 3
    paths = collections.Counter(v.path for v in backbone.weights)
    assert [path for path, count in paths.items() if count > 1] == ["self_attention/embeddings"]
    # The reference: the trained weights, in Keras, before anything reads the checkpoint.
    expected_logits = logits_of(tf.constant(held_out[0])).numpy()
    expected_loss = float(np.mean(keras.losses.sparse_categorical_crossentropy(held_out[1], expected_logits,
                                                                               from_logits=True)))
    shared = [v.numpy() for v in backbone.weights if v.path == "self_attention/embeddings"]
    assert not np.allclose(shared[0], shared[1])   # read the wrong way round, the loss would differ

    # A fresh model_fn (other initial weights), given the TRAIN run's folder as checkpoint_path.
    fresh_model_fn, _, _ = _t5_model_fn(seed=5)
    metrics = mox.run(input_fn=input_fn, model_fn=fresh_model_fn, run_mode=mox.ModeKeys.EVAL, batch_size=T5_BATCH,
                      checkpoint_path=str(tmp_path / "t5"))
    np.testing.assert_allclose(metrics["loss"], expected_loss, rtol=1e-5)
    outputs = []
    predict_model_fn, _, _ = _t5_model_fn(seed=6)
    mox.run(input_fn=input_fn, model_fn=predict_model_fn, run_mode=mox.ModeKeys.PREDICT, batch_size=T5_BATCH,
            checkpoint_path=str(tmp_path / "t5"), output_fn=outputs.extend, output_every_n_steps=1)
    np.testing.assert_allclose(np.concatenate([output["logits"] for output in outputs]), expected_logits,
                               rtol=1e-5, atol=1e-5)


def test_a_warm_start_still_refuses_to_guess_between_variables_of_one_name(tmp_path):
    model_fn, _, _ = _t5_model_fn(seed=0)
    tokens = _t5_arrays(1)

    def input_fn(mode):
        return tf.data.Dataset.from_tensor_slices(tokens)

    arguments = dict(input_fn=input_fn, optimizer_fn=mox.get_optimizer_fn("sgd", 0.1), run_mode=mox.ModeKeys.TRAIN,
                     batch_size=T5_BATCH, max_number_of_steps=1)
    mox.run(model_fn=model_fn, log_dir=str(tmp_path / "t5"), **arguments)
    with pytest.raises(errors.CheckpointError, match=r"named \[self_attention/embeddings\] \(1\), so a warm start cannot "
                                                     r"tell which is which"):
        mox.run(model_fn=_t5_model_fn(seed=1)[0], log_dir=str(tmp_path / "tuned"),
                checkpoint_path=str(tmp_path / "t5"), **arguments)


def _twins_model_fn(count):
    """``count`` Dense layers all named 'twin', built inside model_fn: one Keras path for all."""

    def model_fn(inputs, mode):
        images, labels = inputs
        hidden = images
        for index in range(count):
            hidden = _dense(runlib.NUM_CLASSES, "twin", index)(hidden)
        return runlib.spec_for(images, labels, hidden)

    return model_fn


def test_eval_refuses_a_checkpoint_with_another_count_of_a_shared_name_naming_both(tmp_path):
    _run(tmp_path / "two", _twins_model_fn(2), 2)
    images, labels = runlib.mnist_rows(32)
    arguments = dict(input_fn=runlib.input_fn_for(images, labels, repeat=False), run_mode=mox.ModeKeys.EVAL,
                     batch_size=BATCH, checkpoint_path=str(tmp_path / "two"))
    # The same model_fn reads its own checkpoint, its two 'twin' layers in creation order ...
    metrics = mox.run(model_fn=_twins_model_fn(2), **arguments)
    saved = runlib.checkpoint_by_name(tmp_path / "two")
    logits = (images @ saved["twin/kernel~0"] + saved["twin/bias~0"]) @ saved["twin/kernel~1"] + saved["twin/bias~1"]
    np.testing.assert_allclose(metrics["accuracy"], np.mean(logits.argmax(1) == labels), atol=1e-6)
    # ... and one with three cannot say which two of its three they are.
    with pytest.raises(errors.CheckpointError, match=r"holds 2 variable\(s\) named 'twin/bias' \(shapes \[\(10,\), "
                                                     r"\(10,\)\]\) and this model_fn creates 3 \(shapes "):
        mox.run(model_fn=_twins_model_fn(3), **arguments)
