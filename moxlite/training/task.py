"""A run's Task (TF Model Garden's name): what every mode builds first, and each mode's pieces.

One Task per ``run``: the user's ``input_fn`` and ``model_fn`` bound to the run's strategy and
batch size. It owns the three things every mode starts from, so that no job assembles them:

- the input of a mode (``dataset_fn``; ``build`` probes it first), called the way MoXing
  called ``input_fn`` (``calling``: keyword arguments only where declared);
- ``model_fn``'s variables, created once and reused on every later call (``template``),
  and their stable names (``checkpoint_keys``, ``stable_name``);
- the per-replica step of each mode over ``model_fn``: ``train_step``, ``evaluator``
  (EVAL's sample-weighted sums), ``predict``, ``export``.

The jobs (``training_job``, ``inference_job``) ask the Task for these and pass it nothing
to call back: what a job decides (optimizers, checkpoints, the controller) stays in the job.
Nothing here depends on which mode the run is in.
"""

import tensorflow as tf

from moxlite import compat, errors
from moxlite.contract import ModeKeys
from moxlite.training import reporting
from moxlite.training.inference import export
from moxlite.training.input import iterator_input
from moxlite.training.trainers import nonfinite
from moxlite.training.trainers import steps
from moxlite.training.inference.evaluation import EvalPass
from moxlite.training.inference.evaluation import predict as predict_outputs
from moxlite.training.input.replica_batches import (as_model_inputs, call_input_fn, leading_batch_size, make_dataset_fn,
                                     placeholder_batch)
from moxlite.training.capture.shared_variables import SharedVariablesModelFn
from moxlite.training.state.variable_lists import variable_lists


class Task:
    """One call of ``run``'s input and model: its RunConfig, distribution set-up and model template.

    The jobs ask it for the dataset of a mode, model_fn's variables (``build``), the global
    step, the variables each optimizer trains, and the steps of each mode.
    """

    def __init__(self, config, setup):
        self.config = config
        self.setup = setup
        self.strategy = setup.strategy
        # None until ``build`` reads it from the first batch when run() got no batch_size.
        self.batch_size = config.batch_size
        self._template = SharedVariablesModelFn(config.model_fn)
        self.logger = reporting.get_logger()
        self._unused_inputs = {}   # mode -> the dataset build() read, for the first dataset_fn call

    @property
    def global_batch_size(self):
        return (self.batch_size or 0) * self.setup.num_replicas_in_sync

    @property
    def batches_given(self):
        """True when input_fn's elements are the batches: no batch_size was given to batch by."""
        return self.config.batch_size is None

    @property
    def is_chief(self):
        return self.setup.is_chief

    def dataset_fn(self, mode, skip_steps=0):
        # A parameter-server worker traces dataset_fn in its own graph: it cannot take a dataset
        # made here, and calls input_fn itself.
        read_already = None if self.setup.coordinator else (lambda: self._unused_inputs.pop(mode, None))
        return make_dataset_fn(self.config.input_fn, mode, self.config.batch_size, self.config.auto_batch,
                               skip_steps=skip_steps, read_already=read_already)

    def fresh_input(self, mode):
        """input_fn's dataset of ``mode`` read anew, unbatched (for a count in an error message)."""
        return call_input_fn(self.config.input_fn, mode, self.config.batch_size, self.config.auto_batch)

    def _probe(self, mode):
        """input_fn's per-replica batches, a first batch if one had to be read, and, where
        known, the number of samples per epoch."""
        given = self.config.batch_size
        raw = call_input_fn(self.config.input_fn, mode, given, self.config.auto_batch)
        self._unused_inputs[mode] = raw
        first = None
        if given is None:
            first = _first_batch(raw, mode)
            self.batch_size = leading_batch_size(first, mode)
            self.logger.info("run() has no batch_size: input_fn's %s elements are the batches (%d samples in "
                             "the first)", mode, self.batch_size)
        elif not self.config.auto_batch and mode == ModeKeys.TRAIN:
            first = self._announce_real_batch(raw, mode, given)
        batched = raw.batch(given) if self.config.auto_batch and given is not None else raw
        cardinality = int(raw.cardinality())
        num_samples = None
        if cardinality >= 0:
            num_samples = cardinality if batched is not raw else cardinality * self.batch_size
        return batched, first, num_samples

    def _announce_real_batch(self, raw, mode, given):
        """With ``auto_batch=False`` input_fn's elements are the batches that train: their size,
        not ``batch_size``, is the run's batch (start-up line, sample/sec, the run's context).
        A ``batch_size`` that disagrees gets one line. Returns the first batch if one was read."""
        first = None
        size = _static_batch_size(raw.element_spec)
        if size is None:
            first = _first_batch(raw, mode)
            size = _static_batch_size(tf.nest.map_structure(tf.TensorSpec.from_tensor, first))
        if size is not None and size != given:
            self.logger.info("input_fn's %s batches hold %d samples, not batch_size=%d (auto_batch=False: its "
                             "elements are the batches); the run trains and counts batches of %d", mode, size,
                             given, size)
            self.batch_size = size
        return first

    def build(self, mode):
        """Create model_fn's variables once, from placeholder inputs when the shapes allow.

        Returns (model_fn's spec, the input's element spec, samples per epoch or None).
        """
        batched, first, num_samples = self._probe(mode)
        inputs = placeholder_batch(batched.element_spec, self.batch_size)
        if inputs is None:
            inputs = first if first is not None else _first_of(batched, self._unused_inputs[mode])
        with self.strategy.scope():
            spec = self._template.build(as_model_inputs(inputs), mode)
        self._check_external_variables()
        return spec, batched.element_spec, num_samples

    def spec_of(self, mode):
        """model_fn's spec in ``mode`` on the variables ``build`` made, for a check before training:
        the run's batch size and its unread input stay as they were."""
        batch_size = self.batch_size
        try:
            spec, _, _ = self.build(mode)
        finally:
            self.batch_size = batch_size
            self._unused_inputs.pop(mode, None)
        return spec

    def _check_external_variables(self):
        if self.strategy.num_replicas_in_sync == 1 and not self.setup.coordinator:
            return
        for variable in self._template.external_variables:
            if not self._made_under_this_strategy(variable):
                raise errors.ModelFnError(
                    f"model_fn uses variable {variable.name!r}, created before run() outside the "
                    f"distribution strategy run() uses ({self.strategy.num_replicas_in_sync} replica(s)); build "
                    f"the model inside `with moxlite.strategy_scope():` (after setting the flags or TF_CONFIG), "
                    f"or construct it inside model_fn, so its variables exist on every replica")

    def _made_under_this_strategy(self, variable):
        """Created in the scope of ``self.strategy`` (the object strategy_scope() hands out), not another's."""
        if not compat.created_under_a_strategy(variable):
            return False
        if self.setup.coordinator:   # parameter-server variables: any strategy's scope placed them on the ps
            return True
        return self.strategy.extended.variable_created_in_scope(variable)

    def global_step(self):
        with self.strategy.scope():
            return tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                               aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

    # model_fn's variables and their names (after ``build``).

    def checkpoint_keys(self):
        """({stable name: variable} for every variable model_fn uses, names shared by several)."""
        return self._template.checkpoint_keys()

    def stable_name(self, variable):
        """``variable``'s checkpoint key, or None: the names THOR's include/exclude match."""
        return self._template.stable_name(variable)

    @property
    def last_error(self):
        """The last moxlite error raised inside a traced model_fn call (AutoGraph wraps it)."""
        return self._template.last_error

    def variable_lists(self, spec, trainable_exclude_patterns, logger):
        """The variables each loss of ``spec`` trains, in slot-saving order (checkpoint-key order)."""
        return variable_lists(self._template, spec, trainable_exclude_patterns, logger)

    def state_variables(self, optimizers):
        """The floating-point model and ``optimizers`` variables a checked call verifies are finite."""
        return nonfinite.floating_variables(list(self.checkpoint_keys()[0].values()) + list(optimizers))

    # Each mode's step over model_fn.

    def train_step(self, pipelines, lists, skip_nonfinite=False):
        """TRAIN's per-replica step: one update per loss, through its pipeline, of its variables."""
        return steps.TrainStep(self._template, pipelines, lists, self.setup.num_replicas_in_sync,
                               skip_nonfinite=skip_nonfinite)

    def evaluator(self, batches_per_call=1):
        """EVAL's means of log_info over a fresh pass of the EVAL input for each evaluation."""
        return EvalPass(self.strategy, self.dataset_fn(ModeKeys.EVAL), self._template,
                         batches_per_call=batches_per_call)

    def predict(self, output_fn, output_every_n_steps=0, max_batches=0):
        """PREDICT over the input: output_info to ``output_fn``; the outputs not handed to it."""
        outputs, _ = predict_outputs(self.strategy, self.dataset_fn(ModeKeys.PREDICT), self._template, output_fn,
                                     output_every_n_steps, max_batches=max_batches)
        return outputs

    def export(self, element_spec, target_dir):
        """The SavedModel of model_fn's EXPORT mode on inputs of ``element_spec``; its path."""
        return export.export_saved_model(self._template, element_spec, target_dir)


def _static_batch_size(element_spec):
    """The leading dimension every component of a batch shares, None if unknown or not shared."""
    sizes = set()
    for spec in tf.nest.flatten(element_spec):
        shape = getattr(spec, "shape", None)
        if shape is None or shape.rank is None or shape.rank == 0 or shape[0] is None:
            return None
        sizes.add(int(shape[0]))
    return sizes.pop() if len(sizes) == 1 else None


def _first_of(batched, raw):
    """A batch to build model_fn's variables on. An element input_fn already read from an
    iterator (which can be read only once) serves, as a batch of one when moxlite batches."""
    known = iterator_input.first_element(raw)
    if known is None:
        return next(iter(batched))
    if batched is raw:
        return known
    return tf.nest.map_structure(lambda component: component[tf.newaxis], known)


def _first_batch(dataset, mode):
    """The first element of ``dataset`` without consuming it where it can be read only once:
    the element a ``get_next()`` already read is known (``iterator_input``)."""
    known = iterator_input.first_element(dataset)
    if known is not None:
        return known
    for element in dataset.take(1):
        return element
    raise errors.ArgumentError(
        f"input_fn returned no {mode} data, so run() (given no batch_size) cannot read the batch size "
        f"from its first batch; check input_fn's {mode} dataset, or pass batch_size=...")
