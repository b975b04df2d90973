"""Resuming when input_fn's pipeline changed since the checkpoint was written.

On one device the checkpoint holds the input iterator's position, which only
fits the pipeline that wrote it. Add a ``.map`` or change a shuffle buffer and
TensorFlow fails, either while restoring or at the first ``get_next``. The
model, optimizer and step still fit, so by default the run resumes them with
the input restarted from its beginning and says so; with
``--noallow_input_restart`` (recipe ``run.allow_input_restart: false``) it
stops with one line instead. Never a raw TensorFlow error.
"""

import tensorflow as tf

from moxlite import errors, flags
from moxlite.training.reporting import get_logger

# What TensorFlow raises for an iterator state that does not fit its dataset.
MISMATCH_ERRORS = (tf.errors.InternalError, tf.errors.FailedPreconditionError, tf.errors.InvalidArgumentError,
                   tf.errors.NotFoundError)


def restart_or_stop(prefix, step, detail):
    """Log the restart, or raise CheckpointError when the flag forbids it."""
    what = (f"the input position saved in {prefix} no longer fits input_fn's pipeline (it changed since that "
            f"checkpoint: {detail})")
    if not flags.get_flag("allow_input_restart"):
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


class GuardedLoop:
    """A training loop whose iterator was restored from a checkpoint. TensorFlow may find the
    restored position unfit for the pipeline at any later batch (a shuffle buffer runs out);
    the loop then asks ``restart()`` for a loop with a fresh input and goes on with that one,
    counting the steps the failed call did before it failed."""

    def __init__(self, loop, global_step, restart, prefix):
        self._loop = loop
        self._global_step = global_step
        self._restart = restart
        self._prefix = prefix
        self._restarted = False

    def __getattr__(self, name):
        return getattr(self._loop, name)

    def run_steps(self, num_steps):
        if self._restarted:
            return self._loop.run_steps(num_steps)
        before = int(self._global_step.numpy())
        try:
            return self._loop.run_steps(num_steps)
        except MISMATCH_ERRORS as error:
            if "IteratorGetNext" not in str(error):   # not the input position: not ours to handle
                raise
            done = int(self._global_step.numpy()) - before
            restart_or_stop(self._prefix, before + done, first_line(error))
            self._loop.close()
            self._loop = self._restart()
            self._restarted = True
            more, logs = self._loop.run_steps(num_steps - done) if num_steps > done else (0, {})
            return done + more, logs
