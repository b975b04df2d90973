"""Port (a) of issue 12: ResNet-50 fine-tuning from a raw image folder, run as its user would."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite.training.state.checkpoints import Checkpointer
from tests import runlib
from tests.portlib import run_port
from tests.moxing.test_raw_images import write_digit_folders

SIZE = 32
PRETRAINED_STEP = 1234
PRETRAINED_MOVING_VARIANCE = 3.0


def _pretrained_checkpoint(directory):
    """A 5-class 'ImageNet' ResNet-50 checkpoint in moxlite's format: the zoo's network built by
    plain Keras, batch-norm variances set to a value no fresh network has."""
    backbone = keras.applications.ResNet50(include_top=False, weights=None, input_shape=(SIZE, SIZE, 3),
                                           pooling="avg")
    logits = keras.layers.Dense(5, name="logits")(backbone.output)
    model = keras.Model(backbone.input, logits)
    for weight in model.weights:
        if weight.path.endswith("moving_variance"):
            weight.assign(np.full(weight.shape, PRETRAINED_MOVING_VARIANCE, np.float32))
    variables = [w.value for w in model.weights]
    step = tf.Variable(PRETRAINED_STEP, dtype=tf.int64)
    Checkpointer(directory, step, variables).save(PRETRAINED_STEP)
    return {w.path: w.numpy() for w in model.weights}


@pytest.mark.slow   # a ResNet-50 built, trained 3 steps and exported in a subprocess
def test_resnet_fine_tune_from_raw_folder(tmp_path):
    data_dir, pretrained_dir, out = tmp_path / "flowers", tmp_path / "pretrained", tmp_path / "train"
    write_digit_folders(str(data_dir), per_class=8, classes=(0, 1, 2), size=(40, 40))
    pretrained = _pretrained_checkpoint(str(pretrained_dir))
    run_port("resnet_finetune_raw.py", f"--data_url={data_dir}", f"--train_url={out}",
             f"--checkpoint_url={pretrained_dir}", "--batch_size=2", f"--image_size={SIZE}", "--max_steps=3")

    # global_step was excluded: the run counted its 3 steps from 0, not from the pretrained 1234.
    assert runlib.checkpoint_step(str(out)) == 3
    tuned = runlib.checkpoint_by_name(str(out))
    # The logits (get_model_meta's pattern) were excluded: a new 3-class head.
    assert tuned["logits/kernel"].shape == (2048, 3)
    # The backbone was restored: 3 steps at lr 0.01 move kernels by a few per cent at most, while
    # a fresh initialisation differs by ~140 %. A batch-norm moving variance after 3 steps is
    # 0.99**3 * start + (1 - 0.99**3) * (batch variances >= 0): at least 2.91 from the pretrained 3.0,
    # where a fresh start (1.0) could only reach it with batch variances near 68.
    for name, value in pretrained.items():
        if name.startswith("logits"):
            continue
        if name.endswith("kernel"):
            change = np.linalg.norm(tuned[name] - value) / np.linalg.norm(value)
            assert change < 0.2, (name, change)
        if name.endswith("moving_variance"):
            assert np.all(tuned[name] >= 0.99 ** 3 * PRETRAINED_MOVING_VARIANCE - 1e-4), name
    # var_scope(force_dtype=tf.float32) under fp16 compute: every variable stored in float32.
    assert {value.dtype for value in tuned.values()} == {np.dtype(np.float32)}

    # The export serves the trained network: the Keras application itself in mixed_float16 with
    # the checkpoint's weights gives the same logits.
    images = np.stack([mox.get_data_augmentation_fn("resnet_v1_50", mox.ModeKeys.EVAL, SIZE, SIZE)(
        tf.io.decode_png(tf.io.read_file(str(path)), channels=3)).numpy()
        for path in sorted((data_dir / "digit_1").iterdir())[:4]])
    served = tf.saved_model.load(str(out / "model" / "model")).signatures["serving_default"]
    logits = served(images=tf.constant(images))["logits"].numpy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        reference = keras.applications.ResNet50(include_top=True, weights=None, input_shape=(SIZE, SIZE, 3),
                                                classes=3, classifier_activation=None)
    finally:
        keras.config.set_dtype_policy("float32")
    for weight in reference.weights:
        weight.assign(tuned[weight.path.replace("predictions/", "logits/")])
    expected = reference(images, training=False).numpy().astype(np.float32)
    assert logits.shape == (4, 3) and logits.dtype == np.float32
    np.testing.assert_allclose(logits, expected, rtol=2e-2, atol=2e-2)
