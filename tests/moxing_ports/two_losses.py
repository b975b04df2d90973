"""Two losses, two optimizers: a digit classifier and an auxiliary parity head on its logits.

Each loss trains only its own variable scope (var_scopes), the way MoXing trains a GAN's
generator and discriminator: the parity loss also depends on the digit weights, but
must not move them.

Ported from a moxing.tensorflow script. What changed, and nothing else:
  import moxing.tensorflow as mox     -> import moxlite as mox
  tf.flags / tf.app.run               -> tf.compat.v1.flags / tf.compat.v1.app.run
  tf.variable_scope, tf.get_variable,
  tf.zeros_initializer               -> tf.compat.v1.<same>
  tf.losses.sparse_softmax_cross_entropy -> tf.compat.v1.losses.<same>
"""

import os

import numpy as np
import tensorflow as tf

import moxlite as mox

tf.compat.v1.flags.DEFINE_string("data_url", None, "Directory holding mnist_5k.npz.")
tf.compat.v1.flags.DEFINE_string("train_url", None, "Output directory.")
tf.compat.v1.flags.DEFINE_integer("max_steps", 25, "Training steps.")
flags = tf.compat.v1.flags.FLAGS


def main(*args):
    data = np.load(os.path.join(flags.data_url, "mnist_5k.npz"))
    order = np.random.RandomState(0).permutation(len(data["labels"]))  # the file is sorted by label
    images = data["images"][order].reshape(-1, 784).astype(np.float32) / 255.0
    labels = data["labels"][order].astype(np.int32)

    def input_fn(mode):
        return tf.data.Dataset.from_tensor_slices((images[:4000], labels[:4000])).repeat()

    def model_fn(inputs, mode):
        x, digit = inputs
        with tf.compat.v1.variable_scope("digits"):
            w = tf.compat.v1.get_variable("w", [784, 10], initializer=tf.compat.v1.zeros_initializer())
            b = tf.compat.v1.get_variable("b", [10], initializer=tf.compat.v1.zeros_initializer())
        digit_logits = tf.matmul(x, w) + b
        with tf.compat.v1.variable_scope("parity"):
            p = tf.compat.v1.get_variable("w", [10, 2], initializer=tf.compat.v1.zeros_initializer())
            c = tf.compat.v1.get_variable("b", [2], initializer=tf.compat.v1.zeros_initializer())
        parity_logits = tf.matmul(digit_logits, p) + c
        digit_loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels=digit, logits=digit_logits)
        parity_loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels=digit % 2, logits=parity_logits)
        return mox.ModelSpec(loss=[digit_loss, parity_loss], var_scopes=[["digits"], ["parity"]],
                             log_info={"digit_loss": digit_loss, "parity_loss": parity_loss})

    mox.run(input_fn=input_fn, model_fn=model_fn,
            optimizer_fn=[mox.get_optimizer_fn("sgd", learning_rate=0.1),
                          mox.get_optimizer_fn("sgd", learning_rate=0.01)],
            run_mode=mox.ModeKeys.TRAIN, batch_size=40, log_dir=flags.train_url,
            max_number_of_steps=flags.max_steps, log_every_n_steps=5)


if __name__ == "__main__":
    tf.compat.v1.app.run(main=main)
