"""Raw image folders and the zoo's preprocessing, against the files and numpy."""

import os

import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite import errors
from moxlite.data import mnist
from moxlite.training.input.replica_batches import call_input_fn


def write_digit_folders(root, per_class=4, classes=(0, 1, 2), size=None):
    """Bundled MNIST digits as PNG files in root/<class name>/; returns {path: (pixels, label)}."""
    (images, labels), _ = mnist.split(validation_fraction=0.2, seed=0)
    written = {}
    for label_id, digit in enumerate(classes):
        folder = os.path.join(root, f"digit_{digit}")
        os.makedirs(folder, exist_ok=True)
        for count, index in enumerate(np.flatnonzero(labels == digit)[:per_class]):
            pixels = np.round(images[index] * 255).astype(np.uint8)[..., None]
            if size:
                pixels = tf.cast(tf.round(tf.image.resize(pixels, size)), tf.uint8).numpy()
            path = os.path.join(folder, f"{count:03d}.png")
            tf.io.write_file(path, tf.io.encode_png(pixels))
            written[path] = (pixels, label_id)
    return written


def test_metadata_counts_the_class_folders(tmp_path):
    written = write_digit_folders(str(tmp_path), per_class=3)
    (tmp_path / "digit_1" / "notes.txt").write_text("not an image")
    meta = mox.ImageClassificationRawMetadata(base_dir=str(tmp_path))
    assert (meta.num_classes, meta.total_num_samples) == (3, 9)
    assert meta.labels == ["digit_0", "digit_1", "digit_2"]
    assert dict(zip(meta.file_paths, meta.label_ids)) == {p: label for p, (_, label) in written.items()}


def test_dataset_features_are_the_files_decoded(tmp_path):
    written = write_digit_folders(str(tmp_path), per_class=3)
    meta = mox.ImageClassificationRawMetadata(base_dir=str(tmp_path))
    dataset = mox.ImageClassificationRawDataset(meta, num_epochs=1, shuffle=True,
                                                reader_class=mox.AsyncRawGenerator)
    elements = list(call_input_fn(lambda mode: dataset.get(["image", "label", "image_name"]), mox.ModeKeys.TRAIN))
    assert len(elements) == 9
    names = [name.numpy().decode() for _, _, name in elements]
    assert sorted(names) == sorted(written) and names != meta.file_paths   # all of them, shuffled
    for image, label, name in elements:
        pixels, label_id = written[name.numpy().decode()]
        np.testing.assert_array_equal(image.numpy(), np.repeat(pixels, 3, axis=-1))   # grey -> RGB
        assert int(label) == label_id


def test_eval_preprocessing_equals_numpy():
    rng = np.random.default_rng(1)
    # vgg family (ResNet v1): shorter side already 32*256/224 = 37 px -> only the centre crop and caffe scaling.
    image = rng.integers(0, 256, (37, 45, 3)).astype(np.uint8)
    got = mox.get_data_augmentation_fn("resnet_v1_50", mox.ModeKeys.EVAL, output_height=32, output_width=32)(image)
    crop = image[2:34, 6:38].astype(np.float32)
    expected = crop[..., ::-1] - np.array([103.939, 116.779, 123.68], np.float32)
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-4)
    # inception family (ResNet v2): the central 87.5 % of 32 px is 28 px -> no resize, x/127.5 - 1.
    image = rng.integers(0, 256, (32, 32, 3)).astype(np.uint8)
    got = mox.get_data_augmentation_fn("resnet_v2_50", mox.ModeKeys.EVAL, output_height=28, output_width=28)(image)
    np.testing.assert_allclose(got.numpy(), image[2:30, 2:30] / 127.5 - 1.0, atol=1e-5)


@pytest.mark.parametrize("name", ["resnet_v1_50", "inception_v3"])
def test_train_augmentation_is_random_geometry_then_the_same_scaling(name):
    """On a one-colour image crops and flips change nothing: the output is numpy's scaling of that colour."""
    colour = np.array([200, 30, 90], np.float32)
    image = np.broadcast_to(colour, (50, 60, 3)).astype(np.uint8)
    fn = mox.get_data_augmentation_fn(name, mox.ModeKeys.TRAIN, output_height=24, output_width=20)
    got = fn(image).numpy()
    assert got.shape == (24, 20, 3)
    expected = colour[::-1] - np.array([103.939, 116.779, 123.68]) if name == "resnet_v1_50" else colour / 127.5 - 1
    np.testing.assert_allclose(got, np.broadcast_to(expected, got.shape), atol=1e-3)
    gradient = np.tile(np.arange(60, dtype=np.uint8)[None, :, None], (50, 1, 3))
    crops = {tuple(fn(gradient).numpy()[0, :, 0].round(3)) for _ in range(6)}
    assert len(crops) > 1   # the geometry is random


def test_a_crop_taller_than_wide_always_fits_the_resized_image():
    """VGG/ResNet-v1 resize the shorter side from min(h, w) * 256/224 up: for a 24x20 crop that
    was 23 rows, and one random draw in a few failed with 'Need value.shape >= size'."""
    train = mox.get_data_augmentation_fn("resnet_v1_50", mox.ModeKeys.TRAIN, output_height=24, output_width=20)
    evaluate = mox.get_data_augmentation_fn("resnet_v1_50", mox.ModeKeys.EVAL, output_height=24, output_width=20)
    wide = np.zeros((10, 40, 3), np.uint8)
    assert {train(wide).numpy().shape for _ in range(60)} == {(24, 20, 3)}
    assert evaluate(wide).numpy().shape == (24, 20, 3)


def test_wrong_inputs_get_one_line_errors(tmp_path):
    with pytest.raises(errors.ArgumentError, match="is not a folder"):
        mox.ImageClassificationRawMetadata(base_dir=str(tmp_path / "missing"))
    (tmp_path / "empty_class").mkdir()
    with pytest.raises(errors.ArgumentError, match="holds no"):
        mox.ImageClassificationRawMetadata(base_dir=str(tmp_path))
    with pytest.raises(errors.ArgumentError, match="no Keras Applications counterpart"):
        mox.get_data_augmentation_fn("lenet", mox.ModeKeys.TRAIN)


def test_random_augmentation_resumes_exactly(tmp_path):
    """TRAIN augmentation is random yet checkpointable: 2 steps, a stop, 2 more equal 4 straight."""
    import keras

    write_digit_folders(str(tmp_path / "data"), per_class=4, classes=(0, 1), size=(20, 20))
    meta = mox.ImageClassificationRawMetadata(base_dir=str(tmp_path / "data"))

    def input_fn(mode):
        augment = mox.get_data_augmentation_fn("resnet_v1_50", mode, output_height=12, output_width=12)
        return mox.ImageClassificationRawDataset(meta, augmentation_fn=augment).get(["image", "label"])

    def model_fn(inputs, mode):
        images, labels = inputs
        logits = keras.layers.Dense(2, kernel_initializer="zeros")(keras.layers.Flatten()(images / 255.0))
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))
        return mox.ModelSpec(loss=loss, log_info={"loss": loss})

    def train(log_dir, steps):
        mox.run(input_fn=input_fn, model_fn=model_fn, optimizer_fn=mox.get_optimizer_fn("sgd", 0.01),
                run_mode=mox.ModeKeys.TRAIN, batch_size=3, log_dir=str(log_dir), max_number_of_steps=steps,
                log_every_n_steps=100)

    train(tmp_path / "straight", 4)
    train(tmp_path / "resumed", 2)
    train(tmp_path / "resumed", 4)
    from tests import runlib
    for straight, resumed in zip(runlib.checkpoint_variables(str(tmp_path / "straight")),
                                 runlib.checkpoint_variables(str(tmp_path / "resumed"))):
        np.testing.assert_array_equal(straight, resumed)


def test_augmentation_applied_in_input_fn_as_moxing_scripts_did(tmp_path):
    """image, label = dataset.get(...); image = augmentation_fn(image) in input_fn: the same images as
    augmentation_fn given to the data set."""
    write_digit_folders(str(tmp_path), per_class=2, classes=(0, 1), size=(36, 36))
    meta = mox.ImageClassificationRawMetadata(base_dir=str(tmp_path))
    augment = mox.get_data_augmentation_fn("inception_v3", mox.ModeKeys.TRAIN, output_height=24, output_width=24)

    def in_input_fn(mode):
        image, label = mox.ImageClassificationRawDataset(meta, num_epochs=1).get(["image", "label"])
        return augment(image), label

    def in_dataset(mode):
        return mox.ImageClassificationRawDataset(meta, num_epochs=1, augmentation_fn=augment).get(["image", "label"])

    first = list(call_input_fn(in_input_fn, mox.ModeKeys.TRAIN))
    second = list(call_input_fn(in_dataset, mox.ModeKeys.TRAIN))
    assert len(first) == 4 and first[0][0].shape == (24, 24, 3)
    for (image_a, label_a), (image_b, label_b) in zip(first, second):
        np.testing.assert_array_equal(image_a.numpy(), image_b.numpy())
        assert int(label_a) == int(label_b)


RECIPE = """
run: {mode: train, steps: 2, batch_size: 4, log_every_n_steps: 1}
input:
  name: moxlite.zoo.recipe_fns:raw_folder_input_fn
  kwargs: {base_dir: %(data)s, model_name: mobilenet_v1_025, image_size: 32}
  num_samples: 6
model:
  name: moxlite.zoo.recipe_fns:classifier_model_fn
  kwargs: {model_name: mobilenet_v1_025, num_classes: 3, weight_decay: 0.0001}
optimizer: {name: momentum, learning_rate: "1:0.01,2:0.001", kwargs: {momentum: 0.9}}
"""


def test_zoo_classifier_through_a_recipe(tmp_path, capsys):
    from moxlite.recipes import cli
    from tests import runlib

    write_digit_folders(str(tmp_path / "data"), per_class=2, classes=(0, 1, 2), size=(36, 36))
    recipe = tmp_path / "zoo.yaml"
    recipe.write_text(RECIPE % {"data": tmp_path / "data"})
    code = cli.main([str(recipe), "--set", f"run.log_dir={tmp_path / 'log'}"])
    assert code == 0, capsys.readouterr().err[-2000:]
    assert runlib.checkpoint_step(str(tmp_path / "log")) == 2
    assert runlib.checkpoint_by_name(str(tmp_path / "log"))["logits/kernel"].shape == (256, 3)
