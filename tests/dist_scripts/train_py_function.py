"""Train an MLP with BatchNormalization on MNIST rows that pass through ``tf.py_function``.

Used by tests/package/test_clean_exit.py: once under MultiWorkerMirroredStrategy (one
process per worker, started by tools/launch_local.py), once on two logical CPU
devices. A run of this kind once left interpreter exit waiting forever; the
test checks that each process ends by itself.

    python tests/dist_scripts/train_py_function.py --log_dir=/tmp/x --steps=8 [--num_gpus=2]  + cluster flags
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import moxlite as mox  # noqa: E402
from tests import runlib  # noqa: E402


def input_fn(mode):
    images, labels = runlib.mnist_rows(256)

    def scale(image):
        return image.numpy() * 1.0

    def through_python(image, label):
        image = tf.py_function(scale, [image], tf.float32)
        image.set_shape([runlib.NUM_FEATURES])
        return image, label

    return tf.data.Dataset.from_tensor_slices((images, labels)).map(through_python).repeat()


def model_fn(inputs, mode):
    images, labels = inputs
    hidden = keras.layers.Dense(32, kernel_initializer=keras.initializers.GlorotUniform(seed=1))(images)
    hidden = keras.layers.BatchNormalization()(hidden, training=mode == mox.ModeKeys.TRAIN)
    logits = keras.layers.Dense(runlib.NUM_CLASSES, kernel_initializer=keras.initializers.GlorotUniform(seed=2))(
        tf.nn.relu(hidden))
    return runlib.spec_for(images, labels, logits)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--log_dir", required=True)
    parser.add_argument("--steps", type=int, default=8)
    args, _ = parser.parse_known_args()
    mox.run(input_fn=input_fn, model_fn=model_fn, optimizer_fn=mox.get_optimizer_fn("sgd", 0.1),
            run_mode=mox.ModeKeys.TRAIN, batch_size=16, log_dir=args.log_dir,
            max_number_of_steps=args.steps, log_every_n_steps=4)
    print("TRAINED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
