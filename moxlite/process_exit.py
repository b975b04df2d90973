"""A quicker end for a process that ran ``moxlite.run``: no garbage-collector walk over what is left.

After TensorFlow and Keras are imported, a process holds several hundred thousand objects
that live until it ends. Interpreter shutdown tears the modules down and runs the garbage
collector over all of them, more than once: about a second of CPU per process, and
several seconds of wall time on a loaded machine, at the end of every training script,
every ``moxlite-run`` and every cluster task.

``freeze_at_exit()`` (called by ``run``) registers, once per process, an exit handler that
first collects what is garbage at that moment, so that the finalizers of unreachable
objects still run (an unclosed file in a reference cycle is flushed), and then moves every
object still alive into the collector's permanent generation (``gc.freeze()``), which
shutdown's collections skip. Shutdown otherwise proceeds as usual: every other ``atexit``
handler runs (those registered before ``run``, such as ``logging``'s flush, after this
one), modules are torn down and reference counts free what they free. What is skipped is
only what Python never promises at exit: finalizers of reference cycles that are still
reachable when the interpreter ends.
"""

import atexit
import gc
import threading

_lock = threading.Lock()
_registered = False


def freeze_survivors():
    """Collect the garbage of now, then exempt every object still alive from later collections."""
    gc.collect()
    gc.freeze()


def freeze_at_exit():
    """Register ``freeze_survivors`` to run at interpreter exit; once per process."""
    global _registered
    with _lock:
        if not _registered:
            atexit.register(freeze_survivors)
            _registered = True


def registered():
    """Whether ``freeze_at_exit`` has registered its handler in this process."""
    return _registered
