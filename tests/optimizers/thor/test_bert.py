"""THOR on a tiny keras-hub BERT (issue 19): every projection, embedding and LayerNorm against a
numpy reference, chosen by stable path, on 2 replicas as on 1, and under O1."""

import re

import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from tests import thorbertlib, runlib

pytest.importorskip("keras_hub")

BATCH = 4
THOR = dict(lr=0.05, momentum=0.9, damping=0.05, frequency=2)
FEED_FORWARD = "feedforward_(intermediate|output)_dense"


def _lines(out, start):
    return [line.split("INFO:moxlite:")[-1] for line in out.splitlines() if start in line]


def _numpy_reference_test(tmp_path, include, preconditioned):
    """Two steps (a refresh, then a stale step) of thor(momentum) on a closed-over 1-layer BERT,
    against thorbertlib.numpy_thor from the same start; returns the paths whose weights THOR moved off
    plain momentum's (numpy, preconditioning nothing)."""
    tokens, segments, labels = thorbertlib.data(2 * BATCH)
    model, bert = thorbertlib.classifier()
    start = [v.numpy() for v in model.trainable_variables]
    thor = dict(THOR, **({"include": [include]} if include else {}))
    lr, momentum = thor.pop("lr"), thor.pop("momentum")
    runlib.train(tmp_path, thorbertlib.input_fn_for(tokens, segments, labels),
                 thorbertlib.closed_over_model_fn(model), thorbertlib.thor_optimizer_fn(lr, momentum, **thor),
                 steps=2, batch_size=BATCH)
    trained = runlib.checkpoint_by_name(str(tmp_path))
    for variable, value in zip(model.trainable_variables, start):
        variable.assign(value)
    steps = [(tokens[i * BATCH:(i + 1) * BATCH], segments[i * BATCH:(i + 1) * BATCH], labels[i * BATCH:(i + 1) * BATCH])
             for i in range(2)]
    expected = thorbertlib.numpy_thor(model, bert, model.get_layer("head"), steps, lr=lr, momentum=momentum,
                                  damping=THOR["damping"], frequency=THOR["frequency"], preconditioned=preconditioned)
    assert set(expected) == set(trained)
    for path, want in expected.items():
        np.testing.assert_allclose(trained[path], want, rtol=0, atol=1e-5, err_msg=path)
    for variable, value in zip(model.trainable_variables, start):
        variable.assign(value)
    plain = thorbertlib.numpy_thor(model, bert, model.get_layer("head"), steps, lr=lr, momentum=momentum,
                               damping=THOR["damping"], frequency=THOR["frequency"], preconditioned=lambda path: False)
    # Which weights preconditioning moved off the plain momentum path (the numbers the test can tell apart).
    return {path for path in expected if np.abs(expected[path] - plain[path]).max() > 1e-4}


def test_a_thor_update_on_a_one_layer_bert_equals_numpy_over_a_refresh_and_a_stale_step(tmp_path, capsys):
    moved = _numpy_reference_test(tmp_path, None, lambda path: True)
    assert {"token_embedding/embeddings", "position_embedding/embeddings", "embeddings_layer_norm/gamma",
            "transformer_layer_0/self_attention_layer/attention_output/kernel", "head/kernel"} <= moved, moved
    line = _lines(capsys.readouterr().out, "thor: preconditioning")[0]
    # Every tracked kind of the backbone, named by its stable path.
    for name, kind in (("token_embedding/embeddings", "Embedding: A diag 50, G 32x32"),
                       ("position_embedding/embeddings", "Embedding: A diag 16, G 32x32"),
                       ("segment_embedding/embeddings", "Embedding: A diag 2, G 32x32"),
                       ("embeddings_layer_norm/gamma", "LayerNormalization"),
                       ("transformer_layer_0/self_attention_layer/query/kernel", "EinsumDense: A 32x32, G 32x32"),
                       ("transformer_layer_0/self_attention_layer/attention_output/kernel",
                        "EinsumDense: A 32x32, G 32x32"),
                       ("transformer_layer_0/feedforward_intermediate_dense/kernel", "Dense: A 32x32, G 64x64"),
                       ("transformer_layer_0/feedforward_layer_norm/gamma", "LayerNormalization")):
        assert f"{name} ({kind}" in line, (name, line)
    assert line.startswith("thor: preconditioning 14 layer(s)"), line


def test_include_of_the_feed_forward_pattern_preconditions_exactly_those_layers(tmp_path, capsys):
    moved = _numpy_reference_test(tmp_path, FEED_FORWARD, lambda path: re.search(FEED_FORWARD, path))
    assert {"transformer_layer_0/feedforward_intermediate_dense/kernel",
            "transformer_layer_0/feedforward_output_dense/kernel"} <= moved, moved
    out = capsys.readouterr().out
    line = _lines(out, "thor: preconditioning")[0]
    assert re.fullmatch(r"thor: preconditioning 2 layer\(s\): transformer_layer_0/feedforward_intermediate_dense/"
                        r"kernel \(Dense: A 32x32, G 64x64\); transformer_layer_0/feedforward_output_dense/kernel "
                        r"\(Dense: A 64x64, G 32x32\)", line), line
    plain = _lines(out, "thor: plain gradient")[0]
    assert "transformer_layer_0/self_attention_layer/query/kernel (EinsumDense: excluded by include/exclude)" in plain


def _reductions_spied(monkeypatch):
    """[(method, thor function it was called from)] of every cross-replica reduction, as they happen."""
    import traceback

    from tensorflow.python.distribute import distribute_lib

    calls = []
    for name in ("reduce_to", "batch_reduce_to"):
        original = getattr(distribute_lib.StrategyExtendedV2, name)

        def spy(self, *args, _name=name, _original=original, **kwargs):
            names = [frame.name for frame in traceback.extract_stack()]
            where = next((n for n in reversed(names) if n.endswith(("_collect", "_apply_in_cross_replica_context"))),
                         None)
            calls.append((_name, where))
            return _original(self, *args, **kwargs)
        monkeypatch.setattr(distribute_lib.StrategyExtendedV2, name, spy)
    return calls


def test_a_bert_built_in_model_fn_trains_on_two_replicas_as_on_one_at_twice_the_batch(tmp_path, capsys, monkeypatch):
    """Sequences of unknown length (the kernels' gradients are [None, 64] when traced: issue 19's
    raw ValueError), a tied masked-LM head (the token table gets the plain gradient, named), and
    every factor crossing the replicas in one reduction per traced step."""

    def train(log_dir, batch):
        thorbertlib.train_masked_lm(str(log_dir), 3, batch)
        return runlib.checkpoint_by_name(str(log_dir))

    one = train(tmp_path / "one", 2 * BATCH)
    calls = _reductions_spied(monkeypatch)
    mox.set_flag("num_gpus", 2)
    two = train(tmp_path / "two", BATCH)
    out = capsys.readouterr().out
    assert "Training: 2 replica(s)" in out
    lines = _lines(out, "thor: preconditioning")
    assert len(lines) == 2 and lines[0] == lines[1] and lines[0].startswith("thor: preconditioning 14 layer(s)")
    assert "mlm/intermediate_dense/kernel (Dense" in lines[0] and "token_embedding" not in lines[0]
    assert "token_embedding/embeddings (Embedding: also called with reverse=True" in _lines(out, "plain gradient")[1]
    assert set(two) == set(one)
    for path in one:
        np.testing.assert_allclose(two[path], one[path], rtol=0, atol=1e-5, err_msg=path)
    collects = [name for name, where in calls if where and where.endswith("_collect")]
    gradients = [name for name, where in calls if where and where.endswith("_apply_in_cross_replica_context")]
    assert collects and set(collects) == {"reduce_to"} and len(collects) == len(gradients), calls


def test_o1_with_layer_norm_and_softmax_kept_in_float32_keeps_every_factor_finite_and_float32(tmp_path, capsys):
    """Under O1 the projections record float16 inputs and output gradients; THOR's factor sums,
    inverses and batch counts stay float32 and finite after refreshes (steps 0 and 2 of 4)."""
    tokens, segments, labels = thorbertlib.data(4 * BATCH)
    made = []
    thor = dict(THOR)
    lr, momentum = thor.pop("lr"), thor.pop("momentum")

    def optimizer_fn():
        made.append(thorbertlib.thor_optimizer_fn(lr, momentum, **thor)())
        return made[-1]

    mox.set_flag("amp_level", "O1")
    mox.set_flag("keep_fp32", "LayerNormalization,Softmax")
    mox.run(input_fn=thorbertlib.input_fn_for(tokens, segments, labels), model_fn=thorbertlib.masked_lm_model_fn,
            optimizer_fn=optimizer_fn, run_mode=mox.ModeKeys.TRAIN, batch_size=BATCH, log_dir=str(tmp_path),
            max_number_of_steps=4)
    optimizer = made[-1]
    assert optimizer.preconditioned_layers()[0] == "position_embedding/embeddings"
    assert len(optimizer.preconditioned_layers()) == 14 and int(optimizer._updates.numpy()) == 4
    refreshed = 0
    for slot in optimizer._slots:
        for key, variable in slot.state.items():
            value = variable.numpy()
            assert value.dtype == np.float32 and np.all(np.isfinite(value)), (slot.name, key)
        if "g_inverse" in slot.state:
            inverse = slot.state["g_inverse"].numpy()
            refreshed += not np.allclose(inverse, np.eye(inverse.shape[-1])[None])
    assert refreshed == 10, refreshed    # every Kronecker layer's G inverse was rebuilt (the 4 LayerNorms have none)
    assert optimizer.fallback_counts()[2] == 0     # no step's statistics were dropped as non-finite


@pytest.mark.parametrize("tied", [True, False])
def test_a_tied_reverse_call_makes_the_table_unseen_and_an_untied_one_leaves_its_lookup_recorded(tied):
    from moxlite.training.capture import layer_statistics

    import keras_hub

    layer = keras_hub.layers.ReversibleEmbedding(10, 4, tie_weights=tied, name="tokens")
    ids = tf.constant([[1, 2, 2]])
    with tf.GradientTape() as tape:
        with layer_statistics.recording(tape, ["Embedding"]) as records:
            logits = layer(layer(ids), reverse=True)
    assert logits.shape == (1, 3, 10)
    if tied:
        assert len(records) == 2 and all(r.unseen and "reverse=True" in r.unseen for r in records), records
    else:   # the reverse call multiplies by reverse_embeddings: only the lookup is recorded
        assert len(records) == 1 and records[0].unseen is None
        np.testing.assert_array_equal(records[0].inputs, ids)
