"""Every trainer the controller drives implements the whole Trainer protocol, nothing probed."""

import contextlib

import tensorflow as tf

from moxlite.training.trainers.async_trainer import AsyncTrainer
from moxlite.training.state.input_resume import RestartingTrainer
from moxlite.training.trainers.sync_trainer import SyncTrainer
from moxlite.training.trainer_protocol import Trainer


def test_every_trainer_implements_every_method_of_the_protocol():
    for trainer_class in (SyncTrainer, AsyncTrainer, RestartingTrainer):
        assert issubclass(trainer_class, Trainer)
        assert not trainer_class.__abstractmethods__, trainer_class


class _Recording(Trainer):
    """A trainer that records what the controller side asked of it."""

    def __init__(self, writes_summaries=False):
        self.calls = []
        self._writes_summaries = writes_summaries

    def run_steps(self, num_steps, check_state=False, summary_since=None):
        self.calls.append(("run_steps", num_steps, check_state, summary_since))
        return num_steps, {}

    @property
    def writes_summaries(self):
        return self._writes_summaries

    def finish(self, counted_step):
        self.calls.append(("finish", counted_step))
        return counted_step + 1

    def any_worker(self, requested):
        self.calls.append(("any_worker", requested))
        return True

    def learning_rate(self):
        self.calls.append(("learning_rate",))
        return tf.constant(0.5)

    def user_summaries(self):
        self.calls.append(("user_summaries",))
        return contextlib.nullcontext()

    def close(self):
        self.calls.append(("close",))


def test_a_restarting_trainer_passes_every_call_to_the_trainer_it_guards():
    inner = _Recording(writes_summaries=True)
    step = tf.Variable(0, dtype=tf.int64)
    guarded = RestartingTrainer(inner, global_step=step, restart=None, prefix="ckpt-1", allow_restart=True)
    assert guarded.writes_summaries is True
    assert guarded.run_steps(3, check_state=True, summary_since=(1.5, 2)) == (3, {})
    assert guarded.finish(7) == 8
    assert guarded.any_worker(False) is True
    assert float(guarded.learning_rate()) == 0.5
    with guarded.user_summaries():
        pass
    guarded.close()
    assert inner.calls == [("run_steps", 3, True, (1.5, 2)), ("finish", 7), ("any_worker", False), ("learning_rate",),
                           ("user_summaries",), ("close",)]
