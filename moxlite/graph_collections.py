"""MoXing's ``get_collection``: what the zoo adds while the current ``model_fn`` call runs.

TF1 graph collections do not exist in TF2's eager/traced world, and MoXing's
own ``get_collection`` already differed from ``tf.get_collection``: it
returned what the *current* ``model_fn`` call (one per device) had added.
moxlite keeps that meaning: ``SharedVariablesModelFn`` opens a fresh set of
collections around every ``model_fn`` call, thread-local so that replicas
running in their own threads do not see each other's entries. The zoo adds
its weight-decay terms under ``tf.compat.v1.GraphKeys.REGULARIZATION_LOSSES``.

``UPDATE_OPS`` is always empty: Keras applies batch-norm statistics updates in
place during the forward pass, so ``tf.control_dependencies(mox.get_collection(
UPDATE_OPS))`` is a harmless no-op. Outside a ``model_fn`` call the
collections of this thread's last scope-less additions are used.
"""

import collections
import contextlib
import threading

_local = threading.local()


def _stack():
    if not hasattr(_local, "stack"):
        _local.stack = [collections.defaultdict(list)]
    return _local.stack


@contextlib.contextmanager
def model_fn_scope():
    """Fresh collections for the duration of one ``model_fn`` call."""
    stack = _stack()
    stack.append(collections.defaultdict(list))
    try:
        yield stack[-1]
    finally:
        stack.pop()


def add_to_collection(key, value):
    """Add ``value`` to collection ``key`` of the current model_fn call."""
    _stack()[-1][key].append(value)


def get_collection(key, scope=None):
    """The values added to collection ``key`` during the current model_fn call (a new list).

    scope: keep only values whose ``name`` contains it, as ``tf.get_collection`` does.
    """
    values = list(_stack()[-1].get(key, ()))
    if scope:
        values = [v for v in values if scope in (getattr(v, "name", None) or "")]
    return values
