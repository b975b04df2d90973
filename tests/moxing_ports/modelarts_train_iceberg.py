"""Port of huaweicloud/ModelArts-Lab
official_examples/Using_MoXing_to_Create_a_Iceberg_Images_Classification_Application/codes/train_iceberg.py
(commit 25fba402): Kaggle's iceberg-or-ship radar images from TFRecords through MoXing's
``tfrecord_common`` classes; TRAIN with an export for serving, then EVAL and PREDICT with an
``output_fn`` that collects a pandas submission, written to ``train_url``.

Every change made to the script, and nothing else:
  import moxing.tensorflow as mox                    -> import moxlite as mox
  from moxing.tensorflow.datasets.tfrecord_common    -> from moxlite.tensorflow.datasets.tfrecord_common
  from moxing.framework.util import compat           -> from moxlite.framework.util import compat
  from tensorflow.contrib import slim; slim.one_hot_encoding -> tf.one_hot (TF2 has no contrib)
  tensorflow.python.keras.layers / tensorflow.python.layers.layers and the
    tf_util.version_info() branch choosing between them -> keras.layers (Keras 3)
  tf.flags / tf.app.run                              -> tf.compat.v1.flags / tf.compat.v1.app.run
  tf.FixedLenFeature / tf.py_func / tf.random_uniform -> tf.io.FixedLenFeature / tf.numpy_function /
                                                        tf.random.uniform
  tf.losses.softmax_cross_entropy                    -> tf.compat.v1.losses.softmax_cross_entropy
  submission.append(df) (removed in pandas 2)        -> pd.concat([submission, df])
  tf.gfile.Open(submission_file, 'w') (TF2 cannot write s3://) -> mox.file.File(submission_file, 'w'),
    and os.path.join on the obs:// url              -> train_url.rstrip('/') + '/submission.csv'
  ExportSpec inputs_dict 'angles' (the expanded tensor) -> the raw angles input (moxlite serves inputs
                                                        model_fn received, not tensors computed from them)
  NUM_SAMPLES_TRAIN/EVAL/TEST = 1176/295/8424 and the 150 epochs -> flags of those names and defaults,
    so the test runs on a few generated records
"""

import math
import os

import keras
import numpy as np
import pandas as pd
import tensorflow as tf
from keras.layers import Activation, Concatenate, Conv2D, Dense, Dropout, Flatten, MaxPooling2D

import moxlite as mox
from moxlite.tensorflow.datasets.tfrecord_common import BaseTFRecordDataset, ImageClassificationTFRecordMetadata

os.environ['TF_CPP_MIN_LOG_LEVEL'] = '2'

tf.compat.v1.flags.DEFINE_integer('batch_size', 16, 'Mini-batch size')
tf.compat.v1.flags.DEFINE_string('data_url', None, 'Dir of dataset')
tf.compat.v1.flags.DEFINE_string('train_url', None, 'Dir of log')
tf.compat.v1.flags.DEFINE_boolean('is_training', True, 'True for train. False for eval and predict.')
tf.compat.v1.flags.DEFINE_integer('num_samples_train', 1176, 'NUM_SAMPLES_TRAIN')
tf.compat.v1.flags.DEFINE_integer('num_samples_eval', 295, 'NUM_SAMPLES_EVAL')
tf.compat.v1.flags.DEFINE_integer('num_samples_test', 8424, 'NUM_SAMPLES_TEST')
tf.compat.v1.flags.DEFINE_integer('epochs', 150, 'Training epochs')
flags = tf.compat.v1.flags.FLAGS


def input_fn(run_mode, **kwargs):
  if run_mode == mox.ModeKeys.TRAIN:
    num_samples = flags.num_samples_train
    num_epochs = None
    shuffle = True
    file_pattern = 'iceberg-train-*.tfrecord'
    num_readers = 16
  else:
    num_epochs = None
    shuffle = False
    num_readers = 1
    if run_mode == mox.ModeKeys.EVAL:
      num_samples = flags.num_samples_eval
      file_pattern = 'iceberg-eval-*.tfrecord'
    else:
      num_samples = flags.num_samples_test
      file_pattern = 'iceberg-test-*.tfrecord'

  custom_feature_keys = ['band_1', 'band_2', 'angle']
  custom_feature_values = [tf.io.FixedLenFeature((75 * 75,), tf.float32, default_value=None),
              tf.io.FixedLenFeature((75 * 75,), tf.float32, default_value=None),
              tf.io.FixedLenFeature([], tf.float32, default_value=None)]

  if run_mode == mox.ModeKeys.PREDICT:
    custom_feature_keys.append('id')
    custom_feature_values.append(tf.io.FixedLenFeature([], tf.string, default_value=None))

  else:
    custom_feature_keys.append('label')
    custom_feature_values.append(tf.io.FixedLenFeature([], tf.int64, default_value=None))

  dataset_meta = ImageClassificationTFRecordMetadata(flags.data_url,
                                                     file_pattern,
                                                     num_samples=num_samples,
                                                     redirect_dir=None)

  class IcebergTFRecordDataset(BaseTFRecordDataset):

    def _build_features(self, band_1, band_2, angle, id_or_label):
      band_1 = tf.reshape(band_1, shape=[75, 75])
      band_2 = tf.reshape(band_2, shape=[75, 75])
      self._add_feature('band_1', band_1)
      self._add_feature('band_2', band_2)
      self._add_feature('angle', angle)
      if 'id' in custom_feature_keys:
        self._add_feature('id', id_or_label)
      else:
        self._add_feature('label', id_or_label)

  dataset = IcebergTFRecordDataset(dataset_meta,
                                   feature_keys=custom_feature_keys,
                                   feature_values=custom_feature_values,
                                   shuffle=shuffle,
                                   num_parallel=num_readers,
                                   num_epochs=num_epochs)

  if run_mode == mox.ModeKeys.PREDICT:
    band_1, band_2, id_or_label, angle = dataset.get(['band_1', 'band_2', 'id', 'angle'])
    # Non-DMA safe string cannot tensor may not be copied to a GPU.
    # So we encode string to a list of integer.
    from moxlite.framework.util import compat
    id_or_label = tf.numpy_function(lambda str: np.array([ord(ch) for ch in compat.as_str(str)]), [id_or_label], tf.int64)
    # We know `id` is a string of 8 alphabets.
    id_or_label = tf.reshape(id_or_label, shape=(8,))
  else:
    band_1, band_2, id_or_label, angle = dataset.get(['band_1', 'band_2', 'label', 'angle'])

  band_3 = band_1 + band_2

  # Rescale the input image to [0, 1]
  def rescale(*args):
    ret_images = []
    for image in args:
      image = tf.cast(image, tf.float32)
      image_min = tf.reduce_min(image)
      image_max = tf.reduce_max(image)
      image = (image - image_min) / (image_max - image_min)
      ret_images.append(image)
    return ret_images

  band_1, band_2, band_3 = rescale(band_1, band_2, band_3)
  image = tf.stack([band_1, band_2, band_3], axis=2)

  # Data augementation
  if run_mode == mox.ModeKeys.TRAIN:
    image = tf.image.random_flip_left_right(image)
    image = tf.image.random_flip_up_down(image)
    image = tf.image.rot90(image, k=tf.random.uniform(shape=(), maxval=3, minval=0, dtype=tf.int32))

  return image, id_or_label, angle


def model_v1(images, angles, run_mode):
  is_training = (run_mode == mox.ModeKeys.TRAIN)

  # Conv Layer 1
  x = Conv2D(64, kernel_size=(3, 3), activation='relu', input_shape=(75, 75, 3))(images)
  x = MaxPooling2D(pool_size=(3, 3), strides=(2, 2))(x)
  x = Dropout(0.2)(x, training=is_training)

  # Conv Layer 2
  x = Conv2D(128, kernel_size=(3, 3), activation='relu')(x)
  x = MaxPooling2D(pool_size=(2, 2), strides=(2, 2))(x)
  x = Dropout(0.2)(x, training=is_training)

  # Conv Layer 3
  x = Conv2D(128, kernel_size=(3, 3), activation='relu')(x)
  x = MaxPooling2D(pool_size=(2, 2), strides=(2, 2))(x)
  x = Dropout(0.2)(x, training=is_training)

  # Conv Layer 4
  x = Conv2D(64, kernel_size=(3, 3), activation='relu')(x)
  x = MaxPooling2D(pool_size=(2, 2), strides=(2, 2))(x)
  x = Dropout(0.2)(x, training=is_training)

  # Flatten the data for upcoming dense layers
  x = Flatten()(x)
  x = Concatenate()([x, angles])

  # Dense Layers
  x = Dense(512)(x)
  x = Activation('relu')(x)
  x = Dropout(0.2)(x, training=is_training)

  # Dense Layer 2
  x = Dense(256)(x)
  x = Activation('relu')(x)
  x = Dropout(0.2)(x, training=is_training)

  # Sigmoid Layer
  logits = Dense(2)(x)

  return logits


def model_fn(inputs, mode, **kwargs):
  # In train or eval, id_or_labels represents labels. In predict, id_or_labels represents id.
  images, id_or_labels, angles = inputs
  raw_angles = angles
  # Reshape angles from [batch_size] to [batch_size, 1]
  angles = tf.expand_dims(angles, 1)
  # Apply your version of model
  logits = model_v1(images, angles, mode)

  if mode == mox.ModeKeys.PREDICT:
    logits = tf.nn.softmax(logits)
    # clip logits to get lower loss value.
    logits = tf.clip_by_value(logits, clip_value_min=0.05, clip_value_max=0.95)
    model_spec = mox.ModelSpec(output_info={'id': id_or_labels, 'logits': logits})
  elif mode == mox.ModeKeys.EXPORT:
    predictions = tf.nn.softmax(logits)
    export_spec = mox.ExportSpec(inputs_dict={'images': images, 'angles': raw_angles},
                                 outputs_dict={'predictions': predictions},
                                 version='model')
    model_spec = mox.ModelSpec(export_spec=export_spec)
  else:
    labels_one_hot = tf.one_hot(id_or_labels, 2)
    loss = tf.compat.v1.losses.softmax_cross_entropy(
      logits=logits, onehot_labels=labels_one_hot,
      label_smoothing=0.0, weights=1.0)
    model_spec = mox.ModelSpec(loss=loss, log_info={'loss': loss})
  return model_spec


def output_fn(outputs):
  global submission
  submission = pd.DataFrame(columns=['id', 'is_iceberg'])
  for output in outputs:
    for id, logits in zip(output['id'], output['logits']):
      # Decode id from integer list to string.
      id = ''.join([chr(ch) for ch in id])
      # Get the probability of label==1
      is_iceberg = logits[1]
      df = pd.DataFrame([[id, is_iceberg]], columns=['id', 'is_iceberg'])
      submission = pd.concat([submission, df])


def main(*args):
  num_gpus = mox.get_flag('num_gpus')
  num_workers = len(mox.get_flag('worker_hosts').split(','))
  steps_per_epoch = int(round(math.ceil(
    float(flags.num_samples_train) / (flags.batch_size * num_gpus * num_workers))))

  if flags.is_training:
    mox.run(input_fn=input_fn,
            model_fn=model_fn,
            optimizer_fn=mox.get_optimizer_fn(name='adam', learning_rate=0.001),
            run_mode=mox.ModeKeys.TRAIN,
            batch_size=flags.batch_size,
            log_dir=flags.train_url,
            max_number_of_steps=steps_per_epoch * flags.epochs,
            log_every_n_steps=20,
            save_summary_steps=50,
            save_model_secs=120,
            export_model=mox.ExportKeys.TF_SERVING)
  else:
    mox.run(input_fn=input_fn,
            model_fn=model_fn,
            run_mode=mox.ModeKeys.EVAL,
            batch_size=5,
            log_every_n_steps=1,
            max_number_of_steps=int(flags.num_samples_eval / 5),
            checkpoint_path=flags.train_url)
    mox.run(input_fn=input_fn,
            output_fn=output_fn,
            model_fn=model_fn,
            run_mode=mox.ModeKeys.PREDICT,
            batch_size=24,
            max_number_of_steps=int(flags.num_samples_test / 24),
            log_every_n_steps=50,
            output_every_n_steps=int(flags.num_samples_test / 24),
            checkpoint_path=flags.train_url)

    # Write results to file. tf.gfile allow writing file to EBS/s3
    submission_file = flags.train_url.rstrip('/') + '/submission.csv'
    result = submission.to_csv(path_or_buf=None, index=False)
    with mox.file.File(submission_file, 'w') as f:
      f.write(result)


if __name__ == '__main__':
  tf.compat.v1.app.run(main=main)
