"""MoXing's TFRecord helpers: a subclass of BaseTFRecordDataset read back against the numpy it was written from."""

import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite import errors
from moxlite.training.input.replica_batches import call_input_fn
from tests import runlib

NUM_ROWS = 96


def _write(directory, images, labels, files=3):
    """MNIST rows as raw float bytes, their labels and a per-row weight, split over ``files`` files."""
    for part in range(files):
        with tf.io.TFRecordWriter(str(directory / f"train-{part:02d}.tfrecord")) as writer:
            for index in range(part, len(labels), files):
                feature = {
                    "row": tf.train.Feature(bytes_list=tf.train.BytesList(value=[images[index].tobytes()])),
                    "class": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(labels[index])])),
                    "index": tf.train.Feature(int64_list=tf.train.Int64List(value=[index])),
                }
                writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


class RowDataset(mox.BaseTFRecordDataset):
    """A script's subclass: custom keys, decoding in _build_features, renamed features."""

    def __init__(self, meta, **kwargs):
        super().__init__(meta, feature_keys=["row", "class", "index"],
                         feature_values=[tf.io.FixedLenFeature([], tf.string),
                                         tf.io.FixedLenFeature([], tf.int64),
                                         tf.io.FixedLenFeature([], tf.int64)], **kwargs)

    def _build_features(self, row, label, index):
        self._add_feature("image", tf.reshape(tf.io.decode_raw(row, tf.float32), [runlib.NUM_FEATURES]))
        self._add_feature("label", tf.cast(label, tf.int32))
        self._add_feature("index", index)


@pytest.fixture
def rows(tmp_path):
    images, labels = runlib.mnist_rows(NUM_ROWS)
    _write(tmp_path, images, labels)
    meta = mox.ImageClassificationTFRecordMetadata(str(tmp_path), "train-*", num_samples=NUM_ROWS)
    return meta, images, labels


def _collect(dataset):
    return [np.stack(column) for column in zip(*[tuple(t.numpy() for t in element) for element in dataset])]


def test_features_equal_what_was_written(rows):
    meta, images, labels = rows
    dataset = RowDataset(meta, shuffle=False, num_epochs=1)
    assert dataset.feature_names == ["image", "label", "index"]
    got_images, got_labels, got_index = _collect(call_input_fn(lambda mode: dataset.get(["image", "label", "index"]),
                                                               mox.ModeKeys.TRAIN))
    assert sorted(got_index) == list(range(NUM_ROWS))
    np.testing.assert_array_equal(got_images, images[got_index])
    np.testing.assert_array_equal(got_labels, labels[got_index])


def test_seeded_shuffle_is_shared_so_worker_shards_partition_the_data(rows):
    meta, _, _ = rows
    orders = []
    for _ in range(2):  # two workers, each building its own pipeline
        dataset = RowDataset(meta, shuffle=True, num_epochs=1, shuffle_buffer_size=32)
        orders.append(_collect(call_input_fn(lambda mode: dataset.get(["index"]), mox.ModeKeys.TRAIN))[0])
    np.testing.assert_array_equal(orders[0], orders[1])
    assert list(orders[0]) != sorted(orders[0])
    shard0, shard1 = orders[0][0::2], orders[0][1::2]
    assert not set(shard0) & set(shard1) and len(set(shard0) | set(shard1)) == NUM_ROWS


@pytest.mark.parametrize("auto_batch,num_gpus", [(True, 1), (False, 1), (False, 2)])
def test_run_trains_on_get_features_like_numpy(rows, tmp_path, auto_batch, num_gpus):
    """input_fn returns dataset.get(...) unchanged, as MoXing scripts do; the weights equal numpy's,
    also on two devices at half the batch each (MirroredStrategy)."""
    meta, images, labels = rows
    batch_size, steps = 16 // num_gpus, 6
    mox.set_flag("num_gpus", num_gpus)

    def input_fn(mode):
        dataset = RowDataset(meta, shuffle=False, batch_size=None if auto_batch else batch_size)
        return dataset.get(["image", "label"])

    mox.run(input_fn=input_fn, model_fn=runlib.softmax_model_fn,
            optimizer_fn=mox.get_optimizer_fn("sgd", 0.5), run_mode=mox.ModeKeys.TRAIN,
            batch_size=batch_size, auto_batch=auto_batch, log_dir=str(tmp_path / "log"),
            max_number_of_steps=steps, log_every_n_steps=100)
    order = np.concatenate([np.arange(part, NUM_ROWS, 3) for part in range(3)])
    kernel, bias = runlib.numpy_softmax_regression(images[order], labels[order], 16, steps, 0.5)
    got_kernel, got_bias = runlib.checkpoint_variables(str(tmp_path / "log"))
    np.testing.assert_allclose(got_kernel, kernel, atol=2e-5)
    np.testing.assert_allclose(got_bias, bias, atol=2e-5)


def test_mistakes_get_one_line_errors(rows, tmp_path):
    meta, _, _ = rows
    dataset = RowDataset(meta, shuffle=False, batch_size=8)
    with pytest.raises(errors.ArgumentError, match=r"unknown feature\(s\) \['pixels'\]"):
        call_input_fn(lambda mode: dataset.get(["pixels"]), mox.ModeKeys.TRAIN)
    images, _ = dataset.get(["image", "label"])
    with pytest.raises(errors.ArgumentError, match="placeholder for a tf.data feature"):
        images * 2.0
    with pytest.raises(errors.ArgumentError, match="outside _build_features"):
        dataset._add_feature("x", tf.constant(1))
    with pytest.raises(errors.ArgumentError, match=r"batch_size=8\) disagrees with run's per-device batch_size=16"):
        call_input_fn(lambda mode: dataset.get(["image"]), mox.ModeKeys.TRAIN, 16, auto_batch=False)
    with pytest.raises(errors.ArgumentError, match="matches no file"):
        mox.ImageClassificationTFRecordMetadata(str(tmp_path), "nothing-*")
    with pytest.raises(errors.ArgumentError, match="feature_values"):
        mox.BaseTFRecordDataset(meta, ["a", "b"], [tf.io.FixedLenFeature([], tf.int64)])
