"""The controller (Orbit's name): the outer loop that drives a trainer.

It owns the step budget, log lines, summaries, checkpoints and interleaved
evaluation: every training and evaluation line and every summary of a run is
written from here, through ``reporting`` (``train`` for TRAIN, ``evaluate`` for
every evaluation, run_mode=EVAL's too, ``report_end`` after the last step). The
trainer (``SyncTrainer`` or ``AsyncTrainer``, see ``trainer_protocol``) runs
steps; the controller decides how many per call so that logging, summary and
checkpoint boundaries fall exactly on their steps.

``steps_per_loop="auto"`` (the default) runs each traced call up to the next
step at which the host has something to do: a log line (and the hooks called
with it), a summary, a checkpoint by steps (and the interleaved evaluation
after it), the last step. Splitting the steps into calls changes nothing
computed, so the run equals one at ``steps_per_loop=1`` step for step. Only
the host's clock is read between calls, so a call is also bounded in time
(``CallBound``): time-based checkpoints and SIGINT/SIGTERM wait at most about
``AUTO_CALL_SECONDS`` for the call in flight.
"""

import dataclasses
import time
from typing import Callable, Optional, Union

import numpy as np

from moxlite.training import reporting
from moxlite.training.hooks import epoch_hooks


AUTO = "auto"
# The time one traced call may take under steps_per_loop="auto": how long a time-based
# checkpoint or a SIGINT/SIGTERM may wait for the call in flight (at most a tenth of
# save_model_secs when that is shorter).
AUTO_CALL_SECONDS = 1.0
clock = time.monotonic   # what CallBound measures calls with (a test may replace it)
# The bound under steps_per_loop="auto" when synchronous workers must make the same calls:
# their clocks would disagree, so a fixed count (the default log interval bounds it anyway).
AUTO_STEPS_ACROSS_WORKERS = 10
# A run whose first log line is further off than this (tracing included) prints one early, at
# the end of the call in flight then, so that a slow run is not silent until its first boundary.
FIRST_LINE_SECONDS = 10.0


@dataclasses.dataclass
class Cadence:
    """How often things happen, in global steps (0 = never)."""

    steps_per_loop: Union[int, str] = AUTO
    log_every_n_steps: int = 10
    save_summary_steps: int = 100
    save_model_steps: int = 0
    # steps_per_loop="auto" on several synchronous workers: a fixed bound instead of the
    # clock, since every worker must make the same calls (they agree on stopping after each).
    auto_max_steps: Optional[int] = None
    save_model_secs: Optional[float] = None


class CallBound:
    """The most steps one traced call may run under ``steps_per_loop="auto"``.

    Starts at one step (the first call also traces), then follows the measured time per
    step so that a call lasts about ``seconds``, growing at most twofold per call and
    shrinking at once when steps get slower. With ``fixed`` steps the clock is not read.
    """

    def __init__(self, seconds=None, fixed=None):
        self.seconds = seconds or AUTO_CALL_SECONDS
        self.fixed = fixed
        self.steps = fixed or 1
        self._started = None

    def start(self):
        if self.fixed is None:
            self._started = clock()

    def record(self, steps):
        """After a call that ran ``steps`` steps: the bound for the next call."""
        if self.fixed is not None or steps <= 0:
            return
        per_step = max(clock() - self._started, 1e-9) / steps
        self.steps = max(1, min(2 * self.steps, int(self.seconds / per_step)))


def is_auto(steps_per_loop):
    return steps_per_loop == AUTO


def eval_batches_per_call(steps_per_loop):
    """Batches per traced call of run_mode=EVAL: one under "auto", since sums carried across
    batches inside a call would round differently from the host's float64 totals."""
    return 1 if is_auto(steps_per_loop) else steps_per_loop


def call_bound(cadence):
    """The ``CallBound`` of a run with ``steps_per_loop="auto"``, None for a fixed count."""
    if not is_auto(cadence.steps_per_loop):
        return None
    seconds = AUTO_CALL_SECONDS
    if cadence.save_model_secs:
        seconds = min(seconds, cadence.save_model_secs / 10)
    return CallBound(seconds, fixed=cadence.auto_max_steps)


def _next_boundary(step, every):
    return (step // every + 1) * every if every else None


def _to_numpy(logs):
    return {key: np.asarray(value) for key, value in logs.items()}


def train(loop, start_step, target_step, cadence, checkpointer, summaries, global_batch_size,
          evaluation=None, hooks=(), monitors=(), should_stop: Optional[Callable] = None):
    """Run the trainer ``loop`` from ``start_step`` to ``target_step`` (None: until the input ends).

    ``summaries``: the run's ``reporting.Summaries`` (None: write none). ``evaluation``: an
    ``evaluation.EvaluationSchedule`` run after every checkpoint saved by steps (inter_mode=EVAL).
    ``hooks`` are called as ``hook(global_step, log_values)`` at every log line, then the
    ``monitors`` (``loss_scaling.OverflowMonitor``) report, their scalars written.
    ``should_stop()`` is asked after every traced call (an interrupt): True ends the run there.
    Hooks with ``every_n_steps`` (``EarlyStoppingHook``) get ``hook.at_step(step)`` at their own
    boundaries, a call never running past one; True from it ends training there.
    Returns (last global step, last log values as numpy).
    """
    logger = reporting.get_logger()
    throughput = reporting.Throughput(global_batch_size)
    throughput.reset(start_step)
    step = start_step
    logs = {}
    bound = call_bound(cadence)
    boundary_hooks = epoch_hooks(hooks)
    started, logged = clock(), False
    summarised = None   # the last step whose summaries were written
    while target_step is None or step < target_step:
        chunk = bound.steps if bound is not None else cadence.steps_per_loop
        # The steps at which the host reports: the end, a log line (and its hooks), a summary,
        # a checkpoint by steps. A call never runs past the next one.
        limits = [limit for limit in (target_step,
                                      _next_boundary(step, cadence.log_every_n_steps),
                                      _next_boundary(step, cadence.save_summary_steps),
                                      _next_boundary(step, checkpointer.save_model_steps if checkpointer else 0),
                                      *(_next_boundary(step, hook.every_n_steps) for hook in boundary_hooks))
                  if limit is not None]
        chunk = max(min([chunk] + [limit - step for limit in limits]), 1)
        if bound is not None:
            bound.start()
        # A call that ends on a report also checks that the weights are finite: per step only
        # the loss is. The last step is a summary step too: every run writes its loss.
        summary_step = bool(cadence.save_summary_steps) and (
            (step + chunk) % cadence.save_summary_steps == 0 or step + chunk == target_step)
        done, step_logs = loop.run_steps(chunk, check_state=step + chunk in limits,
                                         summary_since=throughput.since() if summary_step else None)
        # Tracing and compiling are not training: their calls are left out of the throughput.
        throughput.exclude(*untimed(loop))
        if bound is not None:
            bound.record(done)
        if done == 0:
            logger.info("Input ended at global step %d", step)
            break
        step += done
        logs = step_logs
        at_log = cadence.log_every_n_steps and step % cadence.log_every_n_steps == 0
        at_summary = summary_step and done == chunk
        if at_log or at_summary:
            values = _to_numpy(logs)
            rate = throughput.tick(step)
            if at_log:
                logged = True
                logger.info(reporting.train_line(step, step, rate, values))
                _call_hooks(step, values, hooks, monitors, summaries)
            if at_summary:
                summarised = step
                if not loop.writes_summaries and summaries is not None:
                    # (else the trainer wrote them in the call, which was asked to end on this step)
                    extra = {"sample_per_sec": rate, "learning_rate": np.asarray(loop.learning_rate())}
                    summaries.train.scalars(step, {**values, **extra})
        elif (cadence.log_every_n_steps and not logged and clock() - started >= FIRST_LINE_SECONDS
              and throughput.measured(step)):
            logged = True   # the first line, early (the hooks keep their own steps)
            logger.info(reporting.train_line(step, step, throughput.tick(step), _to_numpy(logs)))
        if checkpointer is not None and checkpointer.due(step):
            # Steps still in flight (parameter servers) are waited for first: the checkpoint
            # numbered ``step`` holds the state after that many steps.
            checkpointer.save(loop.finish(step))
            if evaluation is not None:
                evaluate(evaluation, step, summaries)
            throughput.reset(step)  # saving and evaluating are not training time
        if done < chunk:
            logger.info("Input ended at global step %d", step)
            break
        stop = [hook.at_step(step) for hook in boundary_hooks if step % hook.every_n_steps == 0]
        if any(stop):
            break
        if should_stop is not None and should_stop():
            break
    if cadence.save_summary_steps and summaries is not None and logs and summarised != step:
        # A run that ended before its target (the input, a hook, a signal): its last step's
        # values, written on the host.
        summaries.train.scalars(step, {**_to_numpy(logs), "learning_rate": np.asarray(loop.learning_rate())})
    return step, _to_numpy(logs)


def untimed(loop):
    """(seconds, steps) of the trainer's calls since last asked that traced or compiled (none
    for a trainer that does not say)."""
    take = getattr(loop, "take_untimed", None)
    return take() if take is not None else (0.0, 0)


def _call_hooks(step, values, hooks, monitors, summaries):
    for hook in hooks:
        hook(step, values)
    for monitor in monitors:
        scalars = monitor.report(step)
        if summaries is not None and scalars:
            summaries.train.scalars(step, scalars)


def evaluate(evaluation, step, summaries):
    """Run ``evaluation`` at global ``step`` (once per step), log MoXing's validation line and
    write the means to the evaluation's summaries. Returns (means, samples), None when the
    step was evaluated already."""
    result = evaluation.at(step)
    if result is None:
        return None
    metrics, _ = result
    reporting.get_logger().info(reporting.validation_line(step, metrics))
    if summaries is not None:
        summaries.eval.scalars(step, metrics)
        summaries.eval.flush()   # the writer stays open for the next evaluation
    return result


def report_end(step, logs, summaries, evaluation=None, hooks=(), monitors=()):
    """After the last step of a training that was not interrupted: the last evaluation (unless
    the last checkpoint's already ran at ``step``), then the hooks and monitors once more.
    Returns that evaluation's (means, samples), None without one."""
    if evaluation is not None:
        evaluate(evaluation, step, summaries)
    _call_hooks(step, logs, hooks, monitors, summaries)
    return evaluation.results.get(step) if evaluation is not None else None
