"""Non-trainable state kept as one value across mirrored replicas (aggregation MEAN).

Keras creates BatchNormalization's moving mean and variance without an aggregation (NONE).
A mirrored variable without one is updated by each replica on its own component: under
MirroredStrategy with N replicas, each keeps the moving statistics of its own 1/N of the
batches, the replicas drift apart, and a checkpoint holds the first replica's. With MEAN, an
update in replica context is averaged across replicas and written to every component, so all
replicas hold the same value: for a moving mean, ``m <- momentum * m + (1 - momentum) *
mean_over_replicas(batch_mean_r)``, the single-device update on the global batch when the
replicas' batches are of equal size. A moving variance becomes the mean of the replicas'
batch variances, which leaves out the spread of their batch means; Keras's
``BatchNormalization(synchronized=True)`` normalises with the global batch's statistics and
gives the single-device moving variance (and gradients) as well.

``with_replica_mean(kwargs)`` is applied by the variable creators moxlite installs while
model_fn's variables are made and inside ``moxlite.strategy_scope()``. It changes only
non-trainable floating-point variables made under a Mirrored strategy with several replicas
that asked for no aggregation and no on-read synchronisation; Keras metrics (aggregation SUM),
integer state (seed generators) and trainable variables keep what they asked for.
"""

import tensorflow as tf

_MIRRORED = (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)
_NO_AGGREGATION = (None, tf.VariableAggregation.NONE, "none")
_ON_WRITE = (None, tf.VariableSynchronization.AUTO, tf.VariableSynchronization.ON_WRITE)


def _dtype_of(kwargs):
    dtype = kwargs.get("dtype")
    if dtype is None:
        initial_value = kwargs.get("initial_value")
        dtype = None if callable(initial_value) else getattr(initial_value, "dtype", None)
    try:
        return None if dtype is None else tf.as_dtype(dtype)
    except TypeError:
        return None


def averages_state(strategy):
    """True when ``strategy`` mirrors variables over several replicas (where MEAN applies)."""
    return isinstance(strategy, _MIRRORED) and strategy.num_replicas_in_sync > 1


def with_replica_mean(kwargs):
    """``kwargs`` of a variable creator, with aggregation MEAN where the module docstring says."""
    if kwargs.get("trainable", True) is not False:
        return kwargs
    if kwargs.get("aggregation") not in _NO_AGGREGATION or kwargs.get("synchronization") not in _ON_WRITE:
        return kwargs
    dtype = _dtype_of(kwargs)
    if dtype is None or not dtype.is_floating or not averages_state(tf.distribute.get_strategy()):
        return kwargs
    return dict(kwargs, aggregation=tf.VariableAggregation.MEAN)
