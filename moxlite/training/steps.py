"""The per-replica bodies of a training, evaluation and prediction step.

Each runs inside ``strategy.run`` (replica context) in a traced function, for
every strategy moxlite supports. Gradients are of ``loss / replicas`` so that
the optimizer's cross-replica sum makes them the gradient of the mean loss over
the global batch: two replicas with batch B step exactly as one with 2B.
"""

import contextlib

import tensorflow as tf

from moxlite import errors
from moxlite.contract import ModeKeys
from moxlite.optimizers import wrapper as wrapper_lib
from moxlite.training import layer_statistics, nonfinite
from moxlite.training.inputs import as_model_inputs, batch_size_of


def as_scalar(value):
    """A log_info value as a float32 scalar (non-scalars are averaged)."""
    value = tf.cast(value, tf.float32)
    return tf.reduce_mean(value) if value.shape.rank != 0 else value


def log_values(spec):
    return {name: as_scalar(value) for name, value in (spec.log_info or {}).items()}


def check_spec(spec, mode, num_optimizers=None):
    """Fail early, with the fix, when model_fn's ModelSpec lacks what ``mode`` needs."""
    if mode == ModeKeys.TRAIN:
        if not spec.losses:
            raise errors.ModelFnError(
                "model_fn returned ModelSpec(loss=None) in TRAIN mode; return the training loss: "
                "ModelSpec(loss=loss, log_info={'loss': loss})")
        for index, loss in enumerate(spec.losses):
            _check_scalar_loss(loss, index if len(spec.losses) > 1 else None)
        if len(spec.losses) == 1 and spec.var_scopes is not None:
            scopes = list(spec.var_scopes)
            if len(scopes) != 1 and not all(isinstance(s, str) for s in scopes):
                raise errors.ModelFnError(
                    f"model_fn returned one loss but var_scopes={errors.describe(spec.var_scopes)} holds "
                    f"{len(scopes)} lists; give one list of variable-name scopes, e.g. var_scopes=[['head']]")
        if len(spec.losses) > 1:
            if spec.var_scopes is None or len(spec.var_scopes) != len(spec.losses):
                raise errors.ModelFnError(
                    f"model_fn returned {len(spec.losses)} losses but var_scopes="
                    f"{errors.describe(spec.var_scopes)}; give one list of variable-name scopes per loss")
            if num_optimizers not in (None, 1, len(spec.losses)):
                raise errors.ArgumentError(
                    f"optimizer_fn is a list of {num_optimizers} factories for {len(spec.losses)} losses; "
                    f"give one factory per loss (or a single factory used for each)")
    elif mode == ModeKeys.EVAL and not spec.log_info:
        raise errors.ModelFnError(
            "model_fn returned ModelSpec(log_info=None) in EVAL mode; return the metrics to average, "
            "e.g. ModelSpec(log_info={'loss': loss, 'accuracy': accuracy})")
    elif mode == ModeKeys.PREDICT and not spec.output_info:
        raise errors.ModelFnError(
            "model_fn returned ModelSpec(output_info=None) in PREDICT mode; return the tensors to "
            "hand to output_fn, e.g. ModelSpec(output_info={'classes': classes})")
    for hook in spec.hooks or []:
        if not callable(hook):
            raise errors.ModelFnError(
                f"ModelSpec.hooks holds {errors.describe(hook)}; hooks must be callables "
                f"hook(global_step, log_values)")
    for name, value in (spec.log_info or {}).items():
        if not (tf.is_tensor(value) or isinstance(value, (int, float))):
            raise errors.ModelFnError(
                f"log_info[{name!r}] is {errors.describe(value)}; log_info values must be scalar tensors")


def _check_scalar_loss(loss, index):
    """MoXing's loss is a scalar; a per-example loss would be summed by the gradient, as if the
    learning rate were multiplied by the batch size."""
    shape = getattr(loss, "shape", None)
    if shape is None or shape.rank in (None, 0):
        return
    name = "loss" if index is None else f"loss[{index}]"
    raise errors.ModelFnError(
        f"model_fn returned a {name} of shape {shape.as_list()}, not a scalar; average it over the batch: "
        f"ModelSpec(loss=tf.reduce_mean(per_example_loss), ...)")


def loss_scale_of(optimizer):
    """The factor ``optimizer.scale_loss`` multiplies a loss by (1 without loss scaling)."""
    scale_loss = getattr(optimizer, "scale_loss", None)
    return scale_loss(tf.constant(1.0)) if scale_loss is not None else tf.constant(1.0)


class TrainStep:
    """One optimizer step per loss, on the variables that loss trains.

    Clipping is not done here: it is a link of the optimizer stack (``training/clipping.py``),
    so that it sees unscaled, accumulated gradients.
    """

    def __init__(self, template, optimizers, variable_lists, num_replicas, skip_nonfinite=False):
        self.template = template
        self.optimizers = optimizers
        self.variable_lists = variable_lists
        self.num_replicas = num_replicas
        # nonfinite_policy=skip: a step whose loss is non-finite hands NaN gradients to the
        # optimizer stack, whose SkipNonFinite then skips it (see moxlite.training.nonfinite).
        self.skip_nonfinite = skip_nonfinite

    def __call__(self, inputs):
        spec, gradient_lists = self._gradients(inputs)
        guard = nonfinite.step_flag(spec.losses, gradient_lists, self.optimizers)
        if self.skip_nonfinite:
            gradient_lists = nonfinite.poison_gradients(gradient_lists, guard[nonfinite.FLAG_KEY])
        for optimizer, gradients, variables in zip(self.optimizers, gradient_lists, self.variable_lists):
            self._apply(optimizer, optimizer, list(zip(gradients, variables)))
        return {**log_values(spec), **guard}

    def _gradients(self, inputs, statistics_sums=None):
        """model_fn's spec and, per optimizer, the gradients of its (scaled) loss / replicas
        with respect to its variables (None where a variable does not affect the loss).

        statistics_sums: None to hand per-layer statistics to the optimizers now; a list to
        get, per optimizer, their summary vector instead (``wrapper.layer_statistics_sums``).
        """
        with tf.GradientTape(persistent=len(self.optimizers) > 1) as tape:
            # At the top-level name scope, so that summaries written by model_fn keep the tags
            # the user gave them instead of the loop's "while/cond/" prefixes.
            with tf.compat.v1.name_scope(None), self._recording(tape) as records:
                spec = self.template(as_model_inputs(inputs), ModeKeys.TRAIN)
            losses = [tf.cast(loss, tf.float32) / self.num_replicas for loss in spec.losses]
            # A LossScaleOptimizer multiplies here and divides the gradients in apply_gradients.
            scaled = [optimizer.scale_loss(loss) for loss, optimizer in zip(losses, self.optimizers)]
        gradient_lists = [self._gradients_and_statistics(tape, loss, variables, optimizer, records, inputs,
                                                         statistics_sums)
                          for loss, variables, optimizer in zip(scaled, self.variable_lists, self.optimizers)]
        del tape
        return spec, gradient_lists

    # Per-layer statistics for wrappers that ask for them (THOR; see optimizers/wrapper.py).

    def _recording(self, tape):
        kinds = set()
        for optimizer in self.optimizers:
            request = wrapper_lib.layer_statistics_request(optimizer)
            kinds.update(request.layer_types if request else ())
        return layer_statistics.recording(tape, kinds) if kinds else contextlib.nullcontext([])

    def _gradients_and_statistics(self, tape, loss, variables, optimizer, records, inputs, statistics_sums=None):
        """Gradients of ``loss``; a requesting optimizer also gets the records with output gradients."""
        probes = layer_statistics.probes_of(records)
        if not records or wrapper_lib.layer_statistics_request(optimizer) is None:
            if statistics_sums is not None:
                statistics_sums.append(None)
            return tape.gradient(loss, variables)
        gradients = tape.gradient(loss, list(variables) + probes)
        unscale = self.num_replicas / loss_scale_of(optimizer)
        records = layer_statistics.with_output_gradients(records, gradients[len(variables):], unscale,
                                                         batch_size_of(inputs))
        finite_checked = [g for g in gradients[:len(variables)] if g is not None]
        if statistics_sums is None:
            wrapper_lib.set_layer_statistics(optimizer, records, finite_checked)
        else:
            statistics_sums.append(wrapper_lib.layer_statistics_sums(optimizer, records, finite_checked))
        return gradients[:len(variables)]

    def _apply(self, optimizer, apply_optimizer, pairs):
        """Apply the gradients that exist with ``apply_optimizer``."""
        apply_optimizer.apply_gradients([(g, v) for g, v in pairs if g is not None])

    def accumulated(self, batches, accumulations, log_keys):
        """One update from ``len(batches)`` micro-batches, summed in tensors (no shared state).

        For the asynchronous loop (see ``moxlite.optimizers.accumulation``): ``batches`` are
        this replica's N micro-batches, ``accumulations[i]`` says how optimizer i applies.
        Each optimizer's ``apply_optimizer`` receives the mean of the N micro-batch gradients,
        the gradient of the mean loss over the N*B samples; clipping applies to that mean.
        Returns the ``log_keys`` log values averaged over the micro-batches.
        """
        num_batches = len(batches)
        # One traced body in a while loop rather than N unrolled copies of model_fn.
        stacked = tf.nest.map_structure(lambda *parts: tf.stack(parts), *batches)
        variable_lists = self.variable_lists
        # Which variables received a gradient: known once the body has been traced.
        used = [set() for _ in variable_lists]

        # Per-layer statistics (thor) are summed over the micro-batches in tensors, per optimizer,
        # and handed over once before the update: no cross-replica call inside this loop.
        summarised = [False for _ in variable_lists]

        def body(index, gradient_sums, log_sums, statistics_totals):
            micro_batch = tf.nest.map_structure(lambda part: tf.gather(part, index), stacked)
            statistics = []
            spec, gradient_lists = self._gradients(micro_batch, statistics)
            new_totals = []
            for number, (total, summary) in enumerate(zip(statistics_totals, statistics)):
                if summary is None:
                    new_totals.append(total)
                    continue
                summarised[number] = True
                new_totals.append(tf.cond(tf.equal(index, 0), lambda: summary, lambda: total + summary))
            logs = {**log_values(spec), **nonfinite.step_flag(spec.losses, gradient_lists, self.optimizers)}
            new_sums = []
            for number, (sums, gradients) in enumerate(zip(gradient_sums, gradient_lists)):
                added = []
                for position, (total, gradient) in enumerate(zip(sums, gradients)):
                    if gradient is None:
                        added.append(total)
                        continue
                    used[number].add(position)
                    added.append(total + tf.cast(tf.convert_to_tensor(gradient), total.dtype))
                new_sums.append(added)
            return (index + 1, new_sums, [total + logs[key] for total, key in zip(log_sums, log_keys)],
                    new_totals)

        zeros = [[tf.zeros(v.shape, v.dtype) for v in variables] for variables in variable_lists]
        initial = (tf.constant(0), zeros, [tf.zeros([], tf.float32) for _ in log_keys],
                   [tf.zeros([0]) for _ in variable_lists])
        # A statistics total's length is known only once model_fn has been traced in the body.
        invariants = (tf.TensorShape([]), [[v.shape for v in variables] for variables in variable_lists],
                      [tf.TensorShape([]) for _ in log_keys], [tf.TensorShape([None]) for _ in variable_lists])
        _, gradient_sums, log_sums, statistics_totals = tf.while_loop(
            lambda index, *_: index < num_batches, body, initial, shape_invariants=invariants)
        for number, (optimizer, accumulation) in enumerate(zip(self.optimizers, accumulations)):
            pairs = [(gradient_sums[number][position] / num_batches, variable_lists[number][position])
                     for position in sorted(used[number])]
            with accumulation.counting_updates():
                if summarised[number]:
                    wrapper_lib.set_layer_statistics_sums(accumulation.apply_optimizer, statistics_totals[number])
                self._apply(optimizer, accumulation.apply_optimizer, pairs)
        return {key: total / num_batches for key, total in zip(log_keys, log_sums)}


class EvalStep:
    """Sample-weighted sums of log_info over one batch, so means are exact over the set."""

    def __init__(self, template):
        self.template = template

    def __call__(self, inputs):
        count = tf.cast(batch_size_of(inputs), tf.float32)
        spec = self.template(as_model_inputs(inputs), ModeKeys.EVAL)
        sums = {}
        for name, value in log_values(spec).items():
            # An empty batch (a replica left without data at the end) adds nothing, not NaN.
            sums[name] = tf.where(count > 0, value * count, 0.0)
        return sums, count


class PredictStep:
    """model_fn's output_info for one batch."""

    def __init__(self, template):
        self.template = template

    def __call__(self, inputs):
        spec = self.template(as_model_inputs(inputs), ModeKeys.PREDICT)
        return {name: tf.convert_to_tensor(value) for name, value in spec.output_info.items()}
