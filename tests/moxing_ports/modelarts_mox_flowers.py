# encoding: utf-8
"""Port of huaweicloud/ModelArts-Lab docs/moxing_api_doc/scripts/mox_flowers.py (commit 4f362662):
MoXing's flowers example. ResNet-50 from the zoo on a raw class-folder image tree, with the
network's augmentation, weight decay from ``mox.get_collection``, MoXing's piecewise
learning rate on a TF1 momentum optimizer, for 20 epochs of the data (``num_epochs=20``,
``max_number_of_steps=sys.maxint``: the data ends the run).

Every change made to the script, and nothing else:
  import moxing.tensorflow as mox                    -> import moxlite as mox
  from moxing.tensorflow.optimizer import ...        -> from moxlite.tensorflow.optimizer import ...
  from tensorflow.contrib import slim; slim.one_hot_encoding -> tf.one_hot (TF2 has no contrib)
  tf.flags / tf.app.run                              -> tf.compat.v1.flags / tf.compat.v1.app.run
  tf.losses, tf.GraphKeys, tf.nn.in_top_k, tf.train.MomentumOptimizer -> tf.compat.v1.<same>
  sys.maxint (Python 2)                              -> sys.maxsize
  output_height=224, output_width=224                -> a flag --image_size of default 224, so that the
                                                        test trains on small images
"""

import sys
import tensorflow as tf

import moxlite as mox
from moxlite.tensorflow.optimizer import learning_rate_scheduler

tf.compat.v1.flags.DEFINE_string('data_url', None, 'Necessary. dataset dir')
tf.compat.v1.flags.DEFINE_string('train_url', None, 'Optional. train_dir')
tf.compat.v1.flags.DEFINE_integer('batch_size', 64, 'Mini-batch-size')
tf.compat.v1.flags.DEFINE_integer('image_size', 224, 'Output size of the augmentation')

flags = tf.compat.v1.flags.FLAGS


def main(_):
  # 获取当前使用的GPU数量和节点数量
  num_gpus = mox.get_flag('num_gpus')
  num_workers = len(mox.get_flag('worker_hosts').split(','))
  data_meta = mox.ImageClassificationRawMetadata(base_dir=flags.data_url)

  def input_fn(mode):
    # 创建一个数据增强方法，该方法基于resnet50论文实现
    augmentation_fn = mox.get_data_augmentation_fn(name='resnet_v1_50',
                                                   run_mode=mode,
                                                   output_height=flags.image_size,
                                                   output_width=flags.image_size)

    # 创建`数据集读取类`，并将数据增强方法传入，最多读取20个epoch
    dataset = mox.ImageClassificationRawDataset(data_meta,
                                                batch_size=flags.batch_size,
                                                num_epochs=20,
                                                augmentation_fn=augmentation_fn)
    image, label = dataset.get(['image', 'label'])
    return image, label

  def model_fn(inputs, mode):
    images, labels = inputs

    # 获取一个resnet50的模型，输入images，输入logits和end_points，这里不关心end_points，仅取logits
    logits, _ = mox.get_model_fn(name='resnet_v1_50',
                                 run_mode=mode,
                                 num_classes=data_meta.num_classes,
                                 weight_decay=0.00004)(images)

    # 计算交叉熵损失值
    labels_one_hot = tf.one_hot(labels, data_meta.num_classes)
    loss = tf.compat.v1.losses.softmax_cross_entropy(logits=logits, onehot_labels=labels_one_hot)

    # 获取正则项损失值，并加到loss上，这里必须要用mox.get_collection代替tf.get_collection
    regularization_losses = mox.get_collection(tf.compat.v1.GraphKeys.REGULARIZATION_LOSSES)
    regularization_loss = tf.add_n(regularization_losses)
    loss = loss + regularization_loss

    # 计算分类正确率
    accuracy = tf.reduce_mean(tf.cast(tf.compat.v1.nn.in_top_k(logits, labels, 1), tf.float32))

    # 返回MoXing-TensorFlow用于定义模型的类ModelSpec
    return mox.ModelSpec(loss=loss, log_info={'loss': loss, 'accuracy': accuracy})

  def optimizer_fn():
    # 使用分段式学习率，0-10个epoch为0.01，10-20个epoch为0.001
    lr = learning_rate_scheduler.piecewise_lr('10:0.01,20:0.001',
                                              num_samples=data_meta.total_num_samples,
                                              global_batch_size=flags.batch_size * num_gpus * num_workers)
    return tf.compat.v1.train.MomentumOptimizer(learning_rate=lr, momentum=0.9)

  mox.run(input_fn=input_fn,
          model_fn=model_fn,
          optimizer_fn=optimizer_fn,
          run_mode=mox.ModeKeys.TRAIN,
          max_number_of_steps=sys.maxsize,
          log_dir=flags.train_url)


if __name__ == '__main__':
  tf.compat.v1.app.run(main=main)
