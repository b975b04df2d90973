"""``lars``: layer-wise adaptive rate scaling (You, Gitman, Ginsburg 2017).

Reference: Y. You, I. Gitman, B. Ginsburg, "Large Batch Training of
Convolutional Networks", arXiv:1708.03888. This is the variant of MoXing and
of TF-contrib's LARSOptimizer, where LARS scales the gradient that the wrapped
optimizer (usually momentum) then applies with its global learning rate. For
each variable w with all-reduced gradient g:

    trust  = ratio * ||w|| / (||g|| + weight_decay * ||w|| + epsilon)
             (trust = 1 when ||w|| = 0 or ||g|| = 0)
    update = trust * (g + weight_decay * w)       handed to the inner optimizer

so momentum computes v <- mu * v + lr * update, w <- w - v. Variables whose
stable name (or Keras path) matches one of ``exclude`` (biases and normalisation parameters by
default, as in the paper's ResNet recipes) pass g through unchanged, without
weight decay.

Under a strategy, the norms are those of the gradient summed over replicas,
so two replicas at batch B equal one at batch 2B: LARS reduces first (unless
an outer wrapper already did), scales, and hands the reduced gradient down.
"""

import keras
import tensorflow as tf

from moxlite.optimizers import exclusion, wrapper as wrapper_lib
from moxlite.optimizers import recipe_tables
from moxlite.optimizers.recipe_tables import DEFAULT_EXCLUDE  # noqa: F401  (re-exported)


def variable_path(variable):
    """The variable's Keras path as this process made it up, else its TensorFlow name (exclusion
    patterns are searched in its stable name too: ``exclusion``)."""
    return exclusion.process_path(variable)


@keras.saving.register_keras_serializable(package="moxlite")
class LARS(wrapper_lib.OptimizerWrapper):
    """Scale each variable's gradient by its LARS trust ratio (formula in the module docstring)."""

    NAME = "lars"
    PARAMETERS = recipe_tables.LARS_PARAMETERS

    def __init__(self, inner_optimizer, name=None, **parameters):
        if "exclude" in parameters and isinstance(parameters["exclude"], list):
            parameters["exclude"] = tuple(parameters["exclude"])
        super().__init__(inner_optimizer, name=name, **parameters)
        self._exclude_pattern = exclusion.compiled(self.exclude)

    def is_excluded(self, variable):
        return exclusion.matches(self._exclude_pattern, variable)

    def trust_ratio(self, gradient, weight):
        """ratio*||w||/(||g||+wd*||w||+eps), or 1 when either norm is 0."""
        w_norm = tf.norm(weight)
        g_norm = tf.norm(gradient)
        ratio = tf.cast(self.ratio, weight.dtype)
        weight_decay = tf.cast(self.weight_decay, weight.dtype)
        denominator = g_norm + weight_decay * w_norm + tf.cast(self.epsilon, weight.dtype)
        usable = tf.logical_and(w_norm > 0, g_norm > 0)
        safe_denominator = tf.where(usable, denominator, tf.ones_like(denominator))
        return tf.where(usable, ratio * w_norm / safe_denominator, tf.ones_like(w_norm))

    def _scale(self, grads, variables):
        """Replica context: each replica scales its copy of the reduced gradients."""
        scaled = []
        for gradient, variable in zip(grads, variables):
            if self.is_excluded(variable):
                scaled.append(gradient)
                continue
            weight = tf.convert_to_tensor(variable)
            gradient = tf.cast(gradient, weight.dtype)
            update = gradient + tf.cast(self.weight_decay, weight.dtype) * weight
            scaled.append(self.trust_ratio(gradient, weight) * update)
        return scaled

    def _apply_in_cross_replica_context(self, distribution, grads, variables, reduced, rest):
        if not reduced:
            grads = wrapper_lib.sum_across_replicas(distribution, grads, variables)
        scaled = distribution.extended.call_for_each_replica(self._scale, args=(list(grads), list(variables)))
        rest(distribution, scaled, variables, True)

    def get_config(self):
        config = super().get_config()
        config["exclude"] = list(self.exclude)
        return config
