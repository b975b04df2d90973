"""The optimizer-wrapper mechanism: Keras 3 optimizers that wrap another.

A wrapper is a ``keras.optimizers.Optimizer`` that owns only its own state
(accumulators, counters) and hands a transformed gradient to its inner
optimizer, which may itself be a wrapper. ``iterations`` and
``learning_rate`` are the innermost optimizer's, as in Keras's
LossScaleOptimizer. Wrappers know nothing of each other, so they stack in any
order: ``batch_gradients(lars(momentum))`` is the 32k-batch ResNet-50 recipe.

How gradients flow (TensorFlow backend, any tf.distribute strategy)
-------------------------------------------------------------------
The loop calls ``wrapper.apply_gradients(zip(grads, vars))`` in replica
context with each replica's own, unreduced gradient (of loss / replicas).
The outermost wrapper enters cross-replica context once, with
``merge_call``, and from there every wrapper of the stack runs
``_apply_in_cross_replica_context(distribution, grads, variables, reduced)``:

- ``grads`` are per-replica values; ``reduced`` says whether they are
  already the cross-replica SUM (each replica holding the same total) or
  still each replica's own gradient.
- A wrapper that needs the total (LARS's norms) reduces with
  ``sum_across_replicas`` and passes ``reduced=True`` down, so nothing below
  reduces again. A wrapper that wants to choose when replicas communicate
  (``batch_gradients`` with sync_on_apply) keeps ``reduced=False`` until it
  applies. Conditions (``tf.cond`` on "is this the applying step") are taken
  here, in cross-replica context, where a branch may reduce; a branch that
  calls ``merge_call`` from replica context is what breaks Keras's own
  ``gradient_accumulation_steps`` under MirroredStrategy.
- Per-replica arithmetic runs in replica context through
  ``distribution.extended.call_for_each_replica``.
- The innermost plain Keras optimizer is applied in replica context with its
  built-in all-reduce switched off when the gradients are already reduced (see
  ``_apply_to_keras_optimizer``), so the whole stack does exactly one
  reduction per update that needs one.

Every cross-replica reduction goes through ``sum_across_replicas``, i.e.
``distribution.extended.batch_reduce_to``: one call per variable group.

Checkpoints: a wrapper tracks its inner optimizer as an attribute and its own
variables in Keras's variable list, so ``tf.train.Checkpoint(optimizer=stack)``
saves and restores the whole stack.

Parameters: each wrapper class declares ``PARAMETERS``, a dict of
``Parameter(default, description, accepted, check)``; the registry lists them
for ``--help-recipe`` and validates values against them. The wrappers a recipe
may name keep theirs in ``moxlite.optimizers.catalog``, which imports no
TensorFlow, so that the recipe loader checks them before TensorFlow starts.

Interface for wrappers that need per-layer statistics (THOR)
------------------------------------------------------------
A second-order wrapper such as THOR (K-FAC-like, see thor.md) preconditions
each layer's gradient with Kronecker factors built from the layer's inputs
and the gradients of the loss with respect to the layer's outputs. Only the
loop can record those, so the contract between the two is:

1. ``layer_statistics_request(optimizer)`` (module function; the loop calls it
   once on the outermost optimizer after building it) returns None, or a
   ``LayerStatisticsRequest``: which layer classes to track (``layer_types``,
   e.g. ("Dense", "Conv2D")), which statistics (``statistics``: "inputs",
   "output_gradients"), ``every_n_steps`` (THOR's ``frequency``, informative)
   and ``collecting``: None (record on every step), or a callable the loop
   calls in replica context that returns a boolean tensor, True on the steps
   whose statistics the wrapper uses (THOR: its refresh updates).
2. On a step where statistics are recorded, the loop, in replica context and
   before ``apply_gradients``, calls ``set_layer_statistics(optimizer, stats)``
   with ``stats`` a list of ``moxlite.training.layer_statistics.LayerRecord``,
   one per call of a tracked layer (a shared layer gives several): the layer,
   its kernel variable (the key: layers built inside model_fn are renamed on
   every trace, their variables are not), its input and the gradient of
   model_fn's loss *as returned* with respect to its pre-activation output
   (loss scale and the loop's division by the replica count taken out,
   float32), and the step's gradients (a wrapper may drop the statistics of a
   step whose gradients overflowed). Each replica hands its local values; the wrapper reduces them
   across replicas itself. With ``collecting``, the loop runs model_fn
   without recording on the other steps (no probes: a step like the inner
   optimizer's) and hands empty records there, still in the same call, so
   that the wrapper's cross-replica work stays outside any replica-context
   ``cond``; without it the loop records on every step.
   Both functions look through a Keras ``LossScaleOptimizer``. A
   ``batch_gradients`` link passes ``micro_batches`` (its num_batches) down
   with them: one step's statistics are then one micro-batch of an update.
3. A loop that accumulates micro-batches inside one step (the asynchronous
   loop) calls ``layer_statistics_sums(optimizer, stats, gradients)`` per
   micro-batch instead (a vector, no cross-replica call), adds them up and
   hands the total to ``set_layer_statistics_sums`` of the optimizer that
   applies, before applying.

The base class implements both by forwarding to the inner wrapper, so a
request made anywhere in a stack reaches the loop and the statistics reach
the wrapper that asked for them.
"""

import dataclasses
import threading
from typing import Any, Callable, Optional, Tuple

import keras
import tensorflow as tf

from moxlite import compat, context, errors, flags, logs
from moxlite.optimizers import catalog, tf1_adapter
from moxlite.optimizers.catalog import Parameter  # noqa: F401  (wrapper_lib.Parameter)

SYNC_REPLICAS_WARNING = "Using OptimizerWrapper when sync_replicas is True may cause performance loss."
_warning_lock = threading.Lock()
_warned = False


@dataclasses.dataclass(frozen=True)
class LayerStatisticsRequest:
    """What per-layer statistics a wrapper needs from the loop (see the module docstring)."""

    layer_types: Tuple[str, ...]
    statistics: Tuple[str, ...] = ("inputs", "output_gradients")
    every_n_steps: int = 1
    collecting: Optional[Callable[[], Any]] = None


def _sync_replicas():
    run_context = context.current()
    if run_context is not None:
        return bool(run_context.sync_replicas)
    return bool(flags.get_flag("sync_replicas"))


def _warn_if_sync_replicas():
    """MoXing's warning, once per process: wrappers are meant for asynchronous training."""
    global _warned
    if not _sync_replicas():
        return
    with _warning_lock:
        if _warned:
            return
        _warned = True
    logs.get_logger().warning(SYNC_REPLICAS_WARNING)


def _reset_sync_replicas_warning():
    """Forget that the warning was logged (for tests)."""
    global _warned
    _warned = False


def is_optimizer(obj):
    """True for a Keras 3 optimizer instance, wrappers included (not for a factory)."""
    return isinstance(obj, keras.optimizers.Optimizer)


def innermost(optimizer):
    """The plain Keras optimizer at the bottom of a wrapper stack."""
    while isinstance(optimizer, OptimizerWrapper):
        optimizer = optimizer.inner_optimizer
    return optimizer


def stack_of(optimizer):
    """The optimizers of a stack, outermost first, innermost (plain Keras) last."""
    stack = [optimizer]
    while isinstance(stack[-1], OptimizerWrapper):
        stack.append(stack[-1].inner_optimizer)
    return stack


def _through_loss_scaling(optimizer):
    """The stack inside a Keras LossScaleOptimizer (which hides the wrappers it holds)."""
    while isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        optimizer = optimizer.inner_optimizer
    return optimizer


def layer_statistics_request(optimizer) -> Optional[LayerStatisticsRequest]:
    """What per-layer statistics the loop must hand to ``optimizer`` (None: none)."""
    optimizer = _through_loss_scaling(optimizer)
    if isinstance(optimizer, OptimizerWrapper):
        return optimizer.layer_statistics_request()
    return None


def set_layer_statistics(optimizer, statistics, gradients=()):
    """Hand the loop's per-layer records (and this step's gradients, whose finiteness decides
    whether the step counts) to the stack ``optimizer`` (see the module docstring)."""
    optimizer = _through_loss_scaling(optimizer)
    if isinstance(optimizer, OptimizerWrapper):
        optimizer.set_layer_statistics(statistics, gradients)


def layer_statistics_sums(optimizer, statistics, gradients=()):
    """One micro-batch's statistics summarised by the stack ``optimizer`` as one float32 vector
    that adds up over micro-batches, without any cross-replica call (None: the stack uses none).

    For a loop that accumulates micro-batches in tensors inside one step (the asynchronous
    loop under ``batch_gradients``): it sums the vectors and hands the total to
    ``set_layer_statistics_sums`` of the optimizer that applies, before applying.
    """
    optimizer = _through_loss_scaling(optimizer)
    if isinstance(optimizer, OptimizerWrapper):
        return optimizer.layer_statistics_sums(statistics, gradients)
    return None


def set_layer_statistics_sums(optimizer, sums):
    """Hand the total of ``layer_statistics_sums`` over an update's micro-batches to ``optimizer``."""
    optimizer = _through_loss_scaling(optimizer)
    if isinstance(optimizer, OptimizerWrapper):
        optimizer.set_layer_statistics_sums(sums)


def sum_across_replicas(distribution, grads, variables):
    """All-reduce (SUM) per-replica gradients onto the variables' devices, in one call.

    Must run in cross-replica context. Returns values that hold, on each
    replica, the sum over replicas. With one replica this is the identity.
    """
    destinations = [v.value if isinstance(v, keras.Variable) else v for v in variables]
    return distribution.extended.batch_reduce_to(
        tf.distribute.ReduceOp.SUM, list(zip(grads, destinations)))


def dense(gradient):
    """Gradients as dense tensors: wrappers accumulate and take norms of them."""
    if isinstance(gradient, tf.IndexedSlices):
        return tf.convert_to_tensor(gradient)
    return gradient


def _install_reduction_switch(optimizer):
    """Let a plain Keras optimizer skip its own all-reduce when given reduced gradients.

    Keras's TensorFlow optimizer sums the gradients across replicas inside
    ``apply`` (``_all_reduce_sum_gradients``). A wrapper that already reduced
    them sets ``_moxlite_gradients_reduced`` (in cross-replica context, one
    thread) around the replica-context call, and this switch then returns
    them unchanged instead of summing identical copies again.
    """
    if getattr(optimizer, "_moxlite_reduction_switch", False):
        return
    original = compat.gradient_all_reduce(optimizer)

    def all_reduce_unless_reduced(grads_and_vars):
        if optimizer._moxlite_gradients_reduced:
            return list(grads_and_vars)
        return original(grads_and_vars)

    optimizer._moxlite_gradients_reduced = False
    compat.replace_gradient_all_reduce(optimizer, all_reduce_unless_reduced)
    optimizer._moxlite_reduction_switch = True


def _apply_to_keras_optimizer(distribution, optimizer, grads, variables):
    """Apply already-reduced per-replica gradients with a plain Keras optimizer."""
    optimizer._moxlite_gradients_reduced = True
    try:
        distribution.extended.call_for_each_replica(optimizer.apply, args=(list(grads), list(variables)))
    finally:
        optimizer._moxlite_gradients_reduced = False


class OptimizerWrapper(keras.optimizers.Optimizer):
    """Base of moxlite's wrappers; subclasses define ``NAME``, ``PARAMETERS`` and the transform.

    A subclass implements ``_apply_in_cross_replica_context`` (calling
    ``self._apply_inner`` with what it hands down) and, when it has state,
    ``_build_own_state(variables)``.
    """

    NAME = "wrapper"
    PARAMETERS = {}
    WARN_WHEN_SYNC = True   # MoXing's sync_replicas warning; False for moxlite's internal links

    def __init__(self, inner_optimizer, name=None, **parameters):
        if callable(inner_optimizer) and not isinstance(inner_optimizer, keras.optimizers.Optimizer):
            inner_optimizer = inner_optimizer()
        inner_optimizer = tf1_adapter.as_keras_optimizer(inner_optimizer)
        if not isinstance(inner_optimizer, keras.optimizers.Optimizer):
            raise errors.OptimizerTypeError(
                f"{self.NAME}: expected a Keras 3 optimizer (or a zero-argument factory of one) "
                f"to wrap, got {type(inner_optimizer).__name__}: {errors.describe(inner_optimizer)}")
        values = self.validate_parameters(parameters)
        super().__init__(learning_rate=0.0, name=name or self.NAME)
        self.inner_optimizer = inner_optimizer
        for key, value in values.items():
            setattr(self, key, value)
        if not isinstance(inner_optimizer, OptimizerWrapper):
            _install_reduction_switch(inner_optimizer)
        if self.WARN_WHEN_SYNC:
            _warn_if_sync_replicas()

    @classmethod
    def validate_parameters(cls, parameters):
        """Defaults filled in; an OptimizerError naming the parameter and its range otherwise."""
        return catalog.checked_parameters(cls.NAME, cls.PARAMETERS, parameters)

    def parameter_values(self):
        return {key: getattr(self, key) for key in self.PARAMETERS}

    # The Keras optimizer surface, delegated to the inner optimizer.

    @property
    def learning_rate(self):
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, learning_rate):
        self.inner_optimizer.learning_rate = learning_rate

    @property
    def iterations(self):
        return self.inner_optimizer.iterations

    @property
    def variables(self):
        return compat.optimizer_own_variables(self) + self.inner_optimizer.variables

    def build(self, variables):
        self._build_own_state(list(variables))
        self.inner_optimizer.build(variables)
        super().build(variables)

    def _build_own_state(self, variables):
        """Create the wrapper's own variables (under the strategy's scope)."""

    def apply_gradients(self, grads_and_vars):
        grads, variables = zip(*grads_and_vars)
        self.apply(grads, variables)
        return self.iterations

    def apply(self, grads, trainable_variables=None):
        if trainable_variables is None:
            trainable_variables = compat.optimizer_built_variables(self)
        elif not self.built:
            self.build(list(trainable_variables))
        pairs = [(dense(g), v) for g, v in zip(grads, trainable_variables) if g is not None]
        if not pairs:
            return
        grads = [g for g, _ in pairs]
        variables = [v for _, v in pairs]
        replica_context = tf.distribute.get_replica_context()
        if replica_context is None:
            self._apply_in_cross_replica_context(tf.distribute.get_strategy(), grads, variables, False)
        else:
            replica_context.merge_call(self._merge_apply, args=(grads, variables))

    def _merge_apply(self, distribution, grads, variables):
        self._apply_in_cross_replica_context(distribution, grads, variables, False)

    def _apply_in_cross_replica_context(self, distribution, grads, variables, reduced):
        """Transform ``grads`` and hand them down; see the module docstring."""
        self._apply_inner(distribution, grads, variables, reduced)

    def _apply_inner(self, distribution, grads, variables, reduced):
        inner = self.inner_optimizer
        if isinstance(inner, OptimizerWrapper):
            inner._apply_in_cross_replica_context(distribution, grads, variables, reduced)
            return
        if not reduced:
            grads = sum_across_replicas(distribution, grads, variables)
        _apply_to_keras_optimizer(distribution, inner, grads, variables)

    def finalize_variable_values(self, var_list):
        self.inner_optimizer.finalize_variable_values(var_list)

    def scale_loss(self, loss):
        return self.inner_optimizer.scale_loss(loss)

    # The per-layer statistics interface (see the module docstring).

    def layer_statistics_request(self):
        return layer_statistics_request(self.inner_optimizer)

    def set_layer_statistics(self, statistics, gradients=(), micro_batches=1):
        """micro_batches: how many steps' statistics make one update of this link (a
        ``batch_gradients`` above multiplies it by its num_batches)."""
        inner = _through_loss_scaling(self.inner_optimizer)
        if isinstance(inner, OptimizerWrapper):
            inner.set_layer_statistics(statistics, gradients, micro_batches)

    def layer_statistics_sums(self, statistics, gradients=()):
        return layer_statistics_sums(self.inner_optimizer, statistics, gradients)

    def set_layer_statistics_sums(self, sums):
        set_layer_statistics_sums(self.inner_optimizer, sums)

    # Serialisation: the inner optimizer is serialised inside the wrapper's config.

    def get_config(self):
        return {"name": self.name,
                "inner_optimizer": keras.saving.serialize_keras_object(self.inner_optimizer),
                **self.parameter_values()}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        inner = keras.saving.deserialize_keras_object(config.pop("inner_optimizer"), custom_objects=custom_objects)
        return cls(inner, **config)

    def describe(self):
        """One line: the wrapper's name and parameter values."""
        arguments = ", ".join(f"{key}={value!r}" for key, value in self.parameter_values().items())
        return f"{self.NAME}({arguments})"
