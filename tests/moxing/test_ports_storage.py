"""Port (b): a TFRecord ModelArts script with data, checkpoints and predictions on object storage.

The script runs in its own process against moto's S3 server on loopback. Its TFRecords
are written here from the bundled MNIST sample and uploaded with boto3; its results are
read back with boto3 and checked against numpy softmax regression on the same rows.
"""

import csv
import io
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from moxlite import file as mox_file
from tests import runlib
from tests.portlib import run_port
from tests.s3lib import s3  # noqa: F401  (the server fixture)

BATCH, STEPS, LEARNING_RATE = 16, 40, 0.5
TRAIN, EVAL = (0, 640), (1000, 200)  # (first row, rows) of the bundled sample


def mnist_rows(first, count):
    data = np.load(os.path.join(os.path.dirname(runlib.__file__), "..", "moxlite", "data", "mnist_5k.npz"))
    order = np.random.RandomState(0).permutation(len(data["labels"]))  # the file is sorted by label
    rows = order[first:first + count]
    return data["images"][rows].reshape(-1, 784), data["labels"][rows].astype(np.int64), rows


def example(image, label, sample_id):
    feature = {
        "image_raw": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image.tobytes()])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
        "sample_id": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(sample_id)])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def upload_records(s3, bucket, name, images, labels, ids):
    buffer_path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"{bucket}-{name}")
    with tf.io.TFRecordWriter(buffer_path) as writer:
        for image, label, sample_id in zip(images, labels, ids):
            writer.write(example(image, label, sample_id))
    with open(buffer_path, "rb") as stream:
        s3.client().put_object(Bucket=bucket, Key=f"data/{name}", Body=stream.read())
    os.remove(buffer_path)


def test_tfrecord_port_trains_evaluates_and_predicts_on_object_storage(s3, tmp_path):
    bucket = s3.new_bucket()
    train_images, train_labels, train_ids = mnist_rows(*TRAIN)
    half = TRAIN[1] // 2  # two train files, read in name order (shuffle=False)
    upload_records(s3, bucket, "train-00000.tfrecord", train_images[:half], train_labels[:half], train_ids[:half])
    upload_records(s3, bucket, "train-00001.tfrecord", train_images[half:], train_labels[half:], train_ids[half:])
    eval_images, eval_labels, eval_ids = mnist_rows(*EVAL)
    upload_records(s3, bucket, "eval-00000.tfrecord", eval_images, eval_labels, eval_ids)

    finished = run_port("tfrecord_object_storage.py", f"--data_url=obs://{bucket}/data",
                        f"--train_url=obs://{bucket}/train", f"--batch_size={BATCH}", f"--max_steps={STEPS}",
                        f"--learning_rate={LEARNING_RATE}", env={"MOXLITE_CACHE_DIR": str(tmp_path / "cache")})
    assert f"predictions written to obs://{bucket}/train/predictions.csv" in finished.stdout

    # Reference: numpy SGD on the same rows in the same order, from zeros.
    x_train = train_images.astype(np.float32) / np.float32(255.0)
    kernel, bias = runlib.numpy_softmax_regression(x_train, train_labels, BATCH, STEPS, LEARNING_RATE)
    checkpoint_dir = tmp_path / "checkpoint"
    mox_file.copy_parallel(f"s3://{bucket}/train", str(checkpoint_dir))  # what the job left on the server
    assert runlib.checkpoint_step(str(checkpoint_dir)) == STEPS
    by_shape = {value.shape: value for value in runlib.checkpoint_variables(str(checkpoint_dir))}
    trained_kernel, trained_bias = by_shape[(784, 10)], by_shape[(10,)]
    np.testing.assert_allclose(trained_kernel, kernel, atol=2e-5)
    np.testing.assert_allclose(trained_bias, bias, atol=2e-5)

    x_eval = eval_images.astype(np.float64) / 255.0
    probabilities = runlib.softmax_probabilities(x_eval @ kernel + bias)
    client = s3.client()
    metrics = json.loads(client.get_object(Bucket=bucket, Key="train/metrics.json")["Body"].read())
    expected_loss = -np.mean(np.log(probabilities[np.arange(len(eval_labels)), eval_labels]))
    expected_accuracy = np.mean(probabilities.argmax(axis=1) == eval_labels)
    assert metrics["accuracy"] == pytest.approx(expected_accuracy, abs=1e-6)
    assert metrics["loss"] == pytest.approx(expected_loss, abs=1e-5)  # a sample mean: the short batch weighs 8

    rows = list(csv.DictReader(io.StringIO(
        client.get_object(Bucket=bucket, Key="train/predictions.csv")["Body"].read().decode())))
    assert [int(row["sample_id"]) for row in rows] == list(eval_ids)  # every sample once, in order
    assert [int(row["prediction"]) for row in rows] == list(probabilities.argmax(axis=1))
    np.testing.assert_allclose([float(row["probability"]) for row in rows], probabilities.max(axis=1), atol=1e-5)
    assert not os.listdir(tmp_path / "cache") or all(
        name.startswith("moxlite-data-") for name in os.listdir(tmp_path / "cache"))  # run caches were removed
