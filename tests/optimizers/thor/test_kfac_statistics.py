"""THOR's ``statistics: kfac`` (K-FAC expand over the rows the loss reaches, factors on the loss's
own scale, damping relative to each factor), ``kfac_reduce`` (K-FAC reduce: one term per example,
its reached rows' inputs averaged and their ds summed) and the thor(adamw) stack, on the grammar
masked LM of recipes/grammar_mlm_thor.yaml against tests/thormlmlib.py's numpy reference, on 1
replica and on 2, and an interrupted run against an uninterrupted one.

The model is masked: after the second block's attention only the 10 masked positions of each
64-token sequence reach the loss, so the second block's query, attention-out and feed-forward
layers, and the head, see 80 of 512 rows on 8 examples, and the loss's terms are those 80: a
reference that counted all rows, or scaled by the batch, differs from the one these tests hold.
Three updates at frequency 2, as tests/optimizers/thor/test_grammar_reference.py.
"""

import numpy as np
import pytest

import moxlite as mox
from tests import runlib, thormlmlib

pytest.importorskip("keras_hub")

STEPS = 3
FREQUENCY = 2
BATCH = 8
# thor(adamw) leaves the attention's query and key plain here: at initialisation the softmax is
# nearly uniform and their gradients (~1e-5) are near float32 noise, which their tiny G (tr/d ~1e-11,
# the natural gradient's multiplier 1e10) turns into steps whose signs no float32 run fixes.
ADAMW_EXCLUDE = ("query", "key/kernel")
# The statistics each mode's reference is checked to differ from.
CONTRASTED = {"kfac": "mindspore", "kfac_reduce": "kfac"}


def _exclude(inner):
    return ADAMW_EXCLUDE if inner == "adamw" else ()


def _train(log_dir, network, features, batch, statistics, inner, steps=STEPS, made=None):
    optimizer_fn = thormlmlib.thor_optimizer_fn(STEPS, FREQUENCY, statistics, inner, _exclude(inner))
    if made is not None:
        def optimizer_fn(build=optimizer_fn):
            made.append(build())
            return made[-1]
    mox.run(input_fn=thormlmlib.input_fn_for(features), model_fn=network.model_fn,
            optimizer_fn=optimizer_fn,
            run_mode=mox.ModeKeys.TRAIN, batch_size=batch, log_dir=str(log_dir), max_number_of_steps=steps,
            log_every_n_steps=STEPS)
    return runlib.checkpoint_by_name(str(log_dir))


def _assert_update_equals(got, want, start, what, undetermined):
    """Every variable's update (trained - start) is within Adam's largest possible step (3 times
    the sum of the learning rates) of the reference's, and all but 1 in 10,000 of its entries
    outside those the reference marks ``undetermined`` (under 10 % of them) within 2 % of the
    variable's largest step.

    Adam divides each entry by its own running magnitude, so every step is of the order of the
    learning rate whatever the gradient's size, and an entry whose preconditioned gradient is
    small against its layer's largest carries the preconditioning's float32 error (~1e-4 of the
    largest, tests/optimizers/thor/test_grammar_reference.py) magnified into its step; over three updates
    Adam follows the ratios of an entry's successive gradients, and the summation order of one
    replica against two moves a few more entries. A statistics mode or stack that differs moves
    most entries by a step's whole size (the check against the other mode below). A gradient zero
    in exact arithmetic (the key's bias: the softmax ignores it) is float32 noise of ~1e-15, which
    Adam's epsilon (1e-7) turns into steps of ~1e-9: 1e-8 absolute, far below a real step (~1e-3).
    """
    largest_step = 3 * sum(thormlmlib.polynomial(thormlmlib.LEARNING_RATE, step, STEPS) for step in range(STEPS))
    marked = sum(int(mask.sum()) for mask in undetermined.values())
    total = sum(mask.size for mask in undetermined.values())
    assert marked < 0.1 * total, (marked, total)
    outside = 0
    for path, value in want.items():
        update = value - start[path]
        error = np.abs((got[path] - start[path]) - update)
        assert error.max() <= largest_step, (what, path, error.max())
        rounding = 4 * np.finfo(np.float32).eps * np.abs(start[path]).max()
        tolerance = 2e-2 * np.abs(update).max() + rounding + 1e-8
        outside += int(((error > tolerance) & ~undetermined.get(path, np.zeros(error.shape, bool))).sum())
    assert outside <= 1e-4 * total, (what, outside, total)


def _batches():
    features = thormlmlib.examples(STEPS * BATCH)
    assert (features["masked_lm_weights"].sum(axis=1) == 10).all()   # the same weight in every example
    return features, [{key: value[i * BATCH:(i + 1) * BATCH] for key, value in features.items()}
                      for i in range(STEPS)]


@pytest.mark.own_process
@pytest.mark.slow   # two runs of the full-size model and the reference's three updates
@pytest.mark.parametrize("statistics,inner", [("kfac", "adamw"), ("kfac_reduce", "adamw"), ("mindspore", "adamw")])
def test_statistics_and_inner_optimizer_equal_numpy_on_one_and_two_replicas(tmp_path, statistics, inner):
    features, batches = _batches()
    network = thormlmlib.Network(batches[0])
    start = network.weights()
    one = _train(tmp_path / "one", network, features, BATCH, statistics, inner)

    network = thormlmlib.Network(batches[0], start=start)
    undetermined = {}
    expected = thormlmlib.numpy_thor(network, batches, STEPS, FREQUENCY, statistics=statistics, inner=inner,
                                     undetermined=undetermined, exclude=_exclude(inner))
    assert set(one) == set(expected), set(one) ^ set(expected)
    _assert_update_equals(one, expected, start, f"{statistics} {inner}, 1 replica", undetermined)
    if statistics in CONTRASTED:
        # The reference tells the modes apart: MindSpore's formula (against kfac's), expand's rows
        # (against reduce's) move the weights elsewhere, beyond what the check above lets through.
        for variable in network.variables:
            variable.assign(start[variable.path])
        other = thormlmlib.numpy_thor(network, batches, STEPS, FREQUENCY, statistics=CONTRASTED[statistics],
                                      inner=inner, exclude=_exclude(inner))
        path = "transformer_layer_1/feedforward_output_dense/kernel"
        gap = np.abs((other[path] - start[path]) - (expected[path] - start[path])).max()
        assert gap > 0.2 * np.abs(expected[path] - start[path]).max(), gap
        with pytest.raises(AssertionError):
            _assert_update_equals(other, expected, start, f"{CONTRASTED[statistics]} against {statistics}",
                                  undetermined)

    mox.set_flag("num_gpus", 2)
    with mox.strategy_scope():
        network = thormlmlib.Network(batches[0], start=start)
    two = _train(tmp_path / "two", network, features, BATCH // 2, statistics, inner)
    _assert_update_equals(two, expected, start, f"{statistics} {inner}, 2 replicas", undetermined)


@pytest.mark.own_process
@pytest.mark.slow   # three runs of the full-size model
def test_kfac_thor_over_adamw_interrupted_and_resumed_equals_uninterrupted(tmp_path):
    """Stopped after update 1 (a refresh at 0, a stale update at 1), resumed for update 2 (a refresh):
    the restored inverses, AdamW's moments and THOR's update counter carry on exactly."""
    features, batches = _batches()
    network = thormlmlib.Network(batches[0])
    start = network.weights()
    straight = _train(tmp_path / "straight", network, features, BATCH, "kfac", "adamw")
    network = thormlmlib.Network(batches[0], start=start)
    _train(tmp_path / "resumed", network, features, BATCH, "kfac", "adamw", steps=2)
    network = thormlmlib.Network(batches[0], start=start)
    resumed = _train(tmp_path / "resumed", network, features, BATCH, "kfac", "adamw")
    assert runlib.checkpoint_step(str(tmp_path / "resumed")) == STEPS
    for path, value in straight.items():
        np.testing.assert_allclose(resumed[path], value, rtol=0, atol=1e-6, err_msg=path)


@pytest.mark.own_process
@pytest.mark.slow   # two one-update runs of the full-size model
def test_health_line_warns_under_mindspores_statistics_and_not_under_kfac(tmp_path, capfd):
    """On the grammar model at MindSpore's damping (sqrt(lambda) = 0.22), G's scale (tr G / d, 1e-11 to
    1e-2 here) is below the damping on most layers, and the first refresh says so; with kfac each
    factor's damping is sqrt(lambda) times its own scale, so no factor is below it and no warning."""
    features, batches = _batches()
    # 3 tables, 2 x 6 attention and feed-forward layers, the pooler, the head's dense: 17 Kronecker
    # layers, less the 2 queries and 2 keys ADAMW_EXCLUDE leaves plain.
    layers = 13
    lines, health = {}, {}
    for statistics in ("mindspore", "kfac"):
        network = thormlmlib.Network(batches[0])
        made = []
        _train(tmp_path / statistics, network, features, BATCH, statistics, "adamw", steps=1, made=made)
        lines[statistics] = capfd.readouterr().err.splitlines()
        health[statistics] = made[-1].curvature_health()
    # On request, the same reading: MindSpore's G is below its damping on most layers, kfac's nowhere.
    assert len(health["mindspore"]) == len(health["kfac"]) == layers
    inert = [name for name, row in health["mindspore"].items() if row["g_scale"] < row["g_damping"]]
    assert len(inert) > layers // 2, health["mindspore"]
    assert all(row["g_scale"] >= row["g_damping"] and row["ratio"] >= 0 for row in health["kfac"].values())
    for statistics, found in lines.items():
        summary = [line for line in found if line.startswith("thor: curvature at update 0")]
        assert len(summary) == 1, (statistics, found[-20:])
        # The per-layer table of the first refresh: every Kronecker layer, LayerNorm left out.
        table = [line for line in found if line.startswith("thor:    ") and "update/gradient" in line]
        assert len(table) == layers, table
    warning = [line for line in lines["mindspore"] if line.startswith("thor: warning: a factor is below")]
    assert len(warning) == 1 and "statistics: kfac" in warning[0], lines["mindspore"][-20:]
    g_below = int(warning[0].split("(G on ")[1].split()[0])
    assert g_below == len(inert), (warning, inert)
    assert not [line for line in lines["kfac"] if "warning" in line], lines["kfac"][-20:]
    assert f"G below its damping on 0 of {layers} layers, A on 0" in " ".join(lines["kfac"])


@pytest.mark.parametrize("statistics", ["kfac", "kfac_reduce"])
def test_kfac_statistics_refuse_pi_damping_naming_both_settings(statistics):
    """kfac (and kfac_reduce) damps each factor by its own scale: pi_damping on top would be a second
    split, so the wrapper refuses the pair with the fields and the fix."""
    inner = mox.get_optimizer_fn("momentum", 0.01, momentum=0.9)
    with pytest.raises(mox.errors.OptimizerError) as raised:
        mox.get_optimizer_wrapper_fn("thor", inner, statistics=statistics, pi_damping=True)()
    message = str(raised.value)
    assert "pi_damping=True" in message and f"statistics='{statistics}'" in message and "drop pi_damping" in message
