"""A run's workload: the user's input_fn and model_fn bound to its strategy and batch size.

What every mode builds first (the input, model_fn's variables, the global step), shared by
the training job and the inference job; nothing here depends on the mode's work.
"""

import tensorflow as tf

from moxlite import compat, errors
from moxlite.training import reporting
from moxlite.training.inputs import as_model_inputs, call_input_fn, make_dataset_fn, placeholder_batch
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
        self.batch_size = config.batch_size
        self.global_batch_size = self.batch_size * setup.num_replicas_in_sync
        self.template = ModelTemplate(config.model_fn)
        self.logger = reporting.get_logger()

    @property
    def is_chief(self):
        return self.setup.is_chief

    def dataset_fn(self, mode, skip_steps=0):
        return make_dataset_fn(self.config.input_fn, mode, self.batch_size, self.config.auto_batch,
                               skip_steps=skip_steps)

    def _probe(self, mode):
        """input_fn's per-replica batch spec and, where known, the number of samples per epoch."""
        raw = call_input_fn(self.config.input_fn, mode, self.batch_size, self.config.auto_batch)
        batched = raw.batch(self.batch_size) if self.config.auto_batch else raw
        cardinality = int(raw.cardinality())
        num_samples = None
        if cardinality >= 0:
            num_samples = cardinality if self.config.auto_batch else cardinality * self.batch_size
        return batched, num_samples

    def build(self, mode):
        """Create model_fn's variables once, from placeholder inputs when the shapes allow.

        Returns (model_fn's spec, the input's element spec, samples per epoch or None).
        """
        batched, num_samples = self._probe(mode)
        inputs = placeholder_batch(batched.element_spec, self.batch_size)
        if inputs is None:
            inputs = next(iter(batched))
        with self.strategy.scope():
            spec = self.template.build(as_model_inputs(inputs), mode)
        self._check_external_variables()
        return spec, batched.element_spec, num_samples

    def _check_external_variables(self):
        if self.strategy.num_replicas_in_sync == 1 and not self.setup.coordinator:
            return
        for variable in self.template.external_variables:
            if not compat.created_under_a_strategy(variable):
                raise errors.ModelFnError(
                    f"model_fn uses variable {variable.name!r}, created before run() outside the "
                    f"distribution strategy; construct the Keras model inside model_fn (or do not build "
                    f"it before run) so moxlite creates its variables on every replica")

    def global_step(self):
        with self.strategy.scope():
            return tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                               aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
