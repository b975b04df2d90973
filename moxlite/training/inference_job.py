"""EVAL, PREDICT and EXPORT: restore a trained model_fn from a checkpoint and use it."""

import os

from moxlite.contract import ModeKeys
from moxlite.training import checkpoints, export, reporting, steps
from moxlite.training.controller import eval_batches_per_call
from moxlite.training.evaluation import Evaluator, predict


class InferenceJob:
    """One run in EVAL, PREDICT or EXPORT mode, on this process's own devices."""

    def __init__(self, workload):
        self.workload = workload
        self.config = workload.config

    def execute(self):
        mode = self.config.run_mode
        if mode == ModeKeys.EVAL:
            return self._evaluate()
        if mode == ModeKeys.PREDICT:
            return self._predict()
        return self._export()

    def _restore(self, mode):
        spec, element_spec, _ = self.workload.build(mode)
        steps.check_spec(spec, mode)
        global_step = self.workload.global_step()
        keyed, ambiguous = self.workload.template.checkpoint_keys()
        checkpointer = checkpoints.Checkpointer(self.config.log_dir, global_step, keyed, ambiguous=ambiguous)
        checkpointer.restore(self.config.checkpoint_path, self.config.checkpoint_exclude_patterns,
                             warm_start_step=True)
        return spec, element_spec, int(global_step.numpy())

    def _evaluate(self):
        config = self.config
        spec, _, step = self._restore(ModeKeys.EVAL)
        keys = list(steps.log_values(spec))
        evaluator = Evaluator(self.workload.strategy, self.workload.dataset_fn(ModeKeys.EVAL), self.workload.template,
                              batches_per_call=eval_batches_per_call(config.steps_per_loop))
        metrics, samples = evaluator.evaluate(keys, max_batches=config.max_number_of_steps)
        self.workload.logger.info(reporting.validation_line(step, metrics))
        if self.workload.is_chief and config.log_dir and os.path.isdir(config.log_dir):
            summaries = reporting.SummaryWriter(os.path.join(config.log_dir, "eval"), enabled=True)
            summaries.scalars(step, metrics)
            summaries.close()
        return {**metrics, "global_step": step, "num_samples": samples}

    def _predict(self):
        self._restore(ModeKeys.PREDICT)
        outputs, _ = predict(self.workload.strategy, self.workload.dataset_fn(ModeKeys.PREDICT), self.workload.template,
                             self.config.output_fn, self.config.output_every_n_steps,
                             max_batches=self.config.max_number_of_steps)
        return outputs

    def _export(self):
        _, element_spec, _ = self._restore(ModeKeys.EXPORT)
        target_dir = self.config.log_dir or self.config.checkpoint_path
        path = export.export_saved_model(self.workload.template, element_spec, target_dir)
        self.workload.logger.info("Exported SavedModel to %s", path)
        return path
