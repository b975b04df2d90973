"""Resuming when input_fn's pipeline changed since the checkpoint was written.

On one device the checkpoint holds the input iterator's position, which only
fits the pipeline that wrote it. Add a ``.map`` or change a shuffle buffer and
TensorFlow fails, either while restoring or at the first ``get_next``. The
model, optimizer and step still fit, so by default the run resumes them with
the input restarted from its beginning and says so; with
``--noallow_input_restart`` (recipe ``run.allow_input_restart: false``) it
stops with one line instead. Never a raw TensorFlow error.

A pipeline with stateful ops (``tf.random.uniform`` or
``tf.image.random_flip_left_right`` inside a ``.map``) has no position
TensorFlow can save at all. ``position_unsavable`` finds that out before
training starts; the run then checkpoints model, optimizer and step without
the input and, like a run on several replicas, resumes by skipping the
batches already trained on.
"""

import re
import shutil
import tempfile

import tensorflow as tf

from moxlite import errors
from moxlite.training.reporting import get_logger
from moxlite.training.trainer_protocol import Trainer

# What TensorFlow raises for an iterator state that does not fit its dataset.
MISMATCH_ERRORS = (tf.errors.InternalError, tf.errors.FailedPreconditionError, tf.errors.InvalidArgumentError,
                   tf.errors.NotFoundError)


def position_unsavable(iterator):
    """Why TensorFlow cannot save ``iterator``'s position (a stateful op in its pipeline), or None.

    Writes the iterator alone to a scratch directory, which TF refuses for such a pipeline
    before any file is written; nothing lands in ``log_dir``. Called before the first batch,
    when tf.data has filled no buffer yet, so what it writes is small.
    """
    scratch = tempfile.mkdtemp(prefix="moxlite-input-probe-")
    try:
        tf.train.Checkpoint(iterator=iterator).write(scratch + "/probe")
    except tf.errors.FailedPreconditionError as error:
        return refusal_detail(error)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return None


def is_unsavable_position(error):
    """True when ``error`` is TF refusing to save an iterator whose pipeline has stateful ops."""
    return isinstance(error, tf.errors.FailedPreconditionError) and "stateful" in str(error)


def refusal_detail(error):
    """``RandomUniform is stateful`` out of TF's message with its function and op names around it."""
    text = re.sub(r"\{\{[^}]*\}\}\s*", "", first_line(error))
    return re.sub(r"\s*\[Op:.*$", "", text).rstrip(". ") or type(error).__name__


def report_unsaved_position(detail):
    """The one line that says checkpoints of this run hold no input position, and what a resume does."""
    get_logger().warning(
        "Checkpoints cannot save the input position because input_fn's pipeline has stateful ops (%s); they "
        "save model, optimizer and global step, and a resume replays input_fn from its beginning, skipping "
        "the batches already trained on (as on several replicas); random ops then draw new values", detail)


def restart_or_stop(prefix, step, detail, allowed):
    """Log the restart, or raise CheckpointError when ``allowed`` (allow_input_restart) is False."""
    what = (f"the input position saved in {prefix} no longer fits input_fn's pipeline (it changed since that "
            f"checkpoint: {detail})")
    if not allowed:
        raise errors.CheckpointError(
            f"{what}; resume with the input restarted from its beginning by allowing it "
            f"(--allow_input_restart, recipe run.allow_input_restart: true), or restore input_fn as it was")
    get_logger().warning("%s; resuming model, optimizer and global step %d with the input restarted from its "
                         "beginning", what, step)


def first_line(error):
    """The line of a TensorFlow error that says what went wrong (the one before its node)."""
    lines = [line.strip() for line in str(getattr(error, "message", None) or error).splitlines() if line.strip()]
    for index, line in enumerate(lines):
        if line.startswith("[[") and index > 0:
            return lines[index - 1][:200]
    return lines[0][:200] if lines else type(error).__name__


class RestartingTrainer(Trainer):
    """A trainer whose iterator was restored from a checkpoint. TensorFlow may find the
    restored position unfit for the pipeline at any later batch (a shuffle buffer runs out);
    it then asks ``restart()`` for a trainer with a fresh input and goes on with that one,
    counting the steps the failed call did before it failed."""

    def __init__(self, loop, global_step, restart, prefix, allow_restart):
        self._loop = loop
        self._allow_restart = allow_restart
        self._global_step = global_step
        self._restart = restart
        self._prefix = prefix
        self._restarted = False

    def run_steps(self, num_steps, check_state=False, summary_since=None):
        if self._restarted:
            return self._loop.run_steps(num_steps, check_state, summary_since)
        before = int(self._global_step.numpy())
        try:
            return self._loop.run_steps(num_steps, check_state, summary_since)
        except MISMATCH_ERRORS as error:
            if "IteratorGetNext" not in str(error):   # not the input position: not ours to handle
                raise
            done = int(self._global_step.numpy()) - before
            restart_or_stop(self._prefix, before + done, first_line(error), self._allow_restart)
            self._loop.close()
            self._loop = self._restart()
            self._restarted = True
            more, logs = self._loop.run_steps(num_steps - done, check_state, summary_since) if num_steps > done else (0, {})
            return done + more, logs

    def finish(self, counted_step):
        return self._loop.finish(counted_step)

    def learning_rate(self):
        return self._loop.learning_rate()

    def any_worker(self, requested):
        return self._loop.any_worker(requested)

    def user_summaries(self):
        return self._loop.user_summaries()

    def create_layer_state(self):
        self._loop.create_layer_state()

    @property
    def writes_summaries(self):
        return self._loop.writes_summaries

    def close(self):
        self._loop.close()
