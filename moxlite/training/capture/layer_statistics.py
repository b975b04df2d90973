"""Recording per-layer inputs and output gradients while model_fn runs (the loop's side of
``moxlite.optimizers.wrapper``'s layer-statistics interface).

While a step traces model_fn, a ``_Recorder`` handler of ``moxlite.training.capture.interception``
sees every layer call on this thread, sub-layers of composite layers included. For a
requested kind (Dense, Conv2D, EinsumDense, Embedding, LayerNormalization, keras-hub's
PositionEmbedding as an Embedding of the position ids, or a custom layer that declares
``moxlite_layer_kind``) it replaces, for that call and this thread
only, the layer's instance ``call`` by one that records the input the layer computes on
and adds a zero "probe" tensor, watched by the step's gradient tape, to the
pre-activation output (Dense, Conv2D, EinsumDense: inside ``activation``, where the bias
is already added) or to the output (Embedding). The gradient of the loss with respect to
a probe is the gradient with respect to that output; the probe leaves every other
gradient unchanged. Both instance attributes are put back when the call returns.

A call the recorder cannot use is recorded as ``unseen`` with the reason, so that the
wrapper gives that layer the plain gradient and names it at start-up: a layer called
inside a loop or branch of its own (an RNN cell runs in a ``tf.while_loop``, whose
tensors the step cannot read), one whose ``call`` never applied ``self.activation``, or a
``ReversibleEmbedding`` called with ``reverse=True`` (``embedding_calls``), an Embedding
whose table model_fn also reads outside its layer calls and outside the calls of a layer that
declares ``EmbeddingOutput`` (a tied output written by hand), and
one looked up with ids [1, ...] whose output is not added to the batch (``broadcast_ids``;
one that is gets the per-sample rows of the add). Calls Keras makes in a scratch graph to
infer a block's shapes (``keras.SymbolicScope``) are not the step's and are not recorded.

Records are keyed by the layer's kernel variable, never by layer name (a layer built
inside model_fn gets a new name on each trace but the same variables), and named by
that variable's checkpoint key (``interception.stable_name``).
"""

import contextlib
import dataclasses
from typing import Any, List, Optional

import keras
import tensorflow as tf

from moxlite import compat
from moxlite.training.capture import broadcast_ids
from moxlite.training.capture import embedding_calls
from moxlite.training.capture import interception

_KINDS = {
    "Dense": keras.layers.Dense,
    "Conv2D": keras.layers.Conv2D,
    "Embedding": keras.layers.Embedding,
    "EinsumDense": keras.layers.EinsumDense,
    "LayerNormalization": keras.layers.LayerNormalization,
}
# Layers whose statistics are only the batch size (no probe).
_NO_PROBE = ("LayerNormalization",)
# The class attribute by which a custom layer asks to be recorded as one of _KINDS.
KIND_ATTRIBUTE = "moxlite_layer_kind"
# Kinds only a custom layer declares (no Keras class): "EmbeddingOutput" is the output
# projection of a head tied to an Embedding's table (logits = inputs . table^T, the table
# its ``moxlite_tied_table()``). It is never recorded: its reads of the table are the table's
# own, so the table's lookups stay recorded, their factors applied to the gradient of both uses.
DECLARED_KINDS = ("EmbeddingOutput",)
# The ops that read a variable through its handle.
_READ_OPS = ("ReadVariableOp", "ResourceGather", "ResourceGatherNd")
_READ_ELSEWHERE = ("its table is also read outside its layer calls (e.g. a tied output written by "
                   "hand, tf.matmul(h, table, transpose_b=True)), whose gradient the lookup's factors "
                   "do not describe")


@dataclasses.dataclass
class LayerRecord:
    """One call of a tracked layer: what it is, its kernel, its input and output gradient.

    ``name`` is the kernel's checkpoint key; ``unseen`` (when set) why the call could not
    be recorded: the layer then gets the plain gradient.
    """

    kind: str
    layer: Any
    kernel: Any
    inputs: Optional[tf.Tensor]
    probe: Optional[tf.Tensor] = None
    output_gradients: Optional[tf.Tensor] = None
    batch_size: Optional[tf.Tensor] = None   # samples model_fn's loss averages over (this replica)
    name: Optional[str] = None
    unseen: Optional[str] = None


def underlying_variable(variable):
    """The tf.Variable behind a Keras variable (what the optimizer's variable lists hold)."""
    return compat.backing_variable(variable)


def kind_of(layer):
    """The kind ``layer`` is recorded as (its ``moxlite_layer_kind``, else its Keras class), or None."""
    declared = getattr(type(layer), KIND_ATTRIBUTE, None)
    if declared is not None:
        return declared if declared in _KINDS or declared in DECLARED_KINDS else None
    if embedding_calls.is_position_embedding(layer):
        return "Embedding"    # a lookup of the position ids (embedding_calls)
    for kind, cls in _KINDS.items():
        if isinstance(layer, cls):
            return kind
    return None


def _kernel_of(layer, kind):
    if kind == "EmbeddingOutput":
        kernel = layer.moxlite_tied_table()
    elif kind == "LayerNormalization":
        kernel = layer.gamma if layer.gamma is not None else layer.beta
    else:
        name = "embeddings" if kind == "Embedding" else "kernel"
        if embedding_calls.is_position_embedding(layer):
            name = embedding_calls.POSITION_TABLE
        kernel = compat.layer_weight_variable(layer, name)
        if kernel is None:
            kernel = _public_weight(layer, name)
    if kernel is None or getattr(layer, "lora_enabled", False):
        return None
    return underlying_variable(kernel)


def _public_weight(layer, name):
    """A custom layer's ``kernel`` / ``embeddings`` attribute, if it is a variable."""
    value = layer.__dict__.get(name)
    return value if isinstance(value, (keras.Variable, tf.Variable)) else None


def _symbolic(structure):
    return any(isinstance(value, keras.KerasTensor) for value in tf.nest.flatten(structure))


class _Recorder:
    """The interception handler of one traced step on one thread."""

    def __init__(self, tape, kinds, batch_size=None):
        self.tape = tape
        self.batch_size = batch_size   # the step's static batch, or None
        self.kinds = set(kinds)
        self.records: List[LayerRecord] = []
        self.graph = tf.compat.v1.get_default_graph()
        self._empty = None
        self._first_op = len(self.graph.get_operations())
        self._table_calls = {}   # id(table) -> [(first op, end op)] of the calls recorded on it
        self._broadcast = []     # (record, the call's output) of lookups whose ids have a leading 1

    def probe(self, tensor):
        probe = tf.zeros_like(tensor)
        self.tape.watch(probe)
        return probe

    def empty(self):
        """A tensor of the step's own graph that stands for an unseen call's inputs."""
        if self._empty is None:
            with self.graph.as_default():
                self._empty = tf.zeros([0])
        return self._empty

    def _noting_table_reads(self, table, original):
        """``original``, noting which of the graph's ops its call makes (its reads of ``table``)."""
        def noted(*args, **kwargs):
            start = len(self.graph.get_operations())
            try:
                return original(*args, **kwargs)
            finally:
                self._table_calls.setdefault(id(table), []).append((start, len(self.graph.get_operations())))
        return noted

    def finish(self):
        """After model_fn's forward pass: lookups whose ids broadcast over the batch get their
        per-sample statistics (``broadcast_ids``), tables read outside their recorded calls and
        kernels with one unseen call become unseen in all their calls. The first two read the
        traced graph; a recording run eagerly (a test of the recorder alone) has none."""
        if not self.graph.building_function:
            self.unseen_everywhere()
            return
        for record, outputs in self._broadcast:
            reason = broadcast_ids.follow(record, outputs)
            if reason is not None:
                record.inputs, record.probe, record.unseen = self.empty(), None, reason
        self._unseen_where_read_elsewhere()
        self.unseen_everywhere()

    def _unseen_where_read_elsewhere(self):
        """An Embedding table that model_fn also reads outside the table's own layer calls (a
        tied output written by hand, ``tf.matmul(h, table, transpose_b=True)``) gets a gradient
        the lookups' factors do not describe: it is unseen, as a keras-hub reverse call is."""
        tables = {id(record.kernel): record for record in self.records
                  if record.kind == "Embedding" and not record.unseen}
        if not tables:
            return
        operations = self.graph.get_operations()
        for key, record in tables.items():
            handle = compat.variable_handle_in(self.graph, record.kernel)
            if handle is None:
                continue
            inside = self._table_calls.get(key, [])
            for index in range(self._first_op, len(operations)):
                operation = operations[index]
                if operation.type not in _READ_OPS or any(start <= index < end for start, end in inside):
                    continue
                if any(tensor.name == handle.name for tensor in operation.inputs):
                    record.inputs, record.probe, record.unseen = self.empty(), None, _READ_ELSEWHERE
                    break

    def unseen_everywhere(self):
        """A kernel with one unseen call is unseen in all: Keras's RNN calls its cell once before
        its while loop (for the output structure), and that call alone would be half a statistic."""
        unseen = {id(record.kernel): record.unseen for record in self.records if record.unseen}
        for record in self.records:
            if id(record.kernel) in unseen and not record.unseen:
                record.inputs, record.probe, record.unseen = self.empty(), None, unseen[id(record.kernel)]

    def around(self, call, args, kwargs, proceed):
        layer = call.layer
        kind = kind_of(layer)
        if kind == "EmbeddingOutput":
            # A declared tied head is never recorded; its reads of its table are the table's own.
            table = _kernel_of(layer, kind)
            if (table is not None and not _symbolic((args, kwargs))
                    and tf.compat.v1.get_default_graph() is self.graph):
                return self._noting_table_reads(table, proceed)(args, kwargs)
            return proceed(args, kwargs)
        if (kind is None or kind not in self.kinds or _symbolic((args, kwargs))
                or compat.in_keras_symbolic_scope()):
            # A symbolic call (a functional model being built) or Keras's shape inference in a
            # scratch graph (a custom block built at its first call) computes no step tensors.
            return proceed(args, kwargs)
        recorder = self

        def recording_call(inputs, *call_args, **call_kwargs):
            return recorder._record(layer, kind, original_call, inputs, call_args, call_kwargs)

        original_call = interception.unrouted(layer, "call")
        with interception.on_this_thread(layer, "call", recording_call):
            return proceed(args, kwargs)

    def _record(self, layer, kind, original, inputs, args, kwargs):
        kernel = _kernel_of(layer, kind)
        if kernel is None:
            return original(inputs, *args, **kwargs)
        if kind == "Embedding" and tf.compat.v1.get_default_graph() is self.graph:
            original = self._noting_table_reads(kernel, original)
        name = interception.stable_name(kernel)
        if tf.compat.v1.get_default_graph() is not self.graph:
            self.records.append(LayerRecord(kind, layer, kernel, self.empty(), name=name, unseen=(
                "called inside a loop or branch of its own, e.g. an RNN cell's tf.while_loop")))
            return original(inputs, *args, **kwargs)
        if kind == "Embedding" and embedding_calls.is_reverse_call(args, kwargs):
            if embedding_calls.ties_weights(layer):
                self.records.append(LayerRecord(kind, layer, kernel, self.empty(), name=name,
                                                unseen=embedding_calls.REVERSE_REASON))
            return original(inputs, *args, **kwargs)
        record = LayerRecord(kind, layer, kernel, inputs, name=name)
        self.records.append(record)
        if kind in _NO_PROBE:
            return original(inputs, *args, **kwargs)
        if kind == "Embedding":
            if embedding_calls.is_position_embedding(layer):
                record.inputs = embedding_calls.position_ids(inputs, args, kwargs)
            outputs = original(inputs, *args, **kwargs)
            record.probe = self.probe(outputs)
            outputs = outputs + record.probe
            if self.batch_size != 1 and broadcast_ids.leading_one(record.inputs):
                self._broadcast.append((record, outputs))
            return outputs
        activation = interception.unrouted(layer, "activation")

        def probed_activation(x):
            record.probe = self.probe(x)
            x = x + record.probe
            return activation(x) if activation is not None else x

        with interception.on_this_thread(layer, "activation", probed_activation):
            outputs = original(inputs, *args, **kwargs)
        if record.probe is None:
            record.inputs, record.unseen = self.empty(), "its call never applied self.activation"
        return outputs


@contextlib.contextmanager
def recording(tape, kinds, batch_size=None):
    """Within this block, calls of layers of ``kinds`` on this thread append LayerRecords
    to the yielded list; probes are watched by ``tape``. ``batch_size``: the step's static
    batch size if known (1: no lookup's ids can broadcast over the batch)."""
    recorder = _Recorder(tape, kinds, batch_size)
    with interception.intercepting(recorder, threads="this"):
        yield recorder.records
    recorder.finish()


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
