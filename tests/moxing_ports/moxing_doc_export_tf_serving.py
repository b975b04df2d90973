"""Port of huaweicloud/ModelArts-Lab docs/moxing_api_doc/MoXing_API_UserInstructions.md (commit 429a62bb),
section 4.4 "导出PB模型": train ResNet-50 on a raw image folder, then export it for TF Serving
(``export_model=mox.ExportKeys.TF_SERVING``, ``ExportSpec`` with the default version -1).

Every change made to the script, and nothing else:
  import moxing.tensorflow as mox                    -> import moxlite as mox
  slim = tf.contrib.slim; slim.one_hot_encoding      -> tf.one_hot (TF2 has no contrib)
  tf.losses.softmax_cross_entropy                    -> tf.compat.v1.losses.softmax_cross_entropy
  base_dir='/export1/flowers/raw/split/train'        -> --data_url
  log_dir='/tmp/delete_me/log_0409'                  -> --train_url
  output_height=224, output_width=224, batch_size=32, max_number_of_steps=100
                                                     -> --image_size, --batch_size, --max_steps of those defaults
  the module-level mox.run call                      -> inside main(), run by tf.compat.v1.app.run (for the flags)
"""

import tensorflow as tf
import moxlite as mox

tf.compat.v1.flags.DEFINE_string('data_url', None, 'Raw train folder')
tf.compat.v1.flags.DEFINE_string('train_url', None, 'log_dir')
tf.compat.v1.flags.DEFINE_integer('image_size', 224, 'Output size of the augmentation')
tf.compat.v1.flags.DEFINE_integer('batch_size', 32, 'batch_size')
tf.compat.v1.flags.DEFINE_integer('max_steps', 100, 'max_number_of_steps')
flags = tf.compat.v1.flags.FLAGS


def input_fn(mode, **kwargs):
  meta = mox.ImageClassificationRawMetadata(base_dir=flags.data_url)
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
    num_classes=1000,
    weight_decay=0.0001,
    data_format='NCHW',
    batch_norm_fused=True)(images)

  labels_one_hot = tf.one_hot(labels, 1000)
  loss = tf.compat.v1.losses.softmax_cross_entropy(logits=logits, onehot_labels=labels_one_hot)

  export_spec = mox.ExportSpec(inputs_dict={'images': images}, outputs_dict={'logits': logits})

  return mox.ModelSpec(loss=loss, export_spec=export_spec)


def main(*args):
  mox.run(input_fn=input_fn,
          model_fn=model_fn,
          optimizer_fn=mox.get_optimizer_fn('sgd', learning_rate=0.01),
          batch_size=flags.batch_size,
          run_mode=mox.ModeKeys.TRAIN,
          max_number_of_steps=flags.max_steps,
          log_dir=flags.train_url,
          export_model=mox.ExportKeys.TF_SERVING)


if __name__ == '__main__':
  tf.compat.v1.app.run(main=main)
