"""Port of huaweicloud/ModelArts-Lab docs/moxing_api_doc/MoXing_API_UserInstructions.md (commit 429a62bb),
section 4.5.3 "使用Early Stopping" (also example 2 of mox.run in MoXing_API_TensorFlow_apidoc.md):
ResNet-50 on raw train/eval folders, evaluated every epoch by ``mox.EarlyStoppingHook`` under
``inter_mode=EVAL``, stopping when accuracy has not risen by ``min_delta`` for 3 evaluations.

Every change made to the script, and nothing else:
  import moxing.tensorflow as mox                    -> import moxlite as mox
  slim = tf.contrib.slim; slim.one_hot_encoding      -> tf.one_hot (TF2 has no contrib)
  tf.losses.softmax_cross_entropy, tf.nn.in_top_k    -> tf.compat.v1.<same>
  base_dir='/export1/flowers/raw/split/train' and '.../eval' -> --data_url/train and --data_url/eval
  output_height=224, output_width=224                -> --image_size (default 224)
  batch_size=32, samples_in_train=640, samples_in_eval=32 (hook and run) -> flags of those defaults
  added log_dir=--train_url to mox.run (the documentation's run keeps no checkpoint to look at)
"""

import tensorflow as tf

import moxlite as mox

tf.compat.v1.flags.DEFINE_string('data_url', None, 'Folder with train/ and eval/ class folders')
tf.compat.v1.flags.DEFINE_string('train_url', None, 'log_dir')
tf.compat.v1.flags.DEFINE_integer('image_size', 224, 'Output size of the augmentation')
tf.compat.v1.flags.DEFINE_integer('batch', 32, 'batch_size of the hook and of mox.run')
tf.compat.v1.flags.DEFINE_integer('samples_in_train', 640, 'samples_in_train of the hook')
tf.compat.v1.flags.DEFINE_integer('samples_in_eval', 32, 'samples_in_eval of the hook')
flags = tf.compat.v1.flags.FLAGS


def input_fn(mode, **kwargs):
  if mode == mox.ModeKeys.TRAIN:
    meta = mox.ImageClassificationRawMetadata(base_dir=flags.data_url + '/train')
  else:
    meta = mox.ImageClassificationRawMetadata(base_dir=flags.data_url + '/eval')

  dataset = mox.ImageClassificationRawDataset(meta)

  image, label = dataset.get(['image', 'label'])
  image = mox.get_data_augmentation_fn(
    name='resnet_v1_50',
    run_mode=mode,
    output_height=flags.image_size,
    output_width=flags.image_size)(image)
  return image, label


def model_fn(inputs, mode, **kwargs):
  images, labels = inputs

  logits, endpoints = mox.get_model_fn(
    name='resnet_v1_50',
    run_mode=mode,
    num_classes=1000)(images)

  labels_one_hot = tf.one_hot(labels, 1000)
  loss = tf.compat.v1.losses.softmax_cross_entropy(logits=logits, onehot_labels=labels_one_hot)

  accuracy = tf.reduce_mean(tf.cast(tf.compat.v1.nn.in_top_k(logits, labels, 1), tf.float32))

  early_stop_hook = mox.EarlyStoppingHook(
    monitor_info={'accuracy': accuracy},
    monitor='accuracy',
    batch_size=flags.batch,
    samples_in_train=flags.samples_in_train,
    samples_in_eval=flags.samples_in_eval,
    evaluate_every_n_epochs=1,
    min_delta=0.01,
    patience=3,
    prefix='[EarlyStopping]'
  )

  return mox.ModelSpec(loss=loss,
                       log_info={'loss': loss, 'accuracy': accuracy},
                       hooks=[early_stop_hook])


def main(*args):
  mox.run(input_fn=input_fn,
          model_fn=model_fn,
          optimizer_fn=mox.get_optimizer_fn('sgd', learning_rate=0.01),
          batch_size=flags.batch,
          run_mode=mox.ModeKeys.TRAIN,
          inter_mode=mox.ModeKeys.EVAL,
          max_number_of_steps=10000,
          log_dir=flags.train_url)


if __name__ == '__main__':
  tf.compat.v1.app.run(main=main)
