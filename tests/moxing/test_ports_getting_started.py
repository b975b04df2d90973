"""MoXing's Getting Started pair (train, then evaluate), run as its user would and checked against numpy.

The scripts are huaweicloud/ModelArts-Lab's docs/moxing_api_doc/scripts/train_tf_mnist.py
and eval_tf_mnist.py, ported in tests/moxing_ports/getting_started_{train,eval}.py (their
docstrings list every change). Their input_fn returns the tensors of a one-shot iterator's
get_next() over a generator of 100-sample batches, and run() gets no batch_size: MoXing
then trains until the generator ends (5 x 800 / 100 = 40 steps) and evaluates every one
of the 1,000 test samples.
"""

import os
import re

import numpy as np
import pytest

from tests import runlib
from tests.portlib import ROOT, run_port

pytestmark = pytest.mark.slow   # each script starts its own TensorFlow process

DATA_URL = os.path.join(ROOT, "moxlite", "data")
BATCH, STEPS, NUM_TEST = 100, 40, 1000


def mnist_test_set():
    """The stand-in's test set: the bundled sample shuffled with seed 0, its first 1,000 rows."""
    data = np.load(os.path.join(DATA_URL, "mnist_5k.npz"))
    order = np.random.RandomState(0).permutation(len(data["labels"]))
    images = data["images"][order].reshape(-1, 784).astype(np.float32) / 255.0
    return images[:NUM_TEST].astype(np.float64), data["labels"][order][:NUM_TEST].astype(np.int64)


def numpy_training(images, labels):
    """W, b after 40 steps of gradient descent (0.5) on mean softmax cross-entropy, zeros at first,
    batch k being test rows 100k..100k+99 (mod 1,000): the order the generator hands them out."""
    weights, bias = np.zeros((784, 10)), np.zeros(10)
    for step in range(STEPS):
        rows = (step * BATCH + np.arange(BATCH)) % NUM_TEST
        x, y = images[rows], labels[rows]
        grad = runlib.softmax_probabilities(x @ weights + bias)
        grad[np.arange(BATCH), y] -= 1.0
        grad /= BATCH
        weights -= 0.5 * x.T @ grad
        bias -= 0.5 * grad.sum(axis=0)
    return weights, bias


def test_getting_started_trains_40_steps_and_evaluates_all_1000_samples(tmp_path):
    out = str(tmp_path / "output_log")
    trained = run_port("getting_started_train.py", f"--data_url={DATA_URL}", f"--train_url={out}")
    assert "Input ended at global step 40" in trained.stdout + trained.stderr
    images, labels = mnist_test_set()
    weights, bias = numpy_training(images, labels)
    saved = runlib.checkpoint_by_name(out)
    np.testing.assert_allclose(saved["W"], weights, atol=2e-5)
    np.testing.assert_allclose(saved["b"], bias, atol=2e-5)

    evaluated = run_port("getting_started_eval.py", f"--data_url={DATA_URL}", f"--train_url={out}")
    text = evaluated.stdout + evaluated.stderr
    match = re.search(r"\[VALIDATION METRICS\] step: (\d+) accuracy: ([\d.]+)", text)
    assert match, text[-2000:]
    accuracy = float(np.mean((images @ weights + bias).argmax(axis=1) == labels))
    assert int(match.group(1)) == STEPS
    # Over all 1,000 samples: an accuracy in thousandths, printed with three decimals.
    assert float(match.group(2)) == pytest.approx(accuracy, abs=5e-4)
    first_batch = float(np.mean((images[:BATCH] @ weights + bias).argmax(axis=1) == labels[:BATCH]))
    assert first_batch != pytest.approx(accuracy, abs=5e-4)   # this data tells one batch from all
