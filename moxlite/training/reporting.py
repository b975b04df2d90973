"""Console lines in MoXing's format and TensorBoard summaries: the one module that writes either.

Console:  ``step: 10(global step: 10)	sample/sec: 42.184	loss: 3.977	accuracy: 0.188``
Eval:     ``[VALIDATION METRICS] step: 31 loss: 0.301 accuracy: 0.912``
Only the chief writes summaries; every process may log to its console.

Every ``tf.summary`` call of moxlite is here (``Summaries``: a run's writers). The controller
decides when they are written: on the host (``SummaryWriter.scalars``) or, for the
synchronous trainer, inside the traced call the controller asks to end on a summary step
(``SummaryWriter.traced_scalars``), where an eager write would cost about 1 ms.
"""

import contextlib
import os
import time

import numpy as np
import tensorflow as tf

from moxlite.logs import get_logger  # the one channel (moxlite.logs); other modules reach it from here too


def format_value(value):
    value = np.asarray(value)
    if value.size == 1:
        value = value.reshape(())
        if np.issubdtype(value.dtype, np.integer):
            return str(int(value))
        return f"{float(value):.3f}" if abs(float(value)) >= 1e-3 or float(value) == 0 else f"{float(value):.3e}"
    return np.array2string(value, precision=3)


def train_line(step, global_step, samples_per_sec, values):
    """MoXing's training log line."""
    parts = [f"step: {step}(global step: {global_step})", f"sample/sec: {samples_per_sec:.3f}"]
    parts += [f"{name}: {format_value(value)}" for name, value in values.items()]
    return "\t".join(parts)


def validation_line(step, values):
    """MoXing's evaluation result line."""
    metrics = " ".join(f"{name}: {format_value(value)}" for name, value in values.items())
    return f"[VALIDATION METRICS] step: {step} {metrics}".rstrip()


class Throughput:
    """Samples per second between two calls of ``tick``, on the wall clock (seconds since the
    epoch), the clock a trainer's ``tf.timestamp`` reads: a trainer given ``since()``
    measures the same rate in its traced call. The calls that traced or compiled the step are
    left out (``exclude``): the rate is the training's, not the start-up's."""

    def __init__(self, global_batch_size):
        self.global_batch_size = global_batch_size
        self._time = time.time()
        self._step = None

    def reset(self, step):
        self._time, self._step = time.time(), step

    def since(self):
        """(seconds since the epoch, global step) the next ``tick`` measures from."""
        return self._time, self._step

    def exclude(self, seconds, steps):
        """Leave ``steps`` steps that took ``seconds`` (tracing, compiling) out of the interval."""
        if steps:
            self._time += seconds
            self._step = (self._step or 0) + steps

    def measured(self, step):
        """Whether the interval up to ``step`` holds a step to measure."""
        return self._step is not None and step > self._step

    def tick(self, step):
        now = time.time()
        steps = step - (self._step if self._step is not None else step)
        elapsed = now - self._time
        self._time, self._step = now, step
        return steps * self.global_batch_size / elapsed if elapsed > 0 and steps > 0 else 0.0


class Progress:
    """A progress line for long EVAL/PREDICT passes, at most every ``every_seconds``."""

    def __init__(self, label, every_seconds=10.0):
        self.label = label
        self.every_seconds = every_seconds
        self._start = self._last = time.perf_counter()

    def update(self, batches, samples):
        now = time.perf_counter()
        if now - self._last >= self.every_seconds:
            self._last = now
            rate = samples / (now - self._start)
            get_logger().info("%s: %d batches, %d samples done (%.1f sample/sec)",
                              self.label, batches, samples, rate)


# Summaries reach the disk at least this often (and when the run ends). Flushing after every
# summary step syncs the file: about 0.6 ms each, several percent of a fast training loop.
FLUSH_SECONDS = 10
MAX_QUEUED_EVENTS = 10_000   # not a bound in practice: the time is


class SummaryWriter:
    """Scalar summaries in ``log_dir`` (the chief's only); a no-op elsewhere."""

    def __init__(self, log_dir, enabled, once_per_step=False):
        """``once_per_step``: a step the directory's event files hold already is not written
        again (an evaluation of a checkpoint evaluated before, by an earlier run)."""
        self._log_dir = log_dir if enabled else None
        self._writer = None
        self._recorded = None if once_per_step else frozenset()

    def recorded(self, step):
        """Whether ``step`` has summaries in this directory from before this writer (once_per_step)."""
        if self._recorded is None:
            self._recorded = set(recorded_steps(self._log_dir)) if self._log_dir else set()
        return int(step) in self._recorded

    @property
    def writer(self):
        """The underlying writer, created on first use (so a run that trains nothing writes nothing)."""
        if self._writer is None and self._log_dir:
            self._writer = tf.summary.create_file_writer(self._log_dir, max_queue=MAX_QUEUED_EVENTS,
                                                         flush_millis=FLUSH_SECONDS * 1000)
        return self._writer

    def scalars(self, step, values, prefix=""):
        """Write the scalar ``values`` at ``step`` now, whatever condition user summaries are
        recorded under. Eagerly: a traced writer would be traced again for every run (about
        20 ms, mid-run), and the training loop writes its own values in its traced call."""
        if self._log_dir is None or self.recorded(step):
            return
        writer = self.writer
        arrays = {prefix + name: np.asarray(value) for name, value in values.items()}
        scalars = {name: float(array.reshape(())) for name, array in arrays.items() if array.size == 1}
        if not scalars:
            return
        with writer.as_default(step=int(step)), tf.summary.record_if(True):
            for name, value in scalars.items():
                tf.summary.scalar(name, tf.constant(value, tf.float32))

    def traced_scalars(self, step, values):
        """Write the scalar tensors ``values`` at the int64 tensor ``step``, inside a traced
        function (the synchronous trainer's call), whatever condition user summaries are
        recorded under. Tags are the keys: written at the top-level name scope, not under
        the call's ``cond/`` scopes."""
        with tf.compat.v1.name_scope(None), self.writer.as_default(step=step), tf.summary.record_if(True):
            for name, value in values.items():
                tf.summary.scalar(name, value)

    def user_summaries(self, global_step, every):
        """A context (entered once for the run) in which summaries written by user functions land
        in this writer on every ``every``-th global step (the step ``user_summary_step`` sets)."""
        stack = contextlib.ExitStack()
        if every and self.writer is not None:   # (reading ``writer`` creates the file)
            stack.enter_context(self.writer.as_default(step=global_step))
            stack.enter_context(tf.summary.record_if(
                lambda: tf.equal(tf.summary.experimental.get_step() % every, 0)))
        return stack

    def flush(self):
        """Put what was written on disk now (for rare writes, such as an evaluation's)."""
        if self._writer is not None:
            self._writer.flush()

    def close(self):
        if self._writer is not None:
            self._writer.close()


@contextlib.contextmanager
def user_summary_step(step):
    """Summaries written inside (model_fn's) record at ``step``: the global step after the
    batch's update, the step the loop's own summaries and log line give that batch."""
    previous = tf.summary.experimental.get_step()
    tf.summary.experimental.set_step(step)
    try:
        yield
    finally:
        tf.summary.experimental.set_step(previous)


def recorded_steps(log_dir):
    """The steps that the event files directly in ``log_dir`` hold summaries at."""
    steps = set()
    for path in tf.io.gfile.glob(os.path.join(log_dir, "events.out.tfevents.*")):
        try:
            for event in tf.compat.v1.train.summary_iterator(path):
                if event.HasField("summary") and event.summary.value:
                    steps.add(int(event.step))
        except tf.errors.DataLossError:   # a file cut short (a run killed mid-write): what was read counts
            continue
    return steps


class Summaries:
    """A run's summary writers: the training scalars in ``log_dir``, the evaluation's in
    ``log_dir/eval`` (TensorBoard shows the two as runs). Each file is created on its first
    write, so a run that writes nothing leaves no event file. An evaluation at a step that
    ``log_dir/eval`` holds already (a rerun's, a repeated run_mode=EVAL's) is not written again."""

    def __init__(self, log_dir, enabled):
        self.train = SummaryWriter(log_dir, enabled)
        self.eval = SummaryWriter(os.path.join(log_dir, "eval") if log_dir else None, enabled, once_per_step=True)

    def close(self):
        self.train.close()
        self.eval.close()
