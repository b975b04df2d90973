"""Every variable a traced model_fn reads is checkpointed, restored and exported (issue 33, items 1 and 5).

A model closed over and reached through a dict, a helper, a method or a module attribute kept
its trainable weights (a gradient tape saw them) but lost its BatchNorm moving statistics:
the checkpoint held none, a resume restarted them, EVAL used the initial ones and export
refused the untracked resources. The reference for each path is the same model named in
model_fn (which always worked), an uninterrupted run, and the trained model itself.
The tiny models here are fast; the keras.applications models they were found on are slow.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from tests import runlib
from tests import traced_pathslib as paths

BATCH = 8
STEPS = 4


def small_bn_net(seed=1):
    return keras.Sequential([
        keras.Input((6,)),
        keras.layers.Dense(8, kernel_initializer=keras.initializers.GlorotUniform(seed=seed)),
        keras.layers.BatchNormalization(momentum=0.5),
        keras.layers.ReLU(),
        keras.layers.Dense(3, kernel_initializer=keras.initializers.GlorotUniform(seed=seed + 1)),
    ])


IMAGES, LABELS = paths.data(64, (6,), 3)
INPUT_FN = paths.input_fn_for(IMAGES, LABELS)


def train(log_dir, model_fn, steps=STEPS):
    runlib.train(log_dir, INPUT_FN, model_fn, mox.get_optimizer_fn("sgd", learning_rate=0.1), steps=steps,
                 batch_size=BATCH)
    return runlib.checkpoint_by_name(str(log_dir))


@pytest.fixture(scope="module")
def named_run(tmp_path_factory):
    """The reference: the model named in model_fn, trained STEPS steps."""
    log_dir = tmp_path_factory.mktemp("named")
    return train(log_dir, paths.model_fn_through("named", small_bn_net()))


@pytest.mark.parametrize("path", [p for p in paths.PATHS if p != "named"])
def test_the_checkpoint_holds_batchnorm_statistics_whatever_the_path_to_the_model(path, named_run, tmp_path):
    net = small_bn_net()
    saved = train(tmp_path, paths.model_fn_through(path, net))
    statistics = paths.moving_statistics(saved)
    assert sorted(statistics) == sorted(paths.moving_statistics(named_run))
    assert len(statistics) == 2
    for key, value in statistics.items():
        np.testing.assert_allclose(value, named_run[key], rtol=1e-6, atol=1e-6)
    # They are the trained model's own (training moved them off their initial 0 and 1).
    by_name = {v.path: v.numpy() for v in net.non_trainable_variables}
    np.testing.assert_allclose(statistics[next(k for k in statistics if k.endswith("moving_mean"))],
                               by_name["sequential/batch_normalization/moving_mean"], rtol=1e-6)
    assert np.abs(by_name["sequential/batch_normalization/moving_mean"]).max() > 0.1


def test_a_resume_through_a_dict_ends_where_the_uninterrupted_run_does(named_run, tmp_path):
    """2 + 2 steps, each run on a freshly built model (as a new process would) through a dict."""
    train(tmp_path, paths.model_fn_through("dict", small_bn_net()), steps=STEPS // 2)
    resumed = train(tmp_path, paths.model_fn_through("dict", small_bn_net()), steps=STEPS)
    assert sorted(resumed) == sorted(named_run)
    for key, value in resumed.items():
        np.testing.assert_allclose(value, named_run[key], rtol=1e-5, atol=1e-6, err_msg=key)


@pytest.mark.parametrize("path", ["helper", "method"])
def test_eval_and_export_of_a_fresh_model_through_a_helper_use_the_trained_statistics(path, tmp_path):
    trained = small_bn_net()
    train(tmp_path, paths.model_fn_through(path, trained))
    expected = trained(IMAGES, training=False).numpy()

    fresh = small_bn_net(seed=7)   # other initial weights, BatchNorm's 0 and 1: all must be restored
    model_fn = paths.model_fn_through(path, fresh)
    predicted = paths.predicted_logits(INPUT_FN, model_fn, str(tmp_path), BATCH)
    np.testing.assert_allclose(predicted, expected, rtol=1e-5, atol=1e-5)

    exported = mox.run(input_fn=INPUT_FN, model_fn=model_fn, run_mode=mox.ModeKeys.EXPORT, batch_size=BATCH,
                       log_dir=str(tmp_path / "export"), checkpoint_path=str(tmp_path))
    served = tf.saved_model.load(exported).signatures["serving_default"]
    np.testing.assert_allclose(served(images=tf.constant(IMAGES))["logits"].numpy(), predicted, rtol=1e-5, atol=1e-5)


def test_a_variable_read_through_its_handle_alone_is_refused_before_training(tmp_path):
    offset = tf.Variable(tf.zeros([3]), trainable=False, name="offset")
    handles = {"offset": offset.handle}

    def model_fn(inputs, mode):
        images, labels = inputs
        logits = keras.layers.Dense(3)(images)
        shift = tf.raw_ops.ReadVariableOp(resource=handles["offset"], dtype=tf.float32)
        return paths.spec_for(images, labels, logits + shift)

    with pytest.raises(mox.errors.ModelFnError, match="through their resource handle"):
        train(tmp_path, model_fn)
    assert not tf.train.latest_checkpoint(str(tmp_path))
