"""moxlite's jit_compile (auto, true, false) against hand-written loops with and without XLA and model.fit.

Three models on the bundled digits (batch 64, momentum 0.9): the MLP (784-256-10), a
small CNN (moxlite's ``lenet``: 2 conv, pool, 2 dense) and a small ViT (moxlite's
``vit_tiny`` at 2 blocks, 4 heads, 64 wide, patches of 7; ``--vit_full`` for ViT-Ti's
own sizes). For each, six contenders run the same steps per traced call (``--steps_per_loop``):

* ``moxlite.run`` with ``jit_compile`` ``auto`` (measures, keeps the faster), ``true`` and ``false``;
* the hand-written loop (one ``tf.function`` of N steps over an iterator) whose step is
  ``tf.function(jit_compile=True)``, and the same without XLA;
* ``model.fit(jit_compile=True, steps_per_execution=N)``.

Each reads its loss every N steps; steps/sec is taken from the ``--warmup`` step to the
last one (tracing, compiling and auto's trial, at most 2 x 50 steps, fall before the
default warmup of 150 at 1000 steps). Rounds alternate the order of the contenders.
The table gives each contender's median steps/sec and, per model, the median and range
over rounds of moxlite auto's ratio to the faster hand-written loop and to model.fit.

    python tools/bench_xla.py [--steps 1000] [--warmup 150] [--rounds 5] [--steps_per_loop 10]
                              [--models mlp,cnn,vit] [--vit_full] [--quick]

``--quick`` (40 steps, warmup 10, one round) only checks that every contender runs.
"""

import argparse
import logging
import statistics
import sys
import tempfile
import time

import keras
import numpy as np
import tensorflow as tf

import moxlite as mox
from moxlite import logs
from moxlite.data import mnist
from moxlite.models import build_model_fn
from moxlite.models.networks import NETWORKS

clock = time.perf_counter
BATCH = 64
LEARNING_RATE, MOMENTUM = 0.01, 0.9
SMALL_VIT = {"patch_size": 7, "embed_dim": 64, "depth": 2, "num_heads": 4, "drop_path": 0.0}
FULL_VIT = {"patch_size": 7, "drop_path": 0.0}
MODELS = {"mlp": ("mlp", {"hidden_units": [256]}), "cnn": ("lenet", {}), "vit": ("vit_tiny", SMALL_VIT)}
CONTENDERS = ("moxlite auto", "moxlite true", "moxlite false", "hand XLA", "hand", "fit XLA")


def images_for(name, images):
    return images.reshape(-1, 784) if name == "mlp" else images.reshape(-1, 28, 28, 1)


class _StepTimes(logging.Handler):
    """(step, time) of each of moxlite's training log lines."""

    def __init__(self):
        super().__init__()
        self.times = []

    def emit(self, record):
        message = record.getMessage()
        if message.startswith("step: "):
            self.times.append((int(message.split("(")[0].split()[1]), clock()))


def time_moxlite(model, images, labels, steps, n, jit_compile):
    network, options = MODELS[model]

    def input_fn(mode):
        return tf.data.Dataset.from_tensor_slices((images, labels)).repeat()

    recorder = _StepTimes()
    logger = logs.get_logger()
    logger.addHandler(recorder)
    try:
        with tempfile.TemporaryDirectory() as log_dir:
            mox.run(input_fn=input_fn, model_fn=build_model_fn(network, 10, **options),
                    optimizer_fn=mox.get_optimizer_fn("momentum", LEARNING_RATE, momentum=MOMENTUM),
                    run_mode=mox.ModeKeys.TRAIN, batch_size=BATCH, log_dir=log_dir, max_number_of_steps=steps,
                    log_every_n_steps=n, steps_per_loop=n, save_summary_steps=0, jit_compile=jit_compile)
    finally:
        logger.removeHandler(recorder)
    return recorder.times


def keras_network(model):
    network, options = MODELS[model]
    shape = (784,) if model == "mlp" else (28, 28, 1)
    return NETWORKS[network](shape, 10, **options)


def dataset(images, labels):
    return (tf.data.Dataset.from_tensor_slices((images, labels)).repeat()
            .batch(BATCH, drop_remainder=True).prefetch(tf.data.AUTOTUNE))


def loss_fn(labels, logits):
    return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))


def time_hand_written(model, images, labels, steps, n, xla):
    """N steps per call over an iterator; the step itself compiled by XLA when ``xla``."""
    network = keras_network(model)
    optimizer = keras.optimizers.SGD(LEARNING_RATE, momentum=MOMENTUM)
    optimizer.build(network.trainable_variables)

    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, network(x, training=True))
        gradients = tape.gradient(loss, network.trainable_variables)
        optimizer.apply_gradients(zip(gradients, network.trainable_variables))
        return loss

    step = tf.function(train_step, jit_compile=True) if xla else train_step

    @tf.function
    def train_steps(iterator, num_steps):
        loss = tf.zeros([])
        for _ in tf.range(num_steps):
            x, y = next(iterator)
            loss = step(x, y)
        return loss

    iterator = iter(dataset(images, labels))
    num_steps = tf.constant(n)
    times = []
    for done in range(n, steps + 1, n):
        float(train_steps(iterator, num_steps))
        times.append((done, clock()))
    return times


class _FitTimes(keras.callbacks.Callback):
    def __init__(self, every):
        super().__init__()
        self.every = every
        self.times = []

    def on_train_batch_end(self, batch, logs=None):
        if (batch + 1) % self.every == 0:
            self.times.append((batch + 1, clock()))


def time_fit(model, images, labels, steps, n):
    network = keras_network(model)
    network.compile(optimizer=keras.optimizers.SGD(LEARNING_RATE, momentum=MOMENTUM),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                    steps_per_execution=n, jit_compile=True)
    recorder = _FitTimes(n)
    network.fit(dataset(images, labels), steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[recorder])
    return recorder.times


def run_contender(name, model, images, labels, steps, n):
    if name.startswith("moxlite"):
        return time_moxlite(model, images, labels, steps, n, name.split()[1])
    if name.startswith("hand"):
        return time_hand_written(model, images, labels, steps, n, xla=name == "hand XLA")
    return time_fit(model, images, labels, steps, n)


def steady_rate(times, warmup):
    marks = [(step, at) for step, at in times if step >= warmup]
    (first_step, first_time), (last_step, last_time) = marks[0], marks[-1]
    return (last_step - first_step) / max(last_time - first_time, 1e-9)


def spread(values):
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps_per_loop", type=int, default=10)
    parser.add_argument("--models", default="mlp,cnn,vit")
    parser.add_argument("--vit_full", action="store_true", help="ViT-Ti's own sizes (192 wide, 12 blocks, 3 heads)")
    parser.add_argument("--quick", action="store_true", help="40 steps, warmup 10, one round: a smoke run")
    options = parser.parse_args()
    sys.argv[1:] = []   # moxlite reads MoXing's flags from the command line
    if options.quick:
        options.steps, options.warmup, options.rounds = 40, 10, 1
    if options.vit_full:
        MODELS["vit"] = ("vit_tiny", FULL_VIT)
    for handler in logs.get_logger().handlers:   # a quiet console, the records still flowing
        handler.setLevel(logging.WARNING)
    (images, labels), _ = mnist.split()
    models = [m.strip() for m in options.models.split(",")]
    n = options.steps_per_loop
    runs = [(model, name) for model in models for name in CONTENDERS]
    rates = {run: [] for run in runs}
    for round_index in range(options.rounds):
        for model, name in runs if round_index % 2 == 0 else reversed(runs):
            keras.backend.clear_session()
            times = run_contender(name, model, images_for(model, images), labels, options.steps, n)
            rates[(model, name)].append(steady_rate(times, options.warmup))
    print(f"batch: {BATCH}  steps: {options.warmup}->{options.steps}  steps per call: {n}  rounds: {options.rounds}"
          f"  (median steps/sec; ratios: median (min-max) over rounds)")
    print("| model | " + " | ".join(CONTENDERS) + " | auto / faster hand | auto / fit XLA |")
    print("|---|" + "---|" * (len(CONTENDERS) + 2))
    for model in models:
        auto = rates[(model, "moxlite auto")]
        faster_hand = [max(a, b) for a, b in zip(rates[(model, "hand XLA")], rates[(model, "hand")])]
        medians = " | ".join(f"{statistics.median(rates[(model, name)]):.0f}" for name in CONTENDERS)
        print(f"| {model} | {medians} | {spread([a / h for a, h in zip(auto, faster_hand)])} | "
              f"{spread([a / f for a, f in zip(auto, rates[(model, 'fit XLA')])])} |")
    for (model, name), values in rates.items():
        print(f"{model:4s} {name:14s} rounds: {', '.join(f'{v:.0f}' for v in values)}")


if __name__ == "__main__":
    main()
