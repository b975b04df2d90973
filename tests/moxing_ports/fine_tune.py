"""Fine-tune: pre-train a digit classifier, then warm-start a parity classifier from it.

The fine-tuned network keeps the pre-trained "hidden" layer (frozen), inserts an
"adapter" layer before a new "parity_head", and restores only what the pre-trained
checkpoint has: checkpoint_exclude_patterns names the new layers.

Ported from a moxing.tensorflow script. What changed, and nothing else:
  import moxing.tensorflow as mox   -> import moxlite as mox
  tf.flags / tf.app.run             -> tf.compat.v1.flags / tf.compat.v1.app.run
  tf.layers.dense                   -> keras.layers.Dense (Keras 3)
  tf.losses.sparse_softmax_cross_entropy -> tf.compat.v1.losses.<same>
"""

import os

import keras
import numpy as np
import tensorflow as tf

import moxlite as mox

tf.compat.v1.flags.DEFINE_string("data_url", None, "Directory holding mnist_5k.npz.")
tf.compat.v1.flags.DEFINE_string("train_url", None, "Output directory (pretrain/ and finetune/ inside).")
tf.compat.v1.flags.DEFINE_integer("pretrain_steps", 40, "Pre-training steps.")
tf.compat.v1.flags.DEFINE_integer("finetune_steps", 20, "Fine-tuning steps.")
flags = tf.compat.v1.flags.FLAGS

HIDDEN_UNITS = 32


def main(*args):
    data = np.load(os.path.join(flags.data_url, "mnist_5k.npz"))
    order = np.random.RandomState(0).permutation(len(data["labels"]))  # the file is sorted by label
    images = data["images"][order].reshape(-1, 784).astype(np.float32) / 255.0
    labels = data["labels"][order].astype(np.int32)
    pretrain_dir = os.path.join(flags.train_url, "pretrain")
    finetune_dir = os.path.join(flags.train_url, "finetune")

    def input_fn(mode):
        return tf.data.Dataset.from_tensor_slices((images[:4000], labels[:4000])).repeat()

    def pretrain_model_fn(inputs, mode):
        x, y_ = inputs
        hidden = keras.layers.Dense(HIDDEN_UNITS, activation="relu", name="hidden",
                                    kernel_initializer=keras.initializers.GlorotUniform(seed=1))(x)
        logits = keras.layers.Dense(10, name="digit_head")(hidden)
        loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels=y_, logits=logits)
        return mox.ModelSpec(loss=loss, log_info={"loss": loss})

    mox.run(input_fn=input_fn, model_fn=pretrain_model_fn,
            optimizer_fn=mox.get_optimizer_fn("momentum", learning_rate=0.05, momentum=0.9),
            run_mode=mox.ModeKeys.TRAIN, batch_size=50, log_dir=pretrain_dir,
            max_number_of_steps=flags.pretrain_steps, log_every_n_steps=20)

    def finetune_model_fn(inputs, mode):
        x, y_ = inputs
        hidden = keras.layers.Dense(HIDDEN_UNITS, activation="relu", name="hidden")(x)
        adapted = keras.layers.Dense(HIDDEN_UNITS, kernel_initializer="identity", name="adapter")(hidden)
        logits = keras.layers.Dense(2, kernel_initializer="zeros", name="parity_head")(adapted)
        loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels=y_ % 2, logits=logits)
        return mox.ModelSpec(loss=loss, log_info={"loss": loss})

    mox.set_flag("checkpoint_exclude_patterns", "adapter,parity_head")
    mox.set_flag("trainable_exclude_patterns", "hidden")
    mox.run(input_fn=input_fn, model_fn=finetune_model_fn,
            optimizer_fn=mox.get_optimizer_fn("sgd", learning_rate=0.1),
            run_mode=mox.ModeKeys.TRAIN, batch_size=50, log_dir=finetune_dir,
            checkpoint_path=pretrain_dir, max_number_of_steps=flags.finetune_steps, log_every_n_steps=10)


if __name__ == "__main__":
    tf.compat.v1.app.run(main=main)
