"""Large-batch training, MoXing's way: momentum under lars under batch_gradients, on 2 GPUs.

Ported from a moxing.tensorflow script. What changed, and nothing else:
  import moxing.tensorflow as mox   -> import moxlite as mox
  tf.flags / tf.app.run             -> tf.compat.v1.flags / tf.compat.v1.app.run
  tf.layers.dense                   -> keras.layers.Dense (Keras 3)
  tf.losses.sparse_softmax_cross_entropy -> tf.compat.v1.losses.<same>
"""

import os

import keras
import numpy as np
import tensorflow as tf

import moxlite as mox

tf.compat.v1.flags.DEFINE_string("data_url", None, "Directory holding mnist_5k.npz.")
tf.compat.v1.flags.DEFINE_string("train_url", None, "Output directory.")
tf.compat.v1.flags.DEFINE_integer("max_steps", 16, "Training steps (micro-batches per GPU).")
tf.compat.v1.flags.DEFINE_integer("num_batches", 4, "Micro-batches accumulated per update.")
flags = tf.compat.v1.flags.FLAGS


def main(*args):
    data = np.load(os.path.join(flags.data_url, "mnist_5k.npz"))
    order = np.random.RandomState(0).permutation(len(data["labels"]))  # the file is sorted by label
    images = data["images"][order].reshape(-1, 784).astype(np.float32) / 255.0
    labels = data["labels"][order].astype(np.int32)

    def input_fn(mode):
        return tf.data.Dataset.from_tensor_slices((images[:4000], labels[:4000])).repeat()

    def model_fn(inputs, mode):
        x, y_ = inputs
        logits = keras.layers.Dense(10, kernel_initializer="zeros", name="logits")(x)
        loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels=y_, logits=logits)
        return mox.ModelSpec(loss=loss, log_info={"loss": loss})

    optimizer_fn = mox.get_optimizer_fn("momentum", learning_rate=0.5, momentum=0.9)
    optimizer_fn = mox.get_optimizer_wrapper_fn("lars", optimizer_fn, ratio=0.02, weight_decay=0.001)
    optimizer_fn = mox.get_optimizer_wrapper_fn("batch_gradients", optimizer_fn, num_batches=flags.num_batches)
    mox.set_flag("num_gpus", 2)
    mox.run(input_fn=input_fn, model_fn=model_fn, optimizer_fn=optimizer_fn,
            run_mode=mox.ModeKeys.TRAIN, batch_size=16, log_dir=flags.train_url,
            max_number_of_steps=flags.max_steps, log_every_n_steps=4)


if __name__ == "__main__":
    tf.compat.v1.app.run(main=main)
