"""Epoch-based learning rates count the epoch the user means (issue 8, item 3).

A finite input repeated 12 times: an explicit num_samples wins over the
input's length (weights equal numpy with the rate of each step); an inferred
count is logged with how to override it; no count at all names the fix.
"""

import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite import errors
from moxlite.optimizers.schedules import parse_piecewise, piecewise_value
from tests import runlib

SAMPLES, BATCH, REPEATS = 40, 10, 12
RATES = "1:0.5,3:0.1,12:0.01"


def _run(log_dir, repeat=REPEATS):
    images, labels = runlib.mnist_rows(SAMPLES)

    def input_fn(mode):
        dataset = tf.data.Dataset.from_tensor_slices((images, labels))
        return dataset.repeat(repeat) if repeat else dataset.repeat()

    return runlib.train(log_dir, input_fn, runlib.softmax_model_fn, mox.get_optimizer_fn("sgd", RATES),
                        steps=SAMPLES * REPEATS // BATCH, batch_size=BATCH)


def _numpy(images, labels, samples_per_epoch, num_steps):
    pieces = parse_piecewise(RATES)
    kernel, bias = np.zeros((runlib.NUM_FEATURES, runlib.NUM_CLASSES)), np.zeros(runlib.NUM_CLASSES)
    for step in range(num_steps):
        rate = piecewise_value(pieces, step * BATCH / samples_per_epoch)
        index = np.arange(step * BATCH, (step + 1) * BATCH) % SAMPLES
        x, y = images[index].astype(np.float64), labels[index]
        p = runlib.softmax_probabilities(x @ kernel + bias)
        p[np.arange(BATCH), y] -= 1.0
        kernel, bias = kernel - rate * x.T @ p / BATCH, bias - rate * p.mean(axis=0)
    return kernel, bias


def test_explicit_num_samples_wins_over_the_length_of_a_repeated_input(tmp_path):
    images, labels = runlib.mnist_rows(SAMPLES)
    mox.set_flag("num_samples", SAMPLES)
    assert _run(tmp_path)["global_step"] == 48
    kernel, bias = runlib.checkpoint_variables(tmp_path)
    expected_kernel, expected_bias = _numpy(images, labels, SAMPLES, 48)
    np.testing.assert_allclose(kernel, expected_kernel, atol=2e-5)
    np.testing.assert_allclose(bias, expected_bias, atol=2e-5)
    stretched_kernel, _ = _numpy(images, labels, SAMPLES * REPEATS, 48)
    assert not np.allclose(kernel, stretched_kernel, atol=1e-3)


def test_an_inferred_count_is_logged_with_how_to_override_it(tmp_path, capsys):
    images, labels = runlib.mnist_rows(SAMPLES)
    _run(tmp_path)
    out = capsys.readouterr().out
    assert ("an epoch is 480 samples, the length of input_fn's TRAIN dataset (repeats included); "
            "if an epoch is fewer, set num_samples: moxlite.set_flag('num_samples', N)") in out
    kernel, _ = runlib.checkpoint_variables(tmp_path)
    np.testing.assert_allclose(kernel, _numpy(images, labels, SAMPLES * REPEATS, 48)[0], atol=2e-5)


def test_no_count_names_the_flag_that_gives_it(tmp_path):
    with pytest.raises(errors.OptimizerError, match=r"set it: moxlite.set_flag\('num_samples', N\) or "
                                                    r"--num_samples=N"):
        _run(tmp_path / "run", repeat=0)
    assert not (tmp_path / "run").exists()
