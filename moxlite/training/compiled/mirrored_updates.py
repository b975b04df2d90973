"""The Keras optimizer's variable updates under Mirrored strategies, compiled by XLA per device
(``jit_compile``'s per-replica placement).

With several replicas the optimizer stack runs in cross-replica context (the links'
``merge_call``), where XLA cannot go: it compiles one device's program, not a collective
over devices. What does run per device is the last stage, the Keras optimizer's updates:
Keras calls ``strategy.extended.update(variable, update_step)`` once per variable, and the
strategy runs ``update_step`` on each of the variable's devices in turn with that device's
component (its slots resolve to their components there). ``install`` replaces that loop,
while a compiled step is traced (``tracing_compiled``), by one XLA function per device that
runs ``update_step`` for every variable on it: the gradients are already reduced, so each
device's function reads and writes only its own components.

Under MirroredStrategy (one process, several devices) and MultiWorkerMirrored (each worker
its own devices: the gradients are all-reduced before, so each worker's function reads and
writes only its local components); tests compare both with the uncompiled updates.
"""

import contextlib

import tensorflow as tf

from moxlite import compat

# Where the updates compile per device: one process's devices, or each worker's own devices.
_PER_DEVICE_STRATEGIES = (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)

# While a compiled step is traced: a callable saying whether its updates compile (False once
# XLA refused the step, whose trace then serves as the plain one). One trace at a time.
_TRACING = [None]


@contextlib.contextmanager
def tracing_compiled(active):
    """Keras updates traced inside run per device through XLA while ``active()`` is True. Set
    on the thread that calls ``strategy.run``: Mirrored's replica threads wait while the merge
    call traces on that thread, so a plain flag (not thread-local) is what the update sees."""
    previous, _TRACING[0] = _TRACING[0], active
    try:
        yield
    finally:
        _TRACING[0] = previous


def _compiling():
    return _TRACING[0] is not None and bool(_TRACING[0]())


def _keras_optimizers(optimizer):
    """``optimizer`` and the optimizers a Keras LossScaleOptimizer holds inside it."""
    while optimizer is not None:
        yield optimizer
        optimizer = getattr(optimizer, "inner_optimizer", None)


def install(optimizer):
    """Let ``optimizer`` (a Keras optimizer, or a LossScaleOptimizer around one) update per
    device through XLA while ``tracing_compiled``; its uncompiled updates are unchanged."""
    for keras_optimizer in _keras_optimizers(optimizer):
        if getattr(keras_optimizer, "_moxlite_compiled_updates", None) is not None:
            continue
        if not hasattr(keras_optimizer, "_distributed_tf_update_step"):
            continue   # not Keras's TensorFlow optimizer: its updates stay as they are
        keras_optimizer._moxlite_compiled_updates = _PerDeviceUpdates(keras_optimizer)


class _PerDeviceUpdates:
    """``optimizer._distributed_tf_update_step`` with, while tracing a compiled step, one XLA
    function per device over all the variables (one per trace: each captures its device's
    components)."""

    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.plain = optimizer._distributed_tf_update_step
        optimizer._distributed_tf_update_step = self

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
