"""The optimizer-wrapper mechanism: Keras 3 optimizers that wrap another.

A wrapper is a ``keras.optimizers.Optimizer`` that owns only its own state
(accumulators, counters) and hands a transformed gradient down the stack,
to the rest of its pipeline (its inner optimizer, which may itself be a
wrapper, as the pipeline reads it). ``iterations`` and
``learning_rate`` are the innermost optimizer's, as in Keras's
LossScaleOptimizer. Wrappers know nothing of each other, so they stack in any
order: ``batch_gradients(lars(momentum))`` is the 32k-batch ResNet-50 recipe.

How gradients flow (TensorFlow backend, any tf.distribute strategy)
-------------------------------------------------------------------
A stack is a gradient pipeline (``moxlite.optimizers.pipeline``): each wrapper is a
``Link`` that transforms the gradient and hands it to ``rest``, the links below it and
then the plain Keras optimizer, which it does not know. The loop calls
``pipeline.apply_step(zip(grads, vars), inputs)`` in replica context with each replica's
own, unreduced gradient (of loss / replicas) and the step's ``StepInputs``; a wrapper's own
``apply_gradients`` does the same with empty inputs. The pipeline enters cross-replica
context once, with ``merge_call``, and from there each link runs
``_apply_in_cross_replica_context(distribution, grads, variables, reduced, rest)``:

- ``grads`` are per-replica values; ``reduced`` says whether they are
  already the cross-replica SUM (each replica holding the same total) or
  still each replica's own gradient.
- A link that needs the total (LARS's norms) reduces with
  ``sum_across_replicas`` and passes ``reduced=True`` down, so nothing below
  reduces again. A link that wants to choose when replicas communicate
  (``batch_gradients`` with sync_on_apply) keeps ``reduced=False`` until it
  applies. Conditions (``tf.cond`` on "is this the applying step") are taken
  here, in cross-replica context, where a branch may reduce; a branch that
  calls ``merge_call`` from replica context is what breaks Keras's own
  ``gradient_accumulation_steps`` under MirroredStrategy.
- Per-replica arithmetic runs in replica context through
  ``distribution.extended.call_for_each_replica``.
- The innermost plain Keras optimizer is applied in replica context with its
  built-in all-reduce switched off when the gradients are already reduced (see
  ``pipeline.apply_to_keras_optimizer``), so the whole stack does exactly one
  reduction per update that needs one.

Every cross-replica reduction goes through ``sum_across_replicas``, i.e.
``distribution.extended.batch_reduce_to``: one call per variable group.

Checkpoints: a wrapper tracks its inner optimizer as an attribute and its own
variables in Keras's variable list, so ``tf.train.Checkpoint(optimizer=stack)``
saves and restores the whole stack.

Parameters: each wrapper class declares ``PARAMETERS``, a dict of
``Parameter(default, description, accepted, check)``; the registry lists them
for ``--help-recipe`` and validates values against them. The wrappers a recipe
may name keep theirs in ``moxlite.optimizers.recipe_tables``, which imports no
TensorFlow, so that the recipe loader checks them before TensorFlow starts.

Interface for wrappers that need per-layer statistics (THOR)
------------------------------------------------------------
A second-order wrapper such as THOR (K-FAC-like, see docs/guide/optimizers-and-thor.md) preconditions
each layer's gradient with Kronecker factors built from the layer's inputs
and the gradients of the loss with respect to the layer's outputs. Only the
step can record those. The link says ``"layer_records"`` in its ``READS`` and
answers ``layer_statistics_request()`` with a ``LayerStatisticsRequest``: which
layer classes to track (``layer_types``, e.g. ("Dense", "Conv2D")), which
statistics (``statistics``: "inputs", "output_gradients"), ``every_n_steps``
(THOR's ``frequency``, informative) and ``collecting``: None (record on every
step), or a callable the step calls in replica context that returns a boolean
tensor, True on the steps whose statistics the link uses (THOR: its refresh
updates).

On every step the step hands the records in ``StepInputs.layer_records`` (a list of
``moxlite.training.capture.layer_statistics.LayerRecord``, one per call of a tracked
layer; a shared layer gives several): the layer, its kernel variable (the key:
layers built inside model_fn are renamed on every trace, their variables are
not), its input and the gradient of model_fn's loss *as returned* with respect
to its pre-activation output (loss scale and the loop's division by the replica
count taken out, float32), with the step's gradients in ``checked_gradients`` (a
link may drop the statistics of a step whose gradients overflowed). Each replica
hands its local values; the link reduces them across replicas itself, in its
``receive``, whose result the pipeline hands to the link's apply of the same step as its
``received`` argument (no state between the two). With ``collecting``, the step runs model_fn without recording on
the other steps (no probes: a step like the inner optimizer's) and hands empty
records there, still in the same call, so that the link's cross-replica work
stays outside any replica-context ``cond``. ``micro_batches`` (the product of
``apply_every`` of the links above, e.g. an outer ``batch_gradients``) says how
many steps' records make one update.

A loop that accumulates micro-batches inside one step (the asynchronous loop)
asks ``pipeline.summarise(inputs)`` per micro-batch instead (a vector, no
cross-replica call), adds them up and hands the total, as
``StepInputs(record_sums=...)``, to the pipeline that applies, before applying.
"""

import dataclasses
import threading
from typing import Any, Callable, Optional, Tuple

import keras

from moxlite import compat, context, errors, flags, logs
from moxlite.optimizers import tf1_adapter
from moxlite.optimizers import recipe_tables
from moxlite.optimizers import pipeline as pipeline_lib
from moxlite.optimizers.recipe_tables import Parameter  # noqa: F401  (wrapper_lib.Parameter)

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


def _synchronous_cluster():
    """True when several workers train in sync: the only set-up MoXing's warning is about (a
    single process has no replicas to synchronise across machines)."""
    run_context = context.current()
    if run_context is not None:
        return bool(run_context.sync_replicas) and run_context.num_workers > 1
    workers = [host for host in flags.get_flag("worker_hosts").split(",") if host]
    return bool(flags.get_flag("sync_replicas")) and len(workers) > 1


def _warn_if_sync_replicas():
    """MoXing's warning, once per process, on a synchronous cluster of several workers only:
    wrappers are meant for asynchronous training."""
    global _warned
    if not _synchronous_cluster():
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
    return pipeline_lib.links_of(optimizer)[1]


sum_across_replicas = pipeline_lib.sum_across_replicas
dense = pipeline_lib.dense


class OptimizerWrapper(keras.optimizers.Optimizer, pipeline_lib.Link):
    """Base of moxlite's wrappers; subclasses define ``NAME``, ``PARAMETERS`` and the transform.

    A subclass implements ``_apply_in_cross_replica_context(distribution, grads, variables,
    reduced, rest)`` (calling ``rest`` with what it hands down), says what it is as a link
    (``pipeline.Link``'s attributes) and, when it has state, ``_build_own_state(variables)``.
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
        if self.WARN_WHEN_SYNC:
            _warn_if_sync_replicas()

    @classmethod
    def validate_parameters(cls, parameters):
        """Defaults filled in; an OptimizerError naming the parameter and its range otherwise."""
        return recipe_tables.checked_parameters(cls.NAME, cls.PARAMETERS, parameters)

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
        """Apply through this stack's pipeline, with no step inputs (the loop hands its own to
        the pipeline it built; this one, outside a run or below a Keras LossScaleOptimizer, is
        made for the call: a pipeline holds no state, and nothing is kept on the optimizer)."""
        if trainable_variables is None:
            trainable_variables = compat.optimizer_built_variables(self)
        elif not self.built:
            self.build(list(trainable_variables))
        pipeline_lib.Pipeline(self).apply_step(list(zip(grads, trainable_variables)))

    def _apply_in_cross_replica_context(self, distribution, grads, variables, reduced, rest):
        """Transform ``grads`` and hand them to ``rest``; see the module docstring."""
        rest(distribution, grads, variables, reduced)

    def finalize_variable_values(self, var_list):
        self.inner_optimizer.finalize_variable_values(var_list)

    def scale_loss(self, loss):
        return self.inner_optimizer.scale_loss(loss)

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
