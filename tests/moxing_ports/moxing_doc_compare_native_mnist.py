"""Port of huaweicloud/ModelArts-Lab docs/moxing_api_doc/obsolete/MoXing_API.md (commit 683ada22), section
1.1.1 "MoXing API与原生API对比": the MNIST softmax regression MoXing set beside TensorFlow's
mnist_replica.py, written with MoXing. Ready 100-sample batches from a generator (``auto_batch=False``),
a TF1 ``GradientDescentOptimizer(0.5)`` from ``optimizer_fn``, 1,000 steps, checkpoints in
``flags.train_url``, MoXing's own flag (the script defines only ``--data_url``).

Every change made to the script, and nothing else:
  import moxing.tensorflow as mox                    -> import moxlite as mox
  from tensorflow.examples.tutorials.mnist import input_data (gone in TF2)
                                                     -> import mnist_idx_input_data as input_data (the same
                                                        read_data_sets over the four idx files)
  tf.flags.DEFINE_string, tf.flags.FLAGS             -> tf.compat.v1.flags.<same>
  import moxing.tensorflow as mox after the first read of flags.data_url
                                                     -> import moxlite as mox before it: TensorFlow's flags
                                                        parse the whole command line at that first read, and
                                                        --train_url is MoXing's flag (TF 1.4's argparse flags
                                                        ignored arguments they did not know; absl's refuse them)
  yield mnist.train.next_batch(100) at the indentation of its `while True:` (an IndentationError)
                                                     -> indented under it
  ds.make_one_shot_iterator()                        -> tf.compat.v1.data.make_one_shot_iterator(ds)
  tf.get_variable, tf.train.GradientDescentOptimizer -> tf.compat.v1.<same>
"""
import mnist_idx_input_data as input_data
import tensorflow as tf
import moxlite as mox
tf.compat.v1.flags.DEFINE_string('data_url', '/tmp/tensorflow/mnist/input_data','Directory for storing input data')
flags = tf.compat.v1.flags.FLAGS
mnist = input_data.read_data_sets(flags.data_url, one_hot=True)
def input_fn(run_mode, **kwargs):
  def gen():
      while True:
          yield mnist.train.next_batch(100)
  ds = tf.data.Dataset.from_generator(gen, output_types=(tf.float32, tf.int64),
      output_shapes=(tf.TensorShape([None, 784]), tf.TensorShape([None, 10])))
  return tf.compat.v1.data.make_one_shot_iterator(ds).get_next()
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
        batch_size=100,
        auto_batch=False,
        log_dir=flags.train_url,
        max_number_of_steps=1000)
