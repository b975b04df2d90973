"""Built-in data sets: each input_fn yields exactly the samples its source holds."""

import os

import numpy as np
import pytest
import tensorflow as tf

from moxlite import ModeKeys
from moxlite.data import datasets, mnist


def collect(dataset):
    images, labels = zip(*[(image.numpy(), label.numpy()) for image, label in dataset])
    return np.stack(images), np.array(labels)


def test_mnist_eval_split_is_moxlites_held_out_split_in_order():
    (_, _), (val_images, val_labels) = mnist.split(0.2, 0)
    data = datasets.mnist(validation_fraction=0.2)
    images, labels = collect(data.input_fn(ModeKeys.EVAL))
    np.testing.assert_array_equal(images[..., 0], val_images)
    np.testing.assert_array_equal(labels, val_labels)
    assert (data.num_samples, data.num_eval_samples, data.image_shape) == (4000, 1000, (28, 28, 1))


def test_mnist_train_split_is_a_shuffled_repeat_of_the_training_digits():
    (train_images, train_labels), _ = mnist.split(0.2, 0)
    data = datasets.mnist(epochs=2, shuffle_buffer=4000, seed=3)
    images, labels = collect(data.input_fn(ModeKeys.TRAIN))
    assert len(labels) == 2 * len(train_labels)
    first_epoch = images[:4000, ..., 0].reshape(4000, -1)
    assert not np.array_equal(labels[:4000], train_labels)  # shuffled
    order = np.lexsort(first_epoch.T)
    reference_order = np.lexsort(train_images.reshape(4000, -1).T)
    np.testing.assert_array_equal(first_epoch[order], train_images.reshape(4000, -1)[reference_order])
    np.testing.assert_array_equal(np.bincount(labels[:4000]), np.bincount(train_labels))


def test_synthetic_sample_is_signal_times_class_prototype_plus_noise():
    shape, classes = (6, 5, 2), 3
    noisy = datasets.synthetic(shape, classes, num_samples=60, eval_samples=10, signal=0.0, shuffle_buffer=0, epochs=1)
    signalled = datasets.synthetic(shape, classes, num_samples=60, eval_samples=10, signal=2.0, shuffle_buffer=0, epochs=1)
    noise, labels = collect(noisy.input_fn(ModeKeys.TRAIN))
    images, same_labels = collect(signalled.input_fn(ModeKeys.TRAIN))
    np.testing.assert_array_equal(labels, same_labels)
    assert images.shape == (60,) + shape and set(labels) == {0, 1, 2}
    prototypes = (images - noise) / 2.0
    for label in range(classes):
        members = prototypes[labels == label]
        np.testing.assert_allclose(members, np.broadcast_to(members[0], members.shape), atol=1e-5)
    assert not np.allclose(prototypes[labels == 0][0], prototypes[labels == 1][0])
    assert abs(noise.mean()) < 0.1 and abs(noise.std() - 1.0) < 0.1


def test_synthetic_held_out_samples_differ_from_training_samples_and_repeat_exactly():
    data = datasets.synthetic((4, 4, 1), 5, num_samples=20, eval_samples=8, shuffle_buffer=0, epochs=1)
    train_images, _ = collect(data.input_fn(ModeKeys.TRAIN))
    eval_images, eval_labels = collect(data.input_fn(ModeKeys.EVAL))
    again_images, again_labels = collect(data.input_fn(ModeKeys.EVAL))
    assert eval_images.shape == (8, 4, 4, 1)
    np.testing.assert_array_equal(eval_images, again_images)
    np.testing.assert_array_equal(eval_labels, again_labels)
    assert min(np.abs(train - image).max() for train in train_images for image in eval_images) > 0.1


@pytest.mark.parametrize("image_format", ["encoded", "raw"])
def test_tfrecord_files_read_back_the_written_digits(tmp_path, image_format):
    digits, labels = mnist.load_arrays()
    chosen = np.arange(0, 5000, 250)
    images = digits[chosen][..., None]
    path = str(tmp_path / "part-0.tfrecord")
    datasets.write_tfrecords(path, images, labels[chosen] + 1, image_format=image_format)
    data = datasets.tfrecord([str(tmp_path / "part-*")], [path], image_shape=(28, 28, 1), num_classes=10,
                             image_format=image_format, label_offset=-1)
    read_images, read_labels = collect(data.input_fn(ModeKeys.EVAL))
    np.testing.assert_allclose(read_images, images.astype(np.float32) / 255.0, atol=1e-7)
    np.testing.assert_array_equal(read_labels, labels[chosen])


def test_tfrecord_encoded_images_are_resized_to_the_asked_shape(tmp_path):
    image = np.full((1, 10, 6, 3), 200, np.uint8)
    path = str(tmp_path / "one.tfrecord")
    datasets.write_tfrecords(path, image, [4])
    data = datasets.tfrecord([path], [path], image_shape=(5, 3, 3), num_classes=5)
    read_images, _ = collect(data.input_fn(ModeKeys.EVAL))
    assert read_images.shape == (1, 5, 3, 3)
    np.testing.assert_allclose(read_images, 200 / 255.0, atol=1e-6)


def test_image_folder_labels_follow_sorted_class_folders(tmp_path):
    digits, labels = mnist.load_arrays()
    expected = []
    for split in ("train", "val"):
        for digit in (7, 3):
            folder = tmp_path / split / f"digit_{digit}"
            folder.mkdir(parents=True)
            for index in np.flatnonzero(labels == digit)[:3]:
                png = tf.io.encode_png(digits[index][..., None]).numpy()
                (folder / f"{index:04d}.png").write_bytes(png)
                if split == "val":
                    expected.append((digit, digits[index]))
    data = datasets.image_folder(str(tmp_path / "train"), str(tmp_path / "val"), image_shape=(28, 28, 1))
    images, read_labels = collect(data.input_fn(ModeKeys.EVAL))
    expected.sort(key=lambda pair: pair[0])  # digit_3 (class 0) sorts before digit_7 (class 1)
    np.testing.assert_array_equal(read_labels, [0, 0, 0, 1, 1, 1])
    np.testing.assert_allclose(images[..., 0], np.stack([d for _, d in expected]) / 255.0, atol=1e-7)
    assert (data.num_classes, data.num_samples, data.num_eval_samples) == (2, 6, 6)


def test_image_folder_rejects_an_eval_class_missing_from_training(tmp_path):
    for split, name in (("train", "cat"), ("val", "dog")):
        os.makedirs(tmp_path / split / name)
    with pytest.raises(datasets.DataOptionError, match=r"eval_dir: class folders \['dog'\]"):
        datasets.image_folder(str(tmp_path / "train"), str(tmp_path / "val"))
