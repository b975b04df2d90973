"""Train a bag-of-pixels model with a 50,000 x 16 embedding table through moxlite.run.

Each MNIST image becomes 784 token ids, one per pixel: id = position * 63 + the
pixel's intensity quantised to 0..62 (at most 49,391). The model sums the
tokens' embeddings weighted by their pixels' intensities and classifies the
sum with a Dense layer. The table is
3.2 MB, well over moxlite's 256 KiB minimum shard size, so under
ParameterServerStrategy with several ps it is split across them.

The coordinator prints the global step and the table's shards (shape and
device of each); ``numpy_loss`` reads a checkpoint back for the tests:

    python tests/dist_scripts/train_embedding.py --log_dir=/tmp/x --steps=20 --batch=16 [--save_steps=10]
        + MoXing cluster flags (see tools/launch_local.py)
"""

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import moxlite as mox  # noqa: E402
from tests import runlib  # noqa: E402

NUM_ROWS = 512
VOCABULARY = 50_000
EMBEDDING_DIM = 16
LEVELS = 63
LEARNING_RATE = 0.5

# Filled by model_fn's first call (eager, under the strategy's scope).
TABLE = {}


def pixel_tokens(images):
    """[batch, 784] pixels in [0, 1] -> [batch, 784] int32 ids, distinct per (position, level)."""
    levels = tf.cast(tf.round(images * (LEVELS - 1)), tf.int32)
    positions = tf.range(runlib.NUM_FEATURES, dtype=tf.int32)[tf.newaxis, :]
    return positions * LEVELS + levels


def shards_of(variable):
    """(shape, device) of each shard of ``variable`` (one entry when it is not sharded)."""
    value = getattr(variable, "value", variable)
    parts = getattr(value, "variables", None) or [value]
    return [(list(part.shape), part.device) for part in parts]


def model_fn(inputs, mode):
    images, labels = inputs
    embedding = keras.layers.Embedding(
        VOCABULARY, EMBEDDING_DIM, embeddings_initializer=keras.initializers.RandomUniform(-0.05, 0.05, seed=3))
    # Each token's embedding weighted by its pixel's intensity: the background adds nothing.
    bag = tf.reduce_sum(embedding(pixel_tokens(images)) * images[:, :, tf.newaxis], axis=1)
    logits = keras.layers.Dense(runlib.NUM_CLASSES, kernel_initializer=keras.initializers.GlorotUniform(seed=4))(bag)
    if "shards" not in TABLE:
        TABLE["shards"] = shards_of(embedding.embeddings)
    return runlib.spec_for(images, labels, logits)


def train(log_dir, steps, batch, save_steps):
    """Train on the first NUM_ROWS MNIST rows in order; return (run's result, shards of the table)."""
    TABLE.clear()
    images, labels = runlib.mnist_rows(NUM_ROWS)
    result = mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=model_fn,
                     optimizer_fn=mox.get_optimizer_fn("sgd", LEARNING_RATE), run_mode=mox.ModeKeys.TRAIN,
                     batch_size=batch, log_dir=log_dir, max_number_of_steps=steps,
                     log_every_n_steps=save_steps, save_model_steps=save_steps)
    return result, TABLE.get("shards")


def numpy_loss(checkpoint_prefix):
    """Mean cross-entropy of the saved model on the training rows, computed in numpy."""
    table, kernel, bias = runlib.checkpoint_variables(checkpoint_prefix)
    images, labels = runlib.mnist_rows(NUM_ROWS)
    tokens = pixel_tokens(tf.constant(images)).numpy()
    bag = (table[tokens].astype(np.float64) * images[:, :, np.newaxis]).sum(axis=1)
    logits = bag @ kernel + bias
    return float(-np.log(runlib.softmax_probabilities(logits)[np.arange(len(labels)), labels]).mean())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--log_dir", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--save_steps", type=int, default=10)
    args, _ = parser.parse_known_args()
    result, shards = train(args.log_dir, args.steps, args.batch, args.save_steps)
    if result is not None:  # None in a process that only served
        print("RESULT " + json.dumps({"global_step": int(result["global_step"]), "shards": shards}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
