"""THOR's ``statistics: kfac`` (K-FAC expand over the rows the loss reaches, factors on the loss's
own scale, damping relative to each factor) and THOR over an Adam-family inner optimizer,
thor(adamw), thor(lamb) and thor(adam), on the grammar masked LM of recipes/grammar_mlm_thor.yaml
against tests/thormlmlib.py's numpy reference, on 1 replica and on 2, and an interrupted run
against an uninterrupted one.

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
# THOR over an Adam-family optimizer (adamw, lamb, adam) leaves the attention's query and key plain
# here: at initialisation the softmax is nearly uniform and their gradients (~1e-5) are near float32
# noise, which their tiny G (tr/d ~1e-11, the natural gradient's multiplier 1e10) turns into steps
# whose signs no float32 run fixes.
ADAM_FAMILY_EXCLUDE = ("query", "key/kernel")
# The stacks with kfac statistics, and for each a wrong inner optimizer its reference must tell
# apart: Lamb without its trust ratio is AdamW; AdamW and Adam differ in THOR's weight decay (Adam's
# is THOR's, added to the gradient: it weighs on the plain query and key kernels, whose gradients
# are of its size).
KFAC_STACKS = {"adamw": "adam", "lamb": "adamw", "adam": "adamw"}


def _exclude(inner):
    return ADAM_FAMILY_EXCLUDE if inner != "momentum" else ()


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


def _largest_step(inner, start):
    """{path: the most any entry can move in the run's three updates}. Adam and AdamW: 3 times the
    sum of the learning rates (Adam's step per entry is of the order of the learning rate). Lamb:
    the sum of the learning rates times 1.1 ||w at the start|| + 3: its update of a variable has
    norm lr ||w|| (||w|| growing by at most 1 + lr an update), or, where w is 0 (a bias at the
    start), Adam's own step."""
    rates = sum(thormlmlib.polynomial(thormlmlib.LEARNING_RATE, step, STEPS) for step in range(STEPS))
    if inner == "lamb":
        return {path: rates * (1.1 * np.linalg.norm(value) + 3) for path, value in start.items()}
    return {path: 3 * rates for path in start}


def _noise_floor(inner):
    """The step float32 noise on a gradient zero in exact arithmetic (the key's bias: the softmax
    ignores it; ~3e-12 here) can take: Adam's epsilon (1e-7) on the root of the uncorrected second
    moment gives lr sqrt(1 - beta_2) noise / epsilon, ~3e-9 (1e-8 allowed); Lamb's, on the
    corrected root, 1 / sqrt(1 - beta_2) = 32 times that at the trust ratio 1 of a variable that is
    0 (the bias at the start), measured up to 1.1e-7 (3e-7 allowed). Both far below a real step
    (~1e-3 for Adam, ~1e-4 for Lamb on the 0.02-sized initial weights)."""
    return 3e-7 if inner == "lamb" else 1e-8


def _entries_outside(got, want, start, undetermined, inner):
    """How many entries outside those the reference marks ``undetermined`` have an update (trained -
    start) further than 2 % of the variable's largest reference step from the reference's (plus
    float32 rounding of the weight and ``_noise_floor``), and how many entries there are."""
    outside = total = 0
    for path, value in want.items():
        update = value - start[path]
        error = np.abs((got[path] - start[path]) - update)
        rounding = 4 * np.finfo(np.float32).eps * np.abs(start[path]).max()
        tolerance = 2e-2 * np.abs(update).max() + rounding + _noise_floor(inner)
        outside += int(((error > tolerance) & ~undetermined.get(path, np.zeros(error.shape, bool))).sum())
        total += error.size
    return outside, total


def _assert_update_equals(got, want, start, what, undetermined, inner):
    """Every variable's update (trained - start) is within the inner optimizer's largest possible
    move (``_largest_step``) of the reference's, and all but 1 in 10,000 of its entries outside
    those the reference marks ``undetermined`` (under 10 % of them) within 2 % of the variable's
    largest step (``_entries_outside``).

    Adam divides each entry by its own running magnitude, so every step is of the order of the
    learning rate whatever the gradient's size (Lamb's the learning rate times the trust ratio,
    one number per variable), and an entry whose preconditioned gradient is small against its
    layer's largest carries the preconditioning's float32 error (~1e-4 of the largest,
    tests/optimizers/thor/test_grammar_reference.py) magnified into its step; over three updates
    Adam follows the ratios of an entry's successive gradients, and the summation order of one
    replica against two moves a few more entries. Lamb's trust ratio ||w|| / ||Adam's step|| is
    a norm over the whole variable, which those few entries barely move. A statistics mode or
    inner optimizer that differs moves more entries than the 1 in 10,000 (the checks against the
    other references below). A gradient zero in exact arithmetic is float32 noise, which the
    inner optimizer's epsilon turns into steps below ``_noise_floor``.
    """
    marked = sum(int(mask.sum()) for mask in undetermined.values())
    total = sum(mask.size for mask in undetermined.values())
    assert marked < 0.1 * total, (marked, total)
    largest = _largest_step(inner, start)
    for path, value in want.items():
        error = np.abs((got[path] - start[path]) - (value - start[path]))
        assert error.max() <= largest[path], (what, path, error.max())
    outside, total = _entries_outside(got, want, start, undetermined, inner)
    assert outside <= 1e-4 * total, (what, outside, total)


def _assert_told_apart(other, expected, start, what, undetermined, inner):
    """The reference of another stack is outside ``_assert_update_equals``'s 1 in 10,000."""
    outside, total = _entries_outside(other, expected, start, undetermined, inner)
    assert outside > 1e-4 * total, (what, outside, total)


def _batches():
    features = thormlmlib.examples(STEPS * BATCH)
    assert (features["masked_lm_weights"].sum(axis=1) == 10).all()   # the same weight in every example
    return features, [{key: value[i * BATCH:(i + 1) * BATCH] for key, value in features.items()}
                      for i in range(STEPS)]


def _reference(start, batches, statistics, inner, undetermined=None):
    network = thormlmlib.Network(batches[0], start=start)
    return thormlmlib.numpy_thor(network, batches, STEPS, FREQUENCY, statistics=statistics, inner=inner,
                                 undetermined=undetermined, exclude=_exclude(inner))


@pytest.mark.own_process
@pytest.mark.slow   # two runs of the full-size model and the reference's three updates (more to contrast)
@pytest.mark.parametrize("statistics,inner", [("kfac", inner) for inner in KFAC_STACKS] + [("mindspore", "adamw")])
def test_statistics_and_inner_optimizer_equal_numpy_on_one_and_two_replicas(tmp_path, statistics, inner):
    features, batches = _batches()
    network = thormlmlib.Network(batches[0])
    start = network.weights()
    one = _train(tmp_path / "one", network, features, BATCH, statistics, inner)

    undetermined = {}
    expected = _reference(start, batches, statistics, inner, undetermined)
    assert set(one) == set(expected), set(one) ^ set(expected)
    _assert_update_equals(one, expected, start, f"{statistics} {inner}, 1 replica", undetermined, inner)
    if statistics == "kfac":
        # The tolerance tells the stack apart: MindSpore's statistics, or another inner optimizer, move
        # the weights elsewhere.
        _assert_told_apart(_reference(start, batches, "mindspore", inner), expected, start,
                           f"mindspore {inner} against kfac {inner}", undetermined, inner)
        _assert_told_apart(_reference(start, batches, "kfac", KFAC_STACKS[inner]), expected, start,
                           f"kfac {KFAC_STACKS[inner]} against kfac {inner}", undetermined, inner)

    mox.set_flag("num_gpus", 2)
    with mox.strategy_scope():
        network = thormlmlib.Network(batches[0], start=start)
    two = _train(tmp_path / "two", network, features, BATCH // 2, statistics, inner)
    _assert_update_equals(two, expected, start, f"{statistics} {inner}, 2 replicas", undetermined, inner)


@pytest.mark.own_process
@pytest.mark.slow   # three runs of the full-size model
@pytest.mark.parametrize("inner", list(KFAC_STACKS))
def test_kfac_thor_over_inner_optimizer_interrupted_and_resumed_equals_uninterrupted(tmp_path, inner):
    """Stopped after update 1 (a refresh at 0, a stale update at 1), resumed for update 2 (a refresh):
    the restored inverses, the inner optimizer's moments and THOR's update counter carry on exactly."""
    features, batches = _batches()
    network = thormlmlib.Network(batches[0])
    start = network.weights()
    straight = _train(tmp_path / "straight", network, features, BATCH, "kfac", inner)
    network = thormlmlib.Network(batches[0], start=start)
    _train(tmp_path / "resumed", network, features, BATCH, "kfac", inner, steps=2)
    network = thormlmlib.Network(batches[0], start=start)
    resumed = _train(tmp_path / "resumed", network, features, BATCH, "kfac", inner)
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
    # layers, less the 2 queries and 2 keys ADAM_FAMILY_EXCLUDE leaves plain.
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


def test_kfac_statistics_refuse_pi_damping_naming_both_settings():
    """kfac damps each factor by its own scale: pi_damping on top would be a second split, so the
    wrapper refuses the pair with the fields and the fix."""
    inner = mox.get_optimizer_fn("momentum", 0.01, momentum=0.9)
    with pytest.raises(mox.errors.OptimizerError) as raised:
        mox.get_optimizer_wrapper_fn("thor", inner, statistics="kfac", pi_damping=True)()
    message = str(raised.value)
    assert "pi_damping=True" in message and "statistics='kfac'" in message and "drop pi_damping" in message
