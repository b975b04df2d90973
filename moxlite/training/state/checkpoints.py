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

from moxlite import compat, errors
from moxlite.training.state import hyperparameters
from moxlite.training.state import input_resume
from moxlite.training.state import checkpoint_keys
from moxlite.training.trainers import nonfinite
from moxlite.training.state import resume_setup
from moxlite.training.reporting import get_logger

CHECKPOINT_NAME = "model.ckpt"

# The model keys in creation order, saved as a constant string tensor (not a variable: a string
# variable cannot be created under MultiWorkerMirroredStrategy, whose variable creation
# broadcasts the initial value).
_KeyList = compat.SavedStrings
ORDER_KEY = "model_variable_order"


def _unescape(name):
    """A checkpoint object name as it was given (TF writes '.' as '..' and '/' as '.S')."""
    out, index = [], 0
    while index < len(name):
        if name[index] == "." and index + 1 < len(name):
            out.append("/" if name[index + 1] == "S" else name[index + 1])
            index += 2
        else:
            out.append(name[index])
            index += 1
    return "".join(out)


def saved_model_variables(prefix):
    """{key: shape} of the model variables in checkpoint ``prefix``."""
    suffix = "/.ATTRIBUTES/VARIABLE_VALUE"
    shapes = {}
    for name, shape in tf.train.list_variables(prefix):
        if name.startswith("model/") and name.endswith(suffix):
            shapes[_unescape(name[len("model/"):-len(suffix)])] = tuple(shape)
    return shapes


def _listed(names, limit=12):
    names = list(names)
    shown = ", ".join(names[:limit])
    return f"[{shown}{', ...' if len(names) > limit else ''}] ({len(names)})"


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
    """True when variable ``name`` matches one of the listed patterns (see ``matches``)."""
    return any(matches(name, pattern) for pattern in patterns)


def matches(name, pattern):
    """True when ``pattern`` matches whole path components of variable ``name``, wherever
    they stand: ``head`` matches ``sequential/head/kernel`` (not ``header/kernel``),
    ``block/dense`` two consecutive components. A component run matches as a shell glob
    (``dense*``) or, failing that, as a regular expression matched whole (``logits|aux``).
    A leading or trailing ``/`` (``a/``) only marks a scope; a pattern with a ``:`` output
    suffix matches the name with it.
    """
    pattern = pattern.strip().strip("/")
    if not pattern:
        return False
    if ":" not in pattern:
        name = checkpoint_keys.variable_name_text(name)
    parts = name.split("/")
    try:
        regex = re.compile(pattern)
    except re.error:
        regex = None
    for start in range(len(parts)):
        for end in range(start + 1, len(parts) + 1):
            run = "/".join(parts[start:end])
            if fnmatch.fnmatchcase(run, pattern) or (regex is not None and regex.fullmatch(run)):
                return True
    return False


def matched_names(names, patterns):
    """{pattern: the names it matches} for each pattern, in ``names``' order (start-up lines)."""
    return {pattern: [name for name in names if matches(name, pattern)] for pattern in patterns}


def describe_matches(setting, matched):
    """One start-up line: what each pattern of ``setting`` matched."""
    parts = [f"{pattern!r} -> {_listed(names, limit=6) if names else 'nothing'}" for pattern, names in matched.items()]
    return f"{setting}: {'; '.join(parts)}"


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
                 is_chief=True, ambiguous=(), setup=None):
        """``variables``: {stable key: variable} (see ``SharedVariablesModelFn.checkpoint_keys``), or a
        list keyed by the variables' own names; ``ambiguous``: keys shared by several;
        ``setup``: this run's ``resume_setup.TrainingSetup``, recorded in each checkpoint and
        compared with the record of the one resumed before anything is restored."""
        self.log_dir = log_dir
        self._training = bool(optimizers)
        self.global_step = global_step
        if isinstance(variables, dict):
            self._variables, self._ambiguous = dict(variables), list(ambiguous)
        else:
            self._variables, self._ambiguous = checkpoint_keys.keyed(list(variables), {})
        self._names = {key: v.name for key, v in self._variables.items()}
        order = _KeyList(list(self._variables))
        self._global_step_trackables = dict(global_step=global_step)
        trackables = dict(global_step=global_step, model=dict(self._variables))
        trackables[ORDER_KEY] = order
        self._setup = setup if optimizers else None
        if self._setup is not None:
            trackables[resume_setup.SETUP_KEY] = _KeyList(self._setup.record)
        self.iterator_mismatch = None
        for index, optimizer in enumerate(optimizers):
            trackables["optimizer" if index == 0 else f"optimizer_{index}"] = optimizer
        markers = (ORDER_KEY, resume_setup.SETUP_KEY)
        self._state = {k: v for k, v in trackables.items() if k not in markers}
        self._markers = {k: v for k, v in trackables.items() if k in markers}
        self._optimizers = list(optimizers)
        self._iterator = iterator
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

    def restore(self, checkpoint_path=None, exclude_patterns=(), warm_start_step=False, same_model_fn=False):
        """Restore from ``log_dir`` or else ``checkpoint_path``; return where from (or None).

        From ``log_dir`` everything is restored (step, model, optimizer, iterator). From
        ``checkpoint_path`` only model variables not matching ``exclude_patterns`` are, and the
        global step too when ``warm_start_step`` (evaluation and prediction report it).
        ``same_model_fn``: the checkpoint was written by this model_fn (EVAL, PREDICT and EXPORT
        read what TRAIN wrote), so names shared by several variables are told apart by creation
        order, as in a resume; a warm start (a TRAIN run's ``checkpoint_path``) refuses them.
        Model variables are matched by stable name and shape (see ``checkpoint_keys``); what does not
        match fails with the lists, never by guessing.
        """
        own = latest_checkpoint(self.log_dir) if self.log_dir else None
        if own:
            # Before anything is read: a set-up this run cannot go on from is one line, not TF's warnings.
            carried = self._setup.check(own, self.log_dir) if self._setup is not None else []
            if checkpoint_path:
                get_logger().info("Ignoring --checkpoint_path because a checkpoint already exists in %s",
                                  self.log_dir)
            model = self._matched_model(own, self._variables, own_run=True)
            trackables = dict(self._state, model=model) if self._training else dict(
                global_step=self.global_step, model=model)
            # Inference runs hold no optimizer or iterator: they read the model part only.
            with hyperparameters.kept_through_restore(self._optimizers):
                self._read(tf.train.Checkpoint(**trackables), own, partial=not self._training)
            if self._iterator is not None:
                self._read_iterator(own)
            if carried:
                self._setup.carry_across(carried, own)
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
        if excluded:
            get_logger().info(describe_matches("checkpoint_exclude_patterns (not restored)",
                                               matched_names(list(self._variables), excluded)))
        kept = {key: v for key, v in self._variables.items() if not matches_any(key, excluded)}
        trackables = dict(model=self._matched_model(source, kept, own_run=False, same_model_fn=same_model_fn))
        if warm_start_step:
            trackables["global_step"] = self.global_step
        self._read(tf.train.Checkpoint(**trackables), source, partial=True)
        skipped = len(self._variables) - len(kept)
        get_logger().info("Restored %d variables by name from %s%s", len(kept), source,
                          f" ({skipped} excluded by checkpoint_exclude_patterns)" if skipped else "")
        return source

    def _matched_model(self, prefix, wanted, own_run, same_model_fn=False):
        """The ``model`` trackable that reads ``wanted`` ({key: variable}) from ``prefix``."""
        saved = saved_model_variables(prefix)
        fix = ("use a new log_dir, or start from this one with checkpoint_path and "
               "checkpoint_exclude_patterns for the variables that changed" if own_run else
               "exclude them with checkpoint_exclude_patterns (new or changed layers), or give the Keras "
               "layers and get_variable calls the names they had when the checkpoint was written")
        ambiguous = [k for k in self._ambiguous if any(key.startswith(k + "~") for key in wanted)]
        if ambiguous and same_model_fn:
            _check_shared_names_line_up(prefix, ambiguous, self._variables, saved)
        elif ambiguous and not own_run:
            raise errors.CheckpointError(
                f"checkpoint {prefix!r}: several variables of this model_fn are named {_listed(ambiguous)}, "
                f"so a warm start cannot tell which is which; name them apart (Keras name=..., "
                f"get_variable scopes) or exclude them with checkpoint_exclude_patterns")
        missing = [k for k in wanted if k not in saved]
        reshaped = [f"{k} {tuple(wanted[k].shape)} vs {saved[k]}" for k in wanted
                    if k in saved and tuple(wanted[k].shape) != saved[k]]
        unused = [k for k in saved if k not in wanted] if own_run and self._training else []
        if missing or reshaped or unused:
            parts = []
            if missing:
                parts.append(f"not in the checkpoint: {_listed(missing)}")
            if reshaped:
                parts.append(f"shape differs (model vs checkpoint): {_listed(reshaped)}")
            if unused:
                parts.append(f"in the checkpoint but not created by model_fn: {_listed(unused)}")
            raise errors.CheckpointError(
                f"checkpoint {prefix!r} does not fit this model_fn by variable name: {'; '.join(parts)}; "
                f"the checkpoint holds {_listed(sorted(saved))}; {fix}")
        return dict(wanted)

    def _read_iterator(self, prefix):
        """Restore the input position; one that does not fit input_fn's pipeline is recorded in
        ``iterator_mismatch`` for the run to decide (see ``input_resume``), not raised."""
        try:
            status = tf.train.Checkpoint(iterator=self._iterator).read(prefix)
            status.expect_partial()
            status.assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.OpError) as error:
            text = str(getattr(error, "message", None) or error).strip().splitlines()
            self.iterator_mismatch = text[0][:200] if text else type(error).__name__

    def replace_iterator(self, iterator):
        """Save ``iterator`` from now on (a restarted input) instead of the one given at first,
        or no input position when None."""
        self._iterator = iterator
        trackables = dict(self._state, iterator=iterator) if iterator is not None else dict(self._state)
        trackables.update(self._markers)
        self._checkpoint = tf.train.Checkpoint(**trackables)
        if self._manager is not None:
            self._manager = None

    def _read(self, checkpoint, prefix, partial):
        try:
            status = checkpoint.read(prefix)
            status.expect_partial()  # bookkeeping such as save_counter is not ours to restore
            if not partial:
                status.assert_existing_objects_matched()
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
        """Write a checkpoint for ``step`` unless one was already written for it.

        Never writes a non-finite state: the weights and optimizer variables are checked
        first (also without a log_dir, so no run ends with them silently non-finite) and a
        non-finite one stops the run (``NonFiniteStep``), keeping the last finite checkpoint.
        Per step only the loss is checked under the default policy, so this is what catches
        a gradient that broke the weights while the loss stayed finite; under parameter
        servers, also a worker's update that reached the weights before its flag was read."""
        if step == self._last_saved_step:
            return None
        if self._training and not self._state_finite():
            raise nonfinite.NonFiniteStep(step, None, in_weights=True)
        if not self.log_dir:
            return None
        try:
            path = self._ensure_manager().save(checkpoint_number=step)
        except tf.errors.FailedPreconditionError as error:
            # TF refuses before writing a file; run() probes for this first, so this is the rare
            # pipeline that passed the probe: save on without the input position, and say so once.
            if self._iterator is None or not input_resume.is_unsavable_position(error):
                raise
            input_resume.report_unsaved_position(input_resume.refusal_detail(error))
            self.replace_iterator(None)
            path = self._ensure_manager().save(checkpoint_number=step)
        self._last_save_time = time.monotonic()
        self._last_saved_step = step
        if self.is_chief:
            get_logger().info("Saved checkpoint for step %d: %s", step, path)
        return path

    def _state_finite(self):
        """True when every floating-point variable this checkpoint holds is finite."""
        return bool(nonfinite.variables_finite(nonfinite.floating_variables([self._checkpoint])))

    def close(self):
        if self._scratch:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None


def has_checkpoint(log_dir, checkpoint_path):
    """True when a run could restore from ``log_dir`` or ``checkpoint_path``."""
    return bool((log_dir and latest_checkpoint(log_dir)) or (checkpoint_path and latest_checkpoint(checkpoint_path)))


def _check_shared_names_line_up(prefix, names, variables, saved):
    """A name several variables share (``name~k`` by creation order) is read from a checkpoint of
    the same model_fn only when the checkpoint holds as many of that name, of the same shapes:
    then the k-th created is the k-th saved. Otherwise one line with both counts."""
    for name in names:
        ours = [tuple(v.shape) for key, v in variables.items() if key.startswith(name + "~")]
        theirs = [saved[key] for key in sorted(saved, key=_creation_index) if key.startswith(name + "~")]
        if ours != theirs:
            raise errors.CheckpointError(
                f"checkpoint {prefix!r} holds {len(theirs)} variable(s) named {name!r} (shapes {theirs}) and "
                f"this model_fn creates {len(ours)} (shapes {ours}), so they cannot be matched by creation "
                f"order; read it with the model_fn that wrote it, or name the layers apart (Keras name=...)")


def _creation_index(key):
    """``name~k``'s k (its creation rank among the variables sharing ``name``), else 0."""
    _, _, index = key.rpartition("~")
    return int(index) if index.isdigit() else 0


def missing_trained_model(log_dir, checkpoint_path, prefix="", exists=has_checkpoint):
    """Why EVAL, PREDICT or EXPORT cannot run (no checkpoint to restore), or None.

    ``prefix`` names the two settings as the caller's user knows them ("run." in a recipe);
    ``exists(log_dir, checkpoint_path)`` is the test (the recipe's also looks on object storage).
    """
    if exists(log_dir, checkpoint_path):
        return None
    return (f"needs a trained model, but {prefix}log_dir={log_dir!r} holds no checkpoint and "
            f"{prefix}checkpoint_path={checkpoint_path!r}")
