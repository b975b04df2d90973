"""keras.applications models closed over behind a dict or a helper (issue 33, items 1 and 5).

Found on MobileNetV2 and EfficientNetB0 built before ``run`` from their constructors: the
checkpoint held none of their BatchNorm moving statistics, a resume restarted them, and export
refused the untracked resources. Tiny sizes (32x32 inputs, MobileNetV2 at alpha 0.35, 3 classes,
no pretrained weights). References: an uninterrupted run, PREDICT's outputs, the trained model.
Slow: each model takes seconds to trace on 2 cores, and each test runs it several times.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from tests import runlib
from tests import traced_pathslib as paths

pytestmark = pytest.mark.slow

BATCH = 4
NUM_CLASSES = 3
IMAGES, LABELS = paths.data(16, (32, 32, 3), NUM_CLASSES)
INPUT_FN = paths.input_fn_for(IMAGES, LABELS)


def mobilenet_v2():
    keras.utils.set_random_seed(0)   # the same initial weights on every construction
    return keras.applications.MobileNetV2(input_shape=(32, 32, 3), alpha=0.35, weights=None,
                                          classes=NUM_CLASSES, classifier_activation=None)


def efficientnet_b0():
    keras.utils.set_random_seed(0)
    return keras.applications.EfficientNetB0(input_shape=(32, 32, 3), weights=None, classes=NUM_CLASSES,
                                             classifier_activation=None)


def train(log_dir, model_fn, steps):
    runlib.train(log_dir, INPUT_FN, model_fn, mox.get_optimizer_fn("sgd", learning_rate=0.01), steps=steps,
                 batch_size=BATCH)
    return runlib.checkpoint_by_name(str(log_dir))


def served_and_predicted(model_fn, checkpoint_path, export_dir):
    predicted = paths.predicted_logits(INPUT_FN, model_fn, checkpoint_path, BATCH)
    exported = mox.run(input_fn=INPUT_FN, model_fn=model_fn, run_mode=mox.ModeKeys.EXPORT, batch_size=BATCH,
                       log_dir=str(export_dir), checkpoint_path=checkpoint_path)
    served = tf.saved_model.load(exported).signatures["serving_default"]
    return served(images=tf.constant(IMAGES))["logits"].numpy(), predicted


def test_mobilenet_v2_behind_a_helper_or_dict_keeps_its_statistics_through_resume_and_export(tmp_path):
    net = mobilenet_v2()
    straight = train(tmp_path / "straight", paths.model_fn_through("helper", net), steps=4)
    statistics = paths.moving_statistics(straight)
    assert len(statistics) == len(net.non_trainable_variables) == 104
    by_path = {v.path: v.numpy() for v in net.non_trainable_variables}
    for key, value in statistics.items():
        np.testing.assert_allclose(value, by_path[key], rtol=1e-6, err_msg=key)

    resumed_dir = tmp_path / "resumed"
    train(resumed_dir, paths.model_fn_through("dict", mobilenet_v2()), steps=2)
    resumed = train(resumed_dir, paths.model_fn_through("dict", mobilenet_v2()), steps=4)
    assert sorted(resumed) == sorted(straight)
    for key, value in resumed.items():
        # The same float32 computation in the same order: equal up to a few ulps of values up to 1e4.
        np.testing.assert_allclose(value, straight[key], rtol=1e-5, atol=1e-6, err_msg=key)

    served, predicted = served_and_predicted(paths.model_fn_through("helper", mobilenet_v2()),
                                             str(tmp_path / "straight"), tmp_path / "export")
    np.testing.assert_allclose(predicted, net(IMAGES, training=False).numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(served, predicted, rtol=1e-5, atol=1e-5)


def test_efficientnet_b0_closed_over_behind_a_dict_exports_what_predict_computes(tmp_path):
    net = efficientnet_b0()
    train(tmp_path / "trained", paths.model_fn_through("dict", net), steps=1)
    served, predicted = served_and_predicted(paths.model_fn_through("dict", efficientnet_b0()),
                                             str(tmp_path / "trained"), tmp_path / "export")
    np.testing.assert_allclose(predicted, net(IMAGES, training=False).numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(served, predicted, rtol=1e-5, atol=1e-5)
