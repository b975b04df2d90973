"""moxlite.run against a hand-written Keras 3 custom loop and against model.fit.

Same model (an MLP on the bundled MNIST sample), same data pipeline, same batch,
same optimizer, one process, measured side by side. Each contender notes the
time every 10 steps (moxlite through its own log lines, the custom loop when it
reads its loss, model.fit in a batch callback); steps/sec is taken between the
``--warmup`` step and the last step, so tracing and start-up are left out.
Rounds alternate the order of the contenders; the best and the median round of
each are compared (on a shared 2-core machine single rounds vary by 15 %).

    python tools/bench_runner.py [--steps 1000] [--warmup 100] [--batch_size 64] [--rounds 3]
"""

import argparse
import logging
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import moxlite as mox  # noqa: E402
from moxlite.data import mnist  # noqa: E402
from moxlite.training import reporting  # noqa: E402

HIDDEN = 256
LOG_EVERY = 10


def dataset(images, labels, batch_size):
    return (tf.data.Dataset.from_tensor_slices((images, labels)).repeat()
            .batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE))


def build_model():
    return keras.Sequential([keras.Input((784,)), keras.layers.Dense(HIDDEN, activation="relu"),
                             keras.layers.Dense(10)])


def loss_fn(labels, logits):
    return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))


class _StepTimes(logging.Handler):
    """Records (step, time) for each of moxlite's training log lines."""

    def __init__(self):
        super().__init__()
        self.times = []

    def emit(self, record):
        message = record.getMessage()
        if message.startswith("step: "):
            self.times.append((int(message.split("(")[0].split()[1]), time.perf_counter()))


def time_moxlite(images, labels, batch_size, steps, steps_per_loop):
    def input_fn(mode):
        return tf.data.Dataset.from_tensor_slices((images, labels)).repeat()

    def model_fn(inputs, mode):
        x, y = inputs
        logits = keras.layers.Dense(10)(keras.layers.Dense(HIDDEN, activation="relu")(x))
        loss = loss_fn(y, logits)
        return mox.ModelSpec(loss=loss, log_info={"loss": loss})

    recorder = _StepTimes()
    logger = logging.getLogger("moxlite")
    logger.addHandler(recorder)
    try:
        with tempfile.TemporaryDirectory() as log_dir:
            mox.run(input_fn=input_fn, model_fn=model_fn, optimizer_fn=mox.get_optimizer_fn("sgd", 0.05),
                    run_mode=mox.ModeKeys.TRAIN, batch_size=batch_size, log_dir=log_dir,
                    max_number_of_steps=steps, log_every_n_steps=LOG_EVERY, steps_per_loop=steps_per_loop)
    finally:
        logger.removeHandler(recorder)
    return recorder.times


def time_custom_loop(images, labels, batch_size, steps, steps_per_loop):
    """The loop a Keras 3 user writes by hand: tf.function train step, loss read every 10 steps."""
    model = build_model()
    optimizer = keras.optimizers.SGD(0.05)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    times = []
    for step, (x, y) in enumerate(dataset(images, labels, batch_size).take(steps), start=1):
        loss = train_step(x, y)
        if step % LOG_EVERY == 0:
            float(loss)
            times.append((step, time.perf_counter()))
    return times


class _FitTimes(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.times = []

    def on_train_batch_end(self, batch, logs=None):
        step = batch + 1
        if step % LOG_EVERY == 0:
            self.times.append((step, time.perf_counter()))


def time_fit(images, labels, batch_size, steps, steps_per_loop):
    model = build_model()
    model.compile(optimizer=keras.optimizers.SGD(0.05),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  steps_per_execution=steps_per_loop)
    recorder = _FitTimes()
    model.fit(dataset(images, labels, batch_size), steps_per_epoch=steps, epochs=1, verbose=0,
              callbacks=[recorder])
    return recorder.times


def steady_rate(times, warmup):
    """Steps per second between the first mark at or after ``warmup`` and the last mark."""
    marks = [(step, at) for step, at in times if step >= warmup]
    (first_step, first_time), (last_step, last_time) = marks[0], marks[-1]
    return (last_step - first_step) / (last_time - first_time)


CONTENDERS = {"moxlite.run": time_moxlite, "custom loop": time_custom_loop, "model.fit": time_fit}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps_per_loop", type=int, default=1)
    options = parser.parse_args()
    for handler in reporting.get_logger().handlers:   # keep the console quiet, the records flowing
        handler.setLevel(logging.WARNING)
    (images, labels), _ = mnist.split()
    images = images.reshape(-1, 784)
    rates = {name: [] for name in CONTENDERS}
    for round_index in range(options.rounds):
        order = list(CONTENDERS) if round_index % 2 == 0 else list(reversed(CONTENDERS))
        for name in order:
            timer = CONTENDERS[name]
            keras.backend.clear_session()
            times = timer(images, labels, options.batch_size, options.steps, options.steps_per_loop)
            rates[name].append(steady_rate(times, options.warmup))
    best = {name: max(values) for name, values in rates.items()}
    median = {name: statistics.median(values) for name, values in rates.items()}
    print(f"cores: {os.cpu_count()}  batch: {options.batch_size}  steps: {options.warmup}->{options.steps}  "
          f"steps_per_loop: {options.steps_per_loop}  rounds: {options.rounds}")
    for name in CONTENDERS:
        runs = ", ".join(f"{r:.1f}" for r in rates[name])
        print(f"{name:12s} best {best[name]:7.1f}  median {median[name]:7.1f} steps/sec  (rounds: {runs})")
    for other in ("custom loop", "model.fit"):
        print(f"ratio moxlite.run / {other:11s}: best {best['moxlite.run'] / best[other]:.3f}  "
              f"median {median['moxlite.run'] / median[other]:.3f}")


if __name__ == "__main__":
    main()
