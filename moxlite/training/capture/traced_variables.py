"""The variables a traced call of model_fn reads or writes, whatever the Python path to them.

A model built before ``run`` and closed over can be reached in many ways: named in
``model_fn``, through a dict (``models["net"](x)``), a helper function, a method or a module
attribute. Looking for it by name misses all but the first, and its non-trainable state
(BatchNorm's moving statistics) then goes unsaved, unrestored and unexported. What a traced
computation touches does not depend on the path: every variable the graph reads or assigns
is recorded by TensorFlow in the ``FuncGraph`` (``graph.variables``: resource variables
report each access to the graph being built), and its handle is one of the graph's captures.

``read_by`` traces the call once more, in a ``tf.function`` that is never run, and hands
back those variables in the order the graph captured their handles (the order of first
use), so that the list is the same on every trace of the same model_fn.
"""

import dataclasses
from typing import Tuple

import tensorflow as tf

from moxlite import compat


@dataclasses.dataclass(frozen=True)
class Traced:
    """What one trace touched: ``variables`` in the order of first use, and ``unreported``, the
    variable handles it captured without TensorFlow reporting their variable (a raw op on
    ``variable.handle``), which nothing can save, restore or export."""

    variables: Tuple = ()
    unreported: Tuple = ()


def read_by(call, inputs):
    """What ``call(inputs)`` reads or assigns when traced (``Traced``).

    ``call`` runs once, in a graph that is never executed; what it returns is dropped. Under a
    ``tf.distribute`` strategy the variables are the per-device components that the trace
    touched (a mirrored variable's component on each device it wrote).
    """

    def traced(structure):
        call(structure)

    graph = tf.function(traced).get_concrete_function(inputs).graph
    accessed = list(graph.variables)
    by_handle = {id(variable.handle): variable for variable in accessed}
    ordered, unreported = [], []
    for external, _ in graph.captures:
        variable = by_handle.pop(id(external), None)
        if variable is not None:
            ordered.append(variable)
        elif compat.is_variable_handle(external):
            unreported.append(external)
    # An access whose handle is no capture (a variable the graph received another way) still counts.
    remaining = {id(variable) for variable in by_handle.values()}
    ordered.extend(variable for variable in accessed if id(variable) in remaining)
    return Traced(tuple(ordered), tuple(unreported))
