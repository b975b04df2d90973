"""TRAIN: the Task's variables and step, optimizers, a trainer, resume, the controller.

The job asks the run's ``task.Task`` for the input, model_fn's variables and the train and
evaluation steps; it builds the optimizers, the trainer and the checkpointer, and hands
them to the controller, which writes every log line and summary.
The order of work follows MoXing: model_fn's variables, then ``optimizer_fn``.
Every check that can fail on user input runs before the first checkpoint is
written, so a mistake leaves earlier checkpoints and logs as they were.
"""

import contextlib
import dataclasses
from typing import Any, List, Optional

import tensorflow as tf

from moxlite import context, errors
from moxlite.contract import ExportKeys, ModeKeys
from moxlite.optimizers import tf1_adapter
from moxlite.training import controller, reporting, validation
from moxlite.training.state import checkpoints
from moxlite.training.compiled import jit_choice
from moxlite.training.trainers import interrupts
from moxlite.optimizers import loss_scaling
from moxlite.training.trainers import nonfinite
from moxlite.training.mixed_precision import settings
from moxlite.training.state import resume_setup
from moxlite.training.trainers import steps
from moxlite.optimizers.apply_if_finite import ApplyIfFinite
from moxlite.training.controller import AUTO_STEPS_ACROSS_WORKERS, Cadence
from moxlite.training.inference.evaluation import EvaluationSchedule
from moxlite.training.hooks import epoch_hooks
from moxlite.training.state.resume import restore_and_resume


@contextlib.contextmanager
def nonfinite_reported(log_dir):
    """A trainer's NonFiniteStep as the one-line NonFiniteError naming the kept checkpoint."""
    try:
        yield
    except nonfinite.NonFiniteStep as stop:
        raise nonfinite.NonFiniteError(nonfinite.stop_message(
            stop.step, stop.loss, log_dir, checkpoints.latest_checkpoint(log_dir), stop.consecutive,
            stop.in_weights, stop.since, stop.overflow_scale)) from None


@dataclasses.dataclass
class TrainingLoop:
    """What the job's set-up hands its loop: where it starts and ends, the trainer and the
    checkpointer, and what the controller reports with (``trainer`` None: nothing to train)."""

    start: int
    target: Optional[int] = None
    trainer: Any = None
    checkpointer: Any = None
    summaries: Any = None
    cadence: Optional[Cadence] = None
    evaluation: Any = None
    hooks: List[Any] = dataclasses.field(default_factory=list)
    monitors: List[Any] = dataclasses.field(default_factory=list)


class TrainingJob:
    """One run in TRAIN mode (then EXPORT when ``export_model`` asks)."""

    def __init__(self, task):
        self.task = task
        self.config = task.config
        self.setup = task.setup
        self.strategy = task.strategy
        self.logger = task.logger
        self.async_mode = self.setup.coordinator is not None

    def execute(self):
        """Set up (``_spec_and_context``, ``_set_up``), run the controller's loop, then export
        when ``export_model`` asks: the loop is here, its set-up apart, as in Orbit's ``Controller``."""
        config = self.config
        spec, run_context = self._spec_and_context()
        with context.activate(run_context), self.strategy.scope():
            loop = self._set_up(spec, run_context.global_step)
            result = {"global_step": loop.start}
            if loop.trainer is not None:
                trainer, checkpointer, summaries = loop.trainer, loop.checkpointer, loop.summaries
                interrupt = interrupts.Interrupts()
                interrupt.install()
                try:
                    with trainer.user_summaries(), nonfinite_reported(config.log_dir):
                        step, logs = controller.train(
                            trainer, loop.start, loop.target, loop.cadence, checkpointer, summaries,
                            self.task.global_batch_size, evaluation=loop.evaluation, hooks=loop.hooks,
                            monitors=loop.monitors, should_stop=self._stop_rule(trainer, interrupt))
                        step = trainer.finish(step)
                        if step == 0 and not interrupt.requested():
                            raise errors.ArgumentError(self._ended_before_first_step())
                        checkpointer.save(step)
                    if interrupt.requested():
                        if self.task.is_chief:
                            self.logger.info("Interrupted by %s at global step %d: saved checkpoint %s; run again "
                                             "with the same log_dir to resume", interrupts.name_of(interrupt.signum),
                                             step, checkpoints.latest_checkpoint(config.log_dir))
                    else:
                        with nonfinite_reported(config.log_dir):   # a fixed loss scale stuck since the last log line
                            final = controller.report_end(step, logs, summaries, loop.evaluation, loop.hooks,
                                                          loop.monitors)
                        if final is not None and not loop.evaluation.max_batches:   # of the whole EVAL input
                            context.final_evaluation({**final[0], "global_step": step, "num_samples": final[1]})
                finally:
                    interrupt.restore()
                    trainer.close()
                    checkpointer.close()
                    summaries.close()
                interrupt.reraise()
                result = {**{k: float(v) for k, v in logs.items() if v.size == 1}, "global_step": step}
        if config.export_model == ExportKeys.TF_SERVING and self.task.is_chief:
            result["export_path"] = self.task.export(self._element_spec, config.log_dir)
            self.logger.info("Exported SavedModel to %s", result["export_path"])
        return result

    def _check_async_limits(self):
        if self.async_mode and self.config.inter_mode is not None:
            raise errors.ArgumentError(
                "inter_mode=EVAL is not supported in asynchronous (parameter-server) training; drop "
                "inter_mode and run EVAL on the checkpoints in log_dir from a separate process")
        if self.async_mode and self.config.nonfinite_policy.action == "skip":
            raise errors.ArgumentError(
                "nonfinite_policy=skip is not supported in asynchronous (parameter-server) training; use "
                "the default nonfinite_policy=stop, which stops at the first non-finite step")

    def _spec_and_context(self):
        """model_fn's TRAIN spec (checked) and the run's ``context.RunContext``; the variable
        lists each loss trains (``_lists``)."""
        config, task = self.config, self.task
        self._check_async_limits()
        spec, self._element_spec, num_samples = task.build(ModeKeys.TRAIN)
        steps.check_spec(spec, ModeKeys.TRAIN, num_optimizers=len(config.optimizer_fn))
        if config.evaluation_follows and config.inter_mode != ModeKeys.EVAL:
            eval_spec = task.spec_of(ModeKeys.EVAL)
            if not eval_spec.log_info:   # only a recipe sets evaluation_follows: run.evaluate is the other fix
                raise errors.ModelFnError(
                    "model_fn returned ModelSpec(log_info=None) in EVAL mode, which the recipe runs after "
                    "training (run.evaluate: true); return the metrics to average, e.g. ModelSpec(log_info="
                    "{'loss': loss, 'accuracy': accuracy}), or set run.evaluate: false")
            steps.check_spec(eval_spec, ModeKeys.EVAL)
        self._lists = task.variable_lists(spec, config.trainable_exclude_patterns, self.logger)
        run_context = context.RunContext(
            global_step=task.global_step(), global_batch_size=task.global_batch_size,
            num_samples=config.num_samples or num_samples or None,
            num_samples_inferred=not config.num_samples and bool(num_samples),
            num_replicas=self.setup.num_replicas_in_sync, num_workers=self.setup.num_workers,
            sync_replicas=self.setup.sync_replicas, strategy=self.strategy)
        return spec, run_context

    def _pipeline(self, index, variables):
        """The pipeline of the index-th optimizer_fn's stack (one factory serves every loss), under
        the run's own links, built once on ``variables``."""
        factories = self.config.optimizer_fn
        optimizer = tf1_adapter.call_optimizer_fn(factories[index] if len(factories) > 1 else factories[0])
        if not validation.looks_like_optimizer(optimizer):   # user code returned something else
            raise errors.OptimizerTypeError(
                f"optimizer_fn returned {errors.describe(optimizer)}, not an optimizer; return a "
                f"Keras optimizer, e.g. lambda: keras.optimizers.SGD(0.1)")
        # nonfinite_policy=skip: the shared apply-if-finite link on top (loss scaling holds one).
        guard = ApplyIfFinite() if self.config.nonfinite_policy.action == "skip" else None
        stack = settings.optimizer_pipeline(optimizer, self.config.precision, guard)
        stack.optimizer.build(variables)
        return stack

    def _overflow_monitors(self, optimizers):
        """A monitor per loss-scaled optimizer: scale changes, skipped steps, their scalars."""
        if self.config.precision.loss_scale is None:
            return []
        # settings.loss_scaled put a LossScale on top of each stack.
        return [loss_scaling.OverflowMonitor(optimizer, self.logger,
                                             max_consecutive=self.config.nonfinite_policy.max_consecutive)
                for optimizer in optimizers]

    def _make_trainer(self, global_step, train_step, log_keys, summaries, skip_steps):
        dataset_fn = self.task.dataset_fn(ModeKeys.TRAIN, skip_steps=skip_steps)
        if self.async_mode:
            from moxlite.training.trainers.async_trainer import AsyncTrainer
            return AsyncTrainer(self.setup.coordinator, self.strategy, dataset_fn, train_step, global_step, log_keys,
                                jit_compile=self._jit_choice(global_step, train_step))
        from moxlite.training.trainers.sync_trainer import SyncTrainer
        trainer = SyncTrainer(self.strategy, dataset_fn, train_step, global_step, log_keys,
                              log_first_clone=self.config.log_first_clone, summaries=summaries.train,
                              save_summary_steps=self.config.save_summary_steps,
                              nonfinite_policy=self.config.nonfinite_policy,
                              state_variables=self.task.state_variables(train_step.optimizers),
                              global_batch_size=self.task.global_batch_size,
                              jit_compile=self._jit_choice(global_step, train_step,
                                                           lambda flag: trainer.any_worker(flag)))
        return trainer

    def _jit_choice(self, global_step, train_step, any_worker=None):
        """The run's ``jit_choice.JitChoice`` (XLA or not, measured under jit_compile=auto), for
        the steps left to train when it starts (None: until the input ends); a THOR stack keeps
        its refresh out of XLA. A measured choice is kept in log_dir and the per-user cache, under
        a fingerprint of the step (``_step_description``) and the machine."""
        target = self.config.max_number_of_steps * (self.setup.num_workers if self.async_mode else 1)
        preconditioned = any(stack.layer_preconditioners() for stack in train_step.pipelines)
        kept = None
        if validation.jit_compile_mode(self.config.jit_compile) == "auto":
            key = jit_choice.fingerprint(self._step_description(train_step, preconditioned))
            kept = jit_choice.KeptChoices(self.config.log_dir if self.task.is_chief else None, key)
        return jit_choice.JitChoice(self.config.jit_compile, self.strategy,
                                     lambda: target - int(global_step.numpy()) if target else None, self.logger,
                                     agree=any_worker if self.setup.num_workers > 1 else None,
                                     preconditioned=preconditioned, chief=self.task.is_chief, kept=kept)

    def _step_description(self, train_step, preconditioned):
        """What the train step computes, as far as its speed goes: the variables each loss trains,
        the optimizer stacks, the input, the batch, the strategy and the precision."""
        return {
            "variables": [[(v.name, v.shape.as_list(), v.dtype.name) for v in variables] for variables in self._lists],
            "optimizers": [[type(link).__name__ for link in stack.links] + [type(stack.base).__name__]
                           for stack in train_step.pipelines],
            "preconditioned": preconditioned,
            "input": [str(spec) for spec in tf.nest.flatten(self._element_spec)],
            "global_batch_size": self.task.global_batch_size,
            "strategy": [type(self.strategy).__name__, self.setup.num_replicas_in_sync, self.setup.num_workers],
            "precision": str(self.config.precision),
        }

    def _make_checkpointer(self, global_step, optimizers, iterator):
        config = self.config
        save_secs, save_steps = config.save_every
        keyed, ambiguous = self.task.checkpoint_keys()
        return checkpoints.Checkpointer(
            config.log_dir, global_step, keyed, optimizers, ambiguous=ambiguous, iterator=iterator,
            save_model_secs=save_secs, save_model_steps=save_steps, keep_checkpoint_max=config.keep_checkpoint_max,
            is_chief=self.task.is_chief,
            setup=resume_setup.TrainingSetup(optimizers, config.precision))

    def _iterator_is_checkpointable(self):
        """TF saves iterator state only for single-device input (not distributed iterators)."""
        return (self.setup.coordinator is None and self.setup.num_workers == 1
                and self.setup.num_replicas_in_sync == 1)

    def _set_up(self, spec, global_step):
        """In the run's context and the strategy's scope: the pipelines and the train step, the
        trainer and the checkpointer (resumed), and what the loop reports with, as one
        ``TrainingLoop`` (its trainer None when the restored step leaves nothing to train)."""
        config = self.config
        pipelines = [self._pipeline(index, variables) for index, variables in enumerate(self._lists)]
        # Clipping is a link of each pipeline (settings.optimizer_pipeline), not of the step.
        train_step = self.task.train_step(pipelines, self._lists,
                                          skip_nonfinite=config.nonfinite_policy.action == "skip")
        optimizers = train_step.optimizers
        log_keys = list(steps.log_values(spec)) + list(nonfinite.PRIVATE_KEYS)
        summaries = reporting.Summaries(config.log_dir, enabled=self.task.is_chief)
        trainer, checkpointer = restore_and_resume(
            config, global_step,
            make_trainer=lambda skip_steps: self._make_trainer(global_step, train_step, log_keys, summaries,
                                                               skip_steps),
            make_checkpointer=lambda iterator: self._make_checkpointer(global_step, optimizers, iterator),
            iterator_checkpointable=self._iterator_is_checkpointable(), async_mode=self.async_mode)
        start = int(global_step.numpy())
        target = config.max_number_of_steps * (self.setup.num_workers if self.async_mode else 1) or None
        if target is not None and start >= target:
            self.logger.info("Restored global step %d >= max_number_of_steps %d: nothing to train", start, target)
            return TrainingLoop(start=start)
        # With an EarlyStoppingHook the EVAL input may repeat forever (MoXing's documented example):
        # every evaluation then reads the hook's samples_in_eval, not "the whole input".
        eval_batches = max([hook.eval_batches for hook in epoch_hooks(spec.hooks)], default=0)
        evaluation = self._interleaved_evaluation(eval_batches) if config.inter_mode == ModeKeys.EVAL else None
        self._bind_epoch_hooks(spec)
        trainer.create_layer_state()   # a link that refuses model_fn's layers does it before anything is written
        context.training_started()
        self.logger.info("Training: %d replica(s), batch %d per replica, global batch %d, from step %d",
                         self.setup.num_replicas_in_sync, self.task.batch_size, self.task.global_batch_size,
                         start)
        cadence = Cadence(config.steps_per_loop, config.log_every_n_steps, config.save_summary_steps,
                          # synchronous workers agree after every call, so they must make the same calls
                          auto_max_steps=(None if self.async_mode or self.setup.num_workers == 1
                                          else AUTO_STEPS_ACROSS_WORKERS),
                          save_model_secs=config.save_every[0])
        return TrainingLoop(start, target, trainer, checkpointer, summaries, cadence, evaluation,
                            list(spec.hooks or []), self._overflow_monitors(optimizers))

    def _ended_before_first_step(self):
        """The message of a TRAIN input that gave no whole batch: its size and the batch."""
        config, task = self.config, self.task
        replicas = self.setup.num_replicas_in_sync
        counted, element_spec = _count_elements(lambda: task.fresh_input(ModeKeys.TRAIN),
                                                limit=task.global_batch_size + 1)
        shapes = _shapes(element_spec or self._element_spec)
        if not config.auto_batch or task.batches_given:
            held = "no batch" if counted == 0 else f"{counted} batch(es)" if counted is not None else "too few batches"
            return (f"input_fn's TRAIN input ended before the first step: it gave {held} (its elements are the "
                    f"batches, of shape {shapes}) and a step takes {replicas} (one per replica); give input_fn "
                    f"more data, e.g. repeat() its dataset")
        held = f"{counted} sample(s)" if counted is not None else "fewer samples"
        return (f"input_fn's TRAIN input ended before the first step: it holds {held} (elements of shape "
                f"{shapes}) and a step takes a whole batch of batch_size={task.batch_size} per replica "
                f"({replicas} replica(s), {task.global_batch_size} samples); give input_fn more samples (e.g. "
                f"repeat() its dataset), a smaller batch_size, or, if its elements are batches already, "
                f"auto_batch=False")

    def _stop_rule(self, trainer, interrupt):
        """When to end training for a signal: at once in one process (or the coordinator of
        parameter servers); synchronous workers agree first, so that all stop at one step."""
        if self.async_mode or self.setup.num_workers == 1:
            return interrupt.requested
        return lambda: trainer.any_worker(interrupt.requested())

    def _bind_epoch_hooks(self, spec):
        """Give each EarlyStoppingHook an evaluation of the EVAL input (MoXing's inter_mode)."""
        boundary = epoch_hooks(spec.hooks)
        if not boundary:
            return
        if self.config.inter_mode != ModeKeys.EVAL:
            raise errors.ArgumentError(
                f"ModelSpec.hooks holds {type(boundary[0]).__name__}, which evaluates during training; pass "
                f"run(inter_mode=mox.ModeKeys.EVAL) so that it has an evaluation set (as in MoXing)")
        evaluator = self.task.evaluator()
        for hook in boundary:
            hook.bind(evaluator)

    def _interleaved_evaluation(self, max_batches=0):
        """The evaluation the controller runs after checkpoints and at the end (inter_mode=EVAL)."""
        eval_spec, _, _ = self.task.build(ModeKeys.EVAL)
        steps.check_spec(eval_spec, ModeKeys.EVAL)
        # Batches per call as in run_mode=EVAL: the same sums, so the last evaluation is EVAL's.
        evaluator = self.task.evaluator(batches_per_call=controller.eval_batches_per_call(self.config.steps_per_loop))
        return EvaluationSchedule(evaluator, steps.log_values(eval_spec), max_batches)


def _count_elements(make_dataset, limit):
    """(How many elements a fresh read of the input gives, up to ``limit``, its element spec);
    (None, None) where the input cannot be read again."""
    try:
        dataset = make_dataset()
        return int(dataset.take(limit).reduce(0, lambda count, _: count + 1)), dataset.element_spec
    except Exception:   # noqa: BLE001 -- an input that reads only once: the size is unknown
        return None, None


def _shapes(element_spec):
    shapes = [str(getattr(spec, "shape", "?")) for spec in tf.nest.flatten(element_spec)]
    return shapes[0] if len(shapes) == 1 else "(" + ", ".join(shapes) + ")"
