"""A run's workload: the user's input_fn and model_fn bound to its strategy and batch size.

What every mode builds first (the input, model_fn's variables, the global step), shared by
the training job and the inference job; nothing here depends on the mode's work.
"""

import tensorflow as tf

from moxlite import compat, errors
from moxlite.training import iterator_input, reporting
from moxlite.training.inputs import (as_model_inputs, call_input_fn, leading_batch_size, make_dataset_fn,
                                     placeholder_batch)
from moxlite.training.template import ModelTemplate


class Workload:
    """One call of ``run``'s input and model: its RunConfig, distribution set-up and model template.

    The jobs ask it for the dataset of a mode, model_fn's variables (``build``), the
    global step and whether this process is the chief.
    """

    def __init__(self, config, setup):
        self.config = config
        self.setup = setup
        self.strategy = setup.strategy
        # None until ``build`` reads it from the first batch when run() got no batch_size.
        self.batch_size = config.batch_size
        self.template = ModelTemplate(config.model_fn)
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
        batched = raw.batch(given) if self.config.auto_batch and given is not None else raw
        cardinality = int(raw.cardinality())
        num_samples = None
        if cardinality >= 0:
            num_samples = cardinality if batched is not raw else cardinality * self.batch_size
        return batched, first, num_samples

    def build(self, mode):
        """Create model_fn's variables once, from placeholder inputs when the shapes allow.

        Returns (model_fn's spec, the input's element spec, samples per epoch or None).
        """
        batched, first, num_samples = self._probe(mode)
        inputs = placeholder_batch(batched.element_spec, self.batch_size)
        if inputs is None:
            inputs = first if first is not None else _first_of(batched, self._unused_inputs[mode])
        with self.strategy.scope():
            spec = self.template.build(as_model_inputs(inputs), mode)
        self._check_external_variables()
        return spec, batched.element_spec, num_samples

    def _check_external_variables(self):
        if self.strategy.num_replicas_in_sync == 1 and not self.setup.coordinator:
            return
        for variable in self.template.external_variables:
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
