"""What the benchmarks in tools/ share: the MLP model_fn they all train through moxlite.run,
and the measuring around the contenders that ``bench_runner.py`` and ``bench_xla.py`` race
(moxlite.run read through its log lines, the hand-written loop, model.fit, the rates).

The scripts run as ``python tools/<script>.py``, so this module is importable as
``benchlib`` from them (Python puts the script's folder first on the path).
"""

import contextlib
import logging
import statistics
import tempfile

import keras
import tensorflow as tf

import moxlite as mox
from moxlite import logs

HIDDEN = 256


def mlp_model_fn(inputs, mode):
    """A 784-256-10 MLP on flattened digits; log_info carries the loss for the log lines."""
    x, y = inputs
    logits = keras.layers.Dense(10)(keras.layers.Dense(HIDDEN, activation="relu")(x))
    loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))
    return mox.ModelSpec(loss=loss, log_info={"loss": loss})


def dataset(images, labels, batch_size):
    """The hand-written loop's and model.fit's input: repeated, batched, prefetched."""
    return (tf.data.Dataset.from_tensor_slices((images, labels)).repeat()
            .batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE))


def loss_fn(labels, logits):
    return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))


class _StepTimes(logging.Handler):
    """(step, clock()) of each of moxlite's training log lines; the other records by prefix."""

    def __init__(self, clock, keep_prefixes=()):
        super().__init__()
        self.clock = clock
        self.keep_prefixes = tuple(keep_prefixes)
        self.times = []
        self.kept = []

    def emit(self, record):
        message = record.getMessage()
        if message.startswith("step: "):
            self.times.append((int(message.split("(")[0].split()[1]), self.clock()))
        elif self.keep_prefixes and message.startswith(self.keep_prefixes):
            self.kept.append(message)


def moxlite_times(images, labels, clock, keep_prefixes=(), **run_arguments):
    """Runs ``mox.run`` in TRAIN mode over (images, labels) repeated, in a scratch log_dir;
    returns ((step, time) per log line, the log messages starting with ``keep_prefixes``)."""

    def input_fn(mode):
        return tf.data.Dataset.from_tensor_slices((images, labels)).repeat()

    recorder = _StepTimes(clock, keep_prefixes)
    logger = logs.get_logger()
    logger.addHandler(recorder)
    try:
        with tempfile.TemporaryDirectory() as log_dir:
            mox.run(input_fn=input_fn, run_mode=mox.ModeKeys.TRAIN, log_dir=log_dir, **run_arguments)
    finally:
        logger.removeHandler(recorder)
    return recorder.times, recorder.kept


def hand_written_times(train_step, iterator, steps, steps_per_loop, every, clock):
    """The loop a Keras 3 user writes by hand: one ``tf.function`` running ``steps_per_loop``
    calls of ``train_step(x, y) -> (loss, finite)`` over ``iterator``, leaving the call at a
    step whose flag is False. The loss is read every ``every`` steps; returns (step, time)."""

    @tf.function
    def train_steps(iterator, num_steps):
        loss = tf.zeros([])
        for _ in tf.range(num_steps):
            x, y = next(iterator)
            loss, finite = train_step(x, y)
            if not finite:
                break
        return loss

    num_steps = tf.constant(steps_per_loop)
    times = []
    for step in range(steps_per_loop, steps + 1, steps_per_loop):
        loss = train_steps(iterator, num_steps)
        if step % every == 0:
            float(loss)
            times.append((step, clock()))
    return times


class _FitTimes(keras.callbacks.Callback):
    def __init__(self, every, clock):
        super().__init__()
        self.every = every
        self.clock = clock
        self.times = []

    def on_train_batch_end(self, batch, logs=None):
        step = batch + 1
        if step % self.every == 0:
            if logs and "loss" in logs:
                float(logs["loss"])   # the loss read on the host, as the other contenders read theirs
            self.times.append((step, self.clock()))


def fit_times(model, data, steps, every, clock):
    """``model.fit`` (compiled already) for ``steps`` steps of ``data``; (step, time) every ``every``."""
    recorder = _FitTimes(every, clock)
    model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[recorder])
    return recorder.times


def steady_rate(times, warmup):
    """Steps per second between the first mark at or after ``warmup`` and the last mark."""
    marks = [(step, at) for step, at in times if step >= warmup]
    (first_step, first_time), (last_step, last_time) = marks[0], marks[-1]
    return (last_step - first_step) / max(last_time - first_time, 1e-9)


def spread(values):
    """``median (min-max)`` of ``values``, two decimals."""
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def quiet_console():
    """Keeps moxlite's console at warnings; its records still reach the handlers above."""
    for handler in logs.get_logger().handlers:
        handler.setLevel(logging.WARNING)


@contextlib.contextmanager
def whole_step_placement():
    """XLA on THOR's whole one-device step, its refresh included, as for any other stack: the
    placement moxlite's two programs for THOR (``jit_choice.placement``) are measured against."""
    from moxlite.training.compiled import jit_choice

    original = jit_choice.placement
    jit_choice.placement = lambda strategy, preconditioned=False: original(strategy, False)
    try:
        yield
    finally:
        jit_choice.placement = original
