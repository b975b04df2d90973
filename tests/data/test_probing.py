"""Input data probed before anything is written (issue 21): one line naming the file and what was expected.

Recipes: a mistake told by a file's first bytes exits 2 before TensorFlow is
imported (checked in a fresh process); one that needs decoding exits 2 after
TensorFlow starts but before log_dir is written. The Python API (the built-in
data sets and MoXing's helpers) raises the same one-line moxlite errors while
input_fn is built, so ``run`` leaves log_dir as it was.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite import errors
from moxlite.data import datasets, sources
from moxlite.recipes import cli
from tests import runlib
from tests import ROOT


# ----------------------------------------------------------------- fixtures

def png_bytes(value, size=(8, 8, 1)):
    return tf.io.encode_png(np.full(size, value, np.uint8)).numpy()


def image_tree(root, classes=("cat", "dog"), per_class=2):
    """root/<class>/<n>.png with real PNG images."""
    for label, name in enumerate(classes):
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for index in range(per_class):
            with open(os.path.join(root, name, f"{index}.png"), "wb") as handle:
                handle.write(png_bytes(40 * label + 10 * index))
    return str(root)


def example(features):
    values = {}
    for key, value in features.items():
        if isinstance(value, bytes):
            values[key] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
        else:
            values[key] = tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
    return tf.train.Example(features=tf.train.Features(feature=values)).SerializeToString()


def write_records(path, records):
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)
    return str(path)


def good_records(path, count=4, num_classes=2):
    return write_records(path, [example({"image/encoded": png_bytes(index * 20),
                                          "image/class/label": index % num_classes}) for index in range(count)])


IMAGE_FOLDER_RECIPE = """\
run: {steps: 2, batch_size: 2, log_dir: LOG_DIR, evaluate: false}
input:
  name: image_folder
  image_folder:
    train_dir: TRAIN
    eval_dir: EVAL
    image_shape: [8, 8, 1]
model: {name: mlp, mlp: {hidden_units: [4]}}
optimizer: {name: sgd, learning_rate: 0.1}
"""

TFRECORD_RECIPE = """\
run: {steps: 2, batch_size: 2, log_dir: LOG_DIR, evaluate: false}
input:
  name: tfrecord
  tfrecord:
    train_files: [TRAIN]
    eval_files: [EVAL]
    image_shape: [8, 8, 1]
    num_classes: 2
model: {name: mlp, mlp: {hidden_units: [4]}}
optimizer: {name: sgd, learning_rate: 0.1}
"""

TRAIN_LINE = 5   # the line of train_dir / train_files in both recipes
EVAL_LINE = 6


def recipe_file(tmp_path, template, train, evaluation, extra=""):
    path = tmp_path / "recipe.yaml"
    text = template.replace("LOG_DIR", str(tmp_path / "logs")).replace("TRAIN", train).replace("EVAL", evaluation)
    if extra:
        text = text.replace("    image_shape: [8, 8, 1]\n", "    image_shape: [8, 8, 1]\n" + extra)
    path.write_text(text)
    return path


def run_recipe_fresh(path):
    """moxlite-run in a fresh process: (exit code, stderr, whether TensorFlow was imported)."""
    script = textwrap.dedent(f"""
        import json, sys
        from moxlite.recipes import cli
        code = cli.main([{str(path)!r}])
        print(json.dumps({{"code": code, "tf": "tensorflow" in sys.modules}}))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["code"], done.stderr, result["tf"]


def assert_one_located_line(err, path, line, fragment):
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"moxlite-run: error: {path}:{line}: "), lines[0]
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in err


# ----------------------------------------------------------------- recipes, told without TensorFlow

def _not_an_image(tmp_path):
    train = image_tree(tmp_path / "train")
    (tmp_path / "train" / "dog" / "0.png").write_bytes(b"not an image at all")
    bad = os.path.join(train, "dog", "0.png")
    return train, image_tree(tmp_path / "val"), (TRAIN_LINE, f"input.image_folder.train_dir: '{bad}' is not a "
                                                             f"JPEG, PNG, BMP or GIF image (it starts with b'not an i')")


def _eval_not_an_image(tmp_path):
    evaluation = image_tree(tmp_path / "val")
    (tmp_path / "val" / "cat" / "1.jpg").write_bytes(b"GIF8")
    bad = os.path.join(evaluation, "cat", "1.jpg")
    return image_tree(tmp_path / "train"), evaluation, (EVAL_LINE, f"input.image_folder.eval_dir: '{bad}' is not a JPEG")


def _one_class(tmp_path):
    train = image_tree(tmp_path / "train", classes=("cat",))
    return train, image_tree(tmp_path / "val", classes=("cat",)), (
        TRAIN_LINE, f"input.image_folder.train_dir: '{train}' has 1 class folder ('cat'); a classifier needs at "
                    f"least 2 classes: add classes, or set allow_single_class if one class is meant")


def _empty_class_folder(tmp_path):
    train = image_tree(tmp_path / "train")
    os.makedirs(tmp_path / "train" / "emu")
    (tmp_path / "train" / "emu" / "notes.txt").write_text("no images here")
    return train, image_tree(tmp_path / "val"), (
        TRAIN_LINE, f"input.image_folder.train_dir: class folder '{os.path.join(train, 'emu')}' holds no "
                    f".jpg/.jpeg/.png/.bmp/.gif image; add images or remove the folder")


def _empty_tfrecord(tmp_path):
    path = tmp_path / "train.tfrecord"
    path.write_bytes(b"")
    return str(path), good_records(tmp_path / "eval.tfrecord"), (
        TRAIN_LINE, f"input.tfrecord.train_files: '{path}' is empty; expected a TFRecord file")


def _text_as_tfrecord(tmp_path):
    path = tmp_path / "train.tfrecord"
    path.write_text("label,pixels\n1,0 0 0\n")
    return str(path), good_records(tmp_path / "eval.tfrecord"), (
        TRAIN_LINE, f"input.tfrecord.train_files: '{path}' is not a TFRecord file (it starts with b'label,pi', "
                    f"not a record header)")


def _directory_as_tfrecord(tmp_path):
    folder = tmp_path / "shards"
    folder.mkdir()
    good_records(folder / "part-0")
    return good_records(tmp_path / "train.tfrecord"), str(folder), (
        EVAL_LINE, f"input.tfrecord.eval_files: '{folder}' is a directory; give glob patterns of the TFRecord "
                   f"files in it, e.g. '{folder}/*'")


NO_TF_CASES = {"image_not_an_image": (IMAGE_FOLDER_RECIPE, _not_an_image),
               "image_eval_not_an_image": (IMAGE_FOLDER_RECIPE, _eval_not_an_image),
               "image_one_class": (IMAGE_FOLDER_RECIPE, _one_class),
               "image_empty_class_folder": (IMAGE_FOLDER_RECIPE, _empty_class_folder),
               "tfrecord_empty": (TFRECORD_RECIPE, _empty_tfrecord),
               "tfrecord_not_tfrecord": (TFRECORD_RECIPE, _text_as_tfrecord),
               "tfrecord_directory": (TFRECORD_RECIPE, _directory_as_tfrecord)}


@pytest.mark.parametrize("name", sorted(NO_TF_CASES))
def test_bad_data_told_by_first_bytes_exits_2_before_tensorflow(name, tmp_path):
    template, make = NO_TF_CASES[name]
    train, evaluation, (line, fragment) = make(tmp_path)
    path = recipe_file(tmp_path, template, train, evaluation)
    code, err, imported_tf = run_recipe_fresh(path)
    assert code == 2, err
    assert_one_located_line(err, path, line, fragment)
    assert not imported_tf
    assert not (tmp_path / "logs").exists()


def test_tfrecord_num_classes_one_exits_2_before_tensorflow(tmp_path):
    path = recipe_file(tmp_path, TFRECORD_RECIPE.replace("num_classes: 2", "num_classes: 1"),
                       good_records(tmp_path / "t.tfrecord"), good_records(tmp_path / "e.tfrecord"))
    code, err, imported_tf = run_recipe_fresh(path)
    assert code == 2
    assert_one_located_line(err, path, 8, "input.tfrecord.num_classes: 1; a classifier needs at least 2 classes")
    assert not imported_tf


def test_one_class_trains_when_the_recipe_says_it_is_meant(tmp_path, capsys):
    train = image_tree(tmp_path / "train", classes=("cat",))
    path = recipe_file(tmp_path, IMAGE_FOLDER_RECIPE, train, image_tree(tmp_path / "val", classes=("cat",)),
                       extra="    allow_single_class: true\n")
    assert cli.main([str(path)]) == 0
    assert tf.train.latest_checkpoint(str(tmp_path / "logs")).endswith("model.ckpt-2")


# ----------------------------------------------------------------- recipes, told by decoding

def _png_that_does_not_decode(tmp_path):
    train = image_tree(tmp_path / "train")
    (tmp_path / "train" / "cat" / "0.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)
    return train, image_tree(tmp_path / "val"), (
        TRAIN_LINE, f"input.image_folder.train_dir: '{os.path.join(train, 'cat', '0.png')}' does not decode as a "
                    f"JPEG, PNG, BMP or GIF image (")


def _records_not_examples(tmp_path):
    path = write_records(tmp_path / "train.tfrecord", [b"\xff\xff\xff\xff"])
    return path, good_records(tmp_path / "eval.tfrecord"), (
        TRAIN_LINE, f"input.tfrecord.train_files: record 0 of '{path}' is not a tf.train.Example")


def _corrupt_record(tmp_path):
    path = tmp_path / "train.tfrecord"
    data = bytearray(open(good_records(tmp_path / "whole.tfrecord"), "rb").read())
    data[20] ^= 0xFF   # inside the first record's data: its CRC no longer matches
    path.write_bytes(bytes(data))
    return str(path), good_records(tmp_path / "eval.tfrecord"), (
        TRAIN_LINE, f"input.tfrecord.train_files: '{path}' is not a readable TFRecord file (")


def _wrong_image_key(tmp_path):
    path = write_records(tmp_path / "train.tfrecord", [example({"img": png_bytes(3), "image/class/label": 1})])
    return path, good_records(tmp_path / "eval.tfrecord"), (
        4, f"input.tfrecord.image_key: record 0 of '{path}' has no feature 'image/encoded'; its features are "
           f"'image/class/label' (int64), 'img' (bytes); set image_key to the bytes feature")


def _label_out_of_range(tmp_path):
    path = write_records(tmp_path / "train.tfrecord", [example({"image/encoded": png_bytes(3),
                                                                "image/class/label": 2})])
    return path, good_records(tmp_path / "eval.tfrecord"), (
        8, f"input.tfrecord.num_classes: record 0 of '{path}' has label 2, which with label_offset 0 is 2, "
           f"outside [0, 2)")


def _images_not_encoded(tmp_path):
    path = write_records(tmp_path / "train.tfrecord", [example({"image/encoded": np.zeros(64, np.uint8).tobytes(),
                                                                "image/class/label": 1})])
    return path, good_records(tmp_path / "eval.tfrecord"), (
        TRAIN_LINE, f"input.tfrecord.train_files: record 0 of '{path}': its 'image/encoded' bytes are not a JPEG, "
                    f"PNG, BMP or GIF image (it starts with b'\\x00")


DECODE_CASES = {"image_png_does_not_decode": (IMAGE_FOLDER_RECIPE, _png_that_does_not_decode),
                "tfrecord_records_not_examples": (TFRECORD_RECIPE, _records_not_examples),
                "tfrecord_corrupt_record": (TFRECORD_RECIPE, _corrupt_record),
                "tfrecord_wrong_image_key": (TFRECORD_RECIPE, _wrong_image_key),
                "tfrecord_label_out_of_range": (TFRECORD_RECIPE, _label_out_of_range),
                "tfrecord_images_not_encoded": (TFRECORD_RECIPE, _images_not_encoded)}


@pytest.mark.parametrize("name", sorted(DECODE_CASES))
def test_bad_data_told_by_decoding_exits_2_before_log_dir_is_written(name, tmp_path, capsys):
    template, make = DECODE_CASES[name]
    train, evaluation, (line, fragment) = make(tmp_path)
    path = recipe_file(tmp_path, template, train, evaluation)
    code = cli.main([str(path)])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert_one_located_line(captured.err, path, line, fragment)
    assert not (tmp_path / "logs").exists()


def test_raw_records_of_the_wrong_size_name_image_shape(tmp_path, capsys):
    path = write_records(tmp_path / "train.tfrecord", [example({"image/encoded": bytes(10), "image/class/label": 0})])
    recipe = recipe_file(tmp_path, TFRECORD_RECIPE, path, path, extra="    image_format: raw\n")
    assert cli.main([str(recipe)]) == 2
    assert_one_located_line(capsys.readouterr().err, recipe, 7,
                            f"input.tfrecord.image_shape: record 0 of '{path}': its 'image/encoded' bytes holds 10 "
                            f"bytes, and raw images of image_shape [8, 8, 1] need 64")


def test_a_bad_recipe_run_leaves_an_earlier_run_in_log_dir_byte_for_byte(tmp_path, capsys):
    train, evaluation = image_tree(tmp_path / "train"), image_tree(tmp_path / "val")
    path = recipe_file(tmp_path, IMAGE_FOLDER_RECIPE, train, evaluation)
    assert cli.main([str(path)]) == 0
    before = runlib.tree_bytes(tmp_path / "logs")
    (tmp_path / "train" / "dog" / "0.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)
    capsys.readouterr()
    assert cli.main([str(path), "--set", "run.steps=4"]) == 2
    assert "does not decode as a JPEG, PNG, BMP or GIF image" in capsys.readouterr().err
    assert runlib.tree_bytes(tmp_path / "logs") == before


# ----------------------------------------------------------------- the Python API

def test_builtin_data_sets_raise_data_option_errors(tmp_path):
    train = image_tree(tmp_path / "train", classes=("cat",))
    with pytest.raises(datasets.DataOptionError, match=r"^train_dir: .* has 1 class folder \('cat'\)"):
        datasets.image_folder(train, train, image_shape=(8, 8, 1))
    data = datasets.image_folder(train, train, image_shape=(8, 8, 1), allow_single_class=True)
    assert data.num_classes == 1
    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    with pytest.raises(datasets.DataOptionError, match=rf"^train_files: '{empty}' is empty"):
        datasets.tfrecord([str(empty)], [str(empty)], image_shape=(8, 8, 1), num_classes=2)
    wrong = write_records(tmp_path / "wrong.tfrecord", [example({"img": png_bytes(1), "image/class/label": 0})])
    with pytest.raises(datasets.DataOptionError, match="^image_key: record 0 of .* has no feature 'image/encoded'"):
        datasets.tfrecord([wrong], [wrong], image_shape=(8, 8, 1), num_classes=2)
    with pytest.raises(datasets.DataOptionError, match="^num_classes: 1; a classifier needs at least 2"):
        datasets.tfrecord([wrong], [wrong], num_classes=1)


def test_raw_metadata_checks_classes_and_first_bytes(tmp_path):
    one = image_tree(tmp_path / "one", classes=("cat",))
    with pytest.raises(errors.ArgumentError, match=r"^ImageClassificationRawMetadata: base_dir: .* has 1 class "
                                                   r"folder \('cat'\).*allow_single_class=True if one class"):
        mox.ImageClassificationRawMetadata(base_dir=one)
    assert mox.ImageClassificationRawMetadata(base_dir=one, allow_single_class=True).num_classes == 1
    two = image_tree(tmp_path / "two")
    os.makedirs(os.path.join(two, "emu"))
    with pytest.raises(errors.ArgumentError, match=r"class folder '.*emu' holds no"):
        mox.ImageClassificationRawMetadata(base_dir=two)
    os.rmdir(os.path.join(two, "emu"))
    with open(os.path.join(two, "dog", "0.png"), "wb") as handle:
        handle.write(b"<html>")
    with pytest.raises(errors.ArgumentError, match=r"dog/0.png' is not a JPEG, PNG, BMP or GIF image \(it starts "
                                                   r"with b'<html>'\)"):
        mox.ImageClassificationRawMetadata(base_dir=two)


def test_raw_dataset_decodes_the_first_images_when_built(tmp_path):
    root = image_tree(tmp_path / "images")
    with open(os.path.join(root, "dog", "0.png"), "wb") as handle:
        handle.write(b"\x89PNG\r\n\x1a\n" + b"\x01" * 40)
    meta = mox.ImageClassificationRawMetadata(base_dir=root)   # its first bytes are a PNG's
    with pytest.raises(errors.ArgumentError, match=r"^ImageClassificationRawDataset: '.*dog/0.png' does not decode"):
        mox.ImageClassificationRawDataset(meta)


def test_tfrecord_metadata_checks_each_file(tmp_path):
    good_records(tmp_path / "train-0")
    (tmp_path / "train-1").write_bytes(b"")
    with pytest.raises(errors.ArgumentError, match=r"^ImageClassificationTFRecordMetadata: '.*train-1' is empty"):
        mox.ImageClassificationTFRecordMetadata(str(tmp_path), "train-*")
    (tmp_path / "train-1").write_bytes(b"\x00" * 12 + b"payload")
    with pytest.raises(errors.ArgumentError, match=r"train-1' is not a TFRecord file"):
        mox.ImageClassificationTFRecordMetadata(str(tmp_path), "train-*")
    os.remove(tmp_path / "train-1")
    (tmp_path / "train-dir").mkdir()
    with pytest.raises(errors.ArgumentError, match=r"train-dir' is a directory"):
        mox.ImageClassificationTFRecordMetadata(str(tmp_path), "train-*")
    os.rmdir(tmp_path / "train-dir")
    with pytest.raises(errors.ArgumentError, match=r"num_classes=1; a classifier needs at least 2"):
        mox.ImageClassificationTFRecordMetadata(str(tmp_path), "train-*", num_classes=1)
    assert mox.ImageClassificationTFRecordMetadata(str(tmp_path), "train-*", num_classes=1,
                                                   allow_single_class=True).file_paths == [str(tmp_path / "train-0")]


def test_tfrecord_dataset_parses_the_first_records_when_built(tmp_path):
    good_records(tmp_path / "train-0")
    meta = mox.ImageClassificationTFRecordMetadata(str(tmp_path), "train-*")
    with pytest.raises(errors.ArgumentError, match=r"^BaseTFRecordDataset: record 0 of '.*train-0' does not parse "
                                                   r"with feature_keys \['pixels'\]"):
        mox.BaseTFRecordDataset(meta, ["pixels"], [tf.io.FixedLenFeature([], tf.string)])
    mox.BaseTFRecordDataset(meta, ["image/encoded"], [tf.io.FixedLenFeature([], tf.string)])


def _classifier_model_fn(inputs, mode):
    import keras

    images, labels = inputs
    logits = keras.layers.Dense(2)(keras.layers.Flatten()(tf.cast(images, tf.float32) / 255.0))
    loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))
    return mox.ModelSpec(loss=loss, log_info={"loss": loss})


def test_run_with_a_moxing_data_set_over_a_bad_file_writes_nothing(tmp_path):
    root = image_tree(tmp_path / "images")
    log_dir = tmp_path / "logs"

    def input_fn(mode):
        meta = mox.ImageClassificationRawMetadata(base_dir=root)
        dataset = mox.ImageClassificationRawDataset(meta, channels=1,
                                                    augmentation_fn=lambda image: tf.reshape(image, [8, 8, 1]))
        return dataset.get(["image", "label"])

    mox.run(input_fn=input_fn, model_fn=_classifier_model_fn, optimizer_fn=lambda: mox.get_optimizer_fn("sgd", 0.1)(),
            run_mode=mox.ModeKeys.TRAIN, batch_size=2, max_number_of_steps=2, log_dir=str(log_dir))
    before = runlib.tree_bytes(log_dir)
    assert before
    with open(os.path.join(root, "cat", "1.png"), "wb") as handle:
        handle.write(b"\x89PNG\r\n\x1a\n" + b"\x02" * 40)
    with open(os.path.join(root, "cat", "0.png"), "wb") as handle:
        handle.write(b"\x89PNG\r\n\x1a\n" + b"\x02" * 40)
    with pytest.raises(errors.ArgumentError, match=r"ImageClassificationRawDataset: '.*cat/0.png' does not decode"):
        mox.run(input_fn=input_fn, model_fn=_classifier_model_fn,
                optimizer_fn=lambda: mox.get_optimizer_fn("sgd", 0.1)(), run_mode=mox.ModeKeys.TRAIN,
                batch_size=2, max_number_of_steps=4, log_dir=str(log_dir))
    assert runlib.tree_bytes(log_dir) == before


def test_header_checks_agree_with_tensorflow(tmp_path):
    path = good_records(tmp_path / "ok.tfrecord")
    with open(path, "rb") as handle:
        assert sources.tfrecord_header_problem(handle.read(12)) is None
    assert sources.crc32c(b"123456789") == 0xE3069283   # the CRC-32C check value (RFC 3720)
    for encode in (tf.io.encode_png, tf.io.encode_jpeg):
        assert sources.image_header_problem(encode(np.zeros((2, 2, 1), np.uint8)).numpy()[:8]) is None
