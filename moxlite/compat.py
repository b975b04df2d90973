"""Every use of a private TensorFlow or Keras API in moxlite, in one place.

moxlite pins TensorFlow 2.21 and Keras 3.15. The helpers below reach into
their internals where no public API does the job; each says what it relies on
and why no public API serves, and raises ``CompatibilityError`` naming the
missing piece when a version no longer has it. tests/test_compat.py holds one
test per helper, so an upgrade that changes one of them fails there with that
name instead of as a wrong number somewhere in a run.
"""

import tensorflow as tf

from moxlite import errors

PINNED = "TensorFlow 2.21 and Keras 3.15"


class CompatibilityError(errors.MoxliteError):
    """The installed TensorFlow or Keras lacks an internal moxlite relies on."""


def _missing(owner, attribute, purpose):
    return CompatibilityError(
        f"{owner} has no {attribute}, which moxlite uses to {purpose} (written for {PINNED}); "
        f"install those versions or update moxlite/compat.py")


# Keras's TensorFlow optimizer ----------------------------------------------------------------

def gradient_all_reduce(optimizer):
    """The optimizer's own all-reduce of gradients (``_all_reduce_sum_gradients``).

    Keras's TensorFlow optimizer sums gradients across replicas inside
    ``apply`` whenever it runs in a replica context; there is no public switch
    to hand it gradients that a wrapper has already reduced.
    """
    original = getattr(optimizer, "_all_reduce_sum_gradients", None)
    if original is None:
        raise _missing(type(optimizer).__name__, "_all_reduce_sum_gradients",
                       "skip the all-reduce of gradients a wrapper already reduced (use the TensorFlow backend)")
    return original


def replace_gradient_all_reduce(optimizer, all_reduce):
    """Make ``optimizer.apply`` reduce gradients with ``all_reduce(grads_and_vars)``."""
    gradient_all_reduce(optimizer)
    optimizer._all_reduce_sum_gradients = all_reduce


def track_optimizer_variable(optimizer, variable):
    """Count ``variable`` among ``optimizer.variables`` (saved and restored with it).

    ``Optimizer.add_variable`` cannot create per-replica (ON_READ) or host
    variables: it takes no ``synchronization``, so such a variable is made
    by hand and registered with ``_track_variable``.
    """
    track = getattr(optimizer, "_track_variable", None)
    if track is None:
        raise _missing(type(optimizer).__name__, "_track_variable", "keep hand-made optimizer variables")
    track(variable)


def share_loss_scale_state(optimizer, source):
    """Build LossScaleOptimizer ``optimizer`` on ``source``'s scale and growth counter.

    Keras's ``LossScaleOptimizer.build`` always creates new ``step_counter``
    and ``dynamic_scale`` variables; to unscale with another optimizer's
    scale, both are taken over and the optimizer is marked built by hand.
    """
    if not source.built:
        raise CompatibilityError(f"share_loss_scale_state: build {source.name!r} first")
    for attribute in ("step_counter", "dynamic_scale"):
        if not hasattr(source, attribute):
            raise _missing(type(source).__name__, attribute, "share one dynamic loss scale between two optimizers")
        setattr(optimizer, attribute, getattr(source, attribute))
    optimizer.built = True


# Variables -------------------------------------------------------------------------------------

def backing_variable(variable):
    """The tf.Variable behind a Keras 3 variable (any other variable as is).

    Keras keeps it in ``_value``; the public ``value`` autocasts to a tensor
    under mixed precision instead of returning the variable.
    """
    import keras

    if not isinstance(variable, keras.Variable):
        return variable
    if not hasattr(variable, "_value"):
        raise _missing("keras.Variable", "_value", "find the tf.Variable a Keras layer trains")
    return variable._value


def wrapped_variable(variable):
    """The variable inside a parameter server's ``AggregatingVariable`` (``_v``), or None.

    A gradient tape under ParameterServerStrategy may record either object;
    AggregatingVariable has no public accessor for the one it wraps.
    """
    return getattr(variable, "_v", None)


def created_under_a_strategy(variable):
    """True for a variable created inside some ``tf.distribute`` strategy's scope.

    Mirrored variables are ``DistributedValues``; parameter-server ones are
    not, and only carry the private ``_distribute_strategy`` (every
    tf.Variable has that attribute: it is None outside a strategy).
    ``strategy.extended.variable_created_in_scope`` is public but asks about
    one given strategy, not any.
    """
    return isinstance(variable, tf.distribute.DistributedValues) or \
        getattr(variable, "_distribute_strategy", None) is not None


def single_device_variables(device):
    """A scope in which the active strategy creates plain variables on ``device``.

    The strategy's variable creator honours ``colocate_with`` set to a
    ``SingleDevice`` (the way tf.distribute places its own host-side
    variables); ``tf.device`` alone would still mirror them.
    """
    from tensorflow.python.distribute import numpy_dataset

    if not hasattr(numpy_dataset, "SingleDevice"):
        raise _missing("tensorflow.python.distribute.numpy_dataset", "SingleDevice",
                       "keep batch_gradients accumulators in host memory (accumulate_on='cpu')")

    def single_device_creator(next_creator, **kwargs):
        kwargs["colocate_with"] = numpy_dataset.SingleDevice(device)
        return next_creator(**kwargs)

    return tf.variable_creator_scope(single_device_creator)


def learning_rate_attribute(optimizer):
    """What a Keras optimizer stores as its learning rate (``_learning_rate``), or None.

    A variable for a float rate, else the schedule or callable itself. The
    public ``learning_rate`` evaluates a schedule and, on a moxlite wrapper,
    answers for the inner optimizer, so it cannot tell which object holds what.
    """
    return getattr(optimizer, "_learning_rate", None)


def keras_auto_name_counters():
    """A copy of Keras's counters of made-up layer names (prefix -> names made so far).

    Keras keeps them in ``keras.src.backend.common.global_state`` under
    ``object_name_uids``; there is no public accessor. Empty if that module is gone.
    """
    try:
        from keras.src.backend.common import global_state
    except ImportError:
        return {}
    return dict(global_state.get_global_attribute("object_name_uids") or {})


def new_tf1_variable_store():
    """A fresh TF1 variable store (what ``tf.compat.v1.get_variable`` looks names up in)."""
    from tensorflow.python.ops import variable_scope

    if not hasattr(variable_scope, "_VariableStore"):
        raise _missing("tensorflow.python.ops.variable_scope", "_VariableStore",
                       "give each model_fn template its own get_variable names")
    return variable_scope._VariableStore()


def tf1_variable_store_scope(store):
    """A scope in which ``tf.compat.v1.get_variable`` uses ``store`` instead of the graph's."""
    from tensorflow.python.ops import variable_scope

    if not hasattr(variable_scope, "with_variable_store"):
        raise _missing("tensorflow.python.ops.variable_scope", "with_variable_store",
                       "give each model_fn template its own get_variable names")
    return variable_scope.with_variable_store(store)


def layer_weight_variable(layer, name):
    """The variable a Keras layer keeps its ``name`` weight in (``_kernel``, ``_embeddings``), or None.

    The public ``kernel`` and ``embeddings`` properties return a tensor (the
    kernel plus the LoRA product) when LoRA is enabled, and raise before the
    layer is built.
    """
    return getattr(layer, f"_{name}", None)


def direct_sublayers(layer):
    """The layers ``layer`` holds directly, in order (Keras's ``_flatten_layers`` one level down).

    ``Layer.layers`` exists only on models, and ``_layers`` misses layers
    held in attributes.
    """
    flatten = getattr(layer, "_flatten_layers", None)
    if flatten is None:
        raise _missing(type(layer).__name__, "_flatten_layers", "list a model's layers for the precision report")
    return list(flatten(include_self=False, recursive=False))
