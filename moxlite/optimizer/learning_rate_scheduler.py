"""MoXing's ``learning_rate_scheduler``: the epoch-string learning rate with explicit sample counts.

``piecewise_lr(lr_strategy, num_samples, global_batch_size)`` is the same
piecewise epoch string that ``get_optimizer_fn(name, learning_rate=string)``
takes (``moxlite.optimizers.schedules`` parses both), but with the number of
samples and the global batch given by the script instead of read from the
run. Called inside ``moxlite.run`` (in ``optimizer_fn``, as MoXing scripts
do) it returns the learning rate as a zero-argument function of the run's
exact global step, counted in micro-steps as the string form is; MoXing
returned a tensor of the global step, and this is what a TF2 optimizer takes
in its place: ``get_optimizer_fn(name, learning_rate=lr)``, a Keras optimizer
and ``tf.compat.v1.train.MomentumOptimizer(learning_rate=lr, ...)`` all
accept it, and give the same learning rate at every step as the string given
to ``get_optimizer_fn``. Called outside a run it returns the Keras
``LearningRateSchedule`` of the step (a later run binds it to its global step
when it reaches ``get_optimizer_fn``).

``global_batch_size`` is what one global step consumes: in MoXing's words
``batch_size * num_gpus * num_workers`` under synchronous training, and
``batch_size * num_gpus`` under asynchronous training, where every worker's
step advances the global step.

MoXing's documentation lists ``piecewise_lr`` as the module's one public
function; it is the one given here.
"""

import math

from moxlite import context, errors
from moxlite.optimizers import schedules

__all__ = ["piecewise_lr"]


def _positive(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise errors.OptimizerError(
            f"piecewise_lr: {name}={errors.describe(value)} must be a positive number "
            f"({'the training samples in one epoch' if name == 'num_samples' else 'samples per global step'})")
    return value


def piecewise_lr(lr_strategy, num_samples, global_batch_size):
    """The learning rate of MoXing's epoch string ``lr_strategy`` as a schedule of the step.

    epoch = step * global_batch_size / num_samples; see ``schedules.PiecewiseEpochSchedule``
    for the string's grammar (``'5:0.1->0.4,10:0.4=>0.8,15:0.8,20:0.08'``).
    """
    steps_per_epoch = _positive("num_samples", num_samples) / _positive("global_batch_size", global_batch_size)
    schedule = schedules.PiecewiseEpochSchedule(lr_strategy, steps_per_epoch)
    schedule.counts = "micro_steps"  # it counts samples, like the string form: see resolve_learning_rate
    if context.current() is None:
        return schedule
    return schedules.resolve_learning_rate(schedule)
