"""Recording per-layer inputs and output gradients while model_fn runs (the loop's side of
``moxlite.optimizers.wrapper``'s layer-statistics interface).

Layers built inside model_fn are new Python objects on every trace, so they
cannot be hooked one by one: while a step traces model_fn, the ``call`` of
each requested Keras layer class is replaced (process-wide, reference-counted,
active only for the thread that asked) by one that records the layer's input
and adds a zero "probe" tensor, watched by the step's gradient tape, to the
pre-activation output (Dense, Conv2D, EinsumDense: inside ``activation``, where
Keras has already added the bias) or to the output (Embedding). The gradient of
the loss with respect to a probe is the gradient with respect to that output,
and the probe leaves every other gradient unchanged.

Records are keyed by the layer's kernel variable, never by layer name: a layer
built inside model_fn gets a new name on each trace but the same variables.
"""

import contextlib
import dataclasses
import threading
from typing import Any, List, Optional

import keras
import tensorflow as tf

from moxlite import compat

_KINDS = {
    "Dense": keras.layers.Dense,
    "Conv2D": keras.layers.Conv2D,
    "Embedding": keras.layers.Embedding,
    "EinsumDense": keras.layers.EinsumDense,
    "LayerNormalization": keras.layers.LayerNormalization,
}
# Layers whose statistics are only the batch size (no probe).
_NO_PROBE = ("LayerNormalization",)


@dataclasses.dataclass
class LayerRecord:
    """One call of a tracked layer: what it is, its kernel, its input and output gradient."""

    kind: str
    layer: Any
    kernel: Any
    inputs: Optional[tf.Tensor]
    probe: Optional[tf.Tensor] = None
    output_gradients: Optional[tf.Tensor] = None
    batch_size: Optional[tf.Tensor] = None   # samples model_fn's loss averages over (this replica)


def underlying_variable(variable):
    """The tf.Variable behind a Keras variable (what the optimizer's variable lists hold)."""
    return compat.backing_variable(variable)


def _kernel_of(layer, kind):
    if kind == "Embedding":
        kernel = compat.layer_weight_variable(layer, "embeddings")
    elif kind == "LayerNormalization":
        kernel = layer.gamma if layer.gamma is not None else layer.beta
    else:
        kernel = compat.layer_weight_variable(layer, "kernel")
    if kernel is None or getattr(layer, "lora_enabled", False):
        return None
    return underlying_variable(kernel)


class _Recorder:
    def __init__(self, tape, kinds):
        self.tape = tape
        self.kinds = set(kinds)
        self.records: List[LayerRecord] = []

    def probe(self, tensor):
        probe = tf.zeros_like(tensor)
        self.tape.watch(probe)
        return probe


_local = threading.local()
_patch_lock = threading.Lock()
_patch_count = 0
_restorers = {}   # kind -> puts that class's call back


def _active_recorder():
    return getattr(_local, "recorder", None)


def _recording_call(kind, original):
    def call(self, inputs, *args, **kwargs):
        recorder = _active_recorder()
        if recorder is None or kind not in recorder.kinds:
            return original(self, inputs, *args, **kwargs)
        kernel = _kernel_of(self, kind)
        if kernel is None:
            return original(self, inputs, *args, **kwargs)
        record = LayerRecord(kind, self, kernel, inputs)
        recorder.records.append(record)
        if kind in _NO_PROBE:
            return original(self, inputs, *args, **kwargs)
        if kind == "Embedding":
            outputs = original(self, inputs, *args, **kwargs)
            record.probe = recorder.probe(outputs)
            return outputs + record.probe
        activation = self.activation

        def probed_activation(x):
            record.probe = recorder.probe(x)
            x = x + record.probe
            return activation(x) if activation is not None else x

        with compat.activation_replaced(self, probed_activation):
            return original(self, inputs, *args, **kwargs)
    return call


def _install():
    global _patch_count
    with _patch_lock:
        if _patch_count == 0:
            for kind, cls in _KINDS.items():
                _restorers[kind] = compat.replace_layer_method(cls, "call", _recording_call(kind, cls.call))
        _patch_count += 1


def _uninstall():
    global _patch_count
    with _patch_lock:
        _patch_count -= 1
        if _patch_count == 0:
            for kind, cls in _KINDS.items():
                _restorers.pop(kind)()


@contextlib.contextmanager
def recording(tape, kinds):
    """Within this block, calls of layers of ``kinds`` on this thread append LayerRecords
    to the yielded list; probes are watched by ``tape``."""
    recorder = _Recorder(tape, kinds)
    previous = _active_recorder()
    _install()
    _local.recorder = recorder
    try:
        yield recorder.records
    finally:
        _local.recorder = previous
        _uninstall()


def probes_of(records):
    return [record.probe for record in records if record.probe is not None]


def with_output_gradients(records, probe_gradients, unscale, batch_size):
    """The records with ``output_gradients`` set: each probe's gradient times ``unscale``
    (replicas / loss scale: the gradient of model_fn's loss as returned), in float32;
    and ``batch_size``, this replica's batch."""
    gradients = iter(probe_gradients)
    for record in records:
        record.batch_size = tf.cast(batch_size, tf.float32)
        if record.probe is None:
            continue
        gradient = next(gradients)
        if gradient is None:
            gradient = tf.zeros_like(record.probe)
        record.output_gradients = tf.cast(gradient, tf.float32) * tf.cast(unscale, tf.float32)
    return records
