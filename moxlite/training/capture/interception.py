"""One way to see every Keras layer call while a run is in progress: mixed precision and THOR's recording use it.

A *handler* gets each layer call with the chain of layers it happens inside,
and decides what happens around it::

    class Handler:
        def around(self, call: LayerCall, args, kwargs, proceed):
            return proceed(args, kwargs)          # proceed runs the next handler, then the layer

Handlers are active only inside ``intercepting(handler)``. What makes them see
the calls:

- Keras 3 has no per-call hook, and layers built inside ``model_fn`` are new
  Python objects on every trace, so no per-object wrapping could catch them
  before they run. The one entry point is therefore ``keras.layers.Layer.__call__``,
  replaced (through ``compat.replace_layer_method``) while at least one handler
  is active anywhere in the process and put back, exactly as it was, when the
  last one leaves, in a ``finally`` (an error, a KeyboardInterrupt). Nothing
  else is patched at class level; what a handler changes on a layer (its
  policy, an instance attribute) it must restore itself on leaving.
- Every sub-layer call goes through the same entry point, so composite layers
  (MultiHeadAttention's EinsumDense projections, an RNN's cell, a block of
  keras-hub) are seen layer by layer; ``LayerCall.parents`` is the chain of
  enclosing layer calls on this thread.
- Threads: a handler entered with ``threads="this"`` sees only calls made on
  the thread that entered it (THOR's recorder, entered per replica).
  ``threads="run"`` handlers (a run's precision) see the calls of the thread
  that entered them and of threads that entered no run handler of their own:
  tf.distribute's replica threads. Two runs in two threads each keep their own.

Stable names: ``stable_names_scope(names)`` publishes, for the run, the function from a
variable to its checkpoint key, and ``stable_name(variable)`` answers it (both
from ``moxlite.stable_names``, which THOR reads without importing the runner).
"""

import contextlib
import dataclasses
import threading
from typing import Any, Callable, Optional, Tuple

import keras
import tensorflow as tf

from moxlite import compat, stable_names


@dataclasses.dataclass(frozen=True)
class LayerCall:
    """One call of ``layer``, inside the calls of ``parents`` (outermost first) on this thread."""

    layer: Any
    parents: Tuple[Any, ...] = ()


_lock = threading.Lock()
_local = threading.local()
_installed = {"count": 0, "original": None, "restore": None}
# Process-wide, replaced (never mutated) under _lock, so that a layer call reads a consistent tuple.
_shared = {"run_handlers": ()}   # (owner thread id, handler)


def _this_thread():
    return threading.get_ident()


def _own_handlers():
    return getattr(_local, "handlers", ())


def _handlers_for_this_thread():
    """The handlers that see a call made now on this thread, outermost first."""
    run_handlers = _shared["run_handlers"]
    if run_handlers:
        me = _this_thread()
        mine = [entry for entry in run_handlers if entry[0] == me]
        # A thread with no run handler of its own (a replica thread) sees every run's.
        chosen = mine or run_handlers
        handlers = [handler for _, handler in chosen]
    else:
        handlers = []
    return handlers + list(_own_handlers())


def _stack():
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def _install():
    with _lock:
        if _installed["count"] == 0:
            original = keras.layers.Layer.__call__

            def intercepted_call(layer, *args, **kwargs):
                handlers = _handlers_for_this_thread()
                if not handlers:
                    return original(layer, *args, **kwargs)
                return _run_chain(handlers, original, layer, args, kwargs)

            _installed["original"] = original
            _installed["restore"] = compat.replace_layer_method(keras.layers.Layer, "__call__", intercepted_call)
        _installed["count"] += 1


def _uninstall():
    with _lock:
        _installed["count"] -= 1
        if _installed["count"] == 0:
            restore = _installed["restore"]
            _installed.update(original=None, restore=None)
            restore()


def _run_chain(handlers, original, layer, args, kwargs):
    stack = _stack()
    call = LayerCall(layer, tuple(stack))

    def proceed_from(index):
        def proceed(args, kwargs):
            if index == len(handlers):
                stack.append(layer)
                try:
                    with _scope_for_an_underscore_name(layer):
                        return original(layer, *args, **kwargs)
                finally:
                    stack.pop()
            return handlers[index].around(call, args, kwargs, proceed_from(index + 1))
        return proceed

    return proceed_from(0)(args, kwargs)


def _scope_for_an_underscore_name(layer):
    """A TensorFlow name scope around the call of a layer whose name starts with '_' (Keras names
    an instance of ``class _Block`` '__block') at the root scope of a traced function: TensorFlow
    refuses such a root scope name ("not a valid root scope name"), inside a scope it takes it.
    Only op names change; Keras's variable paths, hence checkpoint keys, do not."""
    name = getattr(layer, "name", "") or ""
    if not name.startswith("_") or tf.executing_eagerly() or tf.compat.v1.get_default_graph().get_name_scope():
        return contextlib.nullcontext()
    return tf.name_scope(name.lstrip("_") or "layer")


def _share(key, entry):
    with _lock:
        _shared[key] = _shared[key] + (entry,)


def _unshare(key, entry):
    with _lock:
        entries = list(_shared[key])
        entries.remove(entry)
        _shared[key] = tuple(entries)


def original_layer_call():
    """``Layer.__call__`` as Keras defines it (the interception's own while one is installed)."""
    return _installed["original"] or keras.layers.Layer.__call__


@contextlib.contextmanager
def intercepting(handler, threads="this"):
    """While the body runs, ``handler.around`` sees layer calls (see the module docstring for ``threads``)."""
    if threads not in ("this", "run"):
        raise ValueError(f"threads={threads!r}: use 'this' or 'run'")
    _install()
    try:
        if threads == "run":
            entry = (_this_thread(), handler)
            _share("run_handlers", entry)
            try:
                yield handler
            finally:
                _unshare("run_handlers", entry)
        else:
            previous = _own_handlers()
            _local.handlers = tuple(previous) + (handler,)
            try:
                yield handler
            finally:
                _local.handlers = previous
    finally:
        _uninstall()


def installed():
    """True while some handler is active (``Layer.__call__`` is the interception's)."""
    return _installed["count"] > 0


# ---- per-instance, per-thread attribute replacement ---------------------------------------------

class _Routed:
    """An instance attribute (a layer's ``call`` or ``activation``) that is the replacement on the
    threads that asked for one and the original on every other thread."""

    def __init__(self, original, had_own):
        self.original = original
        self.had_own = had_own     # the instance had its own attribute (else the class's is used)
        self.by_thread = {}        # thread id -> stack of replacements

    def current(self):
        stack = self.by_thread.get(_this_thread())
        return stack[-1] if stack else self.original

    def __call__(self, *args, **kwargs):
        function = self.current()
        if function is None:       # an activation of None: the identity
            return args[0]
        return function(*args, **kwargs)


_routes = {}   # (id(layer), attribute) -> _Routed


def unrouted(layer, attribute):
    """``layer.<attribute>`` as it is without any replacement."""
    routed = _routes.get((id(layer), attribute))
    return routed.original if routed is not None else getattr(layer, attribute)


@contextlib.contextmanager
def on_this_thread(layer, attribute, replacement):
    """Within the block, ``layer.<attribute>`` is ``replacement`` for calls made on this thread
    (other threads see the original); put back afterwards, also after an error."""
    key = (id(layer), attribute)
    me = _this_thread()
    with _lock:
        routed = _routes.get(key)
        if routed is None:
            routed = _Routed(getattr(layer, attribute), attribute in vars(layer))
            _routes[key] = routed
            compat.set_untracked_attribute(layer, attribute, routed)
        routed.by_thread.setdefault(me, []).append(replacement)
    try:
        yield
    finally:
        with _lock:
            stack = routed.by_thread[me]
            stack.pop()
            if not stack:
                del routed.by_thread[me]
            if not routed.by_thread:
                del _routes[key]
                if routed.had_own:
                    compat.set_untracked_attribute(layer, attribute, routed.original)
                else:
                    compat.delete_untracked_attribute(layer, attribute)


# ---- stable names ------------------------------------------------------------------------------
# They live in ``moxlite.stable_names``, below the optimizers that read them; here for the runner.
stable_names_scope = stable_names.stable_names_scope
stable_name = stable_names.stable_name
