"""Non-trainable state kept as one value across mirrored replicas (on-read, MEAN).

Keras creates BatchNormalization's moving mean and variance without an aggregation (NONE).
A mirrored variable without one is updated by each replica on its own component: under
MirroredStrategy with N replicas, each keeps the moving statistics of its own 1/N of the
batches, the replicas drift apart, and a checkpoint holds the first replica's.

Here such state is made on-read with aggregation MEAN: each replica updates its own copy with
no synchronisation (an on-write MEAN variable would need a ``merge_call``, which TensorFlow
refuses inside a replica-context ``tf.cond`` such as THOR's recording step), and reading it in
cross-replica context (a checkpoint, an export, ``average_replica_state``) gives the mean of
the copies. The trainer writes that mean back to every copy at the end of each traced call.
The moving statistics are linear in the updates, so for a moving mean this is exactly
``m <- momentum * m + (1 - momentum) * mean_over_replicas(batch_mean_r)``, the single-device
update on the global batch when the replicas' batches are of equal size. A moving variance
becomes the mean of the replicas' batch variances, which leaves out the spread of their
batch means; Keras's ``BatchNormalization(synchronized=True)`` normalises with the global
batch's statistics and gives the single-device moving variance (and gradients) as well.

``with_replica_mean(kwargs)`` is applied by the variable creators moxlite installs while
model_fn's variables are made and inside ``moxlite.strategy_scope()``. It changes only
non-trainable floating-point variables made under MirroredStrategy (one worker) with several
replicas that asked for no aggregation and no on-read synchronisation; Keras metrics
(aggregation SUM), integer state (seed generators) and trainable variables keep what they
asked for. Under MultiWorkerMirroredStrategy the state keeps Keras's NONE (each replica's
own, the first one's saved): reading on-read state there is a collective every worker would
have to join, and only the chief saves.
"""

import tensorflow as tf

from moxlite import compat

_MIRRORED = (tf.distribute.MirroredStrategy,)
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
    return dict(kwargs, aggregation=tf.VariableAggregation.MEAN,
                synchronization=tf.VariableSynchronization.ON_READ)


def replica_averaged(variables):
    """Those of ``variables`` that ``with_replica_mean`` made on-read (their tf.Variables)."""
    found = []
    for variable in variables:
        variable = compat.backing_variable(variable)
        if (getattr(variable, "synchronization", None) == tf.VariableSynchronization.ON_READ
                and getattr(variable, "aggregation", None) == tf.VariableAggregation.MEAN):
            found.append(variable)
    return found


def average_replica_state(variables):
    """Write the mean of each on-read variable's replica copies back to every copy
    (cross-replica context: inside a traced call, one all-reduce per variable)."""
    for variable in variables:
        variable.assign(variable.read_value())
