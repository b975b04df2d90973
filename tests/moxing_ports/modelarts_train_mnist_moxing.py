"""Port of huaweicloud/ModelArts-Lab
official_examples/Using_MoXing_to_Create_a_MNIST_Dataset_Recognition_Application/codes/train_mnist.py
(commit 2d60c039): ModelArts's MoXing MNIST job. Softmax regression on ``get_variable`` weights, fed
ready 50-sample batches from a generator (``auto_batch=False``), 1,000 steps of SGD at 0.01, then
exported for TF Serving under the version ``'model'``.

Every change made to the script, and nothing else:
  import moxing.tensorflow as mox                    -> import moxlite as mox
  from tensorflow.examples.tutorials.mnist import input_data (gone in TF2)
                                                     -> import mnist_idx_input_data as input_data (the same
                                                        read_data_sets over the four idx files)
  tf.flags.DEFINE_string, tf.flags.FLAGS, tf.app.run -> tf.compat.v1.flags.<same>, tf.compat.v1.app.run
  ds.make_one_shot_iterator()                        -> tf.compat.v1.data.make_one_shot_iterator(ds)
  tf.get_variable                                    -> tf.compat.v1.get_variable
"""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function

import mnist_idx_input_data as input_data
import tensorflow as tf
import moxlite as mox
import os

tf.compat.v1.flags.DEFINE_string('data_url', None, 'Dir of dataset')
tf.compat.v1.flags.DEFINE_string('train_url', None, 'Train Url')

flags = tf.compat.v1.flags.FLAGS


def check_dataset():
  work_directory = flags.data_url
  filenames = ['train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz', 't10k-images-idx3-ubyte.gz',
               't10k-labels-idx1-ubyte.gz']

  for filename in filenames:
    filepath = os.path.join(work_directory, filename)
    if not mox.file.exists(filepath):
      raise ValueError('MNIST dataset file %s not found in %s' % (filepath, work_directory))


def main(*args, **kwargs):
  check_dataset()
  mnist = input_data.read_data_sets(flags.data_url, one_hot=True)


  # define the input dataset, return image and label
  def input_fn(run_mode, **kwargs):
    def gen():
      while True:
        yield mnist.train.next_batch(50)
    ds = tf.data.Dataset.from_generator(
        gen, output_types=(tf.float32, tf.int64),
        output_shapes=(tf.TensorShape([None, 784]), tf.TensorShape([None, 10])))
    return tf.compat.v1.data.make_one_shot_iterator(ds).get_next()


  # define the model for training or evaling.
  def model_fn(inputs, run_mode, **kwargs):
    x, y_ = inputs
    W = tf.compat.v1.get_variable(name='W', initializer=tf.zeros([784, 10]))
    b = tf.compat.v1.get_variable(name='b', initializer=tf.zeros([10]))
    y = tf.matmul(x, W) + b
    cross_entropy = tf.reduce_mean(
      tf.nn.softmax_cross_entropy_with_logits(labels=y_, logits=y))
    correct_prediction = tf.equal(tf.argmax(y, 1), tf.argmax(y_, 1))
    accuracy = tf.reduce_mean(tf.cast(correct_prediction, tf.float32))
    export_spec = mox.ExportSpec(inputs_dict={'images': x}, outputs_dict={'logits': y}, version='model')
    return mox.ModelSpec(loss=cross_entropy, log_info={'loss': cross_entropy, 'accuracy': accuracy},
                         export_spec=export_spec)


  mox.run(input_fn=input_fn,
          model_fn=model_fn,
          optimizer_fn=mox.get_optimizer_fn('sgd', learning_rate=0.01),
          run_mode=mox.ModeKeys.TRAIN,
          batch_size=50,
          auto_batch=False,
          log_dir=flags.train_url,
          max_number_of_steps=1000,
          log_every_n_steps=10,
          export_model=mox.ExportKeys.TF_SERVING)

if __name__ == '__main__':
  tf.compat.v1.app.run(main=main)
