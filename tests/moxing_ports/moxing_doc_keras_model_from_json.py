"""Port of huaweicloud/ModelArts-Lab docs/moxing_api_doc/MoXing_API_UserInstructions.md (commit 429a62bb),
section 4.6 "利用Keras构建模型", its second script: ``model_fn`` rebuilds the network from the JSON
the first script (moxing_doc_keras_multi_io.py) wrote, with ``model_from_json``, and trains it with
RMSProp on random single samples batched by MoXing (the graph only: no weights are loaded).

Every change made to the script, and nothing else:
  import moxing.tensorflow as mox                    -> import moxlite as mox
  tensorflow.python.keras.losses/models              -> keras.losses/models (Keras 3)
  tf.random_uniform, tf.random_normal                -> tf.random.uniform, tf.random.normal
  tf.gfile.Open                                      -> tf.io.gfile.GFile
  '/tmp/delete_me/keras_model.json'                  -> --save_path of that default
  log_dir=None, max_number_of_steps=1000             -> log_dir=mox.get_flag('log_dir'), MoXing's own --log_dir flag
                                                        (the documentation's run keeps no checkpoint to look at),
                                                        and --max_steps of default 1000
"""
import tensorflow as tf
import moxlite as mox

from keras.losses import binary_crossentropy
from keras.models import model_from_json

tf.compat.v1.flags.DEFINE_string('save_path', '/tmp/delete_me/keras_model.json', 'The model JSON')
tf.compat.v1.flags.DEFINE_integer('max_steps', 1000, 'max_number_of_steps')
flags = tf.compat.v1.flags.FLAGS


def input_fn(mode, **kwargs):
  main_input = tf.random.uniform(shape=(100,), minval=1, maxval=10000, dtype=tf.int32, name='main_input')
  auxiliary_input = tf.random.normal(shape=(5,), name='aux_input')
  main_labels = tf.random.uniform(shape=(1,))
  auxiliary_labels = tf.random.uniform(shape=(1,))
  return main_input, auxiliary_input, main_labels, auxiliary_labels


def model_fn(inputs, mode, **kwargs):
  main_input, auxiliary_input, main_labels, auxiliary_labels = inputs

  with tf.io.gfile.GFile(flags.save_path, 'r') as f:
    keras_model_json = f.read()

  model_croe = model_from_json(keras_model_json)
  main_output, auxiliary_output = model_croe([main_input, auxiliary_input])

  loss = 1.0 * binary_crossentropy(main_output, main_labels) + \
         0.2 * binary_crossentropy(auxiliary_output, auxiliary_labels)
  loss = tf.reduce_mean(loss)

  return mox.ModelSpec(loss=loss, log_info={'loss': loss})

if __name__ == '__main__':
  mox.run(input_fn=input_fn,
          model_fn=model_fn,
          optimizer_fn=mox.get_optimizer_fn('rmsprop', learning_rate=0.01),
          run_mode=mox.ModeKeys.TRAIN,
          batch_size=32,
          auto_batch=True,
          log_dir=mox.get_flag('log_dir'),
          max_number_of_steps=flags.max_steps,
          log_every_n_steps=10)
