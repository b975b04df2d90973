"""amp_level O1 under the thor wrapper: statistics recorded from float16 layers, float32 preconditioning."""

import keras
import numpy as np

import moxlite as mox
from tests import runlib, thorlib

BATCH = 32
STEPS = 6
TOLERANCE = 0.05   # of the largest weight change: float16 statistics perturb the inverses


def train(log_dir, level):
    images, labels = runlib.mnist_rows(BATCH * STEPS)
    mox.set_flag("amp_level", level)
    runlib.train(log_dir, runlib.input_fn_for(images, labels), runlib.mlp_model_fn,
                 thorlib.thor_optimizer_fn(damping=0.05, frequency=2), steps=STEPS, batch_size=BATCH)
    return runlib.checkpoint_variables(log_dir)


def test_thor_under_o1_follows_thor_under_o0_to_float16_precision(tmp_path):
    reference = train(tmp_path / "o0", "O0")
    mixed = train(tmp_path / "o1", "O1")
    assert all(np.all(np.isfinite(w)) for w in mixed)
    # runlib.mlp_model_fn's initial kernels, to measure how far THOR moved the weights.
    initial = {(784, 32): keras.initializers.GlorotUniform(seed=1)(shape=(784, 32)),
               (32, 10): keras.initializers.GlorotUniform(seed=2)(shape=(32, 10))}
    moved = max(np.max(np.abs(w - np.asarray(initial[w.shape]))) for w in reference if w.shape in initial)
    differences = [np.max(np.abs(got - want)) for got, want in zip(mixed, reference)]
    print(f"thor O1 vs O0: largest weight change {moved:.4f}, largest difference {max(differences):.5f}")
    assert max(differences) <= TOLERANCE * moved
