"""Gradient clipping as a link of the optimizer pipeline, so it sees the right gradient.

The run places it once, when it builds the pipeline (``pipeline.Pipeline(..., clip=...)``),
directly below the lowest link that says ``clipped_after``, at the top of the user's stack
without one. So it clips

- unscaled gradients, below the loss scaling (an overflow is caught before it) and the
  non-finite guard;
- the accumulated mean, once per update, below the lowest ``batch_gradients`` (as the Swin
  reproduction clips after accumulating);
- the preconditioned gradient, below ``thor`` (MindSpore's order: THOR's gradients are
  clipped after the preconditioning, before the momentum).

It acts on the gradient of the global batch: the replicas' gradients are summed first, so a
threshold means the same on any number of replicas.

- ``global_norm``: g_i <- g_i * t / max(t, ||(g_1, ..., g_n)||)
- ``norm``:        g_i <- g_i * t / max(t, ||g_i||)
"""

import tensorflow as tf

from moxlite.optimizers import pipeline
from moxlite.optimizers.recipe_tables import CLIP_TYPES


class GradientClip(pipeline.Link):
    """Clip the global-batch gradient by norm before handing it down (no state of its own)."""

    NAME = "gradient_clip"

    def __init__(self, threshold, clip_type="global_norm"):
        if clip_type not in CLIP_TYPES:
            raise ValueError(f"gradient_clip: clip_type={clip_type!r} is not valid; use 'global_norm' or 'norm'")
        self.threshold = float(threshold)
        self.clip_type = clip_type

    def _apply_in_cross_replica_context(self, distribution, grads, variables, reduced, rest):
        if not reduced:
            grads = pipeline.sum_across_replicas(distribution, list(grads), list(variables))

        def clip(grads):
            grads = [tf.convert_to_tensor(g) for g in grads]
            if self.clip_type == "global_norm":
                return tf.clip_by_global_norm(grads, self.threshold)[0]
            return [tf.clip_by_norm(g, self.threshold) for g in grads]

        clipped = distribution.extended.call_for_each_replica(clip, args=(grads,))
        rest(distribution, clipped, variables, True)

    def describe(self):
        return f"gradient_clip({self.clip_type} {self.threshold:g})"


def clipping_link(threshold, clip_type):
    """The run's clipping link (None when ``threshold`` is 0: no clipping)."""
    return GradientClip(threshold, clip_type) if threshold else None
