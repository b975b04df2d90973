"""Mixed-precision levels O0-O3 (MindSpore's meaning) and fp32 keep-lists, on Keras dtype policies.

The levels, with ``c`` the compute dtype (float16, or bfloat16):

- ``O0``: every layer computes and stores in float32, whatever global policy the user
  set (a mixed one is overridden for the run, with one log line, and restored after).
- ``O1``: every layer computes in ``c`` except the keep-list, whose layers compute in
  float32: by default Apex O1's list, the one the Swin reproduction needed to match
  PyTorch: Softmax, LayerNormalization, BatchNormalization, GroupNormalization and GELU.
- ``O2``: "almost fp16": every layer in ``c`` except BatchNormalization
  (``keep_batchnorm_fp32``, on by default at O2).
- ``O3``: every layer in ``c``, BatchNormalization included (``keep_batchnorm_fp32``
  off by default).

At every level variables are stored in float32, as MindSpore keeps its Parameters
in float32 and casts them at use (Keras's ``mixed_<c>`` policy does the same), so
the optimizer updates float32 master weights. The loss is computed in float32 at
every level: moxlite casts it, and Keras ``Loss`` objects compute in float32.

A keep-list layer gets Keras's ``float32`` policy, so its inputs are cast up, and its
floating outputs are cast back to ``c`` (the Swin reproduction's ``OutputTo16``),
so the next operation sees the compute dtype whatever it is. Its sub-layers (a
MultiHeadAttention's projections and softmax, an LSTM's cell) compute in float32
with it, and hand float32 on inside it. "GELU" names any
``Activation`` layer whose function is GELU (Keras has no GELU layer class); a GELU
fused into another layer (``Dense(activation="gelu")``) computes with that layer.

Layers are configured when they are first called inside ``run`` (see
``layer_policies``), which covers layers built in the body and a Keras model
closed over, built or not; after the run each has its previous policy again. Keras's preprocessing layers (RandAugment, MixUp, ...)
are left as they are: they belong to the input pipeline, not to the network.

Runs in threads: each thread's run computes at its own level. The block in force is the
thread's own (thread-local, as Keras keeps its global dtype policy), and tf.distribute's
replica threads, which open none, follow the run handlers ``interception`` shows them (one
run's, unless two multi-device runs go at once); a second run in another thread is not refused.
"""

import contextlib
import dataclasses
import threading
from typing import Optional, Tuple

import keras
import tensorflow as tf

from moxlite import compat, errors
from moxlite.training.capture import interception
from moxlite.training.mixed_precision import options

LEVELS = tuple(level for level in options.AMP_LEVELS if level)
COMPUTE_DTYPES = options.COMPUTE_DTYPES
GELU = "GELU"
O1_KEEP_FP32 = ("Softmax", "LayerNormalization", "BatchNormalization", "GroupNormalization", GELU)
_BATCHNORM = "BatchNormalization"


@dataclasses.dataclass(frozen=True)
class AmpPlan:
    """Which policy each layer gets at one level."""

    level: str = "O0"
    compute_dtype: str = "float16"
    keep_fp32: Tuple[str, ...] = ()

    @property
    def mixed(self):
        return self.level != "O0"

    @property
    def policy_name(self):
        """The policy of layers not on the keep-list."""
        return f"mixed_{self.compute_dtype}" if self.mixed else "float32"

    def keeps(self, layer):
        """True when ``layer`` must compute in float32 at this level."""
        if not self.mixed:
            return False
        names = {cls.__name__ for cls in type(layer).__mro__}
        if names & set(self.keep_fp32):
            return True
        return GELU in self.keep_fp32 and _is_gelu_activation(layer)

    def policy_for(self, layer):
        return "float32" if self.keeps(layer) else self.policy_name


def plan_for(level, compute_dtype="float16", keep_fp32=None, keep_batchnorm_fp32=None):
    """The AmpPlan for a level, checked; ``keep_fp32=None`` means the level's default list.

    ``keep_batchnorm_fp32`` adds (True) or removes (False) BatchNormalization from the
    list, as MindSpore's switch of that name; None is the level's default: True at O2,
    False at O3, the list as given at O1.
    """
    if level not in LEVELS:
        raise errors.ArgumentError(
            f"amp_level={level!r} is not valid; use one of {', '.join(LEVELS)} "
            f"(O0 float32, O1 mixed with an fp32 keep-list, O2 all but BatchNorm, O3 all)")
    if compute_dtype not in COMPUTE_DTYPES:
        raise errors.ArgumentError(
            f"compute_dtype={compute_dtype!r} is not valid; use 'float16' or 'bfloat16'")
    if keep_fp32 is None:
        keep = list(O1_KEEP_FP32) if level == "O1" else []
    else:
        keep = [check_layer_name(name) for name in keep_fp32]
    if keep_batchnorm_fp32 is None and level == "O2":
        keep_batchnorm_fp32 = True
    if keep_batchnorm_fp32 and _BATCHNORM not in keep:
        keep.append(_BATCHNORM)
    if keep_batchnorm_fp32 is False and _BATCHNORM in keep:
        keep.remove(_BATCHNORM)
    return AmpPlan(level, compute_dtype, tuple(keep))


def check_layer_name(name):
    """``name`` if keep_fp32 accepts it (options.keep_fp32_names: Keras's layer classes but the base
    ``Layer``, which would keep every layer, and GELU); an error with the nearest name otherwise."""
    name = str(name).strip()
    if name in options.keep_fp32_names():
        return name
    near = options.nearest_layer_name(name)
    hint = f"; did you mean {near!r}?" if near else "; give Keras layer class names, e.g. LayerNormalization"
    raise errors.ArgumentError(f"keep_fp32: {name!r} is not a Keras layer class{hint}")


def _is_gelu_activation(layer):
    if not isinstance(layer, keras.layers.Activation):
        return False
    function = getattr(layer, "activation", None)
    return getattr(function, "__name__", "") == "gelu"


# ---- applying a plan to layers -----------------------------------------------------------------

# This thread's open ``layer_policies`` block: its PolicyHandler (``handler``), else none.
_local = threading.local()


def _cast_back(value, dtype):
    """``value`` in ``dtype`` if it is a floating tensor (anything else unchanged)."""
    if isinstance(value, keras.KerasTensor):   # a functional model being built inside model_fn
        if keras.backend.is_float_dtype(value.dtype) and value.dtype != dtype.name:
            return keras.ops.cast(value, dtype.name)
        return value
    if tf.is_tensor(value) and value.dtype.is_floating and value.dtype != dtype:
        return tf.cast(value, dtype)
    return value


def _is_data_layer(layer):
    """Keras's preprocessing layers (RandAugment, MixUp, Rescaling, ...) share a DataLayer base."""
    return any(cls.__name__ == "DataLayer" for cls in type(layer).__mro__)


class PolicyHandler:
    """The interception handler of one plan (``moxlite.training.capture.interception``).

    At a layer's first call in the run it gets its policy, and its sub-layers (found by
    structure) get theirs with it: float32 when the plan keeps it, or when it is a sub-layer
    of a kept layer (by structure at the kept layer's first call and by the call chain after,
    so a MultiHeadAttention's projections and an LSTM's cell compute in float32 with it);
    else the level's. Its
    previous policy is kept and put back by ``restore``. At O0 only layers with the mixed
    global policy the user had set (``overridden``: a model built under it) are set to
    float32; a layer given fp16 compute on purpose (MoXing's ``tf.cast(images, tf.float16)``
    with ``mox.var_scope(force_dtype=tf.float32)``, which the zoo honours) keeps it.

    A kept layer called from outside any kept layer (the boundary) gets its floating
    inputs in float32 and hands its floating outputs on in the compute dtype (the Swin
    reproduction's ``OutputTo16``); inside a kept layer tensors stay float32.
    """

    def __init__(self, plan, overridden=None):
        self.plan = plan
        self.overridden = overridden   # the user's global policy name that O0 overrides, or None
        self.compute = tf.as_dtype(plan.compute_dtype)
        self._lock = threading.Lock()
        self._state = {}      # id(layer) -> kept (bool)
        self._previous = {}   # id(layer) -> (layer, policy before the run)
        self.layers = []      # configured, in first-call order

    def _target(self, layer, kept):
        if not self.plan.mixed:
            return "float32" if self.overridden and layer.dtype_policy.name == self.overridden else None
        return "float32" if kept else self.plan.policy_name

    def _configure(self, layer, kept):
        with self._lock:
            if id(layer) in self._state:
                return
            self._state[id(layer)] = kept
            self._previous[id(layer)] = (layer, layer.dtype_policy)
            self.layers.append(layer)
        target = self._target(layer, kept)
        if target is not None and layer.dtype_policy.name != target:
            layer.dtype_policy = target
        # The sub-layers get theirs now, not at their own first call: a layer may read a
        # sub-layer's dtype before calling it. An RNN makes its initial state in its cell's
        # compute dtype and then, with a mask, selects between that state and the cell's
        # output; a cell still float32 from a model built before the run made a float32 state
        # against float16 outputs ("SelectV2 ... expected to be a half tensor").
        for child in _sublayers(layer):
            if id(child) not in self._state and not _is_data_layer(child):
                self._configure(child, kept or self.plan.keeps(child))

    def kept(self, layer):
        return self._state.get(id(layer))

    def around(self, call, args, kwargs, proceed):
        layer = call.layer
        if _is_data_layer(layer):   # preprocessing/augmentation: input pipeline, not the network
            return proceed(args, kwargs)
        inside_kept = any(self._state.get(id(parent)) for parent in call.parents)
        if id(layer) not in self._state:
            self._configure(layer, inside_kept or self.plan.keeps(layer))
        if not self.plan.mixed or not self._state[id(layer)]:
            return proceed(args, kwargs)
        # Cast up here rather than trust the policy: layers that opt out of Keras's input
        # autocasting (LayerNormalization, BatchNormalization) would otherwise see float16.
        args = tf.nest.map_structure(lambda value: _cast_back(value, tf.float32), args)
        kwargs = tf.nest.map_structure(lambda value: _cast_back(value, tf.float32), kwargs)
        outputs = proceed(args, kwargs)
        if inside_kept:
            return outputs
        return tf.nest.map_structure(lambda value: _cast_back(value, self.compute), outputs)

    def restore(self):
        """Every configured layer back to the policy it had before the run."""
        with self._lock:
            previous, self._previous = self._previous, {}
            self._state = {}
        for layer, policy in previous.values():
            if layer.dtype_policy is not policy:
                layer.dtype_policy = policy


def _sublayers(layer):
    try:
        return compat.direct_sublayers(layer)
    except compat.CompatibilityError:
        return []


@contextlib.contextmanager
def layer_policies(plan: Optional[AmpPlan], record=False):
    """While the body runs, the plan's global policy and each layer configured at its first call.

    Keras fixes a layer's policy at construction; a keep-list needs it per layer class, and
    a model closed over was constructed before this plan existed. So a ``PolicyHandler``
    intercepts every layer call for the duration (``moxlite.training.capture.interception``).
    Afterwards the global policy and every layer's policy are as before, also after an
    error or an interrupt. At O0 a global policy other than float32 is replaced by float32
    for the run, with one log line. ``record`` is accepted for callers that only want
    ``configured_layers`` (the handler always records).
    """
    del record
    if plan is None or getattr(_local, "handler", None) is not None:   # none asked, or nested in this thread's
        yield
        return
    from moxlite import logs

    previous_policy = keras.config.dtype_policy()
    overridden = None
    if not plan.mixed and previous_policy.name != "float32":
        overridden = previous_policy.name
        logs.get_logger().info("amp_level O0 computes in float32: the global Keras dtype policy %r is "
                               "overridden for this run and restored after it", previous_policy.name)
    handler = PolicyHandler(plan, overridden)
    keras.config.set_dtype_policy(plan.policy_name)   # Keras keeps it per thread
    _local.handler = handler
    try:
        with interception.intercepting(handler, threads="run"):
            yield handler
    finally:
        handler.restore()
        keras.config.set_dtype_policy(previous_policy)
        _local.handler = None


def _handler_in_force():
    """The PolicyHandler a layer call made now on this thread goes through: this thread's own
    block's, or on a thread that opened none (tf.distribute's replica threads) the run's it
    sees (``interception``: the first, were several runs' replica threads to share one); None."""
    own = getattr(_local, "handler", None)
    if own is not None:
        return own
    return next((handler for handler in interception.handlers_seen_here() if isinstance(handler, PolicyHandler)),
                None)


def plan_in_force():
    """The AmpPlan of the ``layer_policies`` block in force on this thread (None outside one)."""
    handler = _handler_in_force()
    return handler.plan if handler is not None else None


def mixed_level_in_force():
    """True inside a ``layer_policies`` block of a mixed level (O1-O3)."""
    plan = plan_in_force()
    return plan is not None and plan.mixed


def configured_layers():
    """The layers configured by the ``layer_policies`` block in force so far (empty outside one)."""
    handler = _handler_in_force()
    return list(handler.layers) if handler is not None else []


def layer_dtypes(layers):
    """One row per layer: (path or name, class name, compute dtype, variable dtypes)."""
    rows = []
    for layer in layers:
        variable_dtypes = sorted({str(v.dtype) for v in layer.weights}) if layer.weights else ["-"]
        rows.append((getattr(layer, "path", None) or layer.name, type(getattr(layer, "_layer", layer)).__name__,
                     layer.compute_dtype, ",".join(variable_dtypes)))
    return rows


def describe_layers(layers):
    """The rows of ``layer_dtypes`` as an aligned table, for ``--dry-run``."""
    rows = [("layer", "class", "compute", "variables")] + layer_dtypes(layers)
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)
