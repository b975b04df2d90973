"""What a run does when a loss or gradient stops being finite.

A learning rate that blows up turns the loss into NaN; training on would write
NaN weights into every later checkpoint and rotate the good ones away. The
traced step computes one flag per step (``step_flag``) and the loop reduces it
across replicas inside its traced call (no extra host sync per step):

- ``stop`` (default): the flag is the *unscaled* loss being non-finite. The
  traced call ends at the first such step; the run raises ``NonFiniteError``
  (step, value, the fix) without saving, so the last finite checkpoint stays
  in ``log_dir``. A gradient that is non-finite while its loss is finite
  breaks the weights, and the next step's loss shows it; in case it does not
  (a weight no later loss reads yet), every save first checks every weight and
  optimizer variable and stops the run the same way instead of writing them.
  Gradients are not summed per step: on a small model that pass cost about a
  tenth of the step (``tools/bench_runner.py``), a price the save-time check
  does not pay.
- ``skip`` (``--nonfinite_policy=skip``, recipe ``run.nonfinite_policy``):
  the flag also covers every gradient, since the update must be known bad
  before it is applied. It is not applied (the pipeline's ``ApplyIfFinite``
  link on top, or the loss scaling that holds one), the step is counted and
  logged, and the run stops after ``max_consecutive_nonfinite`` such steps in
  a row.

Under a ``LossScaleOptimizer`` an overflowing scaled gradient is expected and
that optimizer skips it, so only the loss is checked whatever the policy.
"""

import dataclasses

import keras
import tensorflow as tf

from moxlite import errors
from moxlite.errors import NonFiniteStep  # noqa: F401 (raised as nonfinite.NonFiniteStep)
from moxlite.optimizers import pipeline as pipeline_lib

POLICIES = ("stop", "skip")
FLAG_KEY = "_moxlite_nonfinite"
LOSS_KEY = "_moxlite_nonfinite_loss"
PRIVATE_KEYS = (FLAG_KEY, LOSS_KEY)


class NonFiniteError(errors.UserInputError):
    """Training met a non-finite loss or gradient and stopped without saving it."""


@dataclasses.dataclass(frozen=True)
class Policy:
    """``stop`` or ``skip``, and how many skipped steps in a row end the run."""

    action: str = "stop"
    max_consecutive: int = 10

    @classmethod
    def from_values(cls, action, count):
        """The policy of ``--nonfinite_policy`` and ``--max_consecutive_nonfinite`` (or a recipe's run fields), checked."""
        action = action or "stop"
        if action not in POLICIES:
            raise errors.ArgumentError(
                f"nonfinite_policy={action!r} is not valid; use 'stop' (default) or 'skip'")
        if not isinstance(count, int) or count < 1:
            raise errors.ArgumentError(
                f"max_consecutive_nonfinite={count!r} is not valid; pass a positive integer")
        return cls(action, count)


def has_loss_scaling(optimizer):
    """True when ``optimizer``'s pipeline handles overflowing gradients itself: loss scaling,
    moxlite's or Keras's, is in it (a link says ``handles_overflow``)."""
    return pipeline_lib.handles_overflow(optimizer)


def step_flag(losses, gradient_lists, optimizers, check_gradients=True):
    """{FLAG_KEY: 1.0 when this replica's step is non-finite else 0.0, LOSS_KEY: the loss}.

    ``losses`` are unscaled. Gradients count only with ``check_gradients`` (the ``skip``
    policy, which must know before applying) and only for optimizers without loss scaling.
    """
    checked = [g for gradients, optimizer in zip(gradient_lists, optimizers)
               if check_gradients and not has_loss_scaling(optimizer) for g in gradients if g is not None]
    losses = [tf.cast(loss, tf.float32) for loss in losses]
    finite = _sum_is_finite(losses + checked)
    return {FLAG_KEY: 1.0 - tf.cast(finite, tf.float32), LOSS_KEY: tf.add_n(losses)}


def _sum_is_finite(tensors):
    """A bool scalar: one sum over every element of ``tensors`` is finite, so NaN or Inf is
    nowhere. Cheaper than an elementwise is_finite per tensor; a false alarm needs sums near
    float32's max. An embedding's sparse gradient is summed without densifying."""
    return tf.math.is_finite(tf.add_n([
        tf.reduce_sum(tf.cast(t.values if isinstance(t, tf.IndexedSlices) else tf.convert_to_tensor(t), tf.float32))
        for t in tensors]))


def poison_gradients(gradient_lists, flag):
    """Gradients that are NaN when ``flag`` says the loss was: ``ApplyIfFinite`` then skips the step."""
    poison = tf.where(flag > 0, float("nan"), 0.0)
    return [[None if g is None else g + tf.cast(poison, g.dtype) for g in gradients]
            for gradients in gradient_lists]


def floating_variables(items):
    """Every floating-point variable in ``items`` or reachable from them (a model's variables,
    optimizers and their slots), each once: the state that must stay finite."""
    found = {}
    for item in items:
        reachable = [item] if _is_variable(item) else tf.train.TrackableView(item).descendants()
        for candidate in reachable:
            if _is_variable(candidate) and tf.as_dtype(candidate.dtype).is_floating:
                found.setdefault(id(candidate), candidate)
    return list(found.values())


def _is_variable(value):
    return isinstance(value, (tf.Variable, keras.Variable))


def variables_finite(variables):
    """A bool scalar: every element of every variable is finite."""
    return _sum_is_finite(variables) if variables else tf.constant(True)


def stop_message(step, loss, log_dir, last_checkpoint, consecutive=None, in_weights=False, since=None,
                 overflow_scale=None):
    kept = f"the last finite checkpoint is kept: {last_checkpoint}" if last_checkpoint else \
        f"nothing was saved to log_dir={log_dir!r}"
    if overflow_scale is not None:
        return (f"{consecutive} steps in a row overflowed the fixed loss scale {overflow_scale:g} and were "
                f"skipped (max_consecutive_nonfinite reached) up to global step {step}: training stopped, "
                f"{kept}; lower --loss_scale, use --loss_scale=dynamic, or check input_fn's data for NaN/Inf")
    if consecutive:
        what = (f"{consecutive} non-finite steps in a row (nonfinite_policy=skip, max_consecutive_nonfinite="
                f"{consecutive}) up to global step {step} (loss={loss})")
    elif in_weights:
        window = f"after global step {since} and by step {step}" if since is not None else \
            f"at global step {step} or earlier"
        what = (f"non-finite loss or gradient {window}: the loss stayed finite but the weights or optimizer "
                f"variables are not (log_every_n_steps=1 checks them after every step)")
    else:
        what = f"non-finite loss or gradient at global step {step} (loss={loss})"
    return (f"{what}: training stopped, {kept}; lower the learning rate or set gradient_clip, "
            f"check input_fn's data for NaN/Inf, or skip such steps with --nonfinite_policy=skip "
            f"(moxlite.set_flag('nonfinite_policy', 'skip'), recipe run.nonfinite_policy: skip)")


def handle(policy, loop, step, loss, count, consecutive):
    """After a traced call that met ``count`` non-finite steps: raise, or log the skips.

    Raises ``NonFiniteStep`` (turned into ``NonFiniteError`` by ``run``, which knows
    log_dir) under ``stop`` or after ``max_consecutive`` skips in a row.
    """
    from moxlite.training.reporting import get_logger

    if policy.action == "stop":
        raise NonFiniteStep(step, loss)
    loop.skipped_nonfinite += count
    get_logger().warning("Skipped %d non-finite step(s) up to global step %d (loss=%s): %d in a row, %d in "
                         "all (nonfinite_policy=skip)", count, step, loss, consecutive, loop.skipped_nonfinite)
    if consecutive >= policy.max_consecutive:
        raise NonFiniteStep(step, loss, consecutive)
