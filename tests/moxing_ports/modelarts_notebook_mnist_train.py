"""Port of huaweicloud/ModelArts-Lab
best_practices/Using_Notebook_to_Create_a_MNIST_Dataset_Recognition_Application/code/mnist_example.ipynb
(commit ff96cfb3), its cells up to "2. 训练模型" (training): copy the MNIST idx files from OBS to a
local folder with ``mox.file.copy_parallel``, train softmax regression on ready 50-sample batches
(``auto_batch=False``) for 1,000 steps and export it. The notebook's prediction cells are
modelarts_notebook_mnist_predict.py: each cell group ends in its own ``tf.app.run``, which exits.

The cells, in order, as one script. Every change made to them, and nothing else:
  import moxing.tensorflow as mox                    -> import moxlite as mox
  data_url = 's3://bucket/notebook/data/' (the cell the notebook asks its user to edit)
                                                     -> os.environ.get('DATA_URL', <the same>)
  from __future__ import ... in the middle of a cell (a SyntaxError outside a cell's first line)
                                                     -> at the top of the script
  from tensorflow.examples.tutorials.mnist import input_data (gone in TF2)
                                                     -> import mnist_idx_input_data as input_data
  tf.flags.DEFINE_string, tf.flags.FLAGS, tf.app.run -> tf.compat.v1.flags.<same>, tf.compat.v1.app.run
  ds.make_one_shot_iterator()                        -> tf.compat.v1.data.make_one_shot_iterator(ds)
  tf.get_variable                                    -> tf.compat.v1.get_variable
  the cell that only prints copy_parallel's docstring (a bare string) -> left out
"""
from __future__ import print_function
from __future__ import unicode_literals

import moxlite as mox
import os

####### your coding place： begin  ###########
data_url = os.environ.get('DATA_URL', 's3://bucket/notebook/data/')
####### your coding place： end  ###########

train_url = './cache/log/'          #训练输出位置。
if not mox.file.exists(data_url):
    raise ValueError('Plese verify your data url!')
if mox.file.exists(train_url):
    mox.file.remove(train_url,recursive=True)
mox.file.make_dirs(train_url)

# 本地创建数据存储文件夹
local_url = './cache/local_data/'
if mox.file.exists(local_url):
    mox.file.remove(local_url,recursive=True)
os.makedirs(local_url)

mox.file.copy_parallel(data_url, local_url)
data_url = local_url
os.listdir(data_url)

import mnist_idx_input_data as input_data
import tensorflow as tf

tf.compat.v1.flags.DEFINE_string('data_url', None, 'Dir of dataset')
tf.compat.v1.flags.DEFINE_string('train_url', None, 'Train Url')

flags = tf.compat.v1.flags.FLAGS

filenames = ['train-images-idx3-ubyte.gz','train-labels-idx1-ubyte.gz','t10k-images-idx3-ubyte.gz',
             't10k-labels-idx1-ubyte.gz']

for filename in filenames:
  filepath = os.path.join(data_url, filename)
  if not mox.file.exists(filepath):
    raise ValueError('MNIST dataset file %s not found in %s' % (filepath, local_url))

def main(*args):
  flags.data_url = data_url
  flags.train_url = train_url
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
    predictions = tf.argmax(y, 1)
    correct_predictions = tf.equal(predictions, tf.argmax(y_, 1))
    accuracy = tf.reduce_mean(tf.cast(correct_predictions, tf.float32))
    export_spec = mox.ExportSpec(inputs_dict={'images': x}, outputs_dict={'predictions': predictions}, version='model')
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
