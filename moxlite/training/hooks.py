"""MoXing's ``mox.EarlyStoppingHook``: evaluate every N epochs during TRAIN, stop when the metric stalls.

Given in ``ModelSpec(hooks=[...])`` with ``run(inter_mode=ModeKeys.EVAL)``, as
MoXing's documentation requires. Every ``evaluate_every_n_epochs`` epochs of
training (an epoch is ``ceil(samples_in_train / batch_size)`` steps) the
runner evaluates ``monitor`` on ``ceil(samples_in_eval / batch_size)`` batches
of the EVAL input (the mean of ``monitor_info[monitor]`` of model_fn's EVAL
call, or of its ``log_info``), logs ``<prefix> step: N <monitor>: value`` and
applies MoXing's rule: the first evaluation sets the best value; a later one
improves on it when it is higher by more than ``min_delta`` (lower, with
``mode='min'``, moxlite's addition for losses); after ``patience`` evaluations
in a row without improvement training stops, saving its checkpoint. With
patience=3 that is at least four evaluations, as the documentation says.

The step printed is the number of steps done (moxlite's log lines), where
MoXing printed its 0-based step, one less.
"""

import math

from moxlite import errors
from moxlite.training import reporting


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise errors.ArgumentError(f"EarlyStoppingHook: {name}={errors.describe(value)} must be a positive integer")
    return value


class EarlyStoppingHook:
    """Stop training when ``monitor`` on the evaluation set has not improved for ``patience`` evaluations."""

    def __init__(self, monitor_info=None, monitor=None, batch_size=None, samples_in_train=None, samples_in_eval=None,
                 evaluate_every_n_epochs=1, min_delta=0.0, patience=0, prefix="[EarlyStopping]", mode="max"):
        self.monitor_info = dict(monitor_info or {})
        if not isinstance(monitor, str) or not monitor:
            raise errors.ArgumentError(
                f"EarlyStoppingHook: monitor={errors.describe(monitor)} must name the metric to watch, e.g. "
                "monitor='accuracy' with monitor_info={'accuracy': accuracy}")
        if mode not in ("max", "min"):
            raise errors.ArgumentError(f"EarlyStoppingHook: mode={mode!r} must be 'max' or 'min'")
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
            raise errors.ArgumentError(f"EarlyStoppingHook: patience={errors.describe(patience)} must be an integer >= 0")
        self.monitor = monitor
        batch_size = _positive_int("batch_size", batch_size)
        steps_per_epoch = math.ceil(_positive_int("samples_in_train", samples_in_train) / batch_size)
        self.every_n_steps = _positive_int("evaluate_every_n_epochs", evaluate_every_n_epochs) * steps_per_epoch
        self.eval_batches = math.ceil(_positive_int("samples_in_eval", samples_in_eval) / batch_size)
        self.min_delta = float(min_delta)
        self.patience = patience
        self.prefix = prefix
        self.mode = mode
        self.history = []          # (step, value) of every evaluation
        self.best = None
        self.wait = 0
        self.stop_requested = False
        self._evaluator = None

    def bind(self, evaluator):
        """The run's ``evaluation.EvalPass`` of the EVAL input; set before training starts."""
        self._evaluator = evaluator

    def __call__(self, global_step, log_values):
        """The log-line hook protocol: nothing to do there (evaluations fall on epoch boundaries)."""

    def at_step(self, global_step):
        """Evaluate at an epoch boundary and decide; True when training must stop."""
        if self._evaluator is None:
            raise errors.ArgumentError(
                "EarlyStoppingHook needs run(inter_mode=mox.ModeKeys.EVAL), as in MoXing: pass inter_mode so that "
                "the hook has an evaluation set")
        means, _ = self._evaluator.evaluate([self.monitor], self.eval_batches, label="EarlyStopping")
        value = float(means[self.monitor])
        self.history.append((global_step, value))
        reporting.get_logger().info("%s step: %d %s: %.3f", self.prefix, global_step, self.monitor, value)
        better = (self.best is None or (value > self.best + self.min_delta if self.mode == "max"
                                        else value < self.best - self.min_delta))
        if better:
            self.best, self.wait = value, 0
        else:
            self.wait += 1
            if self.wait >= self.patience:
                self.stop_requested = True
                reporting.get_logger().info("%s no improvement of %s in %d evaluation(s): stopping at step %d",
                                            self.prefix, self.monitor, self.wait, global_step)
        return self.stop_requested


def epoch_hooks(hooks):
    """The hooks that want calls at their own step boundaries (``every_n_steps`` and ``at_step``)."""
    return [hook for hook in hooks or [] if getattr(hook, "every_n_steps", 0) and callable(getattr(hook, "at_step", None))]


def eval_monitors(hooks):
    """{name: tensor} of the ``monitor_info`` of model_fn's hooks, averaged by evaluation with log_info."""
    monitors = {}
    for hook in hooks or []:
        monitors.update(getattr(hook, "monitor_info", None) or {})
    return monitors
