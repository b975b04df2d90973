"""MoXing's documented arguments take MoXing's documented values (issue 31 item 5).

MoXing documents ``save_summary_steps`` as unused in EVAL and its DGC ResNet-50 example passes
None there; its MNIST notebook documents ``export_model`` as "True or False". Both used to be
refused. The reference: numpy's softmax regression for the trained weights and the exported
model's logits.
"""

import os

import numpy as np
import tensorflow as tf

import moxlite as mox
from moxlite.training import config as run_config
from tests import runlib

ROWS = 16


def test_none_is_off_for_the_step_counts_in_every_mode():
    for mode in (mox.ModeKeys.TRAIN, mox.ModeKeys.EVAL, mox.ModeKeys.PREDICT):
        checked = run_config.from_run_arguments(dict(
            input_fn=lambda mode: None, model_fn=lambda inputs, mode: None, optimizer_fn=lambda: None,
            run_mode=mode, log_dir="/tmp/unused", save_summary_steps=None, log_every_n_steps=None,
            output_every_n_steps=None, max_number_of_steps=None))
        assert (checked.save_summary_steps, checked.log_every_n_steps, checked.output_every_n_steps,
                checked.max_number_of_steps) == (0, 0, 0, 0), mode


def test_export_model_true_exports_and_eval_takes_save_summary_steps_none(tmp_path):
    images, labels = runlib.mnist_rows(ROWS)
    input_fn = runlib.input_fn_for(images, labels)
    mox.run(input_fn=input_fn, model_fn=runlib.softmax_model_fn, optimizer_fn=mox.get_optimizer_fn("sgd", 0.5),
            run_mode=mox.ModeKeys.TRAIN, batch_size=ROWS, log_dir=str(tmp_path), max_number_of_steps=2,
            export_model=True)
    kernel, bias = runlib.numpy_softmax_regression(images, labels, ROWS, 2, 0.5)
    exported = [os.path.join(root) for root, _, names in os.walk(tmp_path) if "saved_model.pb" in names]
    assert len(exported) == 1
    serving = tf.saved_model.load(exported[0]).signatures["serving_default"]
    logits = list(serving(images=tf.constant(images)).values())[0].numpy()
    np.testing.assert_allclose(logits, images @ kernel + bias, atol=1e-4)

    metrics = mox.run(input_fn=input_fn, model_fn=runlib.softmax_model_fn, run_mode=mox.ModeKeys.EVAL,
                      batch_size=ROWS, log_dir=str(tmp_path), save_summary_steps=None)   # the DGC example's
    expected = np.mean((images @ kernel + bias).argmax(axis=1) == labels)
    np.testing.assert_allclose(metrics["accuracy"], expected, atol=1e-6)
