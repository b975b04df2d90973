"""A ModelArts TFRecord job on OBS: custom features, train, evaluate, predict to a CSV on OBS.

Run as ModelArts does:
  python tfrecord_object_storage.py --data_url=obs://bucket/data --train_url=obs://bucket/train

The TFRecords (train-*.tfrecord, eval-*.tfrecord) hold tf.train.Examples with three
features: 'image_raw' (28x28 uint8 bytes), 'label' (int64) and 'sample_id' (int64). A
BaseTFRecordDataset subclass decodes them in _build_features. Checkpoints and summaries go
to train_url on object storage, the evaluation metrics to train_url/metrics.json, and the
predictions, through mox.file.File, to train_url/predictions.csv.

Ported from a moxing.tensorflow script. What changed, and nothing else:
  import moxing.tensorflow as mox           -> import moxlite as mox
  tf.flags / tf.app.run                     -> tf.compat.v1.flags / tf.compat.v1.app.run
  tf.FixedLenFeature / tf.decode_raw        -> tf.io.FixedLenFeature / tf.io.decode_raw
  tf.layers.dense                           -> keras.layers.Dense (Keras 3)
  tf.losses.sparse_softmax_cross_entropy    -> tf.compat.v1.losses.<same>
"""

import json

import keras
import tensorflow as tf

import moxlite as mox

tf.compat.v1.flags.DEFINE_string("data_url", None, "Folder of the TFRecord files (obs://, s3:// or local).")
tf.compat.v1.flags.DEFINE_string("train_url", None, "Output folder (obs://, s3:// or local).")
tf.compat.v1.flags.DEFINE_integer("batch_size", 16, "Batch size per device.")
tf.compat.v1.flags.DEFINE_integer("max_steps", 40, "Training steps.")
tf.compat.v1.flags.DEFINE_float("learning_rate", 0.5, "SGD learning rate.")
tf.compat.v1.flags.DEFINE_integer("num_train_samples", 640, "Records in train-*.tfrecord.")
tf.compat.v1.flags.DEFINE_integer("num_eval_samples", 200, "Records in eval-*.tfrecord.")
flags = tf.compat.v1.flags.FLAGS


class MnistRecords(mox.BaseTFRecordDataset):
    """Decodes the raw bytes into a flat float image; keeps the id for the prediction file."""

    def _build_features(self, image_raw, label, sample_id):
        image = tf.io.decode_raw(image_raw, tf.uint8)
        image = tf.cast(tf.reshape(image, [784]), tf.float32) / 255.0
        self._add_feature("image", image)
        self._add_feature("label", tf.cast(label, tf.int32))
        self._add_feature("sample_id", sample_id)


def input_fn(mode):
    is_train = mode == mox.ModeKeys.TRAIN
    meta = mox.ImageClassificationTFRecordMetadata(
        flags.data_url, "train-*.tfrecord" if is_train else "eval-*.tfrecord",
        num_samples=flags.num_train_samples if is_train else flags.num_eval_samples)
    dataset = MnistRecords(
        meta, feature_keys=["image_raw", "label", "sample_id"],
        feature_values=[tf.io.FixedLenFeature([], tf.string), tf.io.FixedLenFeature([], tf.int64),
                        tf.io.FixedLenFeature([], tf.int64)],
        shuffle=False, num_epochs=None if is_train else 1)
    return dataset.get(["image", "label", "sample_id"])


def model_fn(inputs, mode):
    images, labels, sample_ids = inputs
    logits = keras.layers.Dense(10, kernel_initializer="zeros", name="logits")(images)
    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32), labels), tf.float32))
    return mox.ModelSpec(
        loss=loss, log_info={"loss": loss, "accuracy": accuracy},
        output_info={"sample_id": sample_ids, "prediction": tf.argmax(logits, 1),
                     "probability": tf.reduce_max(tf.nn.softmax(logits), axis=1)})


def main(*args):
    log_dir = flags.train_url
    mox.run(input_fn=input_fn, model_fn=model_fn,
            optimizer_fn=mox.get_optimizer_fn("sgd", learning_rate=flags.learning_rate),
            run_mode=mox.ModeKeys.TRAIN, batch_size=flags.batch_size, log_dir=log_dir,
            max_number_of_steps=flags.max_steps, log_every_n_steps=10, save_model_steps=20)

    metrics = mox.run(input_fn=input_fn, model_fn=model_fn, run_mode=mox.ModeKeys.EVAL,
                      batch_size=flags.batch_size, log_dir=log_dir)
    mox.file.write(log_dir.rstrip("/") + "/metrics.json",
                   json.dumps({key: float(value) for key, value in metrics.items()}))

    with mox.file.File(log_dir.rstrip("/") + "/predictions.csv", "w") as predictions:
        predictions.write("sample_id,prediction,probability\n")

        def output_fn(outputs):
            for output in outputs:
                for sample_id, prediction, probability in zip(
                        output["sample_id"], output["prediction"], output["probability"]):
                    predictions.write("%d,%d,%.6f\n" % (sample_id, prediction, probability))

        mox.run(input_fn=input_fn, output_fn=output_fn, model_fn=model_fn, run_mode=mox.ModeKeys.PREDICT,
                batch_size=flags.batch_size, log_dir=log_dir, output_every_n_steps=1)
    print("predictions written to %s" % predictions.name)


if __name__ == "__main__":
    tf.compat.v1.app.run(main=main)
