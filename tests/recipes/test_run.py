"""Recipes run end to end: numbers checked against numpy, against an equivalent Python call, and across modes.

Runs are shortened with --set and driven in-process through cli.main (one
subprocess test covers the installed console script).
"""

import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite
from moxlite.data import datasets, mnist
from moxlite.models import build_model_fn
from moxlite.recipes import cli, loader
from tests import runlib
from tests import ROOT as REPO

QUICK_START = os.path.join(REPO, "recipes", "mnist_mlp.yaml")
RESULT = re.compile(r"^\[RESULT\] accuracy: (\d\.\d+)", re.MULTILINE)


def run_recipe(capsys, recipe, log_dir, *overrides, mode=None):
    arguments = [recipe, "--set", f"run.log_dir={log_dir}"]
    for override in overrides:
        arguments += ["--set", override]
    if mode:
        arguments += ["--mode", mode]
    code = cli.main(arguments)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def checkpoint_model_weights(log_dir):
    """The model variables of the latest checkpoint, in creation order."""
    return runlib.checkpoint_variables(str(log_dir))


def numpy_mlp_accuracy(weights, images, labels):
    """Accuracy of a one-hidden-layer ReLU MLP given as [W0, b0, W1, b1]."""
    hidden = np.maximum(images.reshape(len(images), -1) @ weights[0] + weights[1], 0.0)
    logits = hidden @ weights[2] + weights[3]
    return float(np.mean(logits.argmax(axis=1) == labels))


def test_quick_start_recipe_reports_the_accuracy_of_its_checkpoint(capsys, tmp_path):
    log_dir = tmp_path / "quick"
    code, out, _ = run_recipe(capsys, QUICK_START, log_dir, "run.steps=100", "model.mlp.hidden_units=[32]")
    assert code == 0
    printed = float(RESULT.search(out).group(1))
    _, (val_images, val_labels) = mnist.split(0.2, 0)
    expected = numpy_mlp_accuracy(checkpoint_model_weights(log_dir), val_images, val_labels)
    assert printed == pytest.approx(expected, abs=5e-5)
    assert expected > 0.5  # far above chance (0.1): it trained
    saved = loader.load([str(log_dir / "recipe.yaml")]).recipe
    assert saved == loader.load([QUICK_START], [f"run.log_dir={log_dir}", "run.steps=100",
                                                "model.mlp.hidden_units=[32]"]).recipe


def test_eval_predict_and_export_modes_reuse_the_trained_checkpoint(capsys, tmp_path):
    log_dir = tmp_path / "modes"
    shorten = ("run.steps=30", "model.mlp.hidden_units=[16]")
    code, out, _ = run_recipe(capsys, QUICK_START, log_dir, *shorten)
    after_training = float(RESULT.search(out).group(1))
    code_eval, out_eval, _ = run_recipe(capsys, QUICK_START, log_dir, *shorten, mode="eval")
    code_predict, out_predict, _ = run_recipe(capsys, QUICK_START, log_dir, *shorten, mode="predict")
    assert (code, code_eval, code_predict) == (0, 0, 0)
    assert float(RESULT.search(out_eval).group(1)) == after_training
    predicted = re.search(r"\[RESULT\] predicted (\d+) samples; accuracy against the labels: (\d\.\d+)", out_predict)
    assert int(predicted.group(1)) == 1000
    assert float(predicted.group(2)) == pytest.approx(after_training, abs=5e-5)

    code_export, out_export, _ = run_recipe(capsys, QUICK_START, log_dir, *shorten, mode="export")
    assert code_export == 0
    assert out_export.strip().splitlines()[-1] == f"[RESULT] exported SavedModel to {log_dir / 'model' / '1'}"
    serving = tf.saved_model.load(str(log_dir / "model" / "1")).signatures["serving_default"]
    _, (val_images, _) = mnist.split(0.2, 0)
    images = val_images[:50, ..., None]
    weights = checkpoint_model_weights(log_dir)
    logits = np.maximum(images.reshape(50, -1) @ weights[0] + weights[1], 0.0) @ weights[2] + weights[3]
    probabilities = np.exp(logits - logits.max(1, keepdims=True))
    probabilities /= probabilities.sum(1, keepdims=True)
    exported = serving(images=tf.constant(images))
    np.testing.assert_allclose(exported["probabilities"].numpy(), probabilities, rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(exported["classes"].numpy(), logits.argmax(1))


def test_recipe_run_and_equivalent_python_run_give_the_same_weights(capsys, tmp_path):
    recipe_dir, python_dir = tmp_path / "recipe", tmp_path / "python"
    code, _, _ = run_recipe(
        capsys, QUICK_START, recipe_dir, "run.steps=12", "run.evaluate=false", "run.seed=5",
        "model.mlp.hidden_units=[24]", "distribute.num_gpus=2", "run.batch_size=16",
        "optimizer.wrappers=[{name: lars, ratio: 0.01}, {name: batch_gradients, num_batches: 3}]")
    assert code == 0

    keras.backend.clear_session()
    moxlite.set_flag("num_gpus", 2)
    keras.utils.set_random_seed(5)
    optimizer_fn = moxlite.get_optimizer_fn("momentum", 0.05, momentum=0.9)
    optimizer_fn = moxlite.get_optimizer_wrapper_fn("lars", optimizer_fn, ratio=0.01)
    optimizer_fn = moxlite.get_optimizer_wrapper_fn("batch_gradients", optimizer_fn, num_batches=3)
    moxlite.run(input_fn=datasets.mnist(seed=5).input_fn, model_fn=build_model_fn("mlp", 10, hidden_units=[24]),
                optimizer_fn=optimizer_fn, run_mode=moxlite.ModeKeys.TRAIN, batch_size=16,
                log_dir=str(python_dir), max_number_of_steps=12)

    from_recipe, from_python = checkpoint_model_weights(recipe_dir), checkpoint_model_weights(python_dir)
    assert [w.shape for w in from_recipe] == [(784, 24), (24,), (24, 10), (10,)]
    initial = np.std(from_recipe[0])
    for recipe_weight, python_weight in zip(from_recipe, from_python):
        np.testing.assert_allclose(recipe_weight, python_weight, rtol=1e-6, atol=1e-7)
    assert initial > 0


def test_user_functions_are_called_by_reference_with_their_kwargs(capsys, tmp_path, monkeypatch):
    (tmp_path / "user_recipe_fns.py").write_text(
        "import moxlite\n"
        "from moxlite.data import datasets\n"
        "from moxlite.models import build_model_fn\n"
        "CALLS = []\n"
        "def input_fn(mode, fraction):\n"
        "    CALLS.append(('input', mode, fraction))\n"
        "    return datasets.mnist(validation_fraction=fraction).input_fn(mode)\n"
        "def model_fn(inputs, mode, width):\n"
        "    CALLS.append(('model', mode, width))\n"
        "    global _MODEL\n"
        "    if mode == moxlite.ModeKeys.TRAIN or '_MODEL' not in globals():\n"
        "        _MODEL = build_model_fn('mlp', 10, hidden_units=[width])\n"
        "    return _MODEL(inputs, mode)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    log_dir = tmp_path / "user"
    code, out, _ = run_recipe(capsys, QUICK_START, log_dir, "run.steps=10", "input.name=user_recipe_fns:input_fn",
                              "input.kwargs={fraction: 0.5}", "model.name=user_recipe_fns:model_fn",
                              "model.kwargs={width: 12}")
    assert code == 0
    import user_recipe_fns

    assert ("input", "TRAIN", 0.5) in user_recipe_fns.CALLS and ("input", "EVAL", 0.5) in user_recipe_fns.CALLS
    assert ("model", "TRAIN", 12) in user_recipe_fns.CALLS
    assert checkpoint_model_weights(log_dir)[0].shape == (784, 12)
    assert "samples" in RESULT.search(out).string.splitlines()[-1]


@pytest.mark.parametrize("recipe, overrides", [
    ("mnist_cnn.yaml", ["run.steps=8", "model.lenet.filters=[4]", "model.lenet.dense_units=16", "run.eval_steps=2"]),
    ("benchmark.yaml", ["run.steps=3", "model.small_resnet.depth=8", "input.synthetic.image_shape=[16, 16, 3]"]),
])
def test_bundled_recipe_runs_shortened_to_its_last_step(capsys, tmp_path, recipe, overrides):
    log_dir = tmp_path / "bundled"
    code, out, _ = run_recipe(capsys, os.path.join(REPO, "recipes", recipe), log_dir, *overrides)
    assert code == 0
    steps = int(next(o.split("=")[1] for o in overrides if o.startswith("run.steps=")))
    assert tf.train.load_checkpoint(str(log_dir)).get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE") == steps
    assert (log_dir / "recipe.yaml").exists()


def test_eval_without_a_checkpoint_prints_one_line_exits_2_and_writes_nothing(capsys, tmp_path):
    code, out, err = run_recipe(capsys, QUICK_START, tmp_path / "empty", mode="eval")
    assert code == 2
    lines = err.strip().splitlines()
    assert lines[-1].startswith("moxlite-run: error: ") and "run.mode: 'eval' needs a trained model" in lines[-1]
    assert "Traceback" not in err
    assert not (tmp_path / "empty").exists()


def test_user_error_raised_inside_run_prints_one_line_and_exits_2(capsys, tmp_path):
    """A mistake only run() can see (a checkpoint of another network) is one line too."""
    log_dir = tmp_path / "trained"
    assert run_recipe(capsys, QUICK_START, log_dir, "run.steps=2", "run.evaluate=false",
                      "model.mlp.hidden_units=[16]")[0] == 0
    code, out, err = run_recipe(capsys, QUICK_START, log_dir, "model.mlp.hidden_units=[8]", mode="eval")
    lines = err.strip().splitlines()
    assert code == 2 and lines[-1].startswith("moxlite-run: error: ")
    assert "does not fit this model_fn" in lines[-1]
    assert "Traceback" not in err


def test_console_script_runs_the_quick_start(tmp_path):
    log_dir = tmp_path / "console"
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    script = os.path.join(os.path.dirname(sys.executable), "moxlite-run")
    command = [script if os.path.exists(script) else "moxlite-run", QUICK_START, "--set", f"run.log_dir={log_dir}",
               "--set", "run.steps=20", "--set", "model.mlp.hidden_units=[8]", "--set", "run.log_every_n_steps=10"]
    finished = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300, cwd=REPO)
    assert finished.returncode == 0, finished.stderr[-2000:]
    last = finished.stdout.strip().splitlines()[-1]
    _, (val_images, val_labels) = mnist.split(0.2, 0)
    expected = numpy_mlp_accuracy(checkpoint_model_weights(log_dir), val_images, val_labels)
    assert float(RESULT.search(last).group(1)) == pytest.approx(expected, abs=5e-5)
    assert "step: 20(global step: 20)" in finished.stderr + finished.stdout


def _result_accuracy(output):
    line = [l for l in output.splitlines() if l.startswith("[RESULT]")][-1]
    return float(line.split("accuracy: ")[1].split()[0])


def test_large_batch_stack_reaches_the_small_batch_accuracy(capsys, tmp_path):
    """momentum -> lars -> batch_gradients(4) at 4 x 64 matches plain momentum at 64 on the same samples."""
    assert cli.main(["recipes/mnist_mlp.yaml", "--set", f"run.log_dir={tmp_path / 'small'}",
                     "--set", "run.steps=300"]) == 0
    small_batch = _result_accuracy(capsys.readouterr().out)
    assert cli.main(["recipes/mnist_mlp.yaml", "recipes/mnist_large_batch.yaml",
                     "--set", f"run.log_dir={tmp_path / 'large'}"]) == 0
    large_batch = _result_accuracy(capsys.readouterr().out)
    assert small_batch > 0.9
    assert large_batch >= small_batch - 0.01, (large_batch, small_batch)


def test_32k_resnet50_recipe_trains_its_stack_shortened_on_a_small_resnet(capsys, tmp_path):
    """The seed's stack (momentum -> lars -> batch_gradients) as the recipe file writes it trains,
    shortened; and the recipe's model, resnet50, is keras.applications' ResNet-50 with its head.

    2 steps at num_batches=2: one micro-batch accumulated, then the update applied through lars
    and momentum. The run trains small_resnet (depth 8, width 4, 16x16 images, one device): the
    full ResNet-50 cost about a minute of tracing and showed nothing more. The stack's numbers
    are checked against numpy (tests/optimizers/test_stack_orders.py, tests/optimizers/test_lars.py),
    at a large batch against a small one (test_large_batch_stack_reaches_the_small_batch_accuracy
    above) and on 2 workers against one process (tests/distribute/test_wrappers.py).
    """
    from moxlite.models import networks

    log_dir = tmp_path / "r50"
    recipe = os.path.join(REPO, "recipes", "resnet50_imagenet_lars_32k.yaml")
    code, out, _ = run_recipe(
        capsys, recipe, log_dir,
        "input.name=synthetic", "input.synthetic.num_classes=10", "input.synthetic.num_samples=16",
        "input.synthetic.image_shape=[16, 16, 3]", "model.name=small_resnet", "model.small_resnet.depth=8",
        "model.small_resnet.base_width=4",
        "input.shuffle_buffer=0", "distribute.num_gpus=1", "run.batch_size=2", "run.steps=2",
        "optimizer.wrappers.1.num_batches=2", "run.evaluate=false", "run.log_every_n_steps=1")
    assert code == 0, out
    reader = tf.train.load_checkpoint(str(log_dir))
    assert reader.get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE") == 2
    weights = checkpoint_model_weights(log_dir)
    reference = networks.small_resnet((16, 16, 3), 10, depth=8, base_width=4)
    assert sum(w.size for w in weights) == reference.count_params()
    assert all(np.all(np.isfinite(w)) for w in weights)
    assert "step: 2(global step: 2)" in out
    # The recipe's own model: the network its model_fn builds at the recipe's head of 10 classes is
    # ResNet-50's backbone (weights=None) and a 2048 x 10 logits layer.
    assert loader.load([recipe], ["input.name=synthetic"]).recipe.model.name == "resnet50"
    network = networks.NETWORKS["resnet50"]((32, 32, 3), 10)
    backbone = keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), include_top=False)
    assert [w.shape for w in network.weights] == [w.shape for w in backbone.weights] + [(2048, 10), (10,)]


def test_a_schedule_recipe_splits_the_cpu_into_devices_in_a_fresh_process(tmp_path):
    """A learning-rate schedule block is checked by evaluating it, which starts TensorFlow's
    runtime; the CPU must be split into logical devices before that, so moxlite-run sets up the
    distribution before it builds the plan. A fresh process, since this one is split already."""
    environ = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
    environ["PYTHONPATH"] = REPO + os.pathsep + environ.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-m", "moxlite", "recipes/mnist_cnn_thor.yaml", "--set", "distribute.num_gpus=2",
         "--set", "run.steps=2", "--set", "run.evaluate=false", "--set", f"run.log_dir={tmp_path / 'run'}"],
        cwd=REPO, env=environ, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Training: 2 replica(s)" in done.stdout
