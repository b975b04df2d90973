"""The per-replica bodies of a training, evaluation and prediction step.

Each runs inside ``strategy.run`` (replica context) in a traced function, for
every strategy moxlite supports. Gradients are of ``loss / replicas`` so that
the optimizer's cross-replica sum makes them the gradient of the mean loss over
the global batch: two replicas with batch B step exactly as one with 2B.
"""

import contextlib
import dataclasses

import tensorflow as tf

from moxlite import contract, errors
from moxlite.contract import ModeKeys
from moxlite.optimizers import pipeline as pipeline_lib
from moxlite.training.capture import layer_statistics
from moxlite.training.trainers import nonfinite
from moxlite.training.compiled import ps_steps
from moxlite.training.hooks import eval_monitors
from moxlite.training.input.replica_batches import as_model_inputs, batch_size_of


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


@dataclasses.dataclass(eq=False)
class TrainStep:
    """One optimizer step per loss, on the variables that loss trains, through its pipeline.

    The step computes once what the links of each pipeline read (``pipeline.StepInputs``:
    the loss scale, the per-layer records, the micro-batch count) and hands it down with the
    gradients in ``Pipeline.apply_step``. Clipping is not done here: it is a link of the
    pipeline (``optimizers/clipping.py``), so that it sees unscaled, accumulated gradients.
    """

    template: object
    pipelines: list
    variable_lists: list
    num_replicas: int
    # nonfinite_policy=skip: a step whose loss or gradients are non-finite hands NaN gradients
    # to the pipeline, whose apply-if-finite link then skips it. Under ``stop`` only the loss
    # is checked per step (see moxlite.training.trainers.nonfinite).
    skip_nonfinite: bool = False

    @property
    def optimizers(self):
        """The outermost optimizer of each pipeline (what is built, checkpointed, scheduled)."""
        return [pipeline.optimizer for pipeline in self.pipelines]

    def __call__(self, inputs, gradients=None):
        """One step on ``inputs``: (its log values, its guard). ``gradients``: what computes
        (spec, gradient lists, step inputs) in place of ``_gradients`` (its XLA-compiled form,
        see ``compiled_gradients``).

        The guard is the step's non-finite flag and summed loss (``nonfinite.step_flag``), as a
        pair, or stacked into one vector when there are several replicas, so that the trainer
        reduces both across replicas in one call (``guard_pair`` reads either back).
        """
        spec, gradient_lists, step_inputs = (gradients or self._gradients)(inputs)
        guard = nonfinite.step_flag(spec.losses, gradient_lists, self.optimizers, self.skip_nonfinite)
        if self.skip_nonfinite:
            gradient_lists = nonfinite.poison_gradients(gradient_lists, guard[nonfinite.FLAG_KEY])
        for pipeline, gradients, variables, own in zip(self.pipelines, gradient_lists, self.variable_lists,
                                                       step_inputs):
            pipeline.apply_step(list(zip(gradients, variables)), own)
        return log_values(spec), self._packed_guard(guard[nonfinite.FLAG_KEY], guard[nonfinite.LOSS_KEY])

    def _packed_guard(self, flag, loss):
        """(flag, loss), stacked for one reduction when there are several replicas."""
        return tf.stack([flag, loss]) if self.num_replicas > 1 else (flag, loss)

    def compiled_gradients(self, inputs, summarise=False, reads=None):
        """``_gradients`` with a spec that holds only what the step reads (the losses and log
        values): what ``jit_choice`` compiles per replica, whose outputs are tensors.
        ``reads``: what ``step_reads`` returned, read before (outside) the compiled function."""
        spec, gradient_lists, step_inputs = self._gradients(inputs, summarise, reads)
        return contract.ModelSpec(loss=list(spec.losses), log_info=log_values(spec)), gradient_lists, step_inputs

    def step_reads(self, summarise=False):
        """(loss scale per pipeline, statistics policy): what a step reads from the optimizers'
        state before model_fn runs (see ``_gradients``), apart so that a step compiled on a
        parameter-server worker reads it outside XLA (``ps_steps``)."""
        # Read once per step: the loss scaling link divides the gradients by the same scale.
        scales = [pipeline.loss_scale() for pipeline in self.pipelines]
        policy = self._statistics_policy()
        if policy is not None and summarise:
            policy = True
        return scales, policy

    def _gradients(self, inputs, summarise=False, reads=None):
        """model_fn's spec, per pipeline the gradients of its (scaled) loss / replicas with
        respect to its variables (None where a variable does not affect the loss), and per
        pipeline its ``StepInputs`` (None when it reads none): the loss scale and, for a
        pipeline that asks (``_statistics_policy``), the per-layer records.

        summarise: record on every micro-batch (for ``accumulated``, whose links zero the
        summaries they do not use). reads: ``step_reads(summarise)``, when already read.
        """
        scales, policy = reads if reads is not None else self.step_reads(summarise)
        if policy is None:
            spec, gradient_lists, recorded = self._forward_backward(inputs, scales, record=False)
        elif policy is True:
            spec, gradient_lists, recorded = self._forward_backward(inputs, scales, record=True)
        else:
            spec, gradient_lists, recorded = self._recording_only_when(policy, inputs, scales)
        return spec, gradient_lists, self._step_inputs(recorded, gradient_lists, inputs, scales)

    def _forward_backward(self, inputs, scales, record):
        """(spec, gradient lists, recorded); recorded is (records, per pipeline the gradients
        of its loss (times its loss scale in ``scales``) with respect to the records' probes,
        or None if it asks for none)."""
        with tf.GradientTape(persistent=len(self.pipelines) > 1) as tape:
            ps_steps.watch_values(tape)
            # At the top-level name scope, so that summaries written by model_fn keep the tags
            # the user gave them instead of the loop's "while/cond/" prefixes.
            recording = self._recording(tape, inputs) if record else contextlib.nullcontext([])
            with tf.compat.v1.name_scope(None), recording as records:
                spec = self.template(as_model_inputs(inputs), ModeKeys.TRAIN)
            losses = [tf.cast(loss, tf.float32) for loss in spec.losses]
            if self.num_replicas > 1:
                losses = [loss / self.num_replicas for loss in losses]
            scaled = [loss * tf.cast(scale, loss.dtype) for loss, scale in zip(losses, scales)]
        probes = layer_statistics.probes_of(records)
        gradient_lists, probe_gradient_lists = [], []
        for loss, variables, pipeline in zip(scaled, self.variable_lists, self.pipelines):
            asks = bool(records) and pipeline.layer_statistics_request() is not None
            gradients = tape.gradient(loss, ps_steps.differentiated(variables) + (probes if asks else []))
            gradient_lists.append(gradients[:len(variables)])
            probe_gradient_lists.append([tf.zeros_like(p) if g is None else g
                                         for g, p in zip(gradients[len(variables):], probes)] if asks else None)
        del tape
        return spec, gradient_lists, (records, probe_gradient_lists)

    # Per-layer statistics for links that ask for them (THOR; see optimizers/wrapper.py).

    def _requests(self):
        return [pipeline.layer_statistics_request() for pipeline in self.pipelines]

    def _statistics_policy(self):
        """None: record nothing; True: record on every step; else a boolean tensor: record on
        this step only when it is True (some wrapper uses this step's statistics)."""
        requests = [request for request in self._requests() if request is not None and request.layer_types]
        if not requests:
            return None
        if any(request.collecting is None for request in requests):
            return True
        return tf.reduce_any(tf.stack([tf.convert_to_tensor(request.collecting()) for request in requests]))

    def _recording(self, tape, inputs):
        kinds = set()
        for request in self._requests():
            kinds.update(request.layer_types if request else ())
        if not kinds:
            return contextlib.nullcontext([])
        # The batch's static size (None when unknown): a batch of 1 has no ids to broadcast over it.
        flat = tf.nest.flatten(inputs)
        batch = tf.TensorShape(getattr(flat[0], "shape", None) if flat else None)
        return layer_statistics.recording(tape, kinds, batch[0] if batch.rank else None)

    def records_layers(self):
        """True when some pipeline reads per-layer records (THOR)."""
        return any(request is not None and request.layer_types for request in self._requests())

    def see_layers(self, inputs):
        """Replica context, in a trace that never runs: model_fn's forward pass on ``inputs``,
        recorded, its records handed to the pipelines that read them (``Link.see_layers``)."""
        with tf.GradientTape() as tape:
            with self._recording(tape, inputs) as records, tf.compat.v1.name_scope(None):
                self.template(as_model_inputs(inputs), ModeKeys.TRAIN)
        for pipeline, request in zip(self.pipelines, self._requests()):
            if request is not None:
                pipeline.see_layers(records)

    def create_layer_state(self):
        """Eagerly: the pipelines' per-layer state, after ``see_layers``."""
        for pipeline in self.pipelines:
            pipeline.create_layer_state()

    def _recording_only_when(self, collecting, inputs, scales):
        """model_fn traced twice under one replica-context ``cond``: recording (probes watched,
        their gradients taken) when ``collecting``, else exactly as without statistics. The
        ``cond`` holds no collective; the records' tensors leave it (empty on a plain step)
        and are handed to the wrappers after it, in the same call on every step."""
        traced = {}  # the recording branch's Python side (tf.cond traces it first)

        def recording():
            spec, gradient_lists, (records, probe_lists) = self._forward_backward(inputs, scales, record=True)
            traced.update(records=records, probe_lists=probe_lists, gradient_lists=gradient_lists,
                          inputs=[tf.convert_to_tensor(record.inputs) for record in records],
                          probes=[list(probes) if probes is not None else [] for probes in probe_lists])
            return (log_values(spec), spec.losses, _without_none(gradient_lists), traced["inputs"],
                    traced["probes"])

        def plain():
            spec, gradient_lists, _ = self._forward_backward(inputs, scales, record=False)
            return (log_values(spec), spec.losses, _without_none(gradient_lists),
                    [_empty_like(t) for t in traced["inputs"]],
                    [[_empty_like(t) for t in probes] for probes in traced["probes"]])

        logs, losses, gradients, record_inputs, probe_lists = tf.cond(collecting, recording, plain)
        gradient_lists = _with_none(gradients, traced["gradient_lists"])
        records = [dataclasses.replace(record, inputs=value) for record, value in zip(traced["records"], record_inputs)]
        probe_lists = [gradients if traced_list is not None else None
                       for gradients, traced_list in zip(probe_lists, traced["probe_lists"])]
        return contract.ModelSpec(loss=list(losses), log_info=logs), gradient_lists, (records, probe_lists)

    def _step_inputs(self, recorded, gradient_lists, inputs, scales):
        """Per pipeline, its ``StepInputs``: the loss scale, and for a pipeline that asks, the
        records with the gradients of its loss as returned (None when it reads nothing)."""
        records, probe_lists = recorded
        out = []
        for pipeline, gradients, probe_gradients, scale in zip(self.pipelines, gradient_lists, probe_lists, scales):
            if probe_gradients is None:
                out.append(pipeline_lib.StepInputs(loss_scale=scale) if pipeline.reads() else None)
                continue
            own = layer_statistics.with_output_gradients([dataclasses.replace(record) for record in records],
                                                         probe_gradients, self.num_replicas / scale,
                                                         batch_size_of(inputs))
            out.append(pipeline_lib.StepInputs(layer_records=tuple(own), loss_scale=scale,
                                               checked_gradients=tuple(g for g in gradients if g is not None)))
        return out

    def accumulated(self, batches, accumulations, applying, log_keys, gradients=None):
        """One update from ``len(batches)`` micro-batches, summed in tensors (no shared state).

        For the asynchronous loop (see ``moxlite.optimizers.accumulation``): ``batches`` are
        this replica's N micro-batches, ``accumulations[i]`` says how pipeline i applies and
        ``applying[i]`` is the pipeline of its ``apply_optimizer``, built once by the loop
        (``Pipeline.applying``: the run's clipping and non-finite links kept), which receives
        the mean of the N micro-batch gradients, the gradient of the mean loss over the N*B
        samples; clipping applies to that mean.
        Returns (the ``log_keys`` log values, the guard as ``__call__`` returns it), averaged
        over the micro-batches. ``gradients``:
        what computes each micro-batch's (spec, gradient lists, step inputs) in place of
        ``_gradients`` (called with ``summarise=True``; its XLA-compiled form).
        """
        gradients_of = gradients or self._gradients
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
            spec, gradient_lists, step_inputs = gradients_of(micro_batch, summarise=True)
            statistics = [None if own is None or not own.layer_records else pipeline.summarise(own)
                          for pipeline, own in zip(self.pipelines, step_inputs)]
            new_totals = []
            for number, (total, summary) in enumerate(zip(statistics_totals, statistics)):
                if summary is None:
                    new_totals.append(total)
                    continue
                summarised[number] = True
                new_totals.append(tf.cond(tf.equal(index, 0), lambda: summary, lambda: total + summary))
            logs = {**log_values(spec), **nonfinite.step_flag(spec.losses, gradient_lists, self.optimizers,
                                                                  self.skip_nonfinite)}
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
        for number, (pipeline, accumulation) in enumerate(zip(applying, accumulations)):
            pairs = [(gradient_sums[number][position] / num_batches, variable_lists[number][position])
                     for position in sorted(used[number])]
            with accumulation.counting_updates():
                totals = pipeline_lib.StepInputs(record_sums=statistics_totals[number]) if summarised[number] else None
                pipeline.apply_step(pairs, totals)
        logs = {key: total / num_batches for key, total in zip(log_keys, log_sums)}
        return logs, self._packed_guard(logs.pop(nonfinite.FLAG_KEY), logs.pop(nonfinite.LOSS_KEY))


def _without_none(gradient_lists):
    """The gradients that exist, flattened (a ``cond`` output cannot be None)."""
    return [g for gradients in gradient_lists for g in gradients if g is not None]


def _with_none(flat, like):
    """``flat`` back into the lists of ``like``, None where ``like`` has None (and the static
    dense shape of an IndexedSlices, which a ``cond`` output loses, back from ``like``)."""
    flat = iter(flat)
    return [[None if g is None else _static_like(next(flat), g) for g in gradients] for gradients in like]


def _static_like(gradient, traced):
    if isinstance(gradient, tf.IndexedSlices):
        dense_shape = tf.get_static_value(traced.dense_shape)
        if dense_shape is not None:
            return tf.IndexedSlices(gradient.values, gradient.indices,
                                    tf.constant(dense_shape, gradient.dense_shape.dtype))
    return gradient


def _empty_like(tensor):
    """A tensor of ``tensor``'s dtype and rank with no rows (what a plain step hands over)."""
    shape = tensor.shape
    if shape.rank == 0:
        return tf.zeros([], tensor.dtype)
    return tf.zeros([0] + [d if d is not None else 0 for d in shape.as_list()[1:]], tensor.dtype)


class EvalStep:
    """Sample-weighted sums of log_info over one batch, so means are exact over the set."""

    def __init__(self, template):
        self.template = template

    def __call__(self, inputs):
        count = tf.cast(batch_size_of(inputs), tf.float32)
        spec = self.template(as_model_inputs(inputs), ModeKeys.EVAL)
        sums = {}
        values = {name: as_scalar(value) for name, value in eval_monitors(spec.hooks).items()}
        values.update(log_values(spec))   # an EarlyStoppingHook's monitor_info is evaluated too
        for name, value in values.items():
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
