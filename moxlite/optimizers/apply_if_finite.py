"""The one link that applies an update only if it is finite.

Two parts of a run skip an update whose gradients are not finite: the non-finite policy
``skip`` (``nonfinite``) and loss scaling, whose overflowing steps are dropped
(``loss_scaling``). Both go through this link. The decision is taken once for all
replicas: each replica flags a non-finite gradient of its own, the flags are summed across
replicas (and workers), so every replica takes the same branch and mirrored variables stay
equal. The gradients themselves are handed down as they came (reduced or not), so the link
adds no gradient all-reduce of its own.
"""

import keras
import tensorflow as tf

from moxlite.optimizers import pipeline


def _overflowed(grads):
    """Replica context: 1.0 when one of this replica's gradients holds a NaN or an Inf, else 0.0."""
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(tf.convert_to_tensor(g))) for g in grads])
    return tf.where(finite, 0.0, 1.0)


class ApplyIfFinite(pipeline.Link):
    """Hand the gradients down only when every one is finite on every replica."""

    NAME = "apply_if_finite"
    clipped_after = True   # the run's own links sit above clipping

    def _apply_in_cross_replica_context(self, distribution, grads, variables, reduced, rest):
        self.apply_if_finite(distribution, grads, variables, reduced, rest)

    @staticmethod
    def finite_everywhere(distribution, grads, destination):
        """Cross-replica context: a bool scalar, True when every gradient is finite on every replica.

        destination: a variable (or its value) the summed flags are reduced onto.
        """
        if isinstance(destination, keras.Variable):
            destination = destination.value
        flags = distribution.extended.call_for_each_replica(_overflowed, args=(list(grads),))
        count = distribution.extended.reduce_to(tf.distribute.ReduceOp.SUM, flags, destinations=destination)
        return distribution.experimental_local_results(count)[0] == 0

    def apply_if_finite(self, distribution, grads, variables, reduced, rest, finite=None):
        """``rest(...)`` under ``tf.cond(finite)``; returns ``finite`` (computed when not given)."""
        grads, variables = list(grads), list(variables)
        if finite is None:
            finite = self.finite_everywhere(distribution, grads, variables[0])

        def apply():
            rest(distribution, grads, variables, reduced)
            return tf.constant(True)

        tf.cond(finite, apply, lambda: tf.constant(False))
        return finite

    def describe(self):
        return "apply_if_finite"
