"""MoXing's Getting Started training script: softmax regression on MNIST, no batch_size.

Ported from huaweicloud/ModelArts-Lab, docs/moxing_api_doc/scripts/train_tf_mnist.py
(the script of docs/moxing_api_doc/MoXing_API_GettingStarted.md, section 1.3). What
changed, and nothing else:
  import moxing.tensorflow as mox             -> import moxlite as mox
  from tensorflow.examples.tutorials.mnist
      import input_data                       -> import mnist_input_data as input_data
                                                 (TF2 has no such module: the same API on
                                                 mnist_5k.npz under data_url, 800 train and
                                                 1,000 test rows)
  tf.flags.DEFINE_string, tf.flags.FLAGS      -> tf.compat.v1.flags.<same>
  ds.make_one_shot_iterator()                 -> tf.compat.v1.data.make_one_shot_iterator(ds)
  tf.get_variable                             -> tf.compat.v1.get_variable
  tf.train.GradientDescentOptimizer           -> tf.compat.v1.train.GradientDescentOptimizer
  sys.maxint                                  -> sys.maxsize (Python 3)
The original's generator reads mnist.test for training (5 epochs' worth of batches,
counted on mnist.train); that is kept as written.
"""
import sys
import tensorflow as tf
import mnist_input_data as input_data

tf.compat.v1.flags.DEFINE_string('data_url', '/tmp/tensorflow/mnist/input_data', 'Directory for storing input data')
tf.compat.v1.flags.DEFINE_string('train_url', '/tmp/tensorflow/mnist/output_log', 'Directory for output logs')
flags = tf.compat.v1.flags.FLAGS
mnist = input_data.read_data_sets(flags.data_url, one_hot=True)

import moxlite as mox


def input_fn(run_mode, **kwargs):
  num_epochs = 5
  batch_size = 100
  num_batches = num_epochs * mnist.train.num_examples // batch_size

  def gen():
    for _ in range(num_batches):
      yield mnist.test.next_batch(batch_size)

  ds = tf.data.Dataset.from_generator(gen,
                                      output_types=(tf.float32, tf.int64),
                                      output_shapes=(tf.TensorShape([None, 784]), tf.TensorShape([None, 10])))
  x, y_ = tf.compat.v1.data.make_one_shot_iterator(ds).get_next()
  return x, y_


def model_fn(inputs, run_mode, **kwargs):
  x, y_ = inputs
  W = tf.compat.v1.get_variable(name='W', initializer=tf.zeros([784, 10]))
  b = tf.compat.v1.get_variable(name='b', initializer=tf.zeros([10]))
  y = tf.matmul(x, W) + b
  cross_entropy = tf.reduce_mean(
    tf.nn.softmax_cross_entropy_with_logits(labels=y_, logits=y))
  return mox.ModelSpec(loss=cross_entropy, log_info={'loss': cross_entropy})


def optimizer_fn():
  return tf.compat.v1.train.GradientDescentOptimizer(0.5)


mox.run(input_fn=input_fn,
        model_fn=model_fn,
        optimizer_fn=optimizer_fn,
        run_mode=mox.ModeKeys.TRAIN,
        log_dir=flags.train_url,
        max_number_of_steps=sys.maxsize)
