"""How many micro-batches one update of an optimizer stack takes, and what applies it.

A ``batch_gradients`` wrapper keeps its running sum in variables across steps.
That suits synchronous training, where every step runs in order on the same
replicas. Under parameter servers (asynchronous training) steps are scheduled
on whichever worker is free, in any order, so a sum shared across scheduled
steps would mix micro-batches of different workers and updates. There, the
loop accumulates instead, inside one scheduled function: it reads
``num_batches`` micro-batches, sums their gradients in tensors and applies the
mean once through ``apply_optimizer``, the part of the stack below
``batch_gradients``.

This module is the whole contract between such a loop and the wrappers; the
wrappers know nothing of the loop:

    plan = accumulation_of(optimizer)     # the outermost optimizer the loop built
    plan.num_batches                      # micro-batches per update (1: no accumulation)
    plan.apply_optimizer.apply_gradients(zip(mean_gradients, variables))

Only an outermost ``batch_gradients`` (possibly inside Keras's
``LossScaleOptimizer``, which moxlite puts around the whole stack) is lifted
out this way. ``nested_batch_gradients(plan.apply_optimizer)`` tells the loop
whether another one remains further down, which it cannot honour.
"""

import dataclasses

import keras

from moxlite import compat
from moxlite.optimizers import schedules
from moxlite.optimizers import wrapper as wrapper_lib
from moxlite.optimizers.batch_gradients import BatchGradients


@dataclasses.dataclass(frozen=True)
class Accumulation:
    """num_batches micro-batch gradients, averaged, make one update by ``apply_optimizer``."""

    num_batches: int
    apply_optimizer: keras.optimizers.Optimizer

    def counting_updates(self):
        """The scope to apply ``apply_optimizer`` in: its schedule counts one update per num_batches."""
        return schedules.micro_steps_per_update(self.num_batches)


class _SharedLossScale(keras.optimizers.LossScaleOptimizer):
    """``outer``'s loss scaling around another inner optimizer, on ``outer``'s own scale state.

    The gradients the loop averages are of the loss ``outer.scale_loss`` scaled,
    so they must be unscaled (and overflow handled) with the same scale and
    growth counter; sharing the two variables keeps one dynamic scale that
    ``outer`` checkpoints.
    """

    def __init__(self, outer, inner_optimizer):
        super().__init__(inner_optimizer, initial_scale=outer.initial_scale,
                         dynamic_growth_steps=outer.dynamic_growth_steps, name=outer.name + "_accumulated")
        self._outer = outer

    def build(self, var_list):
        if not self._outer.built:
            self._outer.build(var_list)
        compat.share_loss_scale_state(self, self._outer)


def accumulation_of(optimizer):
    """The ``Accumulation`` of the stack whose outermost optimizer is ``optimizer``.

    ``batch_gradients(num_batches=N)`` outermost: (N, its inner optimizer).
    ``LossScaleOptimizer(batch_gradients(N))``: (N, the same loss scaling around
    batch_gradients' inner optimizer). Anything else: (1, ``optimizer``).
    """
    if isinstance(optimizer, BatchGradients):
        return Accumulation(optimizer.num_batches, optimizer.inner_optimizer)
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer) and \
            isinstance(optimizer.inner_optimizer, BatchGradients):
        lifted = optimizer.inner_optimizer
        return Accumulation(lifted.num_batches, _SharedLossScale(optimizer, lifted.inner_optimizer))
    from moxlite.training.loss_scaling import LossScale   # moxlite's own loss scaling
    if isinstance(optimizer, LossScale) and isinstance(optimizer.inner_optimizer, BatchGradients):
        lifted = optimizer.inner_optimizer
        return Accumulation(lifted.num_batches, optimizer.sharing_state_around(lifted.inner_optimizer))
    return Accumulation(1, optimizer)


def nested_batch_gradients(optimizer):
    """The first ``batch_gradients`` anywhere in the stack below ``optimizer`` (itself included), or None."""
    layer = optimizer
    while layer is not None:
        if isinstance(layer, BatchGradients):
            return layer
        if isinstance(layer, (wrapper_lib.OptimizerWrapper, keras.optimizers.LossScaleOptimizer)):
            layer = layer.inner_optimizer
        else:
            layer = None
    return None
