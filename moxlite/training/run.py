"""``moxlite.run``: MoXing's entry point on TF2/Keras 3.

The order of work follows MoXing: ``input_fn``, then ``model_fn``, then
``optimizer_fn``. Every check that can fail on user input runs before anything
is written to ``log_dir``, so a mistake leaves earlier checkpoints and logs as
they were.
"""

import contextlib
import dataclasses
import os

import tensorflow as tf

from moxlite import compat, context, distribute, errors
from moxlite.contract import ExportKeys, ModeKeys
from moxlite.file import training_cache
from moxlite.optimizers import tf1_adapter
from moxlite.optimizers.schedules import current_learning_rate
from moxlite.training import config as config_lib
from moxlite.training import (checkpoints, export, input_resume, interrupts, loss_scaling, nonfinite, precision,
                              reporting, steps)
from moxlite.training.evaluation import Evaluator, predict
from moxlite.training.inputs import call_input_fn, make_dataset_fn, placeholder_batch, as_model_inputs
from moxlite.training.loop import SyncTrainLoop
from moxlite.training.template import ModelTemplate
from moxlite.training.trainer import Cadence, train


def run(input_fn=None, output_fn=None, model_fn=None, optimizer_fn=None, run_mode="invalid",
        inter_mode=None, batch_size=None, auto_batch=True, log_dir=None, max_number_of_steps=0,
        checkpoint_path=None, log_every_n_steps=10, output_every_n_steps=0, save_summary_steps=100,
        save_model_secs=None, export_model=False, save_model_steps=None, steps_per_loop=None,
        keep_checkpoint_max=None):
    """Train, evaluate, predict or export ``model_fn`` on ``input_fn``'s data.

    MoXing's arguments and defaults (see README); moxlite adds ``steps_per_loop`` (steps per
    traced call, default the ``steps_per_loop`` flag) and ``keep_checkpoint_max``.
    ``batch_size`` is per replica; the global batch is batch_size x replicas.

    Returns: TRAIN, a dict of the last step's log values plus ``global_step``; EVAL, the
    averaged log_info dict (plus ``global_step``); PREDICT, outputs not handed to ``output_fn``;
    EXPORT, the SavedModel path.
    """
    if training_cache.needs_local_cache(locals()):  # s3:// / obs:// log_dir: run in a local cache
        return training_cache.run_through_local_cache(run, locals())
    return _run_checked(config_lib.from_run_arguments(locals()))


def run_config(config):
    """``run`` of a RunConfig built by the caller (a recipe): the same run, no flag read or set."""
    if training_cache.needs_local_cache({"log_dir": config.log_dir, "checkpoint_path": config.checkpoint_path}):
        def run_locally(log_dir=None, checkpoint_path=None):
            return _run_checked(dataclasses.replace(config, log_dir=log_dir, checkpoint_path=checkpoint_path))

        return training_cache.run_through_local_cache(
            run_locally, {"log_dir": config.log_dir, "checkpoint_path": config.checkpoint_path})
    return _run_checked(config)


def _run_checked(config):
    mode = config.run_mode
    missing = mode != ModeKeys.TRAIN and checkpoints.missing_trained_model(config.log_dir, config.checkpoint_path)
    if missing:
        raise errors.CheckpointError(
            f"run_mode={mode} {missing}; train first or pass checkpoint_path=<dir of a TRAIN run>")
    # Only training is distributed across processes; the other modes run on this process's devices.
    setup = distribute.setup(local_only=(mode != ModeKeys.TRAIN), get_flag=config.distribution.get_flag)
    if setup.serves_only:
        setup.serve_forever()
        return None
    current = _Run(config, setup)
    try:
        return current.execute()
    except errors.MoxliteError:
        raise
    except Exception as error:  # a moxlite error raised inside a traced function comes back wrapped
        if current.template.last_error is not None:
            raise current.template.last_error from None
        raise error


@contextlib.contextmanager
def nonfinite_reported(log_dir):
    """A loop's NonFiniteStep as the one-line NonFiniteError naming the kept checkpoint."""
    try:
        yield
    except nonfinite.NonFiniteStep as stop:
        raise nonfinite.NonFiniteError(nonfinite.stop_message(
            stop.step, stop.loss, log_dir, checkpoints.latest_checkpoint(log_dir), stop.consecutive)) from None


class _Run:
    """One call of ``run``: the pieces it builds, in the order it builds them."""

    def __init__(self, config, setup):
        self.config = config
        self.setup = setup
        self.strategy = setup.strategy
        self.mode = config.run_mode
        self.batch_size = config.batch_size
        self.global_batch_size = self.batch_size * setup.num_replicas_in_sync
        self.template = ModelTemplate(config.model_fn)
        self.logger = reporting.get_logger()
        self.precision = config.precision
        self.nonfinite_policy = config.nonfinite_policy

    # ---- shared pieces ---------------------------------------------------------------------

    def _dataset_fn(self, mode):
        return make_dataset_fn(self.config.input_fn, mode, self.batch_size, self.config.auto_batch)

    def _probe(self, mode):
        """input_fn's per-replica batch spec and, where known, the number of samples per epoch."""
        raw = call_input_fn(self.config.input_fn, mode, self.batch_size, self.config.auto_batch)
        batched = raw.batch(self.batch_size) if self.config.auto_batch else raw
        cardinality = int(raw.cardinality())
        num_samples = None
        if cardinality >= 0:
            num_samples = cardinality if self.config.auto_batch else cardinality * self.batch_size
        return batched, num_samples

    def _build(self, mode):
        """Create model_fn's variables once, from placeholder inputs when the shapes allow."""
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

    def _global_step(self):
        with self.strategy.scope():
            return tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                               aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

    def _is_chief(self):
        return self.setup.is_chief

    def _iterator_is_checkpointable(self):
        """TF saves iterator state only for single-device input (not distributed iterators)."""
        return (self.setup.coordinator is None and self.setup.num_workers == 1
                and self.setup.num_replicas_in_sync == 1)

    # ---- modes -----------------------------------------------------------------------------

    def execute(self):
        with precision.compute_policy(self.precision):
            return self._execute_mode()

    def _execute_mode(self):
        if self.mode == ModeKeys.TRAIN:
            result = self._train()
            if self.config.export_model == ExportKeys.TF_SERVING and self._is_chief():
                result["export_path"] = export.export_saved_model(
                    self.template, self._train_element_spec, self.config.log_dir)
                self.logger.info("Exported SavedModel to %s", result["export_path"])
            return result
        if self.mode == ModeKeys.EVAL:
            return self._evaluate()
        if self.mode == ModeKeys.PREDICT:
            return self._predict()
        return self._export()

    def _train(self):
        config = self.config
        if self.setup.coordinator is not None and config.inter_mode is not None:
            raise errors.ArgumentError(
                "inter_mode=EVAL is not supported in asynchronous (parameter-server) training; drop "
                "inter_mode and run EVAL on the checkpoints in log_dir from a separate process")
        if self.setup.coordinator is not None and self.nonfinite_policy.action == "skip":
            raise errors.ArgumentError(
                "nonfinite_policy=skip is not supported in asynchronous (parameter-server) training; use "
                "the default nonfinite_policy=stop, which stops at the first non-finite step")
        spec, self._train_element_spec, num_samples = self._build(ModeKeys.TRAIN)
        factories = config.optimizer_fn
        steps.check_spec(spec, ModeKeys.TRAIN, num_optimizers=len(factories))
        variable_lists = self._variable_lists(spec)
        global_step = self._global_step()
        run_context = context.RunContext(
            global_step=global_step, global_batch_size=self.global_batch_size,
            num_samples=self.config.num_samples or num_samples or None,
            num_samples_inferred=not self.config.num_samples and bool(num_samples),
            num_replicas=self.setup.num_replicas_in_sync, num_workers=self.setup.num_workers,
            sync_replicas=self.setup.sync_replicas, strategy=self.strategy)
        with context.activate(run_context), self.strategy.scope():
            optimizers = []
            for index in range(len(variable_lists)):
                factory = factories[index] if len(factories) > 1 else factories[0]
                optimizer = tf1_adapter.call_optimizer_fn(factory)
                if not hasattr(optimizer, "apply_gradients"):
                    raise errors.OptimizerTypeError(
                        f"optimizer_fn returned {errors.describe(optimizer)}, not an optimizer; return a "
                        f"Keras optimizer, e.g. lambda: keras.optimizers.SGD(0.1)")
                if self.nonfinite_policy.action == "skip":
                    optimizer = nonfinite.SkipNonFinite(optimizer)
                optimizer = precision.optimizer_stack(optimizer, self.precision)
                optimizer.build(variable_lists[index])
                optimizers.append(optimizer)
            # Clipping is a link of each optimizer stack (precision.optimizer_stack), not of the step.
            train_step = steps.TrainStep(self.template, optimizers, variable_lists,
                                         self.setup.num_replicas_in_sync,
                                         skip_nonfinite=self.nonfinite_policy.action == "skip")
            return self._train_loop(run_context, spec, optimizers, train_step)

    def _overflow_monitors(self, optimizers, summaries):
        """A log-line hook per loss-scaled optimizer: scale changes, skipped steps, their scalars."""
        return [loss_scaling.OverflowMonitor(optimizer, self.logger, summaries)
                for optimizer in optimizers if loss_scaling.find(optimizer) is not None]

    def _variable_lists(self, spec):
        """Each optimizer's trainable variables, sorted by checkpoint key: Keras saves slots by
        position, so the order must not depend on the order model_fn created the variables.

        A log_dir whose checkpoint an earlier moxlite wrote (slots in creation order) keeps
        creation order, so it still resumes, but only when model_fn creates its variables in
        the order recorded there; ``self._slots_by_name`` says which order was used.
        """
        lists = self._variable_lists_in_creation_order(spec)
        legacy = checkpoints.legacy_slot_order(self.config.log_dir)
        self._slots_by_name = legacy is None
        if legacy is None:
            return [self.template.slot_order(variables) for variables in lists]
        prefix, saved_order = legacy
        order = list(self.template.checkpoint_keys()[0])
        if saved_order is not None and sorted(saved_order) == sorted(order) and saved_order != order:
            raise errors.CheckpointError(
                f"checkpoint {prefix!r} was written by an earlier moxlite that saved optimizer slots "
                f"(momentum, Adam moments, accumulators) in variable creation order, and this model_fn "
                f"creates its variables in another order, so the slots would attach to the wrong variables; "
                f"resume with the model_fn's original creation order, or start a new log_dir with "
                f"checkpoint_path={prefix!r} (weights by name, fresh optimizer slots)")
        self.logger.warning(
            "Keeping optimizer slots in variable creation order: log_dir's checkpoint %s was written by "
            "an earlier moxlite that saved them so; a new log_dir saves them by variable name", prefix)
        return lists

    def _variable_lists_in_creation_order(self, spec):
        trainable = self.template.trainable_variables + [
            v for v in self.template.external_variables if v.trainable]
        excluded = checkpoints.split_patterns(self.config.trainable_exclude_patterns)
        trainable = [v for v in trainable if not checkpoints.matches_any(v.name, excluded)]
        if spec.var_scopes is None:
            return [trainable]
        per_loss = list(spec.var_scopes)
        if len(spec.losses) == 1 and all(isinstance(s, str) for s in per_loss):
            per_loss = [per_loss]   # one loss: var_scopes may be its list of scopes
        lists = []
        for index, scopes in enumerate(per_loss):
            scopes = [scopes] if isinstance(scopes, str) else list(scopes)
            for scope in scopes:
                if not any(v.name.startswith(scope) for v in trainable):
                    names = [v.name for v in trainable]
                    raise errors.ModelFnError(
                        f"var_scopes[{index}] scope {scope!r} matches no trainable variable; variable names "
                        f"are {names[:20]}{' ...' if len(names) > 20 else ''}")
            lists.append([v for v in trainable if any(v.name.startswith(s) for s in scopes)])
        return lists

    def _train_loop(self, run_context, spec, optimizers, train_step):
        config = self.config
        log_keys = list(steps.log_values(spec)) + list(nonfinite.PRIVATE_KEYS)
        summaries = reporting.SummaryWriter(config.log_dir, enabled=self._is_chief())
        async_mode = self.setup.coordinator is not None
        save_secs, save_steps = config.save_every

        def checkpointer_for(iterator):
            keyed, ambiguous = self.template.checkpoint_keys()
            return checkpoints.Checkpointer(
                config.log_dir, run_context.global_step, keyed, optimizers, ambiguous=ambiguous,
                iterator=iterator, save_model_secs=save_secs, save_model_steps=save_steps,
                keep_checkpoint_max=config.keep_checkpoint_max, is_chief=self._is_chief(),
                slots_by_name=self._slots_by_name)

        def make_loop(skip_steps):
            dataset_fn = make_dataset_fn(config.input_fn, ModeKeys.TRAIN, self.batch_size,
                                         config.auto_batch, skip_steps=skip_steps)
            if async_mode:
                from moxlite.training.async_loop import AsyncTrainLoop
                return AsyncTrainLoop(self.setup.coordinator, self.strategy, dataset_fn, train_step,
                                      run_context.global_step, log_keys)
            return SyncTrainLoop(self.strategy, dataset_fn, train_step, run_context.global_step, log_keys,
                                 log_first_clone=self.config.log_first_clone,
                                 summaries=summaries,
                                 save_summary_steps=config.save_summary_steps,
                                 nonfinite_policy=self.nonfinite_policy)

        loop = make_loop(skip_steps=0) if self._iterator_is_checkpointable() else None
        # Without a log_dir nothing is saved, so there is nothing to probe or to say.
        unsavable = loop is not None and config.log_dir and input_resume.position_unsavable(loop.iterator)
        if unsavable:
            input_resume.report_unsaved_position(unsavable)
        if loop is not None and not unsavable:
            checkpointer = checkpointer_for(loop.iterator)
            source = checkpointer.restore(config.checkpoint_path, self.config.checkpoint_exclude_patterns)

            def restarted_loop():
                fresh = make_loop(skip_steps=0)
                checkpointer.replace_iterator(fresh.iterator)
                return fresh

            if checkpointer.iterator_mismatch is not None:
                input_resume.restart_or_stop(source, int(run_context.global_step.numpy()),
                                             checkpointer.iterator_mismatch, config.allow_input_restart)
                loop.close()
                loop = restarted_loop()
            elif source and source == checkpoints.latest_checkpoint(config.log_dir):
                loop = input_resume.GuardedLoop(loop, run_context.global_step, restarted_loop, source,
                                                config.allow_input_restart)
        else:
            checkpointer = checkpointer_for(None)
            source = checkpointer.restore(config.checkpoint_path, self.config.checkpoint_exclude_patterns)
            resumed = int(run_context.global_step.numpy()) if source and checkpoints.latest_checkpoint(
                config.log_dir) == source else 0
            if loop is None or resumed:
                if loop is not None:
                    loop.close()
                loop = make_loop(skip_steps=0 if async_mode else resumed)
        start = int(run_context.global_step.numpy())
        steps_per_worker = config.max_number_of_steps
        target = steps_per_worker * (self.setup.num_workers if async_mode else 1) or None
        if target is not None and start >= target:
            self.logger.info("Restored global step %d >= max_number_of_steps %d: nothing to train",
                             start, target)
            return {"global_step": start}
        evaluate = self._interleaved_evaluation() if config.inter_mode == ModeKeys.EVAL else None
        context.training_started()
        self.logger.info("Training: %d replica(s), batch %d per replica, global batch %d, from step %d",
                         self.setup.num_replicas_in_sync, self.batch_size, self.global_batch_size, start)
        cadence = Cadence(config.steps_per_loop, config.log_every_n_steps, config.save_summary_steps)
        user_summaries = loop.user_summaries() if hasattr(loop, "user_summaries") else contextlib.ExitStack()
        monitors = self._overflow_monitors(optimizers, summaries)
        interrupt = interrupts.Interrupts()
        interrupt.install()
        try:
            with user_summaries, nonfinite_reported(config.log_dir):
                step, logs = train(loop, start, target, cadence, checkpointer, summaries,
                                   self.global_batch_size,
                                   learning_rate=lambda: current_learning_rate(optimizers[0]),
                                   evaluate=evaluate, hooks=list(spec.hooks or []) + monitors,
                                   should_stop=self._stop_rule(loop, interrupt, async_mode))
                if hasattr(loop, "finish"):
                    step = loop.finish()
            checkpointer.save(step)
            if interrupt.requested():
                if self._is_chief():
                    self.logger.info("Interrupted by %s at global step %d: saved checkpoint %s; run again with "
                                     "the same log_dir to resume", interrupts.name_of(interrupt.signum), step,
                                     checkpoints.latest_checkpoint(config.log_dir))
            else:
                if evaluate is not None:
                    evaluate(step)
                for hook in list(spec.hooks or []) + monitors:
                    hook(step, logs)
        finally:
            interrupt.restore()
            loop.close()
            checkpointer.close()
            summaries.close()
        interrupt.reraise()
        return {**{k: float(v) for k, v in logs.items() if v.size == 1}, "global_step": step}

    def _stop_rule(self, loop, interrupt, async_mode):
        """When to end training for a signal: at once in one process (or the coordinator of
        parameter servers); synchronous workers agree first, so that all stop at one step."""
        if async_mode or self.setup.num_workers == 1:
            return interrupt.requested
        return lambda: loop.any_worker(interrupt.requested())

    def _interleaved_evaluation(self):
        eval_spec, _, _ = self._build(ModeKeys.EVAL)
        steps.check_spec(eval_spec, ModeKeys.EVAL)
        keys = list(steps.log_values(eval_spec))
        evaluator = Evaluator(self.strategy, self._dataset_fn(ModeKeys.EVAL), self.template)
        eval_summaries = reporting.SummaryWriter(
            os.path.join(self.config.log_dir, "eval"), enabled=self._is_chief())

        evaluated = set()

        def evaluate(step):
            if step in evaluated:
                return
            evaluated.add(step)
            metrics, _ = evaluator.evaluate(keys)
            self.logger.info(reporting.validation_line(step, metrics))
            eval_summaries.scalars(step, metrics)

        return evaluate

    def _restore_for_inference(self, mode):
        spec, element_spec, _ = self._build(mode)
        steps.check_spec(spec, mode)
        global_step = self._global_step()
        keyed, ambiguous = self.template.checkpoint_keys()
        checkpointer = checkpoints.Checkpointer(self.config.log_dir, global_step, keyed, ambiguous=ambiguous)
        checkpointer.restore(self.config.checkpoint_path, self.config.checkpoint_exclude_patterns,
                             warm_start_step=True)
        return spec, element_spec, int(global_step.numpy())

    def _evaluate(self):
        spec, _, step = self._restore_for_inference(ModeKeys.EVAL)
        keys = list(steps.log_values(spec))
        evaluator = Evaluator(self.strategy, self._dataset_fn(ModeKeys.EVAL), self.template,
                              batches_per_call=self.config.steps_per_loop)
        metrics, samples = evaluator.evaluate(keys, max_batches=self.config.max_number_of_steps)
        self.logger.info(reporting.validation_line(step, metrics))
        if self._is_chief() and self.config.log_dir and os.path.isdir(self.config.log_dir):
            summaries = reporting.SummaryWriter(os.path.join(self.config.log_dir, "eval"), enabled=True)
            summaries.scalars(step, metrics)
            summaries.close()
        return {**metrics, "global_step": step, "num_samples": samples}

    def _predict(self):
        self._restore_for_inference(ModeKeys.PREDICT)
        outputs, _ = predict(self.strategy, self._dataset_fn(ModeKeys.PREDICT), self.template,
                             self.config.output_fn, self.config.output_every_n_steps,
                             max_batches=self.config.max_number_of_steps)
        return outputs

    def _export(self):
        _, element_spec, _ = self._restore_for_inference(ModeKeys.EXPORT)
        target_dir = self.config.log_dir or self.config.checkpoint_path
        path = export.export_saved_model(self.template, element_spec, target_dir)
        self.logger.info("Exported SavedModel to %s", path)
        return path
