"""The controller (Orbit's name): the outer loop that drives a trainer.

It owns the step budget, log lines, summaries, checkpoints and interleaved
evaluation. The trainer (``SyncTrainer`` or ``AsyncTrainer``, see
``trainer_protocol``) runs steps; the controller decides how many per call so
that logging, summary and checkpoint boundaries fall exactly on their steps.
"""

import dataclasses
from typing import Callable, Optional

import numpy as np

from moxlite.training import reporting


@dataclasses.dataclass
class Cadence:
    """How often things happen, in global steps (0 = never)."""

    steps_per_loop: int = 1
    log_every_n_steps: int = 10
    save_summary_steps: int = 100
    save_model_steps: int = 0


def _next_boundary(step, every):
    return (step // every + 1) * every if every else None


def _to_numpy(logs):
    return {key: np.asarray(value) for key, value in logs.items()}


def train(loop, start_step, target_step, cadence, checkpointer, summaries, global_batch_size,
          learning_rate: Optional[Callable] = None, evaluate: Optional[Callable] = None, hooks=(),
          should_stop: Optional[Callable] = None):
    """Run the trainer ``loop`` from ``start_step`` to ``target_step`` (None: until the input ends).

    ``hooks`` are called as ``hook(global_step, log_values)`` at every log line.
    ``should_stop()`` is asked after every traced call (an interrupt): True ends the run there.
    Returns (last global step, last log values as numpy).
    """
    logger = reporting.get_logger()
    throughput = reporting.Throughput(global_batch_size)
    throughput.reset(start_step)
    step = start_step
    logs = {}
    while target_step is None or step < target_step:
        chunk = cadence.steps_per_loop
        for limit in (target_step,
                      _next_boundary(step, cadence.log_every_n_steps),
                      _next_boundary(step, cadence.save_summary_steps),
                      _next_boundary(step, checkpointer.save_model_steps if checkpointer else 0)):
            if limit is not None:
                chunk = min(chunk, limit - step)
        done, step_logs = loop.run_steps(max(chunk, 1))
        if done == 0:
            logger.info("Input ended at global step %d", step)
            break
        step += done
        logs = step_logs
        at_log = cadence.log_every_n_steps and step % cadence.log_every_n_steps == 0
        at_summary = cadence.save_summary_steps and step % cadence.save_summary_steps == 0
        if at_log or at_summary:
            values = _to_numpy(logs)
            rate = throughput.tick(step)
            if at_log:
                logger.info(reporting.train_line(step, step, rate, values))
                for hook in hooks:
                    hook(step, values)
            if at_summary:
                extra = {"sample_per_sec": rate}
                if learning_rate is not None:
                    extra["learning_rate"] = np.asarray(learning_rate())
                summaries.scalars(step, {**values, **extra})
        if checkpointer is not None and checkpointer.due(step):
            checkpointer.save(step)
            if evaluate is not None:
                evaluate(step)
            throughput.reset(step)  # saving and evaluating are not training time
        if done < chunk:
            logger.info("Input ended at global step %d", step)
            break
        if should_stop is not None and should_stop():
            break
    return step, _to_numpy(logs)
