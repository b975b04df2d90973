"""Port of huaweicloud/ModelArts-Lab
official_examples/Using_TensorFlow_to_Create_a_MNIST_Dataset_Recognition_Application/codes/train_mnist_tf.py
(commit a36eb207): a plain TensorFlow-1 MNIST job that stages its data with ``mox.file``:
``copy_parallel(data_url, cache)`` before training and ``copy_parallel(cache, train_url)``
after it, the summaries and the exported SavedModel included.

Every change made to the script, and nothing else:
  import moxing as mox                                -> import moxlite as mox
  TF1 graph code on TF2                               -> tf.compat.v1.disable_eager_execution() and
    tf.placeholder, tf.FixedLenFeature, tf.parse_example, tf.summary.*, tf.train.AdamOptimizer,
    tf.Session, tf.global_variables_initializer, tf.saved_model.builder/utils/signature_def_utils/
    signature_constants/tag_constants, tf.tables_initializer, tf.flags, tf.app.run -> tf.compat.v1.<same>
  tf.nn.softmax_cross_entropy_with_logits            -> tf.nn.softmax_cross_entropy_with_logits (v2: same
                                                        arguments, labels not back-propagated, as here)
  tf.keras.layers.Dense(128, relu) / Dense(10) in a TF1 graph (Keras 3 has no graph mode) -> dense(), the
    same kernel-and-bias layer with glorot-uniform kernels and zero biases, from tf.compat.v1 variables,
    given its input width (784, 128: the parsed placeholder has no static shape)
  from tensorflow.examples.tutorials.mnist import input_data (gone in TF2) -> mnist_idx_input_data, the same (idx files)
    read_data_sets over the four idx files
  cache_data_dir = '/cache/data_url', cache_train_url = '/cache/train_url' -> flags of those defaults
  added test_writer.close() before the last copy, so that the summaries are on disk when copied (the
    original relied on flush_secs=1)
"""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function

import os

import tensorflow as tf
import mnist_idx_input_data as input_data

import moxlite as mox

tf.compat.v1.disable_eager_execution()

tf.compat.v1.flags.DEFINE_integer('max_steps', 1000, 'number of training iterations.')
tf.compat.v1.flags.DEFINE_integer('batch_size', 128, 'number of samples trained in each step.')
tf.compat.v1.flags.DEFINE_string('data_url', None, 'dataset directory.')
tf.compat.v1.flags.DEFINE_string('train_url', None, 'saved model directory.')
tf.compat.v1.flags.DEFINE_string('cache_data_dir', '/cache/data_url', 'local copy of data_url.')
tf.compat.v1.flags.DEFINE_string('cache_train_url', '/cache/train_url', 'local output folder.')

FLAGS = tf.compat.v1.flags.FLAGS


def dense(x, inputs, units, name, activation=None):
    kernel = tf.compat.v1.get_variable(name + '/kernel', [inputs, units],
                                       initializer=tf.compat.v1.glorot_uniform_initializer())
    bias = tf.compat.v1.get_variable(name + '/bias', [units], initializer=tf.compat.v1.zeros_initializer())
    y = tf.matmul(x, kernel) + bias
    return activation(y) if activation is not None else y


def main(*args):
    cache_data_dir = FLAGS.cache_data_dir
    cache_train_url = FLAGS.cache_train_url
    mox.file.copy_parallel(FLAGS.data_url, cache_data_dir)

    # Train model
    print('Training model...')
    mnist = input_data.read_data_sets(cache_data_dir, one_hot=True)
    serialized_tf_example = tf.compat.v1.placeholder(tf.string, name='tf_example')
    feature_configs = {'x': tf.compat.v1.FixedLenFeature(shape=[784], dtype=tf.float32),}
    tf_example = tf.compat.v1.parse_example(serialized_tf_example, feature_configs)
    x = tf.identity(tf_example['x'], name='x')
    y_ = tf.compat.v1.placeholder('float', shape=[None, 10])

    y = dense(x, 784, 128, 'dense', activation=tf.nn.relu)
    y = dense(y, 128, 10, 'dense_1')
    cross_entropy = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(logits=y, labels=y_))
    tf.compat.v1.summary.scalar('cross_entropy', cross_entropy)

    train_step = tf.compat.v1.train.AdamOptimizer(0.01).minimize(cross_entropy)

    correct_prediction = tf.equal(tf.argmax(y, 1), tf.argmax(y_, 1))
    accuracy = tf.reduce_mean(tf.cast(correct_prediction, 'float'))
    tf.compat.v1.summary.scalar('accuracy', accuracy)
    merged = tf.compat.v1.summary.merge_all()
    test_writer = tf.compat.v1.summary.FileWriter(cache_train_url, flush_secs=1)

    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        for step in range(FLAGS.max_steps):
            batch = mnist.train.next_batch(FLAGS.batch_size)
            train_step.run(feed_dict={x: batch[0], y_: batch[1]})
            if step % 10 == 0:
                summary, acc = sess.run([merged, accuracy],
                                        feed_dict={x: mnist.test.images, y_: mnist.test.labels})
                test_writer.add_summary(summary, step)
                print('training accuracy is:', acc)
        print('Done training!')

        builder = tf.compat.v1.saved_model.builder.SavedModelBuilder(os.path.join(cache_train_url, 'model'))
        tensor_info_x = tf.compat.v1.saved_model.utils.build_tensor_info(x)
        tensor_info_y = tf.compat.v1.saved_model.utils.build_tensor_info(y)

        prediction_signature = (
            tf.compat.v1.saved_model.signature_def_utils.build_signature_def(
                inputs={'images': tensor_info_x},
                outputs={'scores': tensor_info_y},
                method_name=tf.compat.v1.saved_model.signature_constants.PREDICT_METHOD_NAME))
        builder.add_meta_graph_and_variables(
            sess, [tf.compat.v1.saved_model.tag_constants.SERVING],
            signature_def_map={
                'predict_images':
                    prediction_signature,
            },
            main_op=tf.compat.v1.tables_initializer(),
            strip_default_attrs=True)
        builder.save()
        print('Done exporting!')

    test_writer.close()
    mox.file.copy_parallel(cache_train_url, FLAGS.train_url)


if __name__ == '__main__':
    tf.compat.v1.app.run(main=main)
