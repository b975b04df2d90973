"""MoXing's Getting Started evaluation script: the accuracy of the trained model on MNIST's test set.

Ported from huaweicloud/ModelArts-Lab, docs/moxing_api_doc/scripts/eval_tf_mnist.py
(docs/moxing_api_doc/MoXing_API_GettingStarted.md, section 1.3.4). What changed, and
nothing else:
  import moxing.tensorflow as mox             -> import moxlite as mox
  from tensorflow.examples.tutorials.mnist
      import input_data                       -> import mnist_input_data as input_data
                                                 (the same API on mnist_5k.npz under
                                                 data_url, 1,000 test rows)
  tf.flags.DEFINE_string, tf.flags.FLAGS      -> tf.compat.v1.flags.<same>
  ds.make_one_shot_iterator()                 -> tf.compat.v1.data.make_one_shot_iterator(ds)
  tf.get_variable                             -> tf.compat.v1.get_variable
  sys.maxint                                  -> sys.maxsize (Python 3)
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
  batch_size = 100
  num_batches = mnist.test.num_examples // batch_size

  def gen():
    for _ in range(num_batches):
      yield mnist.test.next_batch(batch_size)

  ds = tf.data.Dataset.from_generator(gen, output_types=(tf.float32, tf.int64),
                                      output_shapes=(tf.TensorShape([None, 784]), tf.TensorShape([None, 10])))
  return tf.compat.v1.data.make_one_shot_iterator(ds).get_next()


def model_fn(inputs, run_mode, **kwargs):
  x, y_ = inputs
  W = tf.compat.v1.get_variable(name='W', initializer=tf.zeros([784, 10]))
  b = tf.compat.v1.get_variable(name='b', initializer=tf.zeros([10]))
  y = tf.matmul(x, W) + b
  correct_prediction = tf.equal(tf.argmax(y, 1), tf.argmax(y_, 1))
  accuracy = tf.reduce_mean(tf.cast(correct_prediction, tf.float32))
  return mox.ModelSpec(log_info={'accuracy': accuracy})


mox.run(input_fn=input_fn,
        model_fn=model_fn,
        run_mode=mox.ModeKeys.EVAL,
        checkpoint_path=flags.train_url,
        max_number_of_steps=sys.maxsize)
