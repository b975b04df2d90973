"""EVAL, PREDICT and EXPORT: restore a trained model_fn from a checkpoint and use it."""

import os

from moxlite.contract import ModeKeys
from moxlite.training import controller, reporting
from moxlite.training.state import checkpoints
from moxlite.training.trainers import steps
from moxlite.training.inference.evaluation import EvaluationSchedule


class InferenceJob:
    """One run in EVAL, PREDICT or EXPORT mode, on this process's own devices."""

    def __init__(self, task):
        self.task = task
        self.config = task.config

    def execute(self):
        mode = self.config.run_mode
        if mode == ModeKeys.EVAL:
            return self._evaluate()
        if mode == ModeKeys.PREDICT:
            return self._predict()
        return self._export()

    def _restore(self, mode):
        spec, element_spec, _ = self.task.build(mode)
        steps.check_spec(spec, mode)
        global_step = self.task.global_step()
        keyed, ambiguous = self.task.checkpoint_keys()
        checkpointer = checkpoints.Checkpointer(self.config.log_dir, global_step, keyed, ambiguous=ambiguous)
        # EVAL, PREDICT and EXPORT read the checkpoint TRAIN wrote with this model_fn: not a warm start.
        checkpointer.restore(self.config.checkpoint_path, self.config.checkpoint_exclude_patterns,
                             warm_start_step=True, same_model_fn=True)
        return spec, element_spec, int(global_step.numpy())

    def _evaluate(self):
        config = self.config
        spec, _, step = self._restore(ModeKeys.EVAL)
        evaluator = self.task.evaluator(batches_per_call=controller.eval_batches_per_call(config.steps_per_loop))
        evaluation = EvaluationSchedule(evaluator, steps.log_values(spec), max_batches=config.max_number_of_steps)
        # The summaries go next to a TRAIN run's, in an existing log_dir only (EVAL creates none).
        summaries = reporting.Summaries(config.log_dir, enabled=bool(
            self.task.is_chief and config.log_dir and os.path.isdir(config.log_dir)))
        try:
            metrics, samples = controller.evaluate(evaluation, step, summaries)
        finally:
            summaries.close()
        return {**metrics, "global_step": step, "num_samples": samples}

    def _predict(self):
        self._restore(ModeKeys.PREDICT)
        return self.task.predict(self.config.output_fn, self.config.output_every_n_steps,
                                 max_batches=self.config.max_number_of_steps)

    def _export(self):
        _, element_spec, _ = self._restore(ModeKeys.EXPORT)
        target_dir = self.config.log_dir or self.config.checkpoint_path
        path = self.task.export(element_spec, target_dir)
        self.task.logger.info("Exported SavedModel to %s", path)
        return path
