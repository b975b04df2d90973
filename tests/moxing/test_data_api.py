"""MoXing's documented TFRecord and data API (issue 22, item 4), each checked against the numpy it was written from.

The hooks MoXing's subclasses override (``_parser``, ``_build_feature``), its
TF-1.8-era form without feature_keys, ``get_tfrecord`` with slim-style
handlers, ``ImageClassificationTFRecordDataset``/``Metadata``, the named data
sets (``get_dataset_meta``/``get_dataset``), ``split_image_classification_dataset``,
tensor work on ``dataset.get`` features inside input_fn, and MoXing's import paths.
"""

import importlib
import os

import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite import errors
from moxlite.training.input.replica_batches import call_input_fn
from tests import runlib

NUM = 24


def _int64(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def _bytes(value):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _write(path, features_per_row):
    with tf.io.TFRecordWriter(str(path)) as writer:
        for feature in features_per_row:
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


def _images(count, height=6, width=5, channels=3, seed=0):
    return np.random.RandomState(seed).randint(0, 256, size=(count, height, width, channels)).astype(np.uint8)


@pytest.fixture
def raw_rows(tmp_path):
    """Rows of 4 float32 values as raw bytes, an int label and an id, in one file."""
    values = np.random.RandomState(1).rand(NUM, 4).astype(np.float32)
    labels = np.arange(NUM) % 3
    _write(tmp_path / "rows-0.tfrecord", [{"row": _bytes(values[i].tobytes()), "label": _int64([labels[i]]),
                                            "id": _int64([i])} for i in range(NUM)])
    return mox.ImageClassificationTFRecordMetadata(str(tmp_path), "rows-*", num_samples=NUM), values, labels


def _collect(dataset):
    return [np.stack(column) for column in zip(*[tuple(t.numpy() for t in element) for element in dataset])]


KEYS = ["row", "label", "id"]
VALUES = [tf.io.FixedLenFeature([], tf.string), tf.io.FixedLenFeature([], tf.int64), tf.io.FixedLenFeature([], tf.int64)]


def test_a_build_feature_override_decodes_the_features(raw_rows):
    meta, values, labels = raw_rows

    class Rows(mox.BaseTFRecordDataset):
        def _build_feature(self, row, label, index):
            self._add_feature("x", tf.io.decode_raw(row, tf.float32) * 2.0)
            self._add_feature("y", tf.cast(label, tf.int32))

    dataset = Rows(meta, feature_keys=KEYS, feature_values=VALUES, shuffle=False, num_epochs=1)
    x, y = _collect(call_input_fn(lambda mode: dataset.get(["x", "y"]), mox.ModeKeys.EVAL))
    np.testing.assert_allclose(x, values * 2.0)
    np.testing.assert_array_equal(y, labels)


def test_the_tf18_form_parser_override_without_feature_keys(raw_rows):
    meta, values, labels = raw_rows

    class ParsedRows(mox.BaseTFRecordDataset):
        def _parser(self, record):
            parsed = tf.io.parse_single_example(record, dict(zip(KEYS, VALUES)))
            return {"x": tf.io.decode_raw(parsed["row"], tf.float32), "y": parsed["label"]}

    x, y = _collect(call_input_fn(lambda mode: ParsedRows(meta, shuffle=False, num_epochs=1).get(["x", "y"]),
                                  mox.ModeKeys.EVAL))
    np.testing.assert_allclose(x, values)
    np.testing.assert_array_equal(y, labels)

    class ParsedAndBuilt(mox.BaseTFRecordDataset):
        def _parser(self, record):
            parsed = tf.io.parse_single_example(record, dict(zip(KEYS, VALUES)))
            return parsed["row"], parsed["id"]

        def _build_features(self, row, index):
            self._add_feature("first", tf.io.decode_raw(row, tf.float32)[0])
            self._add_feature("index", index)

    first, index = _collect(call_input_fn(
        lambda mode: ParsedAndBuilt(meta, shuffle=False, num_epochs=1).get(["first", "index"]), mox.ModeKeys.EVAL))
    np.testing.assert_allclose(first, values[:, 0])
    np.testing.assert_array_equal(index, np.arange(NUM))


def test_hooks_moxlite_would_not_call_are_refused_naming_the_supported_ones(raw_rows):
    meta, _, _ = raw_rows

    class Misnamed(mox.BaseTFRecordDataset):
        def _parse_example(self, record):
            return record

    with pytest.raises(errors.ArgumentError, match=r"overrides _parse_example, which moxlite never calls.*"
                                                   r"_parser\(self, record\) and _build_features"):
        Misnamed(meta, feature_keys=KEYS, feature_values=VALUES)

    class Both(mox.BaseTFRecordDataset):
        def _build_feature(self, *parsed):
            pass

        def _build_features(self, *parsed):
            pass

    with pytest.raises(errors.ArgumentError, match="both _build_feature and _build_features"):
        Both(meta, feature_keys=KEYS, feature_values=VALUES)
    with pytest.raises(TypeError, match=r"no feature_keys/feature_values and no _parser"):
        mox.BaseTFRecordDataset(meta)


def test_get_tfrecord_with_slim_style_handlers(tmp_path):
    images = _images(NUM, channels=1)
    labels = np.arange(NUM) % 7
    _write(tmp_path / "digits.tfrecord", [
        {"image/encoded": _bytes(tf.io.encode_png(images[i]).numpy()), "image/format": _bytes(b"png"),
         "image/class/label": _int64([labels[i]]), "pair": _int64([i, 2 * i])} for i in range(NUM)])
    keys_to_features = {
        "image/encoded": tf.io.FixedLenFeature((), tf.string, default_value=""),
        "image/format": tf.io.FixedLenFeature((), tf.string, default_value=""),
        "image/class/label": tf.io.FixedLenFeature([1], tf.int64),
        "pair": tf.io.VarLenFeature(tf.int64),
    }
    items_to_handlers = {
        "image": mox.tfexample_decoder.Image(shape=[6, 5, 1], channels=1),
        "label": mox.tfexample_decoder.Tensor("image/class/label", shape=[]),
        "pair": mox.tfexample_decoder.Tensor("pair", shape=[2]),
    }
    dataset = mox.get_tfrecord(dataset_dir=str(tmp_path), file_pattern="*.tfrecord", keys_to_features=keys_to_features,
                               items_to_handlers=items_to_handlers, shuffle=False, num_epochs=1)
    assert dataset.meta.num_samples == NUM   # counted, as MoXing does without num_samples
    got_images, got_labels, got_pairs = _collect(call_input_fn(lambda mode: dataset.get(["image", "label", "pair"]),
                                                               mox.ModeKeys.EVAL))
    np.testing.assert_array_equal(got_images, images)
    np.testing.assert_array_equal(got_labels, labels)
    np.testing.assert_array_equal(got_pairs, np.stack([np.arange(NUM), 2 * np.arange(NUM)], axis=1))
    with pytest.raises(errors.ArgumentError, match=r"reads \['missing'\], which keys_to_features does not parse"):
        mox.get_tfrecord(str(tmp_path), "*.tfrecord", keys_to_features=keys_to_features,
                         items_to_handlers={"x": mox.tfexample_decoder.Tensor("missing")})


def test_image_classification_tfrecord_dataset_and_metadata(tmp_path):
    images = _images(NUM, height=8, width=6)
    labels = np.arange(NUM) % 4
    _write(tmp_path / "data_train_0.tfrecord", [
        {"image/encoded": _bytes(tf.io.encode_png(images[i]).numpy()), "image/class/label": _int64([labels[i]]),
         "weight": _int64([10 + i])} for i in range(NUM)])
    (tmp_path / "labels.txt").write_text("0: daisy\n1: rose\n2: tulip\n3: iris\n")
    meta = mox.ImageClassificationTFRecordMetadata(base_dir=str(tmp_path), file_patterns="*train*.tfrecord")
    assert (meta.num_samples, meta.num_classes) == (NUM, 4)
    assert meta.labels_to_names == {0: "daisy", 1: "rose", 2: "tulip", 3: "iris"}
    dataset = mox.ImageClassificationTFRecordDataset(
        meta=meta, shuffle=False, num_epochs=1, image_size=[4, 3], label_one_hot=True,
        custom_feature_keys=["weight"], custom_feature_values=[tf.io.FixedLenFeature([], tf.int64)])
    got_images, got_labels, got_weights = _collect(call_input_fn(lambda mode: dataset.get(["image", "label", "weight"]),
                                                                 mox.ModeKeys.EVAL))
    # nearest-neighbour resize 8x6 -> 4x3, half-pixel centres: source index floor((i + 0.5) * 2)
    np.testing.assert_array_equal(got_images, images[:, 1::2, 1::2])
    np.testing.assert_array_equal(got_labels, np.eye(4)[labels])
    np.testing.assert_array_equal(got_weights, 10 + np.arange(NUM))
    with pytest.raises(errors.ArgumentError, match="preprocess_fn .* give augmentation_fn"):
        mox.ImageClassificationTFRecordDataset(meta, preprocess_fn=lambda *a: a)


def test_tensor_work_on_get_features_in_input_fn_runs_per_sample(raw_rows):
    meta, values, labels = raw_rows
    dataset = mox.BaseTFRecordDataset(meta, feature_keys=KEYS, feature_values=VALUES, shuffle=False, num_epochs=1)

    def input_fn(mode):   # MoXing-style graph code on the features (the iceberg script's kind)
        row, label, index = dataset.get(["row", "label", "id"])
        x = tf.io.decode_raw(row, tf.float32)
        x = tf.stack([x[0] + x[1], x[2] * 2.0])
        label -= 1
        return x, label, index

    x, y, index = _collect(call_input_fn(input_fn, mox.ModeKeys.EVAL))
    np.testing.assert_allclose(x, np.stack([values[:, 0] + values[:, 1], values[:, 2] * 2.0], axis=1), rtol=1e-6)
    np.testing.assert_array_equal(y, labels - 1)
    np.testing.assert_array_equal(index, np.arange(NUM))


def test_named_data_sets_read_slim_files(tmp_path):
    meta = mox.get_dataset_meta("mnist")
    split_name_train, split_name_eval = meta.splits_to_sizes.keys()
    assert (split_name_train, split_name_eval, meta.num_classes) == ("train", "test", 10)
    images = _images(NUM, height=28, width=28, channels=1)
    labels = np.arange(NUM) % 10
    _write(tmp_path / "mnist_test.tfrecord", [
        {"image/encoded": _bytes(tf.io.encode_png(images[i]).numpy()), "image/format": _bytes(b"png"),
         "image/class/label": _int64([labels[i]])} for i in range(NUM)])
    dataset = mox.get_dataset(name="mnist", split_name=split_name_eval, dataset_dir=str(tmp_path), capacity=4000,
                              num_epochs=1)
    got_images, got_labels = _collect(call_input_fn(lambda mode: dataset.get(["image", "label"]), mox.ModeKeys.EVAL))
    np.testing.assert_array_equal(got_images, images)
    np.testing.assert_array_equal(got_labels, labels)
    with pytest.raises(errors.ArgumentError, match="unknown data set 'svhn'"):
        mox.get_dataset_meta("svhn")
    with pytest.raises(errors.ArgumentError, match=r"split_name='validation' is not one of \['train', 'test'\]"):
        mox.get_dataset("mnist", "validation", str(tmp_path))


def test_split_image_classification_dataset_partitions_every_class(tmp_path):
    source = tmp_path / "flower_photos"
    for label, count in (("daisy", 10), ("roses", 7)):
        (source / label).mkdir(parents=True)
        for i in range(count):
            (source / label / f"{i:02d}.png").write_bytes(tf.io.encode_png(_images(1, seed=i)[0]).numpy())
    counts = mox.split_image_classification_dataset(split_spec={"train": 0.8, "eval": 0.2}, src_dir=str(source),
                                                    dst_dir=str(tmp_path / "split"), overwrite=False)
    assert counts == {"train": 8 + 6, "eval": 2 + 1}   # round(0.8 * n) per class, the rest to the last split
    for label, count in (("daisy", 10), ("roses", 7)):
        train = set(os.listdir(tmp_path / "split" / "train" / label))
        evaluation = set(os.listdir(tmp_path / "split" / "eval" / label))
        assert not train & evaluation and train | evaluation == set(os.listdir(source / label))
    meta = mox.ImageClassificationRawMetadata(base_dir=str(tmp_path / "split" / "train"))
    assert (meta.num_classes, meta.total_num_samples, meta.labels_list) == (2, 14, ["daisy", "roses"])
    (source / "daisy" / "99.png").write_bytes((source / "daisy" / "00.png").read_bytes())
    mox.split_image_classification_dataset({"train": 0.8, "eval": 0.2}, str(source), str(tmp_path / "split"))
    assert len(os.listdir(tmp_path / "split" / "train" / "daisy")) == 8   # overwrite=False kept the split
    with pytest.raises(errors.ArgumentError, match="positive fractions summing to 1"):
        mox.split_image_classification_dataset({"train": 0.8, "eval": 0.1}, str(source), str(tmp_path / "x"))


def test_raw_metadata_reads_labels_txt_and_gives_label_desc(tmp_path):
    for label in ("a", "b"):
        (tmp_path / label).mkdir()
        (tmp_path / label / "0.png").write_bytes(tf.io.encode_png(_images(1)[0]).numpy())
    (tmp_path / "labels.txt").write_text("0: b\n1: a\n")
    meta = mox.ImageClassificationRawMetadata(base_dir=str(tmp_path))
    assert meta.labels_list == ["b", "a"]
    dataset = mox.ImageClassificationRawDataset(meta, shuffle=False, num_epochs=1)
    labels, descriptions = _collect(call_input_fn(lambda mode: dataset.get(["label", "label_desc"]), mox.ModeKeys.EVAL))
    assert list(zip(labels, descriptions)) == [(0, b"b"), (1, b"a")]


IMPORT_PATHS = [
    ("moxlite.tensorflow.datasets.tfrecord_common", "BaseTFRecordDataset", "moxlite.data.tfrecord_dataset"),
    ("moxlite.tensorflow.datasets.tfrecord_common", "ImageClassificationTFRecordMetadata", "moxlite.data.tfrecord_dataset"),
    ("moxlite.tensorflow.datasets.raw.raw_dataset", "split_image_classification_dataset", "moxlite.data.split_dataset"),
    ("moxlite.tensorflow.datasets.reader.raw_reader", "split_image_classification_dataset", "moxlite.data.split_dataset"),
    ("moxlite.tensorflow.datasets", "get_dataset", "moxlite.data.dataset_catalog"),
    ("moxlite.tensorflow.optimizer", "learning_rate_scheduler", "moxlite.optimizer"),
    ("moxlite.tensorflow.executor", "run", "moxlite.training.run"),
    ("moxlite.tensorflow.nets", "get_model_fn", "moxlite.zoo"),
    ("moxlite.tensorflow.preprocessing", "get_data_augmentation_fn", "moxlite.data.zoo_preprocessing"),
    ("moxlite.framework", "file", "moxlite"),
]


@pytest.mark.parametrize("path, name, home", IMPORT_PATHS)
def test_moxings_import_paths_give_moxlites_objects(path, name, home):
    assert getattr(importlib.import_module(path), name) is getattr(importlib.import_module(home), name)


def test_moxing_tensorflow_is_the_package_face():
    import moxlite.tensorflow as mox_tf
    from moxlite.framework.util import compat
    assert mox_tf.run is mox.run and mox_tf.ModeKeys is mox.ModeKeys and mox_tf.file is mox.file
    assert importlib.import_module("moxlite.framework.file") is mox.file
    assert compat.as_str(b"abc") == "abc" and compat.as_bytes("abc") == b"abc"
