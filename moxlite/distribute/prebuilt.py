"""The distributed variables made inside ``moxlite.strategy_scope()``, found again from a component.

A gradient tape in cross-replica context records the component of a mirrored variable
that the read used (a plain variable on the first device), not the mirrored variable,
and TensorFlow keeps no public link back. ``run`` finds the variables of a model built
before it through that tape, so ``strategy_scope()`` records, for every distributed
variable created inside it, which variable each of its components belongs to; the
template then hands the optimizer the mirrored variable.
"""

import weakref

_CONTAINERS = {}   # id of a component -> (weakref to the component, weakref to its distributed variable)


def recording_creator(next_creator, **kwargs):
    """A ``tf.variable_creator_scope`` creator that records the components of what the strategy makes
    (non-trainable state averaged across replicas: ``averaged_state``)."""
    import tensorflow as tf

    from moxlite.distribute import averaged_state

    variable = next_creator(**averaged_state.with_replica_mean(kwargs))
    if isinstance(variable, tf.distribute.DistributedValues):
        for component in variable.values:
            _CONTAINERS[id(component)] = (weakref.ref(component), weakref.ref(variable))
    return variable


def container_of(variable):
    """The distributed variable made in strategy_scope() that ``variable`` is a component of, or None."""
    entry = _CONTAINERS.get(id(variable))
    if entry is None or entry[0]() is not variable:   # unknown, or an id reused after the component died
        return None
    return entry[1]()
