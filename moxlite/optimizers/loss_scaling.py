"""Loss scaling for float16 training: dynamic, fixed, and MindSpore's drop_overflow_update.

With scale s the loop differentiates ``s * loss``; this wrapper divides the
gradients by s before anything below it sees them (clipping, accumulation, LARS),
then checks them: an overflow is any non-finite value on any replica, decided
once for all replicas by the shared ``ApplyIfFinite`` link (their flags are summed
across replicas, so every replica and every worker takes the same branch).

- ``dynamic=True`` (Keras's ``LossScaleOptimizer`` rule): an overflowing step is
  skipped and s halves; after ``growth_steps`` clean steps in a row s doubles.
- ``dynamic=False``: s never changes. ``drop_overflow_update`` (MindSpore's
  ``FixedLossScaleManager`` switch) says whether an overflowing step is skipped
  (True) or applied anyway (False). The dynamic rule always skips, as MindSpore's.

Skipped steps are counted in ``skipped_steps``; ``last_skipped_step`` is the global
step (1-based, as in the log lines) of the latest one; ``overflows_in_a_row`` counts
the overflowing steps since the last clean one. A fixed scale that overflows
``max_consecutive_nonfinite`` steps in a row (all of them skipped) would train no
further: ``OverflowMonitor`` stops the run there, the way the non-finite policy does. ``iterations`` counts applied
updates only, as in Keras and MindSpore; moxlite's global step counts every step.
"""

import keras
import tensorflow as tf

from moxlite import context, errors
from moxlite.optimizers import pipeline
from moxlite.optimizers import wrapper as wrapper_lib
from moxlite.optimizers.apply_if_finite import ApplyIfFinite

_GUARD = ApplyIfFinite()   # stateless: the one "apply only if finite" link, shared

DEFAULT_INITIAL_SCALE = 2.0 ** 15   # Keras's LossScaleOptimizer default
DEFAULT_GROWTH_STEPS = 2000


def _positive_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _positive_int(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@keras.saving.register_keras_serializable(package="moxlite")
class LossScale(wrapper_lib.OptimizerWrapper):
    """Unscale, check for overflow, apply or skip (see the module docstring)."""

    NAME = "loss_scale"
    WARN_WHEN_SYNC = False   # moxlite's own wrapper, not a MoXing optimizer wrapper
    # As a link: an overflowing scaled gradient is expected here and skipped (the step then
    # checks only the loss), and clipping applies to the unscaled gradient it hands down.
    handles_overflow = True
    clipped_after = True
    PARAMETERS = {
        "initial_scale": wrapper_lib.Parameter(
            DEFAULT_INITIAL_SCALE, "the loss scale at step 0", "a positive number", _positive_number),
        "dynamic": wrapper_lib.Parameter(
            True, "halve on overflow and double after growth_steps clean steps (True), or never change (False)",
            "True or False", lambda v: isinstance(v, bool)),
        "growth_steps": wrapper_lib.Parameter(
            DEFAULT_GROWTH_STEPS, "clean steps in a row after which a dynamic scale doubles",
            "an integer >= 1", _positive_int),
        "drop_overflow_update": wrapper_lib.Parameter(
            True, "skip a step whose gradients overflow (True) or apply it anyway (False, fixed scale only)",
            "True or False", lambda v: isinstance(v, bool)),
    }

    def __init__(self, inner_optimizer, name=None, **parameters):
        super().__init__(inner_optimizer, name=name, **parameters)
        if self.dynamic and not self.drop_overflow_update:
            raise ValueError(
                "loss_scale: drop_overflow_update=False needs a fixed scale; a dynamic scale always "
                "drops overflowing updates (as MindSpore's DynamicLossScaleManager)")

    def sharing_state_around(self, inner_optimizer):
        """A LossScale around ``inner_optimizer`` on this one's scale and counters.

        For the asynchronous loop's accumulation (``moxlite.optimizers.accumulation``),
        which applies the averaged gradients of loss scaled by this wrapper below
        ``batch_gradients``: one scale, checkpointed by this wrapper.
        """
        sibling = LossScale(inner_optimizer, name=self.name + "_accumulated", **self.parameter_values())
        object.__setattr__(sibling, "_state_owner", self)
        return sibling

    def accumulation(self, inner):
        """Around an accumulating stack (``inner``, what the stack below answered): the same
        micro-batch count, applied by this scaling (its scale shared) around what applies the mean."""
        if inner.num_batches == 1:
            return pipeline.Accumulation(1, self)
        return pipeline.Accumulation(inner.num_batches, self.sharing_state_around(inner.apply_optimizer))

    def _build_own_state(self, variables):
        owner = getattr(self, "_state_owner", None)
        if owner is not None:
            if not owner.built:
                owner.build(variables)
            for name in ("scale", "clean_steps", "skipped_steps", "last_skipped_step", "overflows_in_a_row"):
                object.__setattr__(self, name, getattr(owner, name))
            return

        def scalar(name, dtype, value):
            return self.add_variable(shape=(), dtype=dtype, aggregation="only_first_replica", name=name,
                                     initializer=keras.initializers.Constant(value))
        self.scale = scalar("scale", "float32", self.initial_scale)
        self.clean_steps = scalar("clean_steps", "int64", 0)
        self.skipped_steps = scalar("skipped_steps", "int64", 0)
        self.last_skipped_step = scalar("last_skipped_step", "int64", 0)
        self.overflows_in_a_row = scalar("overflows_in_a_row", "int64", 0)

    def scale_loss(self, loss):
        return self.inner_optimizer.scale_loss(loss * tf.cast(self.scale, loss.dtype))

    def _apply_in_cross_replica_context(self, distribution, grads, variables, reduced, rest):
        grads, variables = list(grads), list(variables)
        scale = tf.convert_to_tensor(self.scale)

        def unscale(grads):
            return [g / tf.cast(scale, g.dtype) for g in grads]

        unscaled = distribution.extended.call_for_each_replica(unscale, args=(grads,))
        # One replica's overflow is everyone's (decided once, by the shared apply-if-finite link).
        finite = _GUARD.finite_everywhere(distribution, unscaled, self.scale)
        if self.drop_overflow_update:
            _GUARD.apply_if_finite(distribution, unscaled, variables, reduced, rest, finite)
        else:
            rest(distribution, unscaled, variables, reduced)
        self._update_state(tf.logical_not(finite))

    def _update_state(self, overflow):
        """The scale and the counters after a step (cross-replica context)."""
        self.assign(self.overflows_in_a_row, tf.where(overflow, self.overflows_in_a_row + 1,
                                                      tf.constant(0, tf.int64)))
        if self.dynamic:
            grow = tf.logical_and(tf.logical_not(overflow), self.clean_steps + 1 >= self.growth_steps)
            factor = tf.where(overflow, 0.5, tf.where(grow, 2.0, 1.0))
            self.assign(self.scale, self.scale * factor)
            self.assign(self.clean_steps, tf.where(tf.logical_or(overflow, grow), tf.constant(0, tf.int64),
                                                   self.clean_steps + 1))
        if self.drop_overflow_update:
            self.assign_add(self.skipped_steps, tf.cast(overflow, tf.int64))
            run_context = context.current()
            step = (tf.cast(run_context.global_step, tf.int64) + 1 if run_context is not None
                    else tf.cast(self.iterations, tf.int64) + self.skipped_steps)
            self.assign(self.last_skipped_step, tf.where(overflow, step, self.last_skipped_step))

    def describe(self):
        if self.dynamic:
            return f"loss_scale(dynamic, initial {self.initial_scale:g}, growth every {self.growth_steps} steps)"
        action = "skip" if self.drop_overflow_update else "apply"
        return f"loss_scale(fixed {self.initial_scale:g}, {action} overflowing steps)"


class OverflowMonitor:
    """Logs each change of the loss scale and each skipped step, and gives both as scalars.

    ``report`` is called by the controller at log lines and once at the end; skips between
    two calls are reported together, with the step of the last one. With a fixed scale that
    drops overflowing steps, ``max_consecutive`` overflows in a row (seen at a log line) stop
    the run: ``NonFiniteStep``, reported by ``run`` in one line, nothing saved.
    """

    def __init__(self, loss_scale, logger, max_consecutive=None):
        self.loss_scale = loss_scale
        self.max_consecutive = max_consecutive
        self.logger = logger
        self._scale = float(loss_scale.scale.numpy())
        self._skipped = int(loss_scale.skipped_steps.numpy())
        self._reported_step = None

    def report(self, step):
        """Log what changed since the last report; return the scalars to write at ``step``
        (none when ``step`` was reported already: the end may fall on the last log line)."""
        scale = float(self.loss_scale.scale.numpy())
        skipped = int(self.loss_scale.skipped_steps.numpy())
        new_skips = skipped - self._skipped
        if new_skips:
            last = int(self.loss_scale.last_skipped_step.numpy())
            what = f"step {last} skipped" if new_skips == 1 else f"{new_skips} steps skipped, the last at step {last}"
            self.logger.info("loss scale %g -> %g, %s", self._scale, scale, what)
        elif scale != self._scale:
            self.logger.info("loss scale %g -> %g at step %d", self._scale, scale, step)
        self._scale, self._skipped = scale, skipped
        self._stop_if_stuck(step)
        if step == self._reported_step:
            return {}
        self._reported_step = step
        return {"loss_scale": scale, "skipped_steps": float(skipped)}

    def _stop_if_stuck(self, step):
        loss_scale = self.loss_scale
        if self.max_consecutive is None or loss_scale.dynamic or not loss_scale.drop_overflow_update:
            return
        in_a_row = int(loss_scale.overflows_in_a_row.numpy())
        if in_a_row >= self.max_consecutive:
            raise errors.NonFiniteStep(step, None, consecutive=in_a_row,
                                       overflow_scale=float(loss_scale.scale.numpy()))
