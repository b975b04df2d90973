"""Checkpoints when input_fn's pipeline has stateful ops (random ops in a ``.map``).

TensorFlow cannot save such an iterator's position. The run says so in one
line before training, checkpoints model, optimizer and step without it, and a
resume skips the batches already trained on, as a run on several replicas does.
Weights are checked against numpy (a stateful op that leaves values alone) and
against the checkpoint a resume starts from.
"""

import keras
import numpy as np
import tensorflow as tf

import moxlite as mox
from moxlite.training.state import checkpoints
from moxlite.training.state import input_resume
from tests import runlib

BATCH = 16
NOTICE = "Checkpoints cannot save the input position because input_fn's pipeline has stateful ops"


def _train(log_dir, input_fn, steps, model_fn=runlib.softmax_model_fn, **kwargs):
    return runlib.train(log_dir, input_fn, model_fn, mox.get_optimizer_fn("momentum", 0.5, momentum=0.9),
                        steps=steps, batch_size=BATCH, **kwargs)


def _numpy(images, labels, num_steps):
    return runlib.numpy_softmax_regression(images, labels, BATCH, num_steps, 0.5, momentum=0.9)


def _notices(capsys):
    out = capsys.readouterr()
    return (out.out + out.err).count(NOTICE)


def test_stateful_op_in_the_pipeline_saves_model_and_resume_skips_what_was_trained(tmp_path, capsys):
    images, labels = runlib.mnist_rows(160)
    plain = runlib.input_fn_for(images, labels)

    def input_fn(mode):   # tf.random.uniform is stateful; times zero it leaves numpy's reference exact
        return plain(mode).map(lambda x, y: (x + 0.0 * tf.random.uniform([]), y))

    assert _train(tmp_path, input_fn, 4)["global_step"] == 4
    assert _notices(capsys) == 1
    assert runlib.checkpoint_step(str(tmp_path)) == 4
    names = [name for name, _ in tf.train.list_variables(str(tmp_path))]
    assert not any(name.startswith("iterator") for name in names), names
    kernel, bias = runlib.checkpoint_variables(tmp_path)
    np.testing.assert_allclose(kernel, _numpy(images, labels, 4)[0], atol=2e-5)
    np.testing.assert_allclose(bias, _numpy(images, labels, 4)[1], atol=2e-5)
    # Resumed: step, weights and momentum from the checkpoint, input from batch 4 on, so the
    # weights after 10 steps are those of 10 uninterrupted ones.
    assert _train(tmp_path, input_fn, 10)["global_step"] == 10
    assert _notices(capsys) == 1
    kernel, bias = runlib.checkpoint_variables(tmp_path)
    np.testing.assert_allclose(kernel, _numpy(images, labels, 10)[0], atol=2e-5)
    np.testing.assert_allclose(bias, _numpy(images, labels, 10)[1], atol=2e-5)


def test_random_flip_pipeline_resumes_from_the_saved_step_and_weights(tmp_path, capsys):
    images, labels = runlib.mnist_rows(160)

    def input_fn(mode):
        def flipped(x, y):
            image = tf.image.random_flip_left_right(tf.reshape(x, [28, 28, 1]))
            return tf.reshape(image, [runlib.NUM_FEATURES]), y
        return runlib.input_fn_for(images, labels)(mode).map(flipped)

    layers = []

    def recording_model_fn(inputs, mode):   # runlib.mlp_model_fn, keeping its layers to read after run()
        x, y = inputs
        hidden = keras.layers.Dense(32, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(seed=1))
        output = keras.layers.Dense(runlib.NUM_CLASSES, kernel_initializer=keras.initializers.GlorotUniform(seed=2))
        layers[:] = [hidden, output]
        return runlib.spec_for(x, y, output(hidden(x)))

    _train(tmp_path, input_fn, 6, model_fn=recording_model_fn, save_model_steps=3)
    assert _notices(capsys) == 1
    assert [p.name for p in sorted(tmp_path.glob("model.ckpt-*.index"))] == ["model.ckpt-3.index",
                                                                             "model.ckpt-6.index"]
    saved = runlib.checkpoint_variables(tmp_path)
    # A resume to the saved step trains nothing: its variables are what it restored.
    assert _train(tmp_path, input_fn, 6, model_fn=recording_model_fn)["global_step"] == 6
    out = capsys.readouterr()
    assert "Restored global step 6 >= max_number_of_steps 6" in out.out + out.err
    restored = [v.numpy() for layer in layers for v in (layer.kernel, layer.bias)]
    assert len(restored) == len(saved)
    for got, want in zip(restored, saved):
        np.testing.assert_array_equal(got, want)
    # Trained on from there: the log says step 6, the next checkpoint is step 8 with new weights.
    assert _train(tmp_path, input_fn, 8, model_fn=recording_model_fn)["global_step"] == 8
    out = capsys.readouterr()
    assert "from step 6" in out.out + out.err and (out.out + out.err).count(NOTICE) == 1
    assert runlib.checkpoint_step(str(tmp_path)) == 8
    for before, after in zip(saved, runlib.checkpoint_variables(tmp_path)):
        assert np.all(np.isfinite(after)) and not np.array_equal(before, after)


def test_a_save_refused_for_stateful_input_is_redone_without_the_input_position(tmp_path, capsys):
    dataset = tf.data.Dataset.range(100).map(lambda x: x + tf.cast(tf.random.uniform([]) * 0, tf.int64))
    iterator = iter(dataset)
    next(iterator)
    step = tf.Variable(3, dtype=tf.int64)
    weight = tf.Variable([1.0, 2.0])
    checkpointer = checkpoints.Checkpointer(str(tmp_path), step, {"w": weight}, iterator=iterator,
                                            save_model_steps=1)
    path = checkpointer.save(3)
    assert path == str(tmp_path / "model.ckpt-3")
    out = capsys.readouterr()
    assert (out.out + out.err).count(NOTICE + " (RandomUniform is stateful);") == 1
    assert sorted(name for name, _ in tf.train.list_variables(path)
                  if not name.startswith("_CHECKPOINTABLE")) == [
        "global_step/.ATTRIBUTES/VARIABLE_VALUE", "model/w/.ATTRIBUTES/VARIABLE_VALUE",
        "model_variable_order/.ATTRIBUTES/VARIABLE_VALUE", "save_counter/.ATTRIBUTES/VARIABLE_VALUE"]
    checkpointer.save(4)
    assert _notices(capsys) == 0   # said once
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".index")) == [
        "model.ckpt-3.index", "model.ckpt-4.index"]
    # The probe run() uses sees the same refusal before training, and writes nothing in log_dir.
    assert input_resume.position_unsavable(iter(dataset)) == "RandomUniform is stateful"
    assert input_resume.position_unsavable(iter(tf.data.Dataset.range(3))) is None
