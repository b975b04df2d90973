"""THOR on issue 32's workload (the grammar masked LM of recipes/grammar_mlm_thor.yaml, at its full
size) against its numpy reference (tests/thormlmlib.py), on 1 replica and on 2.

Three updates at frequency 2: a refresh, an update on the stale inverses, a second refresh from
the moved weights; learning rate and damping decay over those three updates, so each update sees
its own. The stack is MindSpore's BERT THOR (the BERT THOR recipes' form) on this model:
momentum 0.9, 128-blocks (the feed-forward's 512-wide sides are split in four), weight decay 5e-4
outside LayerNorm and biases, the masked-LM head tied to the token table.
"""

import numpy as np
import pytest

import moxlite as mox
from tests import runlib, thormlmlib

pytest.importorskip("keras_hub")

STEPS = 3
FREQUENCY = 2
BATCH = 8


def _train(log_dir, network, features, batch):
    runlib.train(log_dir, thormlmlib.input_fn_for(features), network.model_fn,
                 thormlmlib.thor_optimizer_fn(STEPS, FREQUENCY), steps=STEPS, batch_size=batch,
                 log_every_n_steps=STEPS)
    return runlib.checkpoint_by_name(str(log_dir))


def _assert_update_equals(got, want, start, what):
    """Each variable's update (trained - start) equals the reference's to 1e-3 of its largest entry,
    plus the float32 rounding of the weights themselves.

    The bound, from float32: the factors are sums of a few thousand float32 products (relative
    error ~1e-6), and the damped inverses amplify it by their condition number, at most
    (largest eigenvalue + sqrt(lambda)) / sqrt(lambda), here below 1e2 (sqrt(lambda) >= 0.13): about
    1e-4 of an update; the bound leaves a factor 10 over that. Where an update is smaller than the
    weights' float32 spacing (the attention's query and key at the start, whose gradients are
    ~1e-5), each of the three ``w += v`` rounds to half a spacing: 4 spacings, 4 * 2^-23 * |w|.
    A gradient that is zero in exact arithmetic (the key's bias: the softmax ignores it) is float32
    noise of ~1e-15 after the learning rate; 1e-12 absolute covers it, far below any real update.
    """
    for path, value in want.items():
        update = value - start[path]
        rounding = 4 * np.finfo(np.float32).eps * np.abs(start[path]).max()
        np.testing.assert_allclose(got[path] - start[path], update, rtol=0,
                                   atol=1e-3 * np.abs(update).max() + rounding + 1e-12, err_msg=f"{what}: {path}")


@pytest.mark.own_process
@pytest.mark.slow   # two runs of the full-size model, and the reference's three updates
def test_thor_on_the_grammar_masked_lm_equals_numpy_on_one_and_two_replicas(tmp_path, capsys):
    features = thormlmlib.examples(STEPS * BATCH)
    assert (features["masked_lm_weights"].sum(axis=1) == 10).all()   # the same weight in every example
    batches = [{key: value[i * BATCH:(i + 1) * BATCH] for key, value in features.items()} for i in range(STEPS)]
    network = thormlmlib.Network(batches[0])
    start = network.weights()

    one = _train(tmp_path / "one", network, features, BATCH)
    line = [line for line in capsys.readouterr().out.splitlines() if "thor: preconditioning" in line][0]
    # 20 in the backbone, the unused pooler among them (recorded: it is called), 2 in the head.
    assert "thor: preconditioning 23 layer(s)" in line, line
    assert line.count("G in 4 blocks of 128") == 2 and line.count("A in 4 blocks of 128") == 2, line

    network = thormlmlib.Network(batches[0], start=start)
    expected = thormlmlib.numpy_thor(network, batches, STEPS, FREQUENCY)
    for variable in network.variables:
        variable.assign(start[variable.path])
    plain = thormlmlib.numpy_thor(network, batches, STEPS, FREQUENCY, precondition=False)
    assert set(one) == set(expected), set(one) ^ set(expected)
    _assert_update_equals(one, expected, start, "1 replica")

    # The reference tells THOR from the plain stack where it matters: the tied table, the split
    # feed-forward sides, the head; and the pooler, which no gradient reaches, stays where it was.
    moved = {path for path in expected
             if np.abs((expected[path] - start[path]) - (plain[path] - start[path])).max()
             > 0.1 * np.abs(plain[path] - start[path]).max()}
    assert {"token_embedding/embeddings", "transformer_layer_1/feedforward_intermediate_dense/kernel",
            "transformer_layer_1/feedforward_output_dense/kernel", "masked_lm_head/intermediate_dense/kernel",
            "embeddings_layer_norm/gamma"} <= moved, sorted(moved)
    np.testing.assert_array_equal(one["pooled_dense/kernel"], start["pooled_dense/kernel"])

    mox.set_flag("num_gpus", 2)
    with mox.strategy_scope():
        network = thormlmlib.Network(batches[0], start=start)
    two = _train(tmp_path / "two", network, features, BATCH // 2)
    _assert_update_equals(two, expected, start, "2 replicas")
