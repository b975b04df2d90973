"""jit_compile under parameter servers: each worker's forward and backward compiled by XLA on
values read from the parameter servers (moxlite/training/compiled/ps_steps.py).

References: one process without XLA (1 worker + 1 ps steps one batch after another, as one
process does), to the tolerance tests/training/test_xla.py states (rtol 1e-5, atol 1e-6; measured
differences here are below 1e-7). That XLA compiled the step on the worker is shown by XLA's
own dump (``XLA_FLAGS=--xla_dump_to``): the modules of moxlite's compiled forward and
backward (``jit_choice.Compiled``'s function ``_flat``), which only a worker runs.
"""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite.training.trainers import async_trainer
from moxlite.training.compiled import jit_choice
from tests import distlib, runlib, thorlib
from tests.dist_scripts import train_mnist, train_thor
from tests.training.test_xla import assert_weights_close

COMPILED_LINE = ("jit_compile=true: the per-worker forward and backward on values read from the parameter "
                 "servers compiled by XLA")


def _launch(launches, script, log_dir, *arguments, dump=None):
    run = launches(["--workers=1", "--ps=1", "--async"],
                   ["python", distlib.script(script), f"--log_dir={log_dir}", *arguments], timeout=180,
                   extra_env={"XLA_FLAGS": f"--xla_dump_to={dump}"} if dump else None)
    assert run.wait() == 0, run.output()
    return run


def _compiled_modules(dump):
    """The XLA modules of moxlite's compiled forward and backward in XLA's dump folder."""
    return {name.split(".")[1] for name in os.listdir(dump) if "_flat_" in name} if os.path.isdir(dump) else set()


def _one_process(train, log_dir, *args, **kwargs):
    mox.set_flag("jit_compile", "false")
    train(str(log_dir), *args, **kwargs)
    return [np.asarray(value) for value in runlib.checkpoint_variables(str(log_dir))]


@pytest.mark.slow
def test_thor_compiled_on_a_worker_equals_one_process_without_xla(launches, tmp_path):
    """thor(momentum) on the small CNN: THOR's layer records come out of the compiled function,
    its refresh (steps 0 and 3 of 6) and the update run uncompiled on the worker."""
    dump = tmp_path / "xla_dump"
    run = _launch(launches, "train_thor.py", tmp_path / "cluster", "--steps=6", "--batch=8", "--jit_compile=true",
                  dump=dump)
    assert COMPILED_LINE in run.output() and "training without XLA" not in run.output()
    assert "thor: preconditioning 2 layer(s)" in run.output()
    assert _compiled_modules(dump), "no XLA module of the compiled forward and backward was dumped"
    single = _one_process(train_thor.train, tmp_path / "single", 6, 8)
    assert_weights_close(thorlib.model_variables(tmp_path / "cluster"), single)


@pytest.mark.slow
def test_batch_gradients_over_lars_compiled_on_a_worker_equals_one_process_without_xla(launches, tmp_path):
    """batch_gradients(lars(momentum)): its 2 micro-batches compiled one by one inside the
    scheduled step (``TrainStep.accumulated``), their mean applied once, uncompiled."""
    run = _launch(launches, "train_mnist.py", tmp_path / "cluster", "--steps=4", "--batch=8",
                  "--optimizer=momentum_lars", "--num_batches=2", "--jit_compile=true")
    assert COMPILED_LINE in run.output() and "training without XLA" not in run.output()
    single = _one_process(train_mnist.train, tmp_path / "single", 4, 8, optimizer="momentum_lars", num_batches=2)
    assert_weights_close([np.asarray(v) for v in runlib.checkpoint_variables(str(tmp_path / "cluster"))], single)


@pytest.mark.slow
def test_a_checkpoint_written_compiled_on_parameter_servers_resumes_without_xla(launches, tmp_path):
    """momentum: a checkpoint written mid-run (step 4 of 6, compiled) holds the state after 4 steps,
    equal to one process's 4 steps without XLA (the controller waits for the steps in flight before
    it saves: before, the checkpoint numbered 4 held global step 1). The cluster then resumes the
    final checkpoint without XLA from step 6 to step 8 (ps_steps adds no variable to it)."""
    from moxlite.training.state.checkpoints import CHECKPOINT_NAME
    log_dir = tmp_path / "cluster"
    common = ["--batch=8", "--optimizer=momentum", "--save_steps=4"]
    first = _launch(launches, "train_mnist.py", log_dir, "--steps=6", "--jit_compile=true", *common)
    assert COMPILED_LINE in first.output() and "training without XLA" not in first.output()
    at_four = str(log_dir / f"{CHECKPOINT_NAME}-4")
    assert runlib.checkpoint_step(at_four) == 4
    single = _one_process(train_mnist.train, tmp_path / "single", 4, 8, optimizer="momentum")
    assert_weights_close([np.asarray(v) for v in runlib.checkpoint_variables(at_four)], single)
    second = _launch(launches, "train_mnist.py", log_dir, "--steps=8", "--jit_compile=false", *common)
    assert "global batch 8, from step 6" in second.output()
    assert second.results()["worker:0"]["global_step"] == 8 and runlib.checkpoint_step(str(log_dir)) == 8


@pytest.mark.slow
def test_a_model_on_get_variable_trains_without_xla_and_says_why(launches, tmp_path):
    """tf.compat.v1.get_variable variables are no Keras variables: the compiled function would
    read them on the parameter server, which XLA cannot; found in its trace, before any step."""
    run = _launch(launches, "train_mnist.py", tmp_path, "--steps=4", "--batch=8", "--model=tf1",
                  "--optimizer=momentum", "--jit_compile=true")
    lines = [line for line in run.output().splitlines() if "XLA cannot compile" in line]
    assert len(lines) == 1, run.output()
    assert lines[0].endswith(
        "WARNING:moxlite:jit_compile=true: XLA cannot compile this step (model_fn reads variables that are not "
        "Keras variables (tf.compat.v1.get_variable, a plain tf.Variable), which XLA on a worker cannot read on "
        "the parameter servers: softmax_b:0, softmax_w:0); training without XLA"), lines[0]
    assert run.results()["worker:0"]["global_step"] == 4


# ---- auto on a ClusterCoordinator -------------------------------------------------------------

class _FakeCoordinator:
    """Schedules nothing: notes which step function each call would run; ``done`` and ``join``
    advance the fake clock by what the scheduled steps cost."""

    def __init__(self, seconds, clock):
        self.seconds, self.clock, self.pending, self.ran = seconds, clock, [], []

    def schedule(self, function, args):
        self.pending.append(function)
        return None

    def done(self):
        for function in self.pending:
            self.ran.append(function)
            self.clock.now += self.seconds[function]
        self.pending = []

    join = done   # a part being timed is waited for


class _Clock:
    now = 0.0

    def __call__(self):
        return self.now


@pytest.mark.parametrize("faster", [True, False], ids=["xla_faster", "plain_faster"])
def test_auto_measures_both_variants_through_the_coordinator_and_keeps_the_faster(monkeypatch, faster):
    """AsyncTrainer.run_steps with a coordinator whose steps take 10 ms one way and 100 ms the
    other (a fake clock): the trial schedules both variants, then only the faster."""
    clock = _Clock()
    monkeypatch.setattr(jit_choice, "clock", clock)
    lines = []

    class Logger:
        def info(self, *args):
            lines.append(args[0] % args[1:])

    choice = jit_choice.JitChoice("auto", tf.distribute.get_strategy(), lambda: 400, Logger(),
                                budget=jit_choice.Budget(min_steps=4, max_trial_steps=4))
    choice.where = jit_choice.PER_WORKER   # as placement() says for ParameterServerStrategy
    trainer = object.__new__(async_trainer.AsyncTrainer)
    trainer._step_fns = {False: "plain", True: "compiled"}
    trainer.coordinator = _FakeCoordinator({"compiled" if faster else "plain": 0.01,
                                            "plain" if faster else "compiled": 0.1}, clock)
    trainer._choice, trainer._value_step, trainer._refusal_told = choice, None, False
    trainer.num_batches, trainer._scheduled, trainer.iterator = 1, 0, None
    trainer._log_keys, trainer._shown_keys = [], []
    trainer._nonfinite_count = tf.Variable(0, dtype=tf.int64)
    monkeypatch.setattr(async_trainer.AsyncTrainer, "_tell_refusal", lambda self: None)
    monkeypatch.setattr(async_trainer.AsyncTrainer, "create_layer_state", lambda self: None)
    for _ in range(4):
        assert trainer.run_steps(10)[0] == 10
    ran = trainer.coordinator.ran
    assert ran.count("plain") >= 5 and ran.count("compiled") >= 5   # traced once, then 4 timed steps each
    assert set(ran[-10:]) == {"compiled" if faster else "plain"}
    assert len(lines) == 1 and lines[0].endswith("training with XLA" if faster else "training without XLA"), lines
    assert jit_choice.PER_WORKER in lines[0]


# ---- the ValueScope, in one process ------------------------------------------------------------

def test_layers_built_inside_model_fn_read_the_given_values_and_their_assignments_are_recorded():
    """model_fn builds a Dense and a BatchNormalization on each call (style 2): under a ValueScope
    the template's variables read as the given values, BatchNorm's moving-statistic update is
    recorded, not applied, and the tape differentiates the values (numpy references)."""
    from moxlite.contract import ModeKeys
    from moxlite.training.compiled import ps_steps
    from moxlite.training.capture import shared_variables as template

    def model_fn(inputs, mode):
        hidden = keras.layers.Dense(2, use_bias=False, kernel_initializer="zeros")(inputs)
        normalized = keras.layers.BatchNormalization(momentum=0.5, center=False, scale=False)(hidden, training=True)
        return mox.ModelSpec(loss=tf.reduce_sum(hidden) + 0.0 * tf.reduce_sum(normalized))

    model = template.SharedVariablesModelFn(model_fn)
    x = np.array([[1.0, 2.0], [3.0, 5.0]], np.float32)
    model.build(tf.constant(x), ModeKeys.TRAIN)
    variables = model.variables
    names = [v.name for v in variables]
    before = [v.numpy() for v in variables]
    kernel = np.array([[1.0, -1.0], [2.0, 0.5]], np.float32)
    values = [tf.constant(kernel) if "kernel" in n else tf.zeros(v.shape) for n, v in zip(names, variables)]
    scope = ps_steps.ValueScope(variables, values)
    with tf.GradientTape() as tape:
        with scope:
            ps_steps.watch_values(tape)
            loss = model(tf.constant(x), ModeKeys.TRAIN).loss
            sources = ps_steps.differentiated(variables)
    np.testing.assert_allclose(float(loss), (x @ kernel).sum(), rtol=1e-6)
    np.testing.assert_allclose(tape.gradient(loss, sources[0]), x.sum(axis=0)[:, None] * np.ones((1, 2)), rtol=1e-6)
    mean_index = next(i for i, n in enumerate(names) if "moving_mean" in n)
    np.testing.assert_allclose(scope.updated[mean_index], 0.5 * (x @ kernel).mean(axis=0), rtol=1e-6)
    for variable, value in zip(variables, before):            # nothing assigned to the variables
        np.testing.assert_array_equal(variable.numpy(), value)
    assert len(model.variables) == len(variables)            # no variable created by the call
