"""THOR on the layer patterns of real models (issue 33): ids that broadcast over the batch,
custom blocks built inside model_fn, a tied output written by hand, keras-hub's ViT.

References: the numpy THOR of tests/thorlib.py, the same model with the ids tiled, a run of
one replica at twice the batch, and a run where the layer gets the plain gradient by
``exclude``.
"""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from tests import runlib, thorlib

BATCH = 8
SETTINGS = dict(lr=0.1, momentum=0.9, damping=0.03, frequency=2)


def _train(log_dir, model_fn, inputs, labels, optimizer_fn, steps, batch=BATCH):
    runlib.train(log_dir, runlib.input_fn_for(inputs, labels), model_fn, optimizer_fn, steps=steps,
                 batch_size=batch, log_every_n_steps=100)
    return runlib.checkpoint_by_name(str(log_dir))


def _tokens(count):
    images, labels = thorlib.small_digits(count)
    return thorlib.tokens_of(images), labels


def _preconditioned(out):
    """The names on the last 'thor: preconditioning' line of ``out``."""
    line = [line for line in out.splitlines() if "thor: preconditioning" in line][-1]
    return re.findall(r"([\w/]+) \(", line.split(":", 2)[-1])


def _plain_line(out):
    return [line for line in out.splitlines() if "thor: plain gradient" in line][-1]


def test_position_ids_broadcast_over_the_batch_train_as_the_ids_tiled_and_as_numpy(tmp_path):
    """ids [1, 6] added to [B, 6, 5] token embeddings: the position table's rows are the B·6
    per-sample rows (before: 6 batch sums, 3.2e-3 off the tiled run after 5 steps)."""
    tokens, labels = _tokens(BATCH * 5)
    optimizer_fn = thorlib.thor_optimizer_fn(block_size=0, **SETTINGS)
    broadcast = _train(tmp_path / "broadcast", thorlib.position_model_fn(tiled=False), tokens, labels,
                       optimizer_fn, 5)
    tiled = _train(tmp_path / "tiled", thorlib.position_model_fn(tiled=True), tokens, labels, optimizer_fn, 5)
    start = thorlib.initial_position_weights()
    expected = thorlib.numpy_thor_positions(tokens, labels, start, BATCH, 5, **SETTINGS)
    assert list(broadcast) == list(tiled)
    assert not np.allclose(start[1], broadcast["embedding_1/embeddings"], atol=1e-3)
    for name, want in zip(broadcast, expected):
        np.testing.assert_allclose(broadcast[name], tiled[name], atol=1e-6, err_msg=name)
        np.testing.assert_allclose(broadcast[name], want, atol=1e-5, err_msg=name)


def test_position_ids_broadcast_on_two_replicas_equal_one_replica_at_twice_the_batch(tmp_path):
    """2 replicas x 4 against 1 x 8 (before: 1.7e-3 apart: each replica summed its own batch)."""
    tokens, labels = _tokens(BATCH * 4)
    optimizer_fn = thorlib.thor_optimizer_fn(block_size=0, **SETTINGS)
    one = _train(tmp_path / "one", thorlib.position_model_fn(tiled=False), tokens, labels, optimizer_fn, 4)
    mox.set_flag("num_gpus", 2)
    two = _train(tmp_path / "two", thorlib.position_model_fn(tiled=False), tokens, labels, optimizer_fn, 4,
                 batch=BATCH // 2)
    for name in one:
        np.testing.assert_allclose(one[name], two[name], atol=1e-5, err_msg=name)


def test_broadcast_ids_whose_rows_go_elsewhere_than_one_add_get_the_plain_gradient_and_a_line(tmp_path, capsys):
    """ids [1, 6] whose rows are multiplied into the batch: no per-sample rows to record, so the
    table is named with the reason and trains as when excluded."""
    tokens, labels = _tokens(BATCH * 2)

    def model_fn(inputs, mode):
        t, y = inputs
        e = keras.layers.Embedding(16, 5, embeddings_initializer=keras.initializers.RandomNormal(seed=4))(t)
        p = keras.layers.Embedding(6, 5, embeddings_initializer=keras.initializers.RandomNormal(seed=5))(
            tf.range(6)[tf.newaxis])
        logits = keras.layers.Dense(10, kernel_initializer=keras.initializers.GlorotUniform(seed=2))(
            tf.reduce_mean(e * p, axis=1))
        return mox.ModelSpec(loss=runlib.cross_entropy(logits, y))

    got = _train(tmp_path / "thor", model_fn, tokens, labels, thorlib.thor_optimizer_fn(**SETTINGS), 3)
    plain = _plain_line(capsys.readouterr().out)
    assert "embedding_1/embeddings" in plain and "tile the ids to the batch" in plain
    excluded = _train(tmp_path / "excluded", model_fn, tokens, labels,
                      thorlib.thor_optimizer_fn(exclude=["embedding_1"], **SETTINGS), 3)
    for name in got:
        np.testing.assert_allclose(got[name], excluded[name], atol=1e-6, err_msg=name)


class _Block(keras.layers.Layer):
    """A custom block the Keras guide's way: sub-layers made in __init__, no build of its own."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(8, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(seed=1))
        self.norm = keras.layers.LayerNormalization()
        self.out = keras.layers.Dense(10, kernel_initializer=keras.initializers.GlorotUniform(seed=2))

    def call(self, x):
        return self.out(self.norm(self.hidden(x)))


def test_a_custom_block_built_inside_model_fn_is_preconditioned_as_when_closed_over(tmp_path, capsys):
    """Keras works out such a block's shapes by calling it in a scratch graph at its first call;
    those calls are not the step's (before: its layers built inside were named 'called inside a
    loop or branch of its own' and got the plain gradient)."""
    images, labels = thorlib.small_digits(BATCH * 3)
    optimizer_fn = thorlib.thor_optimizer_fn(**SETTINGS)

    def inside_fn(inputs, mode):
        x, y = inputs
        return runlib.spec_for(x, y, _Block(name="block")(x))

    inside = _train(tmp_path / "inside", inside_fn, images, labels, optimizer_fn, 3)
    inside_layers = _preconditioned(capsys.readouterr().out)
    keras.backend.clear_session(free_memory=False)   # the made-up sub-layer names of a fresh process
    block = _Block(name="block")

    def closed_fn(inputs, mode):
        x, y = inputs
        return runlib.spec_for(x, y, block(x))

    closed = _train(tmp_path / "closed", closed_fn, images, labels, optimizer_fn, 3)
    assert inside_layers == _preconditioned(capsys.readouterr().out)
    assert len(inside_layers) == 3
    for name in inside:
        np.testing.assert_allclose(inside[name], closed[name], atol=1e-6, err_msg=name)


def _tied_by_hand(inputs, mode):
    tokens, y = inputs
    table = keras.layers.Embedding(16, 5, embeddings_initializer=keras.initializers.RandomNormal(seed=4))
    h = tf.reduce_mean(table(tokens), axis=1)
    h = keras.layers.Dense(5, kernel_initializer=keras.initializers.GlorotUniform(seed=2))(h)
    logits = tf.matmul(h, table.embeddings, transpose_b=True)
    return mox.ModelSpec(loss=runlib.cross_entropy(logits, y))


def test_a_tied_output_written_by_hand_gives_the_table_the_plain_gradient_and_a_line(tmp_path, capsys):
    """logits = h . table^T outside any layer: the table's gradient has a part its lookups' factors
    do not describe, so it is named and trains as when excluded (before: preconditioned silently)."""
    tokens, labels = _tokens(BATCH * 3)
    got = _train(tmp_path / "thor", _tied_by_hand, tokens, labels, thorlib.thor_optimizer_fn(**SETTINGS), 3)
    out = capsys.readouterr().out
    assert "embedding/embeddings" not in _preconditioned(out)
    assert "embedding/embeddings" in _plain_line(out) and "tied output written by hand" in _plain_line(out)
    excluded = _train(tmp_path / "excluded", _tied_by_hand, tokens, labels,
                      thorlib.thor_optimizer_fn(exclude=["embedding/"], **SETTINGS), 3)
    assert _preconditioned(capsys.readouterr().out) == ["dense/kernel"]
    for name in got:
        np.testing.assert_allclose(got[name], excluded[name], atol=1e-6, err_msg=name)


def _vit_model_fn():
    """keras-hub's ViT at a tiny size (from its constructor), built inside model_fn, and a head."""
    keras_hub = pytest.importorskip("keras_hub")

    def model_fn(inputs, mode):
        x, y = inputs
        keras.utils.set_random_seed(1)
        backbone = keras_hub.models.ViTBackbone(image_shape=(8, 8, 3), patch_size=4, num_layers=1, num_heads=2,
                                                hidden_dim=8, mlp_dim=16)
        logits = keras.layers.Dense(4)(backbone(x)[:, 0])
        return mox.ModelSpec(loss=runlib.cross_entropy(logits, y))

    return model_fn


@pytest.mark.slow  # keras-hub's ViT traced on 1 and on 2 replicas: about 60 s on 2 busy cores
def test_keras_hubs_vit_built_inside_model_fn_on_two_replicas_equals_one_replica_under_thor(tmp_path, capsys):
    """Every projection and norm of the encoder is preconditioned (before: 3 layers: its blocks are
    built at their first call), and its position embedding ([1, N] ids) is exact on 2 replicas
    (before: 0.33 apart at position_embedding/embeddings after 3 steps)."""
    rng = np.random.RandomState(0)
    images, labels = rng.rand(BATCH * 3, 8, 8, 3).astype(np.float32), rng.randint(0, 4, BATCH * 3)
    optimizer_fn = thorlib.thor_optimizer_fn(block_size=0, **SETTINGS)
    one = _train(tmp_path / "one", _vit_model_fn(), images, labels.astype(np.int32), optimizer_fn, 3)
    layers = _preconditioned(capsys.readouterr().out)
    assert len(layers) == 12 and "vit_patching_and_embedding/position_embedding/embeddings" in layers
    assert "vit_encoder/transformer_block_1/mha/query/kernel" in layers
    mox.set_flag("num_gpus", 2)
    keras.backend.clear_session(free_memory=False)   # the same made-up names as a fresh process
    two = _train(tmp_path / "two", _vit_model_fn(), images, labels.astype(np.int32), optimizer_fn, 3,
                 batch=BATCH // 2)
    for name in one:
        np.testing.assert_allclose(one[name], two[name], atol=2e-5, err_msg=name)


def test_an_include_pattern_that_matches_no_layer_is_refused_before_any_step(tmp_path):
    tokens, labels = _tokens(BATCH)
    message = (r"thor: include=\['dense', 'dense_9'\]: 'dense_9' matches no layer of model_fn; use a part of one "
               r"of these names: dense/kernel, embedding/embeddings, embedding_1/embeddings")
    with pytest.raises(mox.errors.OptimizerError, match=message):
        _train(tmp_path / "run", thorlib.position_model_fn(tiled=False), tokens, labels,
               thorlib.thor_optimizer_fn(include=["dense", "dense_9"], **SETTINGS), 2)
    assert tf.train.latest_checkpoint(str(tmp_path / "run")) is None


def test_token_ids_of_a_batch_of_one_are_per_sample_rows_and_equal_numpy(tmp_path):
    """A batch of 1 gives token ids [1, 6]: nothing broadcasts, the lookup is recorded as it is."""
    tokens, labels = _tokens(4)
    settings = dict(lr=0.1, momentum=0.9, damping=0.03, frequency=2)
    got = _train(tmp_path / "thor", thorlib.embedding_model_fn, tokens, labels,
                 thorlib.thor_optimizer_fn(block_size=0, **settings), 4, batch=1)
    expected = thorlib.numpy_thor_embedding(tokens, labels, thorlib.initial_embedding_weights(), 1, 4, **settings)
    for name, want in zip(got, expected):
        np.testing.assert_allclose(got[name], want, atol=1e-5, err_msg=name)
