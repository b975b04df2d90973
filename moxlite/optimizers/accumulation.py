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

The links answer for themselves (``Link.accumulation(inner)``, given what the
rest of the stack below answered): ``batch_gradients`` says how many micro-batches
it takes and that its inner optimizer applies their mean; loss scaling around it
(moxlite's, or Keras's ``LossScaleOptimizer``) says the same with its scale shared
around that inner optimizer; every other link says (1, itself). ``nested_batch_gradients(plan.apply_optimizer)`` asks each link below
whether it ``accumulates_micro_batches``, which such a loop cannot honour.
"""

import keras

from moxlite import compat
from moxlite.optimizers import pipeline
from moxlite.optimizers.pipeline import Accumulation  # noqa: F401  (accumulation.Accumulation)


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

    Folded from the bottom up over the stack's members (``pipeline.members_of``): the plain
    optimizer is (1, itself); each link above answers from what the members below it
    answered (``Link.accumulation(inner)``). ``batch_gradients(num_batches=N)``: (N, its inner
    optimizer). Loss scaling around an accumulating stack (moxlite's, or Keras's
    ``LossScaleOptimizer``, which cannot answer for itself and is answered for here): (N,
    the same loss scaling around what applies the mean). Anything else: (1, itself).
    """
    members = pipeline.members_of(optimizer)
    plan = Accumulation(1, members[-1])
    for member in reversed(members[:-1]):
        if pipeline.is_link(member):
            plan = member.accumulation(plan)
        elif plan.num_batches > 1:   # a Keras LossScaleOptimizer around an accumulating stack
            plan = Accumulation(plan.num_batches, _SharedLossScale(member, plan.apply_optimizer))
        else:
            plan = Accumulation(1, member)
    return plan


def nested_batch_gradients(optimizer):
    """The first link anywhere in the stack below ``optimizer`` (itself included) that
    accumulates micro-batches across steps, or None."""
    links, _ = pipeline.links_of(pipeline.looked_through(optimizer))
    return next((link for link in links if link.accumulates_micro_batches), None)
