"""Gradient clipping as a link of the optimizer stack, so it sees the right gradient.

It sits below the loss scaling (so it clips unscaled gradients, and an overflow
is caught before it) and directly below the lowest ``batch_gradients`` (so it
clips the accumulated mean, once per update, as the Swin reproduction clips after
accumulating). It acts on the gradient of the global batch: the replicas'
gradients are summed first, so a threshold means the same on any number of
replicas.

- ``global_norm``: g_i <- g_i * t / max(t, ||(g_1, ..., g_n)||)
- ``norm``:        g_i <- g_i * t / max(t, ||g_i||)
"""

import keras
import tensorflow as tf

from moxlite.optimizers import wrapper as wrapper_lib
from moxlite.optimizers.batch_gradients import BatchGradients

CLIP_TYPES = ("global_norm", "norm")


@keras.saving.register_keras_serializable(package="moxlite")
class GradientClip(wrapper_lib.OptimizerWrapper):
    """Clip the global-batch gradient by norm before handing it down."""

    NAME = "gradient_clip"
    WARN_WHEN_SYNC = False
    PARAMETERS = {
        "threshold": wrapper_lib.Parameter(
            1.0, "the clip threshold", "a positive number",
            lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0),
        "clip_type": wrapper_lib.Parameter(
            "global_norm", "clip all gradients by their joint norm, or each by its own",
            "'global_norm' or 'norm'", lambda v: v in CLIP_TYPES),
    }

    def _apply_in_cross_replica_context(self, distribution, grads, variables, reduced):
        if not reduced:
            grads = wrapper_lib.sum_across_replicas(distribution, list(grads), list(variables))

        def clip(grads):
            grads = [tf.convert_to_tensor(g) for g in grads]
            if self.clip_type == "global_norm":
                return tf.clip_by_global_norm(grads, self.threshold)[0]
            return [tf.clip_by_norm(g, self.threshold) for g in grads]

        clipped = distribution.extended.call_for_each_replica(clip, args=(grads,))
        self._apply_inner(distribution, clipped, variables, reduced=True)

    def describe(self):
        return f"gradient_clip({self.clip_type} {self.threshold:g})"


def insert_clipping(optimizer, threshold, clip_type):
    """``optimizer``'s stack with a GradientClip under its lowest batch_gradients (or on top)."""
    if not threshold:
        return optimizer
    lowest = None
    for link in wrapper_lib.stack_of(optimizer):
        if isinstance(link, BatchGradients):
            lowest = link
    if lowest is None:
        return GradientClip(optimizer, threshold=threshold, clip_type=clip_type)
    lowest.inner_optimizer = GradientClip(lowest.inner_optimizer, threshold=threshold, clip_type=clip_type)
    return optimizer
