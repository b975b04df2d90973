"""THOR's two options past MindSpore's open code: K-FAC's pi-corrected damping and the trace refresh.

References: thorlib's numpy THOR (pi from numpy traces of the full factors), a plain-Python
rendering of the trace rule, the fixed-refresh run, a single device, an uninterrupted run.
"""

import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite import errors
from moxlite.optimizers.thor import damping as thor_damping
from moxlite.optimizers.thor import factors
from moxlite.optimizers.thor import refresh as thor_refresh
from tests import runlib, thorlib

BATCH = 16


def _run(log_dir, optimizer_fn, steps, batch=BATCH, images=None, labels=None):
    if images is None:
        images, labels = thorlib.small_digits(BATCH * 2 * 8)
    runlib.train(log_dir, runlib.input_fn_for(images, labels), thorlib.conv_model_fn("same"), optimizer_fn,
                 steps=steps, batch_size=batch, log_every_n_steps=100)
    return thorlib.model_variables(log_dir)


def _kept(optimizer_fn):
    """optimizer_fn, and the list its THOR wrapper is appended to when made."""
    made = []

    def wrapped():
        optimizer = optimizer_fn()
        made.append(optimizer)
        return optimizer
    return wrapped, made


def test_pi_damping_equals_numpy_on_conv_and_dense_over_a_refresh_and_a_stale_step(tmp_path):
    """Conv2D (A 9x9, G 3x3, lambda/(H*W)) and Dense (A 108 in two 64-blocks, G 10): A damped by
    pi*sqrt(lambda), G by sqrt(lambda)/pi, pi from the traces of the full numpy factors."""
    images, labels = thorlib.small_digits(BATCH * 2)
    settings = dict(lr=0.05, momentum=0.9, damping=0.05, frequency=3, block_size=64, weight_decay=0.0)
    start = thorlib.initial_conv_weights("same")
    trained = _run(tmp_path / "pi", thorlib.thor_optimizer_fn(pi_damping=True, **settings), 2,
                   images=images, labels=labels)
    expected = thorlib.numpy_thor_conv(images, labels, start, BATCH, 2, padding="same", pi_damping=True, **settings)
    even = thorlib.numpy_thor_conv(images, labels, start, BATCH, 2, padding="same", **settings)
    assert np.abs(expected[2] - even[2]).max() > 1e-3   # pi is far from 1 here: the test can tell them apart
    for got, want in zip(trained, expected):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_pi_for_an_embedding_reads_its_diagonal_a_and_a_blocked_g_reads_every_block():
    """Embedding: A is the token-frequency vector (trace = its sum); G in two blocks with a padded
    remainder (side 5 in blocks of 3): the padding adds nothing to the trace."""
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 5, 16).astype(np.float32)
    a = counts / counts.sum()
    rows = rng.normal(size=(40, 5)).astype(np.float32)
    g_full = rows.T @ rows / 40
    blocks = np.zeros((2, 3, 3), np.float32)
    blocks[0], blocks[1, :2, :2] = g_full[:3, :3], g_full[3:, 3:]
    geometry = factors.Geometry("Embedding", 16, 5, (16, 5))
    a_damping, g_damping = thor_damping.factor_dampings(tf.constant(0.2), tf.constant(a), tf.constant(blocks),
                                                        geometry, True)
    pi = np.sqrt((a.sum() / 16) / (np.trace(g_full) / 5))
    np.testing.assert_allclose([float(a_damping), float(g_damping)], [0.2 * pi, 0.2 / pi], rtol=1e-5)
    assert abs(pi - 1) > 0.5
    even = thor_damping.factor_dampings(tf.constant(0.2), tf.constant(a), tf.constant(blocks), geometry, False)
    assert [float(v) for v in even] == pytest.approx([0.2, 0.2])
    zero = thor_damping.factor_dampings(tf.constant(0.2), tf.zeros([16]), tf.constant(blocks), geometry, True)
    assert [float(v) for v in zero] == pytest.approx([0.2, 0.2])   # no rows: pi = 1, not 0 or inf


def _reference_decisions(traces, threshold, growth):
    """Plain Python: per layer, the refreshes at which it inverts, given its (tr A, tr G) per refresh."""
    inverted = []
    for layer in traces:
        reference, waited, gap, at = None, 0, 1.0, []
        for index, (a, g) in enumerate(layer):
            if reference is None:
                invert = True
            else:
                change = max(abs(a - reference[0]) / reference[0], abs(g - reference[1]) / reference[1])
                invert = waited + 1 >= gap and change >= threshold
            if invert:
                reference, waited, gap = (a, g), 0, gap * growth
                at.append(index)
            else:
                waited += 1
        inverted.append(at)
    return inverted


@pytest.mark.parametrize("threshold,growth", [(0.2, 1.0), (0.2, 2.0), (0.0, 1.5)])
def test_trace_rule_inverts_the_layers_a_python_reference_chooses(threshold, growth):
    """Three layers' scripted factor traces over ten refreshes: one steady, one drifting, one jumping."""
    steady = [(1.0 + 0.01 * k, 2.0) for k in range(10)]
    drifting = [(1.0 * 1.1 ** k, 0.5) for k in range(10)]
    jumping = [(3.0, 1.0)] * 4 + [(6.0, 1.0)] * 3 + [(6.0, 0.2)] * 3
    traces = [steady, drifting, jumping]
    rule = thor_refresh.TraceRefresh(threshold, growth)
    states = [rule.slot_variables(lambda suffix, shape, init, dtype: tf.Variable(
        tf.ones(shape, dtype) if init == "ones" else tf.zeros(shape, dtype))) for _ in traces]
    got = [[] for _ in traces]
    for index in range(10):
        for layer, (series, state) in enumerate(zip(traces, states)):
            a, g = series[index]
            invert, record = rule.decide(tf.constant(a), tf.constant(g), state, tf.constant(False))
            record(tf.constant(True))
            if bool(invert):
                got[layer].append(index)
    expected = _reference_decisions(traces, threshold, growth)
    assert got == expected
    assert [int(state["inversions"].numpy()) for state in states] == [len(at) for at in expected]
    if threshold and growth == 1.0:
        assert expected[0] == [0] and len(expected[1]) > 2   # the rule does tell the layers apart


def test_trace_refresh_with_threshold_zero_equals_the_fixed_refresh_exactly(tmp_path):
    settings = dict(damping=0.05, frequency=2, weight_decay=5e-4, pi_damping=True)
    fixed = _run(tmp_path / "fixed", thorlib.thor_optimizer_fn(**settings), 7)
    optimizer_fn, made = _kept(thorlib.thor_optimizer_fn(refresh="trace", trace_threshold=0.0, **settings))
    trace = _run(tmp_path / "trace", optimizer_fn, 7)
    for a, b in zip(fixed, trace):
        np.testing.assert_array_equal(a, b)
    assert set(made[0].inversion_counts().values()) == {4}   # refreshes at updates 0, 2, 4, 6


def test_trace_refresh_with_a_huge_threshold_inverts_only_at_the_first_refresh(tmp_path):
    """Equal to a fixed run whose only refresh is the first (frequency beyond the run)."""
    first_only = _run(tmp_path / "first", thorlib.thor_optimizer_fn(damping=0.05, frequency=100), 7)
    optimizer_fn, made = _kept(thorlib.thor_optimizer_fn(damping=0.05, frequency=2, refresh="trace",
                                                         trace_threshold=1e9))
    trace = _run(tmp_path / "trace", optimizer_fn, 7)
    for a, b in zip(first_only, trace):
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert set(made[0].inversion_counts().values()) == {1}


TRACE_OPTIONS = dict(damping=0.05, frequency=2, weight_decay=5e-4, pi_damping=True, refresh="trace",
                     trace_threshold=0.05, interval_growth=1.5)


def test_two_replicas_equal_one_device_with_pi_damping_and_trace_refresh(tmp_path):
    optimizer_fn, made = _kept(thorlib.thor_optimizer_fn(**TRACE_OPTIONS))
    one = _run(tmp_path / "one", optimizer_fn, 7, batch=2 * BATCH)
    mox.set_flag("num_gpus", 2)
    two = _run(tmp_path / "two", thorlib.thor_optimizer_fn(**TRACE_OPTIONS), 7)
    for a, b in zip(one, two):
        np.testing.assert_allclose(a, b, atol=1e-5)
    counts = made[0].inversion_counts()
    assert min(counts.values()) < 4, counts   # some inversion was skipped: the rule acted


def test_resumed_trace_refresh_equals_uninterrupted(tmp_path):
    """threshold 0, growth 2: a layer inverts at refreshes 0, 2, 6 (updates 0, 4, 12). Stopped after
    update 4, the resumed run must know the gap (4) and the refreshes waited to skip the refreshes
    at updates 6 and 8, and keep update 4's inverses (a fresh state would invert at update 6)."""
    options = dict(damping=0.05, frequency=2, refresh="trace", trace_threshold=0.0, interval_growth=2.0)
    straight = _run(tmp_path / "straight", thorlib.thor_optimizer_fn(**options), 9)
    _run(tmp_path / "resumed", thorlib.thor_optimizer_fn(**options), 5)
    optimizer_fn, made = _kept(thorlib.thor_optimizer_fn(**options))
    resumed = _run(tmp_path / "resumed", optimizer_fn, 9)
    for a, b in zip(straight, resumed):
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert set(made[0].inversion_counts().values()) == {2}   # updates 0 and 4, restored


@pytest.mark.parametrize("key,value", [("pi_damping", "yes"), ("refresh", "sometimes"),
                                       ("trace_threshold", -0.1), ("interval_growth", 0.5)])
def test_bad_values_are_one_line_errors_naming_the_parameter(key, value):
    inner = mox.get_optimizer_fn("momentum", learning_rate=0.1, momentum=0.9)
    with pytest.raises(errors.OptimizerError, match=f"thor: {key}=") as caught:
        mox.get_optimizer_wrapper_fn("thor", inner, **{key: value})()
    assert "\n" not in str(caught.value)
