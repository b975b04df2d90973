"""Non-finite losses and gradients (issue 8, item 2).

A NaN planted in one batch stands in for a learning rate that blows up: the
default stops at that step with one line and keeps the last finite
checkpoint (checked against numpy), on 1 and 2 replicas and with several
steps per traced call; nonfinite_policy=skip skips exactly that update
(numpy with the step left out, momentum included) and stops after K in a row.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite.training.trainers import nonfinite
from tests import runlib

BATCH = 16
BAD_BATCH = 12      # 0-based: global step 13 meets it


def _poisoned(images, bad_batches):
    images = images.copy()
    for batch in bad_batches:
        images[batch * BATCH + 3, 5] = np.nan
    return images


def _train(log_dir, images, labels, num_gpus=1, steps=30, momentum=0.0, **kwargs):
    mox.set_flag("num_gpus", num_gpus)
    extra = {"momentum": momentum} if momentum else {}
    return runlib.train(log_dir, runlib.input_fn_for(images, labels), runlib.softmax_model_fn,
                        mox.get_optimizer_fn("momentum" if momentum else "sgd", 0.5, **extra), steps=steps,
                        batch_size=BATCH // num_gpus, save_model_steps=5, keep_checkpoint_max=1, **kwargs)


def _numpy(images, labels, num_steps, skipped=(), momentum=0.0):
    kernel, bias = np.zeros((runlib.NUM_FEATURES, runlib.NUM_CLASSES)), np.zeros(runlib.NUM_CLASSES)
    velocity_k, velocity_b = np.zeros_like(kernel), np.zeros_like(bias)
    for step in range(num_steps):
        if step in skipped:
            continue
        index = np.arange(step * BATCH, (step + 1) * BATCH) % len(labels)
        x, y = images[index].astype(np.float64), labels[index]
        p = runlib.softmax_probabilities(x @ kernel + bias)
        p[np.arange(BATCH), y] -= 1.0
        velocity_k = momentum * velocity_k - 0.5 * x.T @ p / BATCH
        velocity_b = momentum * velocity_b - 0.5 * p.mean(axis=0)
        kernel, bias = kernel + velocity_k, bias + velocity_b
    return kernel, bias


@pytest.mark.parametrize("num_gpus,steps_per_loop", [(1, 1), (1, 4), (2, 1)])
def test_default_stops_at_the_first_non_finite_step_and_keeps_the_last_finite_checkpoint(
        tmp_path, num_gpus, steps_per_loop):
    images, labels = runlib.mnist_rows(480)
    # On 2 replicas the NaN is in the second replica's half: log_first_clone would not see it.
    images = _poisoned(images, [BAD_BATCH])
    if num_gpus == 2:
        images[BAD_BATCH * BATCH + 3, 5] = 0.0
        images[BAD_BATCH * BATCH + BATCH // 2 + 1, 5] = np.nan
    with pytest.raises(nonfinite.NonFiniteError) as raised:
        _train(tmp_path, images, labels, num_gpus=num_gpus, steps_per_loop=steps_per_loop)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("non-finite loss or gradient at global step 13 (loss=nan): training stopped, "
                              f"the last finite checkpoint is kept: {tmp_path}/model.ckpt-10;")
    assert "lower the learning rate" in message and "--nonfinite_policy=skip" in message
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-10")
    kernel, bias = runlib.checkpoint_variables(tmp_path)
    expected_kernel, expected_bias = _numpy(np.nan_to_num(images), labels, 10)
    np.testing.assert_allclose(kernel, expected_kernel, atol=2e-5)
    np.testing.assert_allclose(bias, expected_bias, atol=2e-5)


def test_skip_policy_leaves_out_exactly_the_non_finite_updates(tmp_path, capsys):
    images, labels = runlib.mnist_rows(480)
    images = _poisoned(images, [BAD_BATCH, 20])
    mox.set_flag("nonfinite_policy", "skip")
    result = _train(tmp_path, images, labels, steps=24, momentum=0.9)
    assert result["global_step"] == 24
    kernel, bias = runlib.checkpoint_variables(tmp_path)
    expected_kernel, expected_bias = _numpy(images, labels, 24, skipped=(BAD_BATCH, 20), momentum=0.9)
    np.testing.assert_allclose(kernel, expected_kernel, atol=5e-5)
    np.testing.assert_allclose(bias, expected_bias, atol=5e-5)
    out = capsys.readouterr()
    assert "Skipped 1 non-finite step(s) up to global step 21 (loss=nan): 1 in a row, 2 in all" in out.out + out.err


def test_skip_policy_stops_after_k_in_a_row(tmp_path):
    images, labels = runlib.mnist_rows(480)
    images = _poisoned(images, range(8, 30))
    mox.set_flag("nonfinite_policy", "skip")
    mox.set_flag("max_consecutive_nonfinite", 3)
    with pytest.raises(nonfinite.NonFiniteError, match="3 non-finite steps in a row .* up to global step 11 "):
        _train(tmp_path, images, labels)
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-10")
    kernel, _ = runlib.checkpoint_variables(tmp_path)
    np.testing.assert_allclose(kernel, _numpy(images, labels, 10, skipped=(8, 9))[0], atol=2e-5)


def test_with_loss_scaling_only_the_unscaled_loss_is_checked():
    """An overflowing scaled gradient is the LossScaleOptimizer's to skip, not a reason to stop."""
    inner = keras.optimizers.SGD(0.1)
    scaled = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))
    gradients = [[tf.constant([1.0, np.inf])]]
    assert float(nonfinite.step_flag([tf.constant(0.5)], gradients, [inner])[nonfinite.FLAG_KEY]) == 1.0
    assert float(nonfinite.step_flag([tf.constant(0.5)], gradients, [scaled])[nonfinite.FLAG_KEY]) == 0.0
    assert float(nonfinite.step_flag([tf.constant(np.nan)], [[tf.ones(2)]], [scaled])[nonfinite.FLAG_KEY]) == 1.0


@pytest.mark.slow
@pytest.mark.parametrize("num_batches", [1, 2])
def test_parameter_server_training_stops_at_a_non_finite_step_and_keeps_finite_checkpoints(launches, tmp_path,
                                                                                           num_batches):
    from tests import distlib

    # One worker: the step that reads the NaN row is counted on the ps whichever worker runs it;
    # a second worker would only add a TensorFlow process. num_batches=2: batch_gradients
    # accumulates inside one scheduled step, through the pipeline the trainer built once.
    run = launches(["--workers=1", "--ps=1", "--async"],
                   ["python", distlib.script("train_mnist.py"), f"--log_dir={tmp_path}", "--steps=200",
                    "--batch=16", "--model=softmax", "--save_steps=4", f"--nan_row={16 * 15 + 2}",
                    f"--num_batches={num_batches}"], timeout=150)
    assert run.wait() != 0, run.output()
    assert "non-finite loss or gradient at global step" in run.output(), run.output()
    assert "the last finite checkpoint is kept" in run.output()
    saved = tf.train.latest_checkpoint(str(tmp_path))
    assert saved is not None and int(saved.rsplit("-", 1)[1]) < 200
    assert all(np.isfinite(v).all() for v in runlib.checkpoint_variables(saved))


# A gradient that breaks while its loss stays finite: only the loss is checked per step under
# the default policy; the next step's loss, or the check every save makes, stops the run.

def _broken_logits_model_fn(inputs, mode):
    images, labels, poison = inputs
    logits = keras.layers.Dense(runlib.NUM_CLASSES, kernel_initializer="zeros", bias_initializer="zeros")(images)
    return runlib.spec_for(images, labels, runlib.poison_gradient(logits, poison))


def _hidden_row_model_fn(inputs, mode):
    """Softmax regression plus a table whose row 1 only the poisoned samples read, at weight 0
    in the loss: that row turns NaN and no later loss reads it."""
    images, labels, poison = inputs
    logits = keras.layers.Dense(runlib.NUM_CLASSES, kernel_initializer="zeros", bias_initializer="zeros")(images)
    rows = keras.layers.Embedding(2, 1, embeddings_initializer="ones")(tf.cast(poison > 0, tf.int32))
    loss = runlib.cross_entropy(logits, labels) + 0.0 * tf.reduce_mean(runlib.poison_gradient(rows, poison))
    return mox.ModelSpec(loss=loss, log_info={"loss": loss})


def _train_poisoned(log_dir, model_fn, bad_batch, num_gpus=1, steps_per_loop=1, **kwargs):
    images, labels = runlib.mnist_rows(480)
    poison = np.zeros(len(labels), np.float32)
    poison[bad_batch * BATCH + (BATCH - 2 if num_gpus == 2 else 3)] = 1.0   # on 2 replicas, in the second's half
    mox.set_flag("num_gpus", num_gpus)

    def input_fn(mode):
        return tf.data.Dataset.from_tensor_slices((images, labels, poison)).repeat()

    runlib.train(log_dir, input_fn, model_fn, mox.get_optimizer_fn("sgd", 0.5), steps=30,
                 batch_size=BATCH // num_gpus, save_model_steps=5, keep_checkpoint_max=1,
                 steps_per_loop=steps_per_loop, **kwargs)
    return images, labels


def _assert_kept_step_10(log_dir, images, labels):
    assert tf.train.latest_checkpoint(str(log_dir)).endswith("model.ckpt-10")
    saved = runlib.checkpoint_by_name(log_dir)
    assert all(np.isfinite(value).all() for value in saved.values())
    kernel, bias = [value for key, value in saved.items() if "dense" in key]
    expected_kernel, expected_bias = _numpy(images, labels, 10)
    np.testing.assert_allclose(kernel, expected_kernel, atol=2e-5)
    np.testing.assert_allclose(bias, expected_bias, atol=2e-5)


@pytest.mark.parametrize("num_gpus,steps_per_loop", [(1, 1), (1, "auto"), (2, 1)])
def test_a_gradient_that_breaks_the_weights_stops_the_run_at_the_next_step(tmp_path, num_gpus, steps_per_loop):
    images, labels = runlib.mnist_rows(480)
    with pytest.raises(nonfinite.NonFiniteError) as raised:
        _train_poisoned(tmp_path, _broken_logits_model_fn, BAD_BATCH, num_gpus, steps_per_loop)
    # Step 13's gradient is infinite, its loss finite; step 14 reads the broken weights.
    assert str(raised.value).startswith("non-finite loss or gradient at global step 14 (loss=nan): training "
                                        f"stopped, the last finite checkpoint is kept: {tmp_path}/model.ckpt-10;")
    _assert_kept_step_10(tmp_path, images, labels)


def test_a_gradient_that_breaks_the_weights_on_a_save_step_is_not_saved(tmp_path):
    images, labels = runlib.mnist_rows(480)
    with pytest.raises(nonfinite.NonFiniteError) as raised:
        _train_poisoned(tmp_path, _broken_logits_model_fn, 14)   # global step 15, a save step
    # The save at step 15 is a reporting boundary: the state is checked before it, the
    # previous check having been at step 10 (a log line and a save).
    assert str(raised.value).startswith(
        "non-finite loss or gradient after global step 10 and by step 15: the loss stayed finite but the weights "
        "or optimizer variables are not (log_every_n_steps=1 checks them after every step): training stopped, "
        f"the last finite checkpoint is kept: {tmp_path}/model.ckpt-10;")
    _assert_kept_step_10(tmp_path, images, labels)


def test_a_broken_weight_no_loss_reads_is_caught_before_the_next_report(tmp_path):
    images, labels = runlib.mnist_rows(480)
    with pytest.raises(nonfinite.NonFiniteError) as raised:
        _train_poisoned(tmp_path, _hidden_row_model_fn, BAD_BATCH)
    assert "non-finite loss or gradient after global step 10 and by step 15: the loss stayed finite" in str(raised.value)
    _assert_kept_step_10(tmp_path, images, labels)


def test_skip_policy_checks_every_gradient_sparse_ones_included(tmp_path, capsys):
    mox.set_flag("nonfinite_policy", "skip")
    images, labels = _train_poisoned(tmp_path, _hidden_row_model_fn, BAD_BATCH)
    out = capsys.readouterr()
    assert "Skipped 1 non-finite step(s) up to global step 13 " in out.out + out.err
    saved = runlib.checkpoint_by_name(tmp_path)
    assert all(np.isfinite(value).all() for value in saved.values())
    kernel, _ = [value for key, value in saved.items() if "dense" in key]
    np.testing.assert_allclose(kernel, _numpy(images, labels, 30, skipped=(BAD_BATCH,))[0], atol=2e-5)


def test_skip_policy_stops_when_an_applied_update_breaks_the_weights(tmp_path, capsys):
    """A learning rate beyond float32 turns finite gradients into infinite updates: step 1 is
    applied (its loss and gradients are finite), step 2's loss is NaN and skipped. Skipping
    cannot mend broken weights, so the state check that ends the same call stops the run."""
    images, labels = runlib.mnist_rows(480)
    mox.set_flag("nonfinite_policy", "skip")
    with pytest.raises(nonfinite.NonFiniteError, match="at global step 2 or earlier: the loss stayed finite"):
        mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=runlib.softmax_model_fn,
                optimizer_fn=mox.get_optimizer_fn("sgd", 1e39), run_mode=mox.ModeKeys.TRAIN, batch_size=BATCH,
                log_dir=str(tmp_path), max_number_of_steps=12, log_every_n_steps=5, save_summary_steps=0,
                steps_per_loop=5)
    out = capsys.readouterr()
    assert "Skipped 1 non-finite step(s) up to global step 2 " in out.out + out.err
    assert tf.train.latest_checkpoint(str(tmp_path)) is None
