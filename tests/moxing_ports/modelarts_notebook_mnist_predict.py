"""Port of huaweicloud/ModelArts-Lab
best_practices/Using_Notebook_to_Create_a_MNIST_Dataset_Recognition_Application/code/mnist_example.ipynb
(commit ff96cfb3), its cells from "2. 预测" (prediction) on: copy one digit image from OBS, and
predict its class from the checkpoint the training cells (modelarts_notebook_mnist_train.py) left
in ./cache/log/. ``input_fn`` returns the image as one ``[784]`` tensor with ``batch_size=1,
auto_batch=False``; ``output_fn`` prints the prediction.

The cells, in order, as one script. Every change made to them, and nothing else:
  import moxing.tensorflow as mox                    -> import moxlite as mox
  src_path = 's3://bucket/test/image_number.jpg' (the cell the notebook asks its user to edit)
                                                     -> os.environ.get('SRC_PATH', <the same>)
  from __future__ import ... in the middle of a cell -> at the top of the script
  tf.read_file                                       -> tf.io.read_file
  tf.image.resize_images(img, [28, 28], 0)           -> tf.image.resize(img, [28, 28], 'bilinear')
                                                        (method 0 is ResizeMethod.BILINEAR)
  tf.get_variable                                    -> tf.compat.v1.get_variable
  tf.app.run                                         -> tf.compat.v1.app.run
"""
from __future__ import print_function
from __future__ import unicode_literals

import moxlite as mox
import os

####### your coding place： begin###########
src_path = os.environ.get('SRC_PATH', 's3://bucket/test/image_number.jpg')
####### your coding place： end  ###########

# 可以利用moxing 将需要预测的图片从OBS拷贝到本地
if not mox.file.exists(src_path):
    raise ValueError('Plese verify your src_path!')
dst_path =  './cache/test.jpg'
mox.file.copy(src_path,dst_path)

image_path = './cache/test.jpg'            # 指定图片位置
checkpoint_url = './cache/log/'         # 指定checkpoint位置，即上一步训练指定的路径的位置。
print(mox.file.exists(image_path))

import moxlite as mox
import os
import tensorflow as tf


def predict(*args):
  def input_fn(run_mode, **kwargs):
    image = tf.io.read_file(image_path)
    img = tf.image.decode_jpeg(image, channels=1)
    img = tf.image.resize(img, [28, 28], 'bilinear')
    img = tf.reshape(img, [784])
    return img

  def model_fn(inputs, run_mode, **kwargs):
    x = inputs
    W1 = tf.compat.v1.get_variable(name='W', initializer=tf.zeros([784, 10]))
    b1 = tf.compat.v1.get_variable(name='b', initializer=tf.zeros([10]))
    y = tf.matmul(x, W1) + b1
    predictions = tf.argmax(y, 1)
    return mox.ModelSpec(output_info={'predict': predictions})

  def output_fn(outputs):
    for output in outputs:
      result = output['predict']
      print("The result：",result)

  mox.run(input_fn=input_fn,
          model_fn=model_fn,
          output_fn=output_fn,
          run_mode=mox.ModeKeys.PREDICT,
          batch_size=1,
          auto_batch=False,
          max_number_of_steps=1,
          output_every_n_steps=1,
          checkpoint_path=checkpoint_url)
if __name__ == '__main__':
  tf.compat.v1.app.run(main=predict)
