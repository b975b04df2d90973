"""Masked LSTM and GRU train at every precision level (issue 33, item 4).

An Embedding with ``mask_zero=True`` feeding an LSTM or GRU closed over in model_fn (built
before ``run``, under the float32 policy) crashed at O1: ``SelectV2 ... expected to be a half
tensor but is a float tensor``. The RNN made its initial state in its cell's compute dtype
before the cell's own first call had set the cell's policy, and with a mask it selects
between that float32 state and the cell's float16 output.

Every level trains, closed over and built inside: finite losses and weights, the loss of one
batch going down. The reference is the O0 run of the same weights: at O1 the loss of the first
step (the initial weights, before any update) must be that loss to within float16's error.
"""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from tests import runlib

VOCABULARY, LENGTH, BATCH, CLASSES = 20, 7, 8, 3

# (amp_level, compute_dtype) past O0 and O1 in float16: O2 and O3, and bfloat16 at the two ends
# of the mixed levels.
OTHER_LEVELS = [("O2", "float16"), ("O3", "float16"), ("O1", "bfloat16"), ("O3", "bfloat16")]

# float16's unit roundoff is 2**-11. The longest chain of rounded float16 operations from the
# embedding lookup to the loss is about LENGTH time steps of some 6 operations each (two
# matmuls, the gate activations, the state update, the mask's select), plus the head and the
# cross-entropy (the loss function computes in its float16 logits' dtype): 50 roundings. The
# worst-case bound of the relative error after n roundings, n * u, is then 50 * 2**-11 = 2.4 %.
# Measured here: 2.9e-4 (LSTM), 6.4e-5 (GRU). Dropping the mask moves the O0 loss by 5 % (LSTM)
# and 11 % (GRU), so the bound still tells a masked run from an unmasked one.
FLOAT16_LOSS_RTOL = 50 * 2.0 ** -11


def _network(kind):
    """Embedding (mask_zero) -> LSTM/GRU -> Dense, with seeded initializers (every build equal)."""
    seed = keras.initializers.GlorotUniform
    rnn = getattr(keras.layers, kind)(6, kernel_initializer=seed(seed=1),
                                      recurrent_initializer=keras.initializers.Orthogonal(seed=2))
    return keras.Sequential([
        keras.layers.Embedding(VOCABULARY, 5, mask_zero=True, embeddings_initializer=keras.initializers.RandomUniform(-0.5, 0.5, seed=0)),
        rnn,
        keras.layers.Dense(CLASSES, kernel_initializer=seed(seed=3))])


def _data():
    """One batch of ids 1..19 with trailing zero padding of 0 to 4 steps (so the mask matters),
    and labels: every step trains on the same rows, so their loss must go down."""
    rng = np.random.RandomState(0)
    ids = rng.randint(1, VOCABULARY, size=(BATCH, LENGTH)).astype(np.int32)
    for row, length in enumerate(rng.randint(3, LENGTH + 1, size=len(ids))):
        ids[row, length:] = 0
    return ids, rng.randint(0, CLASSES, size=len(ids)).astype(np.int32)


def _train(tmp_path, kind, inside, level, compute_dtype, steps):
    """(loss at each step, the trained variables) of a run at ``level``."""
    mox.set_flag("amp_level", level)
    mox.set_flag("compute_dtype", compute_dtype)
    closed_over = None if inside else _network(kind)
    losses = {}   # step -> loss (hooks are called at every log line and once more at the end)

    def model_fn(inputs, mode):
        ids, labels = inputs
        network = _network(kind) if inside else closed_over
        logits = network(ids)
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))
        return mox.ModelSpec(loss=loss, log_info={"loss": loss},
                             hooks=[lambda step, values: losses.setdefault(step, float(values["loss"]))])

    ids, labels = _data()
    log_dir = tmp_path / f"{level}-{compute_dtype}"
    runlib.train(log_dir, lambda mode: tf.data.Dataset.from_tensor_slices((ids, labels)).repeat(), model_fn,
                 mox.get_optimizer_fn("sgd", 0.5), steps=steps, batch_size=BATCH, log_every_n_steps=1)
    reader = tf.train.load_checkpoint(str(log_dir))
    weights = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
               if name.startswith("model/")}
    return [losses[step] for step in sorted(losses)], weights


def _assert_trained(losses, weights):
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses), losses
    assert all(np.isfinite(value).all() for value in weights.values())
    assert losses[-1] < losses[0], losses   # three steps of SGD on the same 8 rows


@pytest.mark.parametrize("inside", [False, True], ids=["closed-over", "built-inside"])
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_a_masked_rnn_trains_at_o1_with_the_o0_loss_to_float16_error(tmp_path, kind, inside):
    reference, reference_weights = _train(tmp_path / "o0", kind, inside, "O0", "float16", steps=3)
    mixed, mixed_weights = _train(tmp_path / "o1", kind, inside, "O1", "float16", steps=3)
    _assert_trained(reference, reference_weights)
    _assert_trained(mixed, mixed_weights)
    # Step 1's loss is the initial weights' (every build is seeded alike), before any update.
    np.testing.assert_allclose(mixed[0], reference[0], rtol=FLOAT16_LOSS_RTOL)


# The other levels (O0 and O1 in float16 are above); about 7 s each on 2 CPU cores, 16 of them.
@pytest.mark.slow
@pytest.mark.parametrize("level, compute_dtype", OTHER_LEVELS, ids=[f"{l}-{c}" for l, c in OTHER_LEVELS])
@pytest.mark.parametrize("inside", [False, True], ids=["closed-over", "built-inside"])
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_a_masked_rnn_trains_at_the_other_levels(tmp_path, kind, inside, level, compute_dtype):
    _assert_trained(*_train(tmp_path, kind, inside, level, compute_dtype, steps=3))
