"""THOR's cost: only the diagonal blocks of the factors are formed and all-reduced, with the
same numbers as forming the full factors and cutting their blocks (numpy references)."""

import os
import sys

import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite.optimizers.thor import factors
from moxlite.optimizers.thor import inverse as thor_inverse
from tests import runlib, thorlib
from tests import ROOT
sys.path.insert(0, os.path.join(ROOT, "tools"))
import thor_plan  # noqa: E402

BATCH = 16


@pytest.mark.parametrize("size, block_size", [(10, 4), (6, 4), (8, 4), (5, 0), (5, 8), (75, 32)])
def test_block_grams_equal_the_diagonal_blocks_of_the_full_product(size, block_size):
    rows = np.random.default_rng(size).normal(size=(37, size)).astype(np.float32)
    layout = thor_inverse.block_layout(size, block_size)
    pieces = factors.block_grams(tf.constant(rows), layout)
    assert [tuple(p.shape) for p in pieces] == factors.piece_shapes(size, layout)
    blocks = thor_inverse.identity_padded(factors.padded_blocks(pieces, layout), size).numpy()
    full = rows.T.astype(np.float64) @ rows        # the full factor, then its blocks padded with the identity
    count, side = layout
    padded = np.eye(count * side)
    padded[:size, :size] = full
    for index in range(count):
        window = slice(index * side, (index + 1) * side)
        np.testing.assert_allclose(blocks[index], padded[window, window], rtol=1e-5, atol=1e-4)


def test_small_blocks_update_equals_numpy_full_factors_then_blocks(tmp_path, monkeypatch):
    """block_size 4 splits every factor (conv A 9 = 4+4+1, dense A 75 = 18x4+3, dense G 10 = 4+4+2):
    7 steps at frequency 3 equal numpy's update, which forms the full factors and inverts their
    blocks; and the one all-reduce of a refresh carries only the blocks (thor_plan's count)."""
    import traceback

    from tensorflow.python.distribute import distribute_lib

    reduced_sizes = []
    original = distribute_lib.StrategyExtendedV2.reduce_to

    def spy(self, reduce_op, value, *args, **kwargs):
        if any(frame.name.endswith("_collect") for frame in traceback.extract_stack()):   # thor's reduction
            reduced_sizes.append(value.shape.num_elements())
        return original(self, reduce_op, value, *args, **kwargs)
    monkeypatch.setattr(distribute_lib.StrategyExtendedV2, "reduce_to", spy)
    images, labels = thorlib.small_digits(BATCH * 7)
    settings = dict(lr=0.05, momentum=0.9, damping=0.05, frequency=3, block_size=4, weight_decay=5e-4)
    start = thorlib.initial_conv_weights("valid")
    mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=thorlib.conv_model_fn("valid"),
            optimizer_fn=thorlib.thor_optimizer_fn(**settings), run_mode=mox.ModeKeys.TRAIN, batch_size=BATCH,
            log_dir=str(tmp_path), max_number_of_steps=7, log_every_n_steps=100)
    trained = thorlib.model_variables(tmp_path)
    expected = thorlib.numpy_thor_conv(images, labels, start, BATCH, 7, padding="valid", **settings)
    for got, want in zip(trained, expected):
        np.testing.assert_allclose(got, want, atol=1e-5)
    conv = thor_plan.LayerShape("conv", "Conv2D", thorlib.KERNEL ** 2, thorlib.FILTERS, rows=0)
    dense = thor_plan.LayerShape("dense", "Dense", 75, 10, rows=0)
    blocks_only = thor_plan.factor_entries(conv, 4) + thor_plan.factor_entries(dense, 4)
    assert blocks_only < 75 ** 2
    assert reduced_sizes and set(reduced_sizes) == {blocks_only + 2 + 1}   # + 2 row counts + the overflow flag (per trace)
    reader = tf.train.load_checkpoint(str(tmp_path))
    saved = sorted(shape for key, shape in reader.get_variable_to_shape_map().items()
                   if key.startswith("optimizer/_variables/") and len(shape) > 1)
    blocks = [[3, 4, 4], [1, 3, 3], [19, 4, 4], [3, 4, 4]]     # conv A, conv G, dense A, dense G
    assert saved == sorted(blocks * 2)                           # factor sums and inverses: blocks only


def test_a_plain_step_records_nothing(tmp_path, monkeypatch):
    """Probes run only on collecting updates (0, 3, 6 of 7 at frequency 3): a plain step runs
    model_fn as a momentum step does, with no probe to add and no statistic to take."""
    from moxlite.training.capture import layer_statistics

    probes_run = tf.Variable(0, dtype=tf.int64, trainable=False)
    original = layer_statistics._Recorder.probe

    def counted(self, tensor):
        probes_run.assign_add(1)
        return original(self, tensor)
    monkeypatch.setattr(layer_statistics._Recorder, "probe", counted)
    images, labels = thorlib.small_digits(BATCH * 7)
    mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=thorlib.conv_model_fn("same"),
            optimizer_fn=thorlib.thor_optimizer_fn(damping=0.05, frequency=3), run_mode=mox.ModeKeys.TRAIN,
            batch_size=BATCH, log_dir=str(tmp_path), max_number_of_steps=7, log_every_n_steps=100)
    assert int(probes_run.numpy()) == 3 * 2     # 3 collecting steps x (conv, dense)
