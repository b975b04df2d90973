"""Issue 8's six ported MoXing scripts, each run in its own process and checked against numpy.

Each script in tests/moxing_ports/ differs from its MoXing original only in the import
line and TF1->TF2 spellings (listed in its docstring). Each test recomputes in numpy what
the script must have produced (weights after its steps, metrics, predictions, the exported
model's outputs) and compares with what it left in its output directory.
"""

import os
import re

import numpy as np
import pytest
import tensorflow as tf

from tests import runlib
from tests.portlib import ROOT, run_port
from tests.tf1_reference import NumpyTF1

pytestmark = pytest.mark.slow   # each port starts its own TensorFlow process

DATA_URL = os.path.join(ROOT, "moxlite", "data")


def port_arrays():
    """The scripts' data: the bundled sample, shuffled once with seed 0, as [N, 784] floats and labels."""
    data = np.load(os.path.join(DATA_URL, "mnist_5k.npz"))
    order = np.random.RandomState(0).permutation(len(data["labels"]))
    images = data["images"][order].reshape(-1, 784).astype(np.float32) / 255.0
    return images.astype(np.float64), data["labels"][order].astype(np.int64)


def batch(images, labels, step, size):
    rows = np.arange(step * size, (step + 1) * size) % 4000   # the scripts repeat the first 4000 rows
    return images[rows], labels[rows]


def softmax_grad(logits, labels):
    """d(mean cross-entropy)/d logits."""
    probabilities = runlib.softmax_probabilities(logits)
    probabilities[np.arange(len(labels)), labels] -= 1.0
    return probabilities / len(labels)


def mean_cross_entropy(logits, labels):
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float(-log_probabilities[np.arange(len(labels)), labels].mean())


def printed(pattern, text):
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not in output:\n{text[-2000:]}"
    return match


def test_tf1_train_eval_pair_with_get_variable_and_a_tf1_momentum_schedule(tmp_path):
    """Items 8 (two run calls with get_variable) and 9 (TF1 MomentumOptimizer, piecewise_constant)."""
    out = tmp_path / "train"
    finished = run_port("tf1_mnist_train_eval.py", f"--data_url={DATA_URL}", f"--train_url={out}",
                        "--max_steps=40", "--decay_step=20")
    images, labels = port_arrays()
    weights = [np.zeros((784, 10)), np.zeros(10)]
    reference = NumpyTF1("Momentum", momentum=0.9)
    for step in range(40):
        x, y = batch(images, labels, step, 50)
        grad = softmax_grad(x @ weights[0] + weights[1], y)
        # piecewise_constant(global_step, [20], [0.05, 0.005]): 0.05 while global_step <= 20.
        reference.step(weights, [x.T @ grad, grad.sum(axis=0)], 0.05 if step <= 20 else 0.005)
    saved = runlib.checkpoint_by_name(str(out))
    np.testing.assert_allclose(saved["softmax/W"], weights[0], atol=2e-5)
    np.testing.assert_allclose(saved["softmax/b"], weights[1], atol=2e-5)

    logits = images[4000:] @ weights[0] + weights[1]
    accuracy = float(np.mean(logits.argmax(axis=1) == labels[4000:]))
    match = printed(r"Test accuracy: ([\d.]+) loss: ([\d.]+)", finished.stdout)
    assert float(match.group(1)) == pytest.approx(accuracy, abs=1e-6)
    assert float(match.group(2)) == pytest.approx(mean_cross_entropy(logits, labels[4000:]), abs=1e-4)


def test_keras_layers_through_train_eval_predict_export(tmp_path):
    out = tmp_path / "keras"
    finished = run_port("keras_layers_all_modes.py", f"--data_url={DATA_URL}", f"--train_url={out}",
                        "--max_steps=40")
    images, labels = port_arrays()
    saved = runlib.checkpoint_by_name(str(out))
    hidden_kernel, hidden_bias, logits_kernel, logits_bias = (
        next(v for k, v in saved.items() if k.startswith(layer) and k.endswith(part))
        for layer, part in (("hidden", "kernel"), ("hidden", "bias"), ("logits", "kernel"), ("logits", "bias")))
    x, y = images[4000:4500], labels[4000:4500]
    logits = np.maximum(x @ hidden_kernel + hidden_bias, 0.0) @ logits_kernel + logits_bias

    match = printed(r"Eval accuracy: ([\d.]+) loss: ([\d.]+)", finished.stdout)
    assert float(match.group(1)) == pytest.approx(float(np.mean(logits.argmax(axis=1) == y)), abs=1e-6)
    assert float(match.group(2)) == pytest.approx(mean_cross_entropy(logits, y), abs=1e-4)
    assert float(match.group(1)) > 0.6   # trained, not the 0.1 of an untrained net

    np.testing.assert_allclose(np.load(out / "predictions.npy"), logits, atol=1e-4)

    export_dir = printed(r"Exported to (\S+)", finished.stdout).group(1)
    assert export_dir.endswith(os.path.join("model"))
    loaded = tf.saved_model.load(export_dir)
    serve = loaded.signatures["serving_default"]
    outputs = serve(**{list(serve.structured_input_signature[1])[0]: tf.constant(x, tf.float32)})
    np.testing.assert_allclose(outputs["logits"].numpy(), logits, atol=1e-4)


def test_modelarts_script_defining_data_url_train_url_batch_size_num_gpus(tmp_path):
    """Item 10: the script's own flag definitions win, and moxlite reads them (2 replicas)."""
    out = tmp_path / "modelarts"
    finished = run_port("modelarts_flags.py", f"--data_url={DATA_URL}", f"--train_url={out}",
                        "--num_gpus=2", "--batch_size=16", "--max_steps=30", "--learning_rate=0.2")
    assert f"Training on 2 GPU(s), batch 16 per GPU, data from {DATA_URL}" in finished.stdout
    assert "Training: 2 replica(s), batch 16 per replica, global batch 32" in finished.stderr + finished.stdout
    images, labels = port_arrays()
    kernel, bias = runlib.numpy_softmax_regression(images[:4000], labels[:4000], 32, 30, 0.2)
    saved = runlib.checkpoint_by_name(str(out))
    np.testing.assert_allclose(next(v for k, v in saved.items() if k.endswith("kernel")), kernel, atol=2e-5)
    np.testing.assert_allclose(next(v for k, v in saved.items() if k.endswith("bias")), bias, atol=2e-5)


def test_two_losses_each_train_only_their_scope(tmp_path):
    out = tmp_path / "two"
    run_port("two_losses.py", f"--data_url={DATA_URL}", f"--train_url={out}", "--max_steps=25")
    images, labels = port_arrays()
    w, b, p, c = np.zeros((784, 10)), np.zeros(10), np.zeros((10, 2)), np.zeros(2)
    for step in range(25):
        x, y = batch(images, labels, step, 40)
        digit_logits = x @ w + b
        d_digit = softmax_grad(digit_logits, y)
        d_parity = softmax_grad(digit_logits @ p + c, y % 2)
        # The parity loss moves only the parity scope, though it depends on the digit weights.
        w, b = w - 0.1 * (x.T @ d_digit), b - 0.1 * d_digit.sum(axis=0)
        p, c = p - 0.01 * (digit_logits.T @ d_parity), c - 0.01 * d_parity.sum(axis=0)
    saved = runlib.checkpoint_by_name(str(out))
    for name, expected in (("digits/w", w), ("digits/b", b), ("parity/w", p), ("parity/b", c)):
        np.testing.assert_allclose(saved[name], expected, atol=2e-5, err_msg=name)
    assert np.abs(p).max() > 1e-3   # the parity head did train


def test_fine_tune_warm_starts_by_name_with_a_new_head_and_an_inserted_layer(tmp_path):
    """Item 5's name-keyed warm start: 'adapter' is inserted before the new 'parity_head'."""
    out = tmp_path / "tune"
    run_port("fine_tune.py", f"--data_url={DATA_URL}", f"--train_url={out}", "--pretrain_steps=30",
             "--finetune_steps=20")
    pretrained = runlib.checkpoint_by_name(str(out / "pretrain"))
    tuned = runlib.checkpoint_by_name(str(out / "finetune"))

    def weight(values, layer, part):
        return next(v for k, v in values.items() if k.startswith(layer) and k.endswith(part))

    hidden_kernel, hidden_bias = weight(pretrained, "hidden", "kernel"), weight(pretrained, "hidden", "bias")
    # Restored from the pre-trained run and frozen by trainable_exclude_patterns.
    np.testing.assert_array_equal(weight(tuned, "hidden", "kernel"), hidden_kernel)
    np.testing.assert_array_equal(weight(tuned, "hidden", "bias"), hidden_bias)

    images, labels = port_arrays()
    adapter, adapter_bias = np.eye(32), np.zeros(32)
    head, head_bias = np.zeros((32, 2)), np.zeros(2)
    for step in range(20):
        x, y = batch(images, labels, step, 50)
        features = np.maximum(x @ hidden_kernel + hidden_bias, 0.0)
        adapted = features @ adapter + adapter_bias
        d_logits = softmax_grad(adapted @ head + head_bias, y % 2)
        d_adapted = d_logits @ head.T
        head, head_bias = head - 0.1 * (adapted.T @ d_logits), head_bias - 0.1 * d_logits.sum(axis=0)
        adapter, adapter_bias = adapter - 0.1 * (features.T @ d_adapted), adapter_bias - 0.1 * d_adapted.sum(axis=0)
    for layer, part, expected in (("adapter", "kernel", adapter), ("adapter", "bias", adapter_bias),
                                  ("parity_head", "kernel", head), ("parity_head", "bias", head_bias)):
        np.testing.assert_allclose(weight(tuned, layer, part), expected, atol=2e-5, err_msg=f"{layer}/{part}")
    assert np.abs(adapter - np.eye(32)).max() > 1e-4   # the inserted layer trained


def test_lars_under_batch_gradients_on_two_gpus(tmp_path):
    out = tmp_path / "lars"
    run_port("lars_batch_gradients.py", f"--data_url={DATA_URL}", f"--train_url={out}", "--max_steps=16",
             "--num_batches=4")
    images, labels = port_arrays()
    kernel, bias = np.zeros((784, 10)), np.zeros(10)
    velocity = [np.zeros_like(kernel), np.zeros_like(bias)]
    ratio, weight_decay, learning_rate, momentum = 0.02, 0.001, 0.5, 0.9
    for update in range(4):   # 16 steps of 2 x 16 rows, 4 micro-batches per update: 128 rows each
        x, y = batch(images, labels, update, 128)
        grad = softmax_grad(x @ kernel + bias, y)
        grads = [x.T @ grad, grad.sum(axis=0)]
        w_norm, g_norm = np.linalg.norm(kernel), np.linalg.norm(grads[0])
        trust = ratio * w_norm / (g_norm + weight_decay * w_norm) if w_norm > 0 and g_norm > 0 else 1.0
        grads[0] = trust * (grads[0] + weight_decay * kernel)   # the bias is excluded from LARS
        velocity = [momentum * v - learning_rate * g for v, g in zip(velocity, grads)]
        kernel, bias = kernel + velocity[0], bias + velocity[1]
    saved = runlib.checkpoint_by_name(str(out))
    np.testing.assert_allclose(next(v for k, v in saved.items() if k.endswith("kernel")), kernel, atol=2e-5)
    np.testing.assert_allclose(next(v for k, v in saved.items() if k.endswith("bias")), bias, atol=2e-5)
    assert runlib.checkpoint_step(str(out)) == 16
