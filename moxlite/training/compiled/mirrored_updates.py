"""The Keras optimizer's variable updates under Mirrored strategies, compiled by XLA per device
(``jit_compile``'s per-replica placement).

With several replicas the optimizer stack runs in cross-replica context (the links'
``merge_call``), where XLA cannot go: it compiles one device's program, not a collective
over devices. What does run per device is the last stage, the Keras optimizer's updates:
Keras calls ``strategy.extended.update(variable, update_step)`` once per variable, and the
strategy runs ``update_step`` on each of the variable's devices in turn with that device's
component (its slots resolve to their components there). ``tracing_compiled`` replaces that
loop while a compiled step is traced, and only then, by one XLA function per device that
runs ``update_step`` for every variable on it: the gradients are already reduced, so each
device's function reads and writes only its own components.

Under MirroredStrategy (one process, several devices) and MultiWorkerMirrored (each worker
its own devices: the gradients are all-reduced before, so each worker's function reads and
writes only its local components); tests compare both with the uncompiled updates.
"""

import contextlib

import tensorflow as tf

from moxlite import compat
from moxlite.optimizers import pipeline

# Where the updates compile per device: one process's devices, or each worker's own devices.
_PER_DEVICE_STRATEGIES = (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)

# While a compiled step is traced: a callable saying whether its updates compile (False once
# XLA refused the step, whose trace then serves as the plain one). One trace at a time.
_TRACING = [None]


@contextlib.contextmanager
def tracing_compiled(active, optimizers=()):
    """Keras updates traced inside run per device through XLA while ``active()`` is True.

    ``optimizers``: the Keras optimizers at the bottom of the run's pipelines (a Keras
    LossScaleOptimizer's inner ones included), whose update loop is replaced for the trace
    only and put back after it, so the user's optimizer objects are as they were. Set on the
    thread that calls ``strategy.run``: Mirrored's replica threads wait while the merge call
    traces on that thread, so a plain flag (not thread-local) is what the update sees."""
    previous, _TRACING[0] = _TRACING[0], active
    installed = [_PerDeviceUpdates(member) for optimizer in optimizers for member in pipeline.members_of(optimizer)
                 if "_distributed_tf_update_step" not in vars(member)   # not replaced already
                 and hasattr(member, "_distributed_tf_update_step")]   # else not Keras's TensorFlow optimizer
    try:
        yield
    finally:
        for updates in installed:
            updates.remove()
        _TRACING[0] = previous


def _compiling():
    return _TRACING[0] is not None and bool(_TRACING[0]())


class _PerDeviceUpdates:
    """``optimizer._distributed_tf_update_step`` with, while tracing a compiled step, one XLA
    function per device over all the variables (one per trace: each captures its device's
    components)."""

    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.plain = optimizer._distributed_tf_update_step
        optimizer._distributed_tf_update_step = self

    def remove(self):
        """The optimizer's own update loop again (its class's method)."""
        del self.optimizer._distributed_tf_update_step

    def __call__(self, distribution, grads_and_vars, learning_rate):
        grads_and_vars = list(grads_and_vars)
        devices = compat.update_devices(grads_and_vars)
        if devices is None or not _compiling() or not isinstance(distribution, _PER_DEVICE_STRATEGIES):
            return self.plain(distribution, grads_and_vars, learning_rate)
        for index, device in enumerate(devices):
            grads = [compat.replica_component(index, grad) for grad, _ in grads_and_vars]
            components = [compat.variable_component(index, variable) for _, variable in grads_and_vars]
            with tf.device(device), compat.update_context(index):
                rate = tf.convert_to_tensor(compat.replica_component(index, learning_rate))
                self._compiled(components)(grads, rate)
        return None

    def _compiled(self, components):
        update_step = self.optimizer.update_step

        def update(grads, learning_rate):
            for grad, variable in zip(grads, components):
                update_step(grad, variable, learning_rate)
            return tf.constant(0)
        return tf.function(update, jit_compile=True, autograph=False)
