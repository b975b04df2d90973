"""Every trainer the controller drives implements the whole Trainer protocol, nothing probed."""

import contextlib

import numpy as np
import tensorflow as tf

import moxlite as mox
from moxlite.training import training_job
from moxlite.training.state.input_resume import RestartingTrainer
from moxlite.training.trainer_protocol import Trainer
from tests import runlib

# What a one-process run asks of its SyncTrainer, which writes its own summaries. A trainer that
# leaves them to the controller is also asked its learning_rate, and one with workers any_worker.
ASKED = {"run_steps", "writes_summaries", "finish", "user_summaries", "close"}


class _ProtocolOnly(Trainer):
    """The trainer a run built, reachable through the protocol's members only: anything else the
    runner asked of it would be an AttributeError. ``asked`` lists the members it was asked for."""

    def __init__(self, inner):
        self._inner = inner
        self.asked = []

    def _ask(self, name, *args, **kwargs):
        self.asked.append(name)
        return getattr(self._inner, name)(*args, **kwargs)

    def run_steps(self, num_steps, check_state=False, summary_since=None):
        return self._ask("run_steps", num_steps, check_state=check_state, summary_since=summary_since)

    @property
    def writes_summaries(self):
        self.asked.append("writes_summaries")
        return self._inner.writes_summaries

    def learning_rate(self):
        return self._ask("learning_rate")

    def finish(self, counted_step):
        return self._ask("finish", counted_step)

    def any_worker(self, requested):
        return self._ask("any_worker", requested)

    def user_summaries(self):
        return self._ask("user_summaries")

    def close(self):
        return self._ask("close")


def _train(log_dir):
    images, labels = runlib.mnist_rows(48)
    result = runlib.train(log_dir, runlib.input_fn_for(images, labels), runlib.softmax_model_fn,
                          mox.get_optimizer_fn("momentum", 0.5, momentum=0.9), steps=6, batch_size=8,
                          log_every_n_steps=2, save_summary_steps=3, save_model_steps=4)
    return result, runlib.checkpoint_variables(str(log_dir))


def test_a_run_drives_its_trainer_through_the_protocol_alone(tmp_path, monkeypatch):
    """The runner and the controller (log lines, summaries, checkpoints, the stop rule, the end)
    ask the trainer that the set-up built for the protocol's members and nothing else; the run
    ends as the same run with the trainer itself."""
    plain, plain_weights = _train(tmp_path / "plain")
    wrapped = []
    set_up = training_job.restore_and_resume

    def restore_and_resume(*args, **kwargs):
        trainer, checkpointer = set_up(*args, **kwargs)
        wrapped.append(_ProtocolOnly(trainer))
        return wrapped[-1], checkpointer

    monkeypatch.setattr(training_job, "restore_and_resume", restore_and_resume)
    result, weights = _train(tmp_path / "protocol")
    assert len(wrapped) == 1
    assert set(wrapped[0].asked) == ASKED, sorted(set(wrapped[0].asked))
    assert result["global_step"] == plain["global_step"] == 6
    for got, want in zip(weights, plain_weights):
        np.testing.assert_array_equal(got, want)


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
