"""Port of huaweicloud/ModelArts-Lab docs/moxing_api_doc/obsolete/MoXing_API.md (commit 683ada22), section
1.2.2 "迁移学习resnet50-flowers": transfer learning on a raw class-folder tree that MoXing's data set
batches itself (``ImageClassificationRawDataset(batch_size=..., augmentation_fn=...,
reader_class=mox.AsyncRawGenerator)``, so ``auto_batch=False``), from a checkpoint without its
global_step and logits (``checkpoint_exclude_patterns``), in float16 with float32 variables
(``var_scope``) and a fixed loss scale of 1024, on MoXing's piecewise learning rate with a TF1
momentum optimizer.

Every change made to the script, and nothing else:
  import moxing.tensorflow as mox                    -> import moxlite as mox
  from moxing.tensorflow.optimizer import ...        -> from moxlite.tensorflow.optimizer import ...
  from tensorflow.contrib import slim; slim.one_hot_encoding -> tf.one_hot (TF2 has no contrib)
  tf.flags / tf.app.run                              -> tf.compat.v1.flags / tf.compat.v1.app.run
  tf.losses, tf.GraphKeys, tf.nn.in_top_k (TF1's argument order), tf.train.MomentumOptimizer
                                                     -> tf.compat.v1.<same>
  max_number_of_steps=1500                           -> --max_steps of default 1500
"""
import os
os.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'

import tensorflow as tf

import moxlite as mox
from moxlite.tensorflow.optimizer import learning_rate_scheduler

tf.compat.v1.flags.DEFINE_string('data_url',
                       None, 'Necessary. dataset dir')
tf.compat.v1.flags.DEFINE_string('model_name',
                       'resnet_v1_50', 'Necessary. model_name')
tf.compat.v1.flags.DEFINE_string('train_url',
                       None, 'Optional. train_dir')
tf.compat.v1.flags.DEFINE_string('checkpoint_url',
                       None, 'Optional. checkpoint path')
tf.compat.v1.flags.DEFINE_integer('batch_size',
                        64, 'Necessary. batch size')
tf.compat.v1.flags.DEFINE_integer('max_steps',
                        1500, 'max_number_of_steps')

flags = tf.compat.v1.flags.FLAGS


def main(*args, **kwargs):
  num_gpus = mox.get_flag('num_gpus')
  num_workers = len(mox.get_flag('worker_hosts').split(','))

  model_meta = mox.get_model_meta(flags.model_name)
  exclude_list = ['global_step', model_meta.default_logits_pattern]
  checkpoint_exclude_patterns = ','.join(exclude_list)
  mox.set_flag('checkpoint_exclude_patterns', checkpoint_exclude_patterns)

  data_meta = mox.ImageClassificationRawMetadata(base_dir=flags.data_url)

  mox.set_flag('loss_scale', 1024.0)

  def input_fn(mode, **kwargs):
    data_augmentation_fn = mox.get_data_augmentation_fn(name=flags.model_name,
                                                        run_mode=mode)

    dataset = mox.ImageClassificationRawDataset(data_meta,
                                                batch_size=flags.batch_size,
                                                augmentation_fn=data_augmentation_fn,
                                                reader_class=mox.AsyncRawGenerator)

    images, labels = dataset.get(['image', 'label'])

    return images, labels

  def model_fn(inputs, mode, **kwargs):
    images, labels = inputs

    mox_model_fn = mox.get_model_fn(
      name=flags.model_name,
      run_mode=mode,
      num_classes=data_meta.num_classes,
      weight_decay=0.00004,
      data_format='NCHW',
      batch_norm_fused=True)

    images = tf.cast(images, tf.float16)
    with mox.var_scope(force_dtype=tf.float32):
      logits, _ = mox_model_fn(images)

    labels_one_hot = tf.one_hot(labels, data_meta.num_classes)
    loss = tf.compat.v1.losses.softmax_cross_entropy(labels_one_hot, logits=logits)

    # Append reg loss
    regularization_losses = mox.get_collection(tf.compat.v1.GraphKeys.REGULARIZATION_LOSSES)
    regularization_loss = tf.add_n(regularization_losses)
    loss = loss + regularization_loss

    logits_fp32 = tf.cast(logits, tf.float32)
    accuracy = tf.reduce_mean(tf.cast(tf.compat.v1.nn.in_top_k(logits_fp32, labels, 1), tf.float32))

    export_spec = mox.ExportSpec(inputs_dict={'images': images},
                                 outputs_dict={'logits': logits},
                                 version='model')

    return mox.ModelSpec(loss=loss,
                         log_info={'loss': loss, 'accuracy': accuracy}, export_spec=export_spec)

  def optimizer_fn():
    lr = learning_rate_scheduler.piecewise_lr('10:0.01,20:0.001',
                                              num_samples=data_meta.total_num_samples,
                                              global_batch_size=flags.batch_size * num_gpus * num_workers)
    opt = tf.compat.v1.train.MomentumOptimizer(learning_rate=lr, momentum=0.9)
    return opt

  mox.run(input_fn=input_fn,
          model_fn=model_fn,
          optimizer_fn=optimizer_fn,
          run_mode=mox.ModeKeys.TRAIN,
          log_dir=flags.train_url,
          batch_size=flags.batch_size,
          auto_batch=False,
          checkpoint_path=flags.checkpoint_url,
          max_number_of_steps=flags.max_steps)


if __name__ == '__main__':
  tf.compat.v1.app.run(main=main)
