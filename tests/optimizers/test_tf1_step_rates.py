"""Rates that optimizer_fn computes from the global step follow it at every update (issue 31).

Each form is a MoXing-style ``optimizer_fn`` run for a few steps of ``moxlite.run`` on the bundled
MNIST rows. The model adds a probe to the loss: a scalar variable whose gradient is exactly 1 on
every replica, so plain SGD moves it by -lr at each update and the rate applied at global step k
is probe[k] - probe[k + 1] (read at every log line by a hook). The reference is the same code in a
TF1 graph, run by ``tf.compat.v1.Session`` step by step: TF1's own optimizer minimising the probe
where optimizer_fn returns a TF1 optimizer, else the rate tensor evaluated at each step.
"""

import functools
import logging
import threading

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite import logs
from moxlite.optimizers import tf1_adapter
from tests import runlib

STEPS = 8          # updates compared per run
BATCH = 16


class RateProbe(keras.layers.Layer):
    """A scalar weight (zero at the start) that the loss adds as it is: its gradient is 1."""

    def build(self, input_shape):
        self.probe = self.add_weight(name="rate_probe", shape=(), initializer="zeros")

    def call(self, inputs):
        return self.probe + 0.0 * tf.reduce_sum(inputs[:0])


def probe_model_fn(probes):
    """Softmax regression on MNIST plus the rate probe; ``probes`` gets (global step, probe) per log line."""

    def record(global_step, values):
        probes.append((global_step, float(values["probe"])))

    def model_fn(inputs, mode):
        images, labels = inputs
        logits = keras.layers.Dense(10, kernel_initializer="zeros")(images)
        probe = RateProbe(name="rate_probe")(images)
        loss = runlib.cross_entropy(logits, labels) + probe
        return mox.ModelSpec(loss=loss, log_info={"loss": loss, "probe": tf.identity(probe)}, hooks=[record])

    return model_fn


def moxlite_probe(tmp_path, optimizer_fn, replicas=1, steps=STEPS, name="run", jit_compile=False):
    """The probe before each of ``steps`` updates and after the last, from moxlite.run."""
    images, labels = runlib.mnist_rows(BATCH * (steps + 1))
    mox.set_flag("num_gpus", replicas)
    probes = []
    runlib.train(tmp_path / name, runlib.input_fn_for(images, labels), probe_model_fn(probes), optimizer_fn,
                 steps=steps + 1, batch_size=BATCH // replicas, log_every_n_steps=1, save_summary_steps=0,
                 jit_compile=jit_compile)
    by_step = dict(probes)   # (the last line's hooks may be called again at the end)
    assert sorted(by_step) == list(range(1, steps + 2)), probes
    return np.array([by_step[step] for step in sorted(by_step)])   # read in the forward of steps 0..steps


def applied_rates(probe):
    return probe[:-1] - probe[1:]


def tf1_probe(optimizer_fn, steps=STEPS):
    """The probe before each update and after the last, under TF1's own optimizer in a Session."""
    with tf.Graph().as_default():
        probe = tf.compat.v1.get_variable("rate_probe", shape=[], initializer=tf.compat.v1.zeros_initializer())
        global_step = tf.compat.v1.train.get_or_create_global_step()
        train = optimizer_fn().minimize(probe, global_step=global_step)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            values = []
            for _ in range(steps):
                values.append(session.run(probe))
                session.run(train)
            values.append(session.run(probe))
    return np.array(values)


def tf1_rates(rate_of_step, steps=STEPS):
    """``rate_of_step(global_step)`` as a TF1 graph tensor, evaluated by a Session at steps 0..steps-1."""
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        rate = rate_of_step(global_step)
        if callable(rate) and not isinstance(rate, tf.Tensor):
            rate = rate()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            values = []
            for step in range(steps):
                global_step.load(step, session)
                values.append(session.run(rate))
    return np.array(values)


def assert_rates(got, want):
    # float32 probe: its value is a sum of at most ~10 rates of order 1, so each difference
    # carries an error of a few ulps of 10 (1e-6); the rates here are >= 1e-3.
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=3e-6)


# The forms MoXing scripts use, each a function of TF1's global step.

def warmup_polynomial(step):
    """A linear warm-up to 2.0 over 3 steps, then polynomial decay, in tensor arithmetic."""
    steps = tf.cast(step, tf.float32)
    warmup = 2.0 * (steps + 1.0) / 3.0
    decay = 2.0 * (1.0 - tf.minimum(steps, 10.0) / 10.0) ** 2 + 0.01
    return tf.minimum(warmup, decay)


def cond_piecewise_or_exponential(step):
    """The issue's example: piecewise after the warm-up, exponential growth during it."""
    return tf.cond(step > 4,
                   lambda: tf.compat.v1.train.piecewise_constant(step, [6], [0.1, 0.01]),
                   lambda: tf.compat.v1.train.exponential_decay(0.01, step, 2, 10.0 ** 0.5))


def where_two_rates(step):
    return tf.where(step < 3, 0.3, 0.03)


TF1_DECAYS = {
    "exponential_decay": lambda step: tf.compat.v1.train.exponential_decay(0.2, step, 3, 0.5, staircase=True),
    "inverse_time_decay": lambda step: tf.compat.v1.train.inverse_time_decay(0.2, step, 2, 0.5),
    "natural_exp_decay": lambda step: tf.compat.v1.train.natural_exp_decay(0.2, step, 2, 0.5),
    "polynomial_decay": lambda step: tf.compat.v1.train.polynomial_decay(0.2, step, 6, 0.01, power=2.0),
    "cosine_decay": lambda step: tf.compat.v1.train.cosine_decay(0.2, step, 7),
    "cosine_decay_restarts": lambda step: tf.compat.v1.train.cosine_decay_restarts(0.2, step, 3),
    "linear_cosine_decay": lambda step: tf.compat.v1.train.linear_cosine_decay(0.2, step, 7),
    "piecewise_constant": lambda step: tf.compat.v1.train.piecewise_constant(step, [2, 5], [0.3, 0.1, 0.02]),
}

def scaled_exponential(step):
    """Arithmetic on a TF1 decay function's result (eagerly, TF2 gives it as a callable)."""
    return 2.0 * tf.compat.v1.train.exponential_decay(0.1, step, 2, 0.5) + 0.01


def where_warmup_or_cosine(step):
    """A decay function's result inside tf.where, against a linear warm-up."""
    steps = tf.cast(step, tf.float32)
    return tf.where(step < 3, 0.1 * (steps + 1.0), tf.compat.v1.train.cosine_decay(0.3, step - 3, 6))


FORMS = {"warmup_polynomial": warmup_polynomial, "cond_piecewise_or_exponential": cond_piecewise_or_exponential,
         "where": where_two_rates, "scaled_exponential": scaled_exponential,
         "where_warmup_or_cosine": where_warmup_or_cosine, **TF1_DECAYS}


def tf1_sgd_fn(rate_of_step):
    """optimizer_fn as a MoXing script writes it: the rate built from TF1's global step."""

    def optimizer_fn():
        step = tf.compat.v1.train.get_or_create_global_step()
        return tf.compat.v1.train.GradientDescentOptimizer(rate_of_step(step))

    return optimizer_fn


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_tf1_optimizers_rate_of_the_step_is_the_tf1_session_rate_at_every_step(tmp_path, form):
    optimizer_fn = tf1_sgd_fn(FORMS[form])
    assert_rates(applied_rates(moxlite_probe(tmp_path, optimizer_fn)), applied_rates(tf1_probe(optimizer_fn)))


def test_the_rates_are_not_the_step_0_value(tmp_path):
    """The reference itself changes over the steps compared (else the tests above prove nothing)."""
    for form in ("warmup_polynomial", "cond_piecewise_or_exponential", "where"):
        rates = applied_rates(tf1_probe(tf1_sgd_fn(FORMS[form])))
        assert len(set(np.round(rates, 6))) >= 2, form


def momentum_of_the_step_fn():
    """Momentum that rises from 0.5 to 0.9 after step 3, and a decaying rate, both tensors of the step."""

    def optimizer_fn():
        step = tf.compat.v1.train.get_or_create_global_step()
        momentum = tf.where(step < 3, 0.5, 0.9)
        rate = tf.compat.v1.train.exponential_decay(0.1, step, 1, 0.7)
        return tf.compat.v1.train.MomentumOptimizer(rate, momentum)

    return optimizer_fn


def test_momentum_computed_from_the_step_follows_it(tmp_path):
    optimizer_fn = momentum_of_the_step_fn()
    np.testing.assert_allclose(moxlite_probe(tmp_path, optimizer_fn), tf1_probe(optimizer_fn), rtol=1e-5, atol=3e-6)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_two_replicas_follow_the_step(tmp_path, jit_compile):
    """MirroredStrategy on 2 logical CPUs, without and with jit_compile (XLA)."""
    optimizer_fn = tf1_sgd_fn(cond_piecewise_or_exponential)
    assert_rates(applied_rates(moxlite_probe(tmp_path, optimizer_fn, replicas=2, jit_compile=jit_compile)),
                 applied_rates(tf1_probe(optimizer_fn)))


# get_optimizer_fn: what MoXing's examples pass as learning_rate.

def named_fn(learning_rate_of_step):
    """get_optimizer_fn('sgd', learning_rate=...) inside optimizer_fn, the rate made from the step."""

    def optimizer_fn():
        step = tf.compat.v1.train.get_or_create_global_step()
        return mox.get_optimizer_fn("sgd", learning_rate=learning_rate_of_step(step))()

    return optimizer_fn


EXPONENTIAL = functools.partial(tf.compat.v1.train.exponential_decay, learning_rate=0.2, decay_steps=2,
                                decay_rate=0.5)

# form -> (optimizer_fn, made when the test runs; the rate as a function of TF1's global step)
NAMED_FORMS = {
    "tensor of the step": (lambda: named_fn(cond_piecewise_or_exponential), cond_piecewise_or_exponential),
    "partial of a TF1 decay function": (lambda: mox.get_optimizer_fn("sgd", learning_rate=EXPONENTIAL),
                                        lambda step: EXPONENTIAL(global_step=step)),
    "function of the step": (lambda: mox.get_optimizer_fn("sgd", learning_rate=where_two_rates), where_two_rates),
}


@pytest.mark.parametrize("form", sorted(NAMED_FORMS))
def test_get_optimizer_fn_takes_moxings_learning_rates_of_the_step(tmp_path, form):
    make_optimizer_fn, rate_of_step = NAMED_FORMS[form]
    optimizer_fn = make_optimizer_fn()
    assert_rates(applied_rates(moxlite_probe(tmp_path, optimizer_fn)), tf1_rates(rate_of_step))


def test_a_wrapper_stack_applies_the_rate_of_the_step_it_applies_at(tmp_path):
    """batch_gradients(lars(sgd)) on 2 replicas: an update every 2 micro-steps, at the rate of its step."""

    def optimizer_fn():
        step = tf.compat.v1.train.get_or_create_global_step()
        sgd = mox.get_optimizer_fn("sgd", learning_rate=warmup_polynomial(step))()
        lars = mox.get_optimizer_wrapper_fn("lars", sgd, ratio=0.01, weight_decay=0.0, exclude=["rate_probe"])()
        return mox.get_optimizer_wrapper_fn("batch_gradients", lars, num_batches=2)()

    rates = tf1_rates(warmup_polynomial)
    # The update of micro-steps (2k, 2k + 1) is applied at global step 2k + 1.
    expected = np.where(np.arange(STEPS) % 2 == 1, rates, 0.0)
    assert_rates(applied_rates(moxlite_probe(tmp_path, optimizer_fn, replicas=2)), expected)


def test_thor_applies_the_rate_of_the_step(tmp_path):
    """thor(momentum of TF1): THOR preconditions the Dense layer; the probe, no layer, takes the rate."""

    def optimizer_fn():
        step = tf.compat.v1.train.get_or_create_global_step()
        sgd = tf.compat.v1.train.GradientDescentOptimizer(where_two_rates(step))
        return mox.get_optimizer_wrapper_fn("thor", sgd, damping=0.1, frequency=2)()

    assert_rates(applied_rates(moxlite_probe(tmp_path, optimizer_fn)), tf1_rates(where_two_rates))


def test_a_second_run_traces_its_own_optimizer_fn(tmp_path):
    for decay_rate in (0.5, 0.9):
        def rate_of_step(step, decay_rate=decay_rate):
            return 0.3 * decay_rate ** tf.cast(step, tf.float32)

        optimizer_fn = tf1_sgd_fn(rate_of_step)
        assert_rates(applied_rates(moxlite_probe(tmp_path, optimizer_fn, name=f"run{decay_rate}")),
                     applied_rates(tf1_probe(optimizer_fn)))


def test_a_python_number_read_from_the_step_is_constant_and_says_so(tmp_path, caplog):
    """What a TF1 graph could not follow either: the value at step 0, and one line that says so."""

    def optimizer_fn():
        step = tf.compat.v1.train.get_or_create_global_step()
        return tf.compat.v1.train.GradientDescentOptimizer(0.1 if int(step) < 3 else 0.01)

    logger = logs.get_logger()   # moxlite's channel does not propagate to the root logger
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO, logger="moxlite"):
            rates = applied_rates(moxlite_probe(tmp_path, optimizer_fn))
    finally:
        logger.removeHandler(caplog.handler)
    assert_rates(rates, np.full(STEPS, 0.1))
    lines = [r.getMessage() for r in caplog.records if "constant for the whole run" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "global step 0" in lines[0]


def test_overlapping_runs_on_two_threads_each_see_their_step_and_leave_tf1_as_it_was():
    """Two runs in one process may call their optimizer_fn at the same time on two threads
    (tests/training/mixed_precision/test_amp_levels.py runs two at once). Forced here into the order that once leaked:
    A opens, B opens, A closes, B closes. Each thread reads its own step while open, and
    afterwards TF1's getters and decay functions behave as TF1's own again: in a graph, a graph
    variable and a graph tensor; eagerly, TF2's callable."""
    steps = {"a": tf.Variable(3, dtype=tf.int64), "b": tf.Variable(7, dtype=tf.int64)}
    a_open, b_open, a_closed = threading.Event(), threading.Event(), threading.Event()
    read, failures = {}, []

    def run(name, wait_before, signal, wait_inside, signal_after):
        try:
            if wait_before is not None:
                assert wait_before.wait(30)
            with tf1_adapter.run_global_step_as_tf1_global_step(steps[name]):
                signal.set()
                assert wait_inside.wait(30)
                read[name] = int(tf.compat.v1.train.get_global_step().numpy())
            if signal_after is not None:
                signal_after.set()
        except BaseException as error:   # reported on the test's thread
            failures.append(error)
            for event in (a_open, b_open, a_closed):
                event.set()

    threads = [threading.Thread(target=run, args=("a", None, a_open, b_open, a_closed)),
               threading.Thread(target=run, args=("b", a_open, b_open, a_closed, None))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures
    assert read == {"a": 3, "b": 7}
    with tf.Graph().as_default() as graph:
        global_step = tf.compat.v1.train.get_or_create_global_step()
        assert global_step.graph is graph
        assert tf.compat.v1.train.exponential_decay(0.2, global_step, 3, 0.5).graph is graph
    assert callable(tf.compat.v1.train.exponential_decay(0.2, steps["a"], 3, 0.5))
