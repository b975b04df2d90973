"""MoXing's TF1 MNIST pair: softmax regression with get_variable, trained then evaluated.

Ported from a moxing.tensorflow script. What changed, and nothing else:
  import moxing.tensorflow as mox            -> import moxlite as mox
  tf.flags / tf.app.run                      -> tf.compat.v1.flags / tf.compat.v1.app.run
  tf.get_variable, tf.variable_scope,
  tf.zeros_initializer, tf.AUTO_REUSE        -> tf.compat.v1.<same>
  tf.train.MomentumOptimizer,
  tf.train.get_or_create_global_step,
  tf.train.piecewise_constant                -> tf.compat.v1.train.<same>
  tf.losses.sparse_softmax_cross_entropy     -> tf.compat.v1.losses.<same>
  input_data.read_data_sets(data_url)        -> the same images read from data_url's .npz
"""

import os

import numpy as np
import tensorflow as tf

import moxlite as mox

tf.compat.v1.flags.DEFINE_string("data_url", None, "Directory holding mnist_5k.npz.")
tf.compat.v1.flags.DEFINE_string("train_url", None, "Directory for checkpoints and summaries.")
tf.compat.v1.flags.DEFINE_integer("batch_size", 50, "Mini-batch size.")
tf.compat.v1.flags.DEFINE_integer("max_steps", 40, "Training steps.")
tf.compat.v1.flags.DEFINE_integer("decay_step", 20, "Global step after which the learning rate drops 10x.")
flags = tf.compat.v1.flags.FLAGS

NUM_TRAIN = 4000


def load_mnist(data_url):
    data = np.load(os.path.join(data_url, "mnist_5k.npz"))
    order = np.random.RandomState(0).permutation(len(data["labels"]))  # the file is sorted by label
    images = data["images"][order].reshape(-1, 784).astype(np.float32) / 255.0
    labels = data["labels"][order].astype(np.int32)
    return (images[:NUM_TRAIN], labels[:NUM_TRAIN]), (images[NUM_TRAIN:], labels[NUM_TRAIN:])


def main(*args):
    (train_images, train_labels), (test_images, test_labels) = load_mnist(flags.data_url)

    def input_fn(run_mode, **kwargs):
        if run_mode == mox.ModeKeys.TRAIN:
            return tf.data.Dataset.from_tensor_slices((train_images, train_labels)).repeat()
        return tf.data.Dataset.from_tensor_slices((test_images, test_labels))

    def model_fn(inputs, run_mode, **kwargs):
        x, y_ = inputs
        with tf.compat.v1.variable_scope("softmax", reuse=tf.compat.v1.AUTO_REUSE):
            W = tf.compat.v1.get_variable(name="W", initializer=tf.compat.v1.zeros_initializer(), shape=[784, 10])
            b = tf.compat.v1.get_variable(name="b", initializer=tf.compat.v1.zeros_initializer(), shape=[10])
        y = tf.matmul(x, W) + b
        cross_entropy = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels=y_, logits=y)
        correct_prediction = tf.equal(tf.argmax(y, 1, output_type=tf.int32), y_)
        accuracy = tf.reduce_mean(tf.cast(correct_prediction, tf.float32))
        return mox.ModelSpec(loss=cross_entropy, log_info={"loss": cross_entropy, "accuracy": accuracy})

    def optimizer_fn():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        learning_rate = tf.compat.v1.train.piecewise_constant(global_step, [flags.decay_step], [0.05, 0.005])
        return tf.compat.v1.train.MomentumOptimizer(learning_rate=learning_rate, momentum=0.9)

    mox.run(input_fn=input_fn,
            model_fn=model_fn,
            optimizer_fn=optimizer_fn,
            run_mode=mox.ModeKeys.TRAIN,
            batch_size=flags.batch_size,
            auto_batch=True,
            log_dir=flags.train_url,
            max_number_of_steps=flags.max_steps,
            log_every_n_steps=10)

    metrics = mox.run(input_fn=input_fn,
                      model_fn=model_fn,
                      optimizer_fn=None,
                      run_mode=mox.ModeKeys.EVAL,
                      batch_size=flags.batch_size,
                      auto_batch=True,
                      log_dir=flags.train_url,
                      max_number_of_steps=0)
    print("Test accuracy: %.6f loss: %.6f" % (metrics["accuracy"], metrics["loss"]))


if __name__ == "__main__":
    tf.compat.v1.app.run(main=main)
