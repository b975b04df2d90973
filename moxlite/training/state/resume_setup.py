"""What set-up a checkpoint was trained with, and whether a resumed run with another one can go on from it.

A checkpoint keeps each optimizer's state under its place in the stack (a
wrapper's inner optimizer under ``optimizer/inner_optimizer/...``), the
loss-scale state when the run scaled its loss, and THOR's inverses in blocks
of its ``block_size`` for the layers it chose. A run whose stack, precision
level or THOR layers differ cannot read that state: TensorFlow would print
dozens of "Value in checkpoint could not be found" warnings and then fail on a
dtype, or pass silently with the state dropped. So every training checkpoint
records its set-up (``SETUP_KEY``, strings ``key=value``), and a resumed run
compares it with its own before restoring anything:

- a change that cannot be carried across is one ``CheckpointError`` saying what
  changed (checkpoint vs this run) and what to do, and nothing is read or written;
- a new THOR ``block_size`` is carried across: the stored inverses do not fit the
  new blocks, so they are recomputed from the first update's batch (as at a
  refresh), and the change is logged.

Hyperparameters proper (learning rate, momentum, THOR's damping and frequency)
are not part of the set-up: ``hyperparameters.kept`` takes them from this
run's ``optimizer_fn``. A checkpoint written before the record existed is
resumed as before, unchecked.
"""

import tensorflow as tf

from moxlite import errors
from moxlite.optimizers import pipeline
from moxlite.optimizers import loss_scaling
from moxlite.training.reporting import get_logger

SETUP_KEY = "training_setup"
CARRIED = ("thor.block_size",)   # keys whose change a resumed run carries across


def _member_name(member):
    """A link's ``NAME`` (what it answers for itself), else the Keras optimizer's class name."""
    return getattr(member, "NAME", None) or type(member).__name__


def _precision_text(settings):
    plan = settings.amp_plan if settings is not None else None
    if plan is None or not plan.mixed:
        return "O0 (float32)"
    return f"{plan.level} ({plan.compute_dtype})"


def _loss_scale_of(stack):
    """The stack's loss-scaling link (the one that says it ``handles_overflow``), or None."""
    return next((member for member in stack if getattr(member, "handles_overflow", False)), None)


def _loss_scale_text(scale):
    """A loss scale's kind: a dynamic scale's restored value carries on whatever its start (a
    hyperparameter); a fixed one is the scale itself, which the restore would silently replace."""
    if scale is None:
        return "none"
    return "dynamic" if scale.dynamic else f"fixed {scale.initial_scale:g}"


class TrainingSetup:
    """The set-up of this run's optimizers and precision, as recorded and as compared."""

    def __init__(self, optimizers, precision_settings=None):
        self.optimizers = list(optimizers)
        self.precision = _precision_text(precision_settings)

    def record(self, with_layers=True):
        """The ``key=value`` strings a checkpoint stores (THOR's layers once they are known)."""
        lines = [f"precision={self.precision}"]
        for index, optimizer in enumerate(self.optimizers):
            prefix = "" if index == 0 else f"optimizer_{index}."
            stack = pipeline.members_of(optimizer)
            lines.append(f"{prefix}optimizer_stack={' > '.join(_member_name(m) for m in stack)}")
            scale = _loss_scale_of(stack)
            lines.append(f"{prefix}loss_scale={_loss_scale_text(scale)}")
            for depth, thor in enumerate(pipeline.layer_preconditioners(optimizer)):
                key = f"{prefix}thor" if depth == 0 else f"{prefix}thor_{depth}"
                lines.append(f"{key}.block_size={thor.block_size}")
                lines.append(f"{key}.include={list(thor.include)}")
                lines.append(f"{key}.exclude={list(thor.exclude)}")
                if with_layers:
                    lines.append(f"{key}.layers={', '.join(thor.preconditioned_layers()) or 'none'}")
        return lines

    # ---- comparing

    def check(self, prefix, log_dir):
        """Compare the set-up saved in ``prefix`` with this run's; raise or return what is carried across.

        Returns [(key, saved, now)] of the carried changes (empty when nothing changed or the
        checkpoint has no record).
        """
        saved = read(prefix)
        if saved is None:
            return []
        now = _as_dict(self.record(with_layers=False))
        changed = [(key, saved.get(key, "none"), value) for key, value in now.items()
                   if saved.get(key, "none") != value]
        changed += [(key, value, "none") for key, value in saved.items()
                    if key not in now and not key.endswith(".layers")]
        blocking = [change for change in changed if not change[0].endswith(CARRIED)]
        if blocking:
            raise errors.CheckpointError(_refusal(prefix, log_dir, _reported(blocking), saved))
        return changed

    def carry_across(self, changes, prefix):
        """After the restore: THOR stacks whose block_size changed recompute their inverses at the next update."""
        for key, saved, now in changes:
            thor = self._thor_of(key)
            update = int(thor.refresh_at_next_update())
            get_logger().info("Resuming %s with %s=%s (the checkpoint had %s): its stored inverses do not fit "
                              "the new blocks, so they are recomputed from the batch of update %d, the first "
                              "of this run", prefix, key, now, saved, update)

    def _thor_of(self, key):
        head = key.split(".")
        index = int(head[0][len("optimizer_"):]) if head[0].startswith("optimizer_") else 0
        name = head[1] if index else head[0]
        depth = int(name.split("_")[1]) if "_" in name else 0
        return pipeline.layer_preconditioners(self.optimizers[index])[depth]


def read(prefix):
    """{key: value} of the set-up saved in checkpoint ``prefix``, or None when it has no record."""
    reader = tf.train.load_checkpoint(prefix)
    name = f"{SETUP_KEY}/.ATTRIBUTES/VARIABLE_VALUE"
    if not reader.has_tensor(name):
        return None
    return _as_dict(value.decode() for value in reader.get_tensor(name))


def _as_dict(lines):
    pairs = (line.partition("=") for line in lines if line)
    return {key: value for key, _, value in pairs}


WHAT = {"precision": "precision level", "optimizer_stack": "optimizer stack", "loss_scale": "loss scale",
        "include": "THOR layers (include)", "exclude": "THOR layers (exclude)"}


def _what(key):
    last = key.rsplit(".", 1)[-1]
    owner = key.rsplit(".", 1)[0] if "." in key else ""
    label = WHAT.get(last, last)
    if owner.startswith("optimizer_") and last in ("optimizer_stack", "loss_scale"):
        label += f" of {owner}"
    return label


def _without_loss_scale(stack):
    return " > ".join(name for name in stack.split(" > ") if name != loss_scaling.LossScale.NAME)


def _reported(changes):
    """The changes worth a word: a changed stack makes THOR's own settings moot, and a stack that
    differs only by the loss-scale wrapper is told by the loss-scale change."""
    stack_changed = {key.rsplit("optimizer_stack", 1)[0] for key, _, _ in changes if key.endswith("optimizer_stack")}
    reported = []
    for key, was, now in changes:
        owner = key.split("thor")[0] if ".thor" in key or key.startswith("thor") else None
        if owner is not None and owner in stack_changed:
            continue
        if key.endswith("optimizer_stack") and _without_loss_scale(was) == _without_loss_scale(now):
            continue
        reported.append((key, was, now))
    return reported


def _refusal(prefix, log_dir, changes, saved):
    parts = [f"{_what(key)} {was} in the checkpoint, {now} in this run" for key, was, now in changes]
    layers = [f"{key.rsplit('.', 1)[0]} preconditioned {value}" for key, value in saved.items()
              if key.endswith(".layers") and any(c[0].startswith(key.rsplit(".", 1)[0] + ".") for c in changes)]
    if layers:
        parts.append("the checkpoint's " + "; ".join(layers))
    return (f"cannot resume {prefix!r}: {'; '.join(parts)}; its optimizer state does not fit this run, so resume "
            f"with the settings it was written with, or train in a new log_dir from its weights "
            f"(checkpoint_path={log_dir!r} restores the model variables only)")
