"""A MoXing script built from Keras layers, run through TRAIN, EVAL, PREDICT and EXPORT.

Ported from a moxing.tensorflow script. What changed, and nothing else:
  import moxing.tensorflow as mox   -> import moxlite as mox
  tf.flags / tf.app.run             -> tf.compat.v1.flags / tf.compat.v1.app.run
  tf.keras.layers                   -> keras.layers (Keras 3)
  tf.losses.sparse_softmax_cross_entropy -> tf.compat.v1.losses.<same>
"""

import os

import keras
import numpy as np
import tensorflow as tf

import moxlite as mox

tf.compat.v1.flags.DEFINE_string("data_url", None, "Directory holding mnist_5k.npz.")
tf.compat.v1.flags.DEFINE_string("train_url", None, "Directory for checkpoints, predictions and the model.")
tf.compat.v1.flags.DEFINE_integer("max_steps", 60, "Training steps.")
flags = tf.compat.v1.flags.FLAGS

BATCH_SIZE = 32


def main(*args):
    data = np.load(os.path.join(flags.data_url, "mnist_5k.npz"))
    order = np.random.RandomState(0).permutation(len(data["labels"]))  # the file is sorted by label
    images = data["images"][order].reshape(-1, 784).astype(np.float32) / 255.0
    labels = data["labels"][order].astype(np.int32)

    def input_fn(mode):
        if mode == mox.ModeKeys.TRAIN:
            return tf.data.Dataset.from_tensor_slices((images[:4000], labels[:4000])).repeat()
        return tf.data.Dataset.from_tensor_slices((images[4000:4500], labels[4000:4500]))

    def model_fn(inputs, mode):
        x, y_ = inputs
        hidden = keras.layers.Dense(64, activation="relu", name="hidden")(x)
        logits = keras.layers.Dense(10, name="logits")(hidden)
        loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels=y_, logits=logits)
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32), y_), tf.float32))
        return mox.ModelSpec(
            loss=loss,
            log_info={"loss": loss, "accuracy": accuracy},
            output_info={"logits": logits, "labels": y_},
            export_spec=mox.ExportSpec(inputs_dict={"images": x}, outputs_dict={"logits": logits},
                                       version="model"))

    mox.run(input_fn=input_fn, model_fn=model_fn,
            optimizer_fn=mox.get_optimizer_fn("momentum", learning_rate=0.05, momentum=0.9),
            run_mode=mox.ModeKeys.TRAIN, batch_size=BATCH_SIZE, log_dir=flags.train_url,
            max_number_of_steps=flags.max_steps, log_every_n_steps=20)

    metrics = mox.run(input_fn=input_fn, model_fn=model_fn, run_mode=mox.ModeKeys.EVAL,
                      batch_size=BATCH_SIZE, log_dir=flags.train_url)
    print("Eval accuracy: %.6f loss: %.6f" % (metrics["accuracy"], metrics["loss"]))

    predictions = []

    def output_fn(outputs):
        for output in outputs:
            predictions.append(output["logits"])

    mox.run(input_fn=input_fn, model_fn=model_fn, output_fn=output_fn, run_mode=mox.ModeKeys.PREDICT,
            batch_size=BATCH_SIZE, log_dir=flags.train_url, output_every_n_steps=1)
    np.save(os.path.join(flags.train_url, "predictions.npy"), np.concatenate(predictions))

    exported = mox.run(input_fn=input_fn, model_fn=model_fn, run_mode=mox.ModeKeys.EXPORT,
                       batch_size=BATCH_SIZE, log_dir=flags.train_url)
    print("Exported to", exported)


if __name__ == "__main__":
    tf.compat.v1.app.run(main=main)
