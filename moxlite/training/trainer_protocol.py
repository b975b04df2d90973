"""The one interface between the controller and a trainer (Orbit's names).

- The *controller* (``moxlite.training.controller.train``) is the outer loop: it
  decides how many steps to ask for so that log lines, summaries, checkpoints,
  hooks and interleaved evaluation fall on their steps, and does them.
- A *trainer* is the inner loop: it runs the steps it is asked for.
  ``SyncTrainer`` (``trainers/sync_trainer.py``) runs them in one traced call on every replica
  together; ``AsyncTrainer`` (``trainers/async_trainer.py``) schedules them on parameter-server
  workers; ``RestartingTrainer`` (``state/input_resume.py``) restarts another trainer's
  input when a restored position no longer fits.

The runner talks to every trainer through these seven methods and one property only.
"""

import abc
from typing import ContextManager, Dict, Optional, Tuple


class Trainer(abc.ABC):
    """Runs training steps for the controller."""

    @abc.abstractmethod
    def run_steps(self, num_steps: int, check_state: bool = False,
                  summary_since: Optional[Tuple[float, int]] = None) -> Tuple[int, Dict]:
        """Run up to ``num_steps`` global steps; return (steps done, log values of the last one).

        Fewer steps than asked means the input ended. Log values may be fetched lazily:
        read them with ``numpy.asarray``. ``check_state``: the controller will report after
        this call, so verify that the weights and optimizer variables are still finite and
        raise ``nonfinite.NonFiniteStep`` if not (a trainer may leave this to the checkpoint
        saves, which always check). ``summary_since``, given when the last step is a summary
        step: (host time in seconds since the epoch, global step) from which the summary's
        throughput is measured; a trainer whose ``writes_summaries`` is True then writes the
        log values, learning rate and throughput itself.
        """

    @property
    def writes_summaries(self) -> bool:
        """True when ``run_steps(..., summary_since=...)`` writes the summaries of its last
        step; otherwise the controller writes them from the returned values."""
        return False

    @abc.abstractmethod
    def learning_rate(self):
        """The learning rate the (first) optimizer applies now, a float32 scalar tensor: what
        the controller writes with the log values when ``writes_summaries`` is False."""

    @abc.abstractmethod
    def finish(self, counted_step: int) -> int:
        """Wait for every step still in flight; return the exact global step.

        ``counted_step`` is the step the controller counted (exact for a trainer whose
        ``run_steps`` returns only when its steps are done).
        """

    @abc.abstractmethod
    def any_worker(self, requested: bool) -> bool:
        """True when any worker of the run passes ``requested`` (synchronous workers agree, so
        that all stop at one step); every worker calls it at the same step."""

    @abc.abstractmethod
    def user_summaries(self) -> ContextManager:
        """A context, entered once for the run, in which summaries written by user functions
        land in the run's summary writer (a no-op where they cannot)."""

    def create_layer_state(self) -> None:
        """Before the first step: create the per-layer state of the step's links (THOR's factors),
        which may refuse model_fn's layers (an ``include`` that matches none); the runner calls
        it before training starts, so that a refusal comes before anything is written. A
        trainer whose links keep no per-layer state has nothing to do."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the input iterator now (not at interpreter shutdown, where TensorFlow's
        iterator destructor can wait forever for its tf.data threads)."""
