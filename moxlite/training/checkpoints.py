"""Checkpoints in ``log_dir``: what is saved, when, and what a new run restores.

A checkpoint holds the global step, every model_fn variable, the optimizer
stack's state and (where TF can save it) the training iterator's position, so
a resumed run sees the same data and ends with the same weights as one that
was never interrupted. MoXing's priority rules apply: a checkpoint already in
``log_dir`` wins over ``checkpoint_path`` (which is a warm start: model
variables only, minus ``checkpoint_exclude_patterns``).
"""

import fnmatch
import re
import shutil
import tempfile
import time

import tensorflow as tf

from moxlite import errors
from moxlite.training.reporting import get_logger

CHECKPOINT_NAME = "model.ckpt"


def variable_keys(variables):
    """Stable checkpoint keys for model_fn's variables: their creation order."""
    return {f"v{index:04d}": variable for index, variable in enumerate(variables)}


def latest_checkpoint(path):
    """The newest checkpoint prefix in directory ``path``, or ``path`` itself if it is a prefix."""
    if not path:
        return None
    if tf.io.gfile.isdir(path):
        return tf.train.latest_checkpoint(path)
    if tf.io.gfile.exists(path + ".index"):
        return path
    return None


def matches_any(name, patterns):
    """True when variable ``name`` matches one of the comma-separated or listed patterns.

    A pattern matches as a shell glob or, failing that, as a regular expression searched in
    the name (MoXing scripts use plain prefixes such as ``logits``).
    """
    for pattern in patterns:
        if fnmatch.fnmatch(name, pattern):
            return True
        try:
            if re.search(pattern, name):
                return True
        except re.error:
            continue
    return False


def split_patterns(patterns):
    if not patterns:
        return []
    if isinstance(patterns, str):
        patterns = patterns.split(",")
    return [p.strip() for p in patterns if p and p.strip()]


class Checkpointer:
    """Saves on a step or time cadence (seconds win when both are given) and restores."""

    def __init__(self, log_dir, global_step, variables, optimizers=(), iterator=None,
                 save_model_secs=None, save_model_steps=None, keep_checkpoint_max=5,
                 is_chief=True):
        self.log_dir = log_dir
        self._training = bool(optimizers)
        self.global_step = global_step
        self._variables = variable_keys(variables)
        self._names = {key: v.name for key, v in self._variables.items()}
        trackables = dict(global_step=global_step, model=dict(self._variables))
        for index, optimizer in enumerate(optimizers):
            trackables["optimizer" if index == 0 else f"optimizer_{index}"] = optimizer
        if iterator is not None:
            trackables["iterator"] = iterator
        self._checkpoint = tf.train.Checkpoint(**trackables)
        self.save_model_secs = save_model_secs
        self.save_model_steps = None if save_model_secs else save_model_steps
        self.is_chief = is_chief
        self._keep = keep_checkpoint_max
        self._manager = None
        self._scratch = None
        self._last_save_time = time.monotonic()
        self._last_saved_step = None

    # ---- restoring -------------------------------------------------------------------------

    def restore(self, checkpoint_path=None, exclude_patterns=(), warm_start_step=False):
        """Restore from ``log_dir`` or else ``checkpoint_path``; return where from (or None).

        From ``log_dir`` everything is restored (step, model, optimizer, iterator). From
        ``checkpoint_path`` only model variables not matching ``exclude_patterns`` are, and the
        global step too when ``warm_start_step`` (evaluation and prediction report it).
        """
        own = latest_checkpoint(self.log_dir) if self.log_dir else None
        if own:
            if checkpoint_path:
                get_logger().info("Ignoring --checkpoint_path because a checkpoint already exists in %s",
                                  self.log_dir)
            # Inference runs hold no optimizer or iterator: they read the model part only.
            self._read(self._checkpoint, own, partial=not self._training)
            self._last_saved_step = int(self.global_step.numpy())
            return own
        if not checkpoint_path:
            return None
        source = latest_checkpoint(checkpoint_path)
        if source is None:
            raise errors.CheckpointError(
                f"checkpoint_path={checkpoint_path!r} holds no checkpoint; pass a directory written by a "
                f"moxlite TRAIN run (or a checkpoint prefix)")
        excluded = split_patterns(exclude_patterns)
        kept = {key: v for key, v in self._variables.items() if not matches_any(self._names[key], excluded)}
        trackables = dict(model=kept)
        if warm_start_step:
            trackables["global_step"] = self.global_step
        self._read(tf.train.Checkpoint(**trackables), source, partial=True)
        skipped = len(self._variables) - len(kept)
        get_logger().info("Restored %d variables from %s%s", len(kept), source,
                          f" ({skipped} excluded by checkpoint_exclude_patterns)" if skipped else "")
        return source

    def _read(self, checkpoint, prefix, partial):
        try:
            status = checkpoint.read(prefix)
            if not partial:
                status.assert_existing_objects_matched()
            status.expect_partial()  # bookkeeping such as save_counter is not ours to restore
        except (AssertionError, ValueError, tf.errors.OpError) as error:
            raise errors.CheckpointError(
                f"checkpoint {prefix!r} does not fit this model_fn: {str(error).splitlines()[0]}; "
                f"use a new log_dir, or pass it as checkpoint_path with checkpoint_exclude_patterns "
                f"for the variables that changed") from None

    # ---- saving ----------------------------------------------------------------------------

    def _ensure_manager(self):
        if self._manager is None:
            directory = self.log_dir
            if not self.is_chief:
                # Non-chief workers must take part in saving (collectives), but write to a
                # scratch directory so that only the chief's files land in log_dir.
                self._scratch = tempfile.mkdtemp(prefix="moxlite-worker-ckpt-")
                directory = self._scratch
            self._manager = tf.train.CheckpointManager(
                self._checkpoint, directory, max_to_keep=self._keep, checkpoint_name=CHECKPOINT_NAME)
        return self._manager

    def due(self, step):
        """True when the cadence asks for a checkpoint at ``step``."""
        if self.save_model_secs:
            return time.monotonic() - self._last_save_time >= self.save_model_secs
        if self.save_model_steps:
            last = self._last_saved_step or 0
            return step // self.save_model_steps > last // self.save_model_steps
        return False

    def save(self, step):
        """Write a checkpoint for ``step`` unless one was already written for it."""
        if not self.log_dir or step == self._last_saved_step:
            return None
        path = self._ensure_manager().save(checkpoint_number=step)
        self._last_save_time = time.monotonic()
        self._last_saved_step = step
        if self.is_chief:
            get_logger().info("Saved checkpoint for step %d: %s", step, path)
        return path

    def close(self):
        if self._scratch:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None


def has_checkpoint(log_dir, checkpoint_path):
    """True when a run could restore from ``log_dir`` or ``checkpoint_path``."""
    return bool((log_dir and latest_checkpoint(log_dir)) or (checkpoint_path and latest_checkpoint(checkpoint_path)))


def missing_trained_model(log_dir, checkpoint_path, prefix=""):
    """Why EVAL, PREDICT or EXPORT cannot run (no checkpoint to restore), or None.

    ``prefix`` names the two settings as the caller's user knows them ("run." in a recipe).
    """
    if has_checkpoint(log_dir, checkpoint_path):
        return None
    return (f"needs a trained model, but {prefix}log_dir={log_dir!r} holds no checkpoint and "
            f"{prefix}checkpoint_path={checkpoint_path!r}")
