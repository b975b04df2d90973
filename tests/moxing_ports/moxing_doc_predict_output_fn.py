"""Port of huaweicloud/ModelArts-Lab docs/moxing_api_doc/MoXing_API_UserInstructions.md (commit 429a62bb),
section 4.3 "利用output_fn做预测" (also example 4 of mox.ModelSpec in MoXing_API_TensorFlow_apidoc.md):
ResNet-50 predicts the classes of a raw image folder resized in input_fn; output_fn, called once
with every step's outputs (output_every_n_steps == max_number_of_steps), writes them as a pandas
DataFrame to object storage through ``mox.file.File``.

Every change made to the script, and nothing else:
  import moxing.tensorflow as mox                    -> import moxlite as mox
  slim = tf.contrib.slim (unused)                    -> removed (TF2 has no contrib)
  tf.image.resize_images                             -> tf.image.resize
  base_dir='/export1/flowers/raw/split/eval'         -> --data_url
  's3://dls-test/outputs.txt'                        -> --output_url
  checkpoint_path='/tmp/checkpoint_path'             -> --checkpoint_url
  batch_size=32                                      -> --batch_size (default 32)
  the module-level mox.run call                      -> inside main(), run by tf.compat.v1.app.run (for the flags)
"""

import pandas as pd
import numpy as np
import tensorflow as tf
import moxlite as mox

tf.compat.v1.flags.DEFINE_string('data_url', None, 'Raw eval folder')
tf.compat.v1.flags.DEFINE_string('output_url', None, 'Where output_fn writes')
tf.compat.v1.flags.DEFINE_string('checkpoint_url', None, 'checkpoint_path')
tf.compat.v1.flags.DEFINE_integer('batch_size', 32, 'batch_size')
flags = tf.compat.v1.flags.FLAGS


def input_fn(mode, **kwargs):
  meta = mox.ImageClassificationRawMetadata(base_dir=flags.data_url)
  dataset = mox.ImageClassificationRawDataset(meta)
  image = dataset.get(['image'])[0]
  image.set_shape([None, None, 3])
  image = tf.expand_dims(image, 0)
  image = tf.image.resize(image, size=[224, 224])
  image = tf.squeeze(image, 0)
  return image


def model_fn(inputs, run_mode, **kwargs):
  images = inputs[0]

  logits, endpoints = mox.get_model_fn(
    name='resnet_v1_50',
    run_mode=run_mode,
    num_classes=1000,
    weight_decay=0.0001)(images)
  prediction = tf.argmax(logits, axis=1)

  return mox.ModelSpec(output_info={'prediction': prediction})


def output_fn(outputs):
  df = pd.DataFrame(np.array(outputs))
  with mox.file.File(flags.output_url, 'w') as f:
    df.to_csv(f)


def main(*args):
  mox.run(input_fn=input_fn,
          model_fn=model_fn,
          output_fn=output_fn,
          output_every_n_steps=10,
          batch_size=flags.batch_size,
          run_mode=mox.ModeKeys.PREDICT,
          max_number_of_steps=10,
          checkpoint_path=flags.checkpoint_url)


if __name__ == '__main__':
  tf.compat.v1.app.run(main=main)
