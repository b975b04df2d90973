"""The stable names of the run in progress: a variable's checkpoint key, in any process and run.

``run`` publishes, for its duration, the function from a variable to its checkpoint key
(``moxlite.training.state.checkpoint_keys``: a full Keras path such as ``block0/attention/query/kernel``,
made-up names replaced by a fresh process's) with ``stable_names_scope``; ``stable_name(variable)``
answers it. THOR's include/exclude and start-up lines and the layer records read it, so
the names they match are the same in any process and any run.

Here, below both ``moxlite.optimizers`` and ``moxlite.training``, so that an optimizer
reads the names without importing the runner (no TensorFlow or Keras import either).
Threads: a run's names answer on the thread that opened the scope, and on threads that
opened none (tf.distribute's replica threads); two runs in two threads each keep theirs.
"""

import contextlib
import threading
from typing import Any, Callable, Optional

_lock = threading.Lock()
# (owner thread id, names) of every run in progress; replaced (never mutated) under _lock.
_scopes = ()


@contextlib.contextmanager
def stable_names_scope(names: Callable[[Any], Optional[str]]):
    """While the body (one ``run``) runs, ``stable_name`` answers with ``names(variable)``."""
    global _scopes
    entry = (threading.get_ident(), names)
    with _lock:
        _scopes = _scopes + (entry,)
    try:
        yield
    finally:
        with _lock:
            remaining = list(_scopes)
            remaining.remove(entry)
            _scopes = tuple(remaining)


def stable_name(variable, default=None):
    """``variable``'s checkpoint key in the run in progress (this thread's, else the only or latest
    one: replica threads), else ``default`` (else its own name without ``:0``)."""
    entries = _scopes
    me = threading.get_ident()
    mine = [names for owner, names in entries if owner == me]
    candidates = mine or [names for _, names in entries]
    for names in reversed(candidates):
        name = names(variable)
        if name:
            return name
    if default is not None:
        return default
    name = getattr(variable, "path", None) or getattr(variable, "name", "") or "<unnamed>"
    return name[:-2] if name.endswith(":0") else name
