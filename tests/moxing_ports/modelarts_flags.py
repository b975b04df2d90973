"""A ModelArts training job: the platform passes --data_url and --train_url, the script defines them.

Run as ModelArts does: python modelarts_flags.py --data_url=<data> --train_url=<out> --num_gpus=2

Ported from a moxing.tensorflow script. What changed, and nothing else:
  import moxing.tensorflow as mox   -> import moxlite as mox
  tf.flags / tf.app.run             -> tf.compat.v1.flags / tf.compat.v1.app.run
  tf.layers.dense                   -> keras.layers.Dense (Keras 3)
  tf.losses.sparse_softmax_cross_entropy -> tf.compat.v1.losses.<same>
The script defines --data_url, --train_url, --batch_size and --num_gpus itself, after
importing the library that defines them too.
"""

import os

import keras
import numpy as np
import tensorflow as tf

import moxlite as mox

tf.compat.v1.flags.DEFINE_string("data_url", None, "Training data (copied by ModelArts).")
tf.compat.v1.flags.DEFINE_string("train_url", None, "Training output directory.")
tf.compat.v1.flags.DEFINE_integer("batch_size", 32, "Batch size per GPU.")
tf.compat.v1.flags.DEFINE_integer("num_gpus", 1, "GPUs used by this job.")
tf.compat.v1.flags.DEFINE_float("learning_rate", 0.2, "SGD learning rate.")
tf.compat.v1.flags.DEFINE_integer("max_steps", 30, "Training steps.")
flags = tf.compat.v1.flags.FLAGS


def main(*args):
    data = np.load(os.path.join(flags.data_url, "mnist_5k.npz"))
    order = np.random.RandomState(0).permutation(len(data["labels"]))  # the file is sorted by label
    images = data["images"][order].reshape(-1, 784).astype(np.float32) / 255.0
    labels = data["labels"][order].astype(np.int32)
    num_gpus = mox.get_flag("num_gpus")
    print("Training on %d GPU(s), batch %d per GPU, data from %s" % (num_gpus, mox.get_flag("batch_size"),
                                                                     mox.get_flag("data_url")))

    def input_fn(mode):
        return tf.data.Dataset.from_tensor_slices((images[:4000], labels[:4000])).repeat()

    def model_fn(inputs, mode):
        x, y_ = inputs
        logits = keras.layers.Dense(10, kernel_initializer="zeros", name="logits")(x)
        loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels=y_, logits=logits)
        return mox.ModelSpec(loss=loss, log_info={"loss": loss})

    mox.run(input_fn=input_fn, model_fn=model_fn,
            optimizer_fn=mox.get_optimizer_fn("sgd", learning_rate=flags.learning_rate),
            run_mode=mox.ModeKeys.TRAIN, batch_size=flags.batch_size, log_dir=flags.train_url,
            max_number_of_steps=flags.max_steps, log_every_n_steps=10)


if __name__ == "__main__":
    tf.compat.v1.app.run(main=main)
