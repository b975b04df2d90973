"""Real models (tests/realmodels.py) trained, resumed, replicated, exported and evaluated by run().

Every cell is one model in one style at one level, and a set of checks, each against an
independent reference:

- ``train``: the run ends with a finite loss (THOR or O1 or O0, the cell's level);
- ``resume``: 2 steps, then 2 more in a new run() on a freshly built model (other initial
  weights, so anything the checkpoint lacks shows) end with the straight 4-step run's weights,
  every weight of the network (BatchNorm statistics included);
- ``replicas``: 2 replicas x 2 (MirroredStrategy on the 2 logical CPU devices of conftest) end
  with the weights of the straight run's 1 device x 4;
- ``export``: the SavedModel the straight run exported serves PREDICT's logits;
- ``eval`` / ``fresh_eval``: EVAL of the straight run's checkpoint in this process / in a fresh
  one (at O0, whatever the level trained at; the fresh process builds the model anew from other
  initial weights) gives the loss that Keras alone (inference mode, float32) and numpy compute
  from the trained network.

One straight run serves the resume, replica, export and eval comparisons. The default cells
cover every model and every check at least once (``DEFAULT_CELLS``);
``MOXLITE_REAL_MODEL_MATRIX=full`` runs the whole cross product of models, styles and levels
with every check (tests/README.md, "The real-model matrix").

Tolerances (float32): the resumed run executes the same ops on the same batches from the
restored state, so it differs from the straight run only if some state was not restored;
RESUME_ATOL allows a few float32 ulps of the weights' size for a graph traced anew. Two
replicas reduce each gradient in another order (2 partial sums of 2 samples against one
sum of 4) and their forward passes compute the same per-sample values; a relative rounding
of ~n * 2**-24 on gradients (n the terms summed, here <= 4 samples x 1024 positions) moves
weights by lr * that after 4 steps, far below REPLICA_ATOL, which leaves room for THOR's
inverses (damped, so their condition number is <= 1 + max eigenvalue / damping) multiplying
the rounding. Served and PREDICT logits: the same graph on the same weights (SERVE_ATOL).
Losses: EVAL averages per-batch means of float32 losses (EVAL_RTOL).
"""

import dataclasses
import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from tests import realmodels, runlib, thorlib
from tests import ROOT

LEVELS = ("O0", "O1", "THOR")
CHECKS = ("train", "resume", "replicas", "export", "eval", "fresh_eval")
STEPS = 4
TRAIN_ONLY_STEPS = 2        # the loss logged at step 2 is computed on updated weights
BATCH = 4                   # the global batch: 1 device x 4, or 2 replicas x 2
LEARNING_RATE = 1e-3
RESUME_ATOL = 1e-6
REPLICA_ATOL = 2e-5
SERVE_ATOL = 1e-5
EVAL_RTOL = 1e-5
FULL = os.environ.get("MOXLITE_REAL_MODEL_MATRIX") == "full"


@dataclasses.dataclass(frozen=True)
class MatrixCell:
    model: str
    style: str
    level: str
    checks: tuple

    @property
    def id(self):
        return f"{self.model}-{self.style}-{self.level}"


# Every model once, every style, level and check at least once. The three keras.applications
# models cost 15-45 CPU s a run (tracing, and ConvNeXt-Tiny's 28M parameters), so they get one
# run each and the cheap models carry the comparisons; measured CPU s per cell: tests/README.md. Cells left out because of an open defect: tests/README.md, "The real-model matrix".
DEFAULT_CELLS = (
    MatrixCell("masked_lstm", "named", "O1", CHECKS),
    MatrixCell("gpt2", "dict", "THOR", ("train", "export")),
    MatrixCell("distilbert", "helper", "O0", ("train", "replicas", "eval")),
    MatrixCell("vit", "inside", "THOR", ("train", "replicas")),
    MatrixCell("mobilenet_v2", "helper", "O0", ("train", "export")),
    MatrixCell("efficientnet_b0", "dict", "O1", ("train",)),
    MatrixCell("convnext_tiny", "inside", "O0", ("train",)),
)

FULL_CELLS = tuple(MatrixCell(model, style, level, CHECKS)
                   for model in realmodels.MODELS for style in realmodels.STYLES for level in LEVELS)

CELLS = FULL_CELLS if FULL else DEFAULT_CELLS


def optimizer_fn_for(matrix_cell):
    """THOR over momentum; momentum (whose slots a resume must restore); plain SGD for a cell that
    only trains (half the optimizer's trace and checkpoint: ConvNeXt-Tiny 43 -> 19 CPU s with O0)."""
    if matrix_cell.level == "THOR":
        return thorlib.thor_optimizer_fn(lr=LEARNING_RATE, momentum=0.9, damping=0.1, frequency=2)
    if matrix_cell.checks == ("train",):
        return mox.get_optimizer_fn("sgd", learning_rate=LEARNING_RATE)
    return mox.get_optimizer_fn("momentum", learning_rate=LEARNING_RATE, momentum=0.9)


def amp_level(level):
    return "O1" if level == "O1" else "O0"


def train(matrix_cell, log_dir, steps, seed=0, num_gpus=1, export=False):
    """Train a fresh realmodels.Cell of ``matrix_cell`` to ``steps``; the Cell and run()'s result.
    On several replicas the closed-over model is built in moxlite.strategy_scope()."""
    mox.set_flag("num_gpus", num_gpus)
    mox.set_flag("amp_level", amp_level(matrix_cell.level))
    if num_gpus > 1:
        with mox.strategy_scope():
            built = realmodels.cell(matrix_cell.model, matrix_cell.style, seed=seed)
    else:
        built = realmodels.cell(matrix_cell.model, matrix_cell.style, seed=seed)
    result = runlib.train(log_dir, realmodels.input_fn_for(matrix_cell.model), built.model_fn,
                          optimizer_fn_for(matrix_cell), steps=steps, batch_size=BATCH // num_gpus,
                          log_every_n_steps=steps, steps_per_loop=1,
                          export_model=mox.ExportKeys.TF_SERVING if export else False)
    mox.set_flag("num_gpus", 1)
    return built, result


def assert_same_weights(got, want, atol, what):
    assert [w.shape for w in got] == [w.shape for w in want], what
    worst = max(float(np.max(np.abs(g - w))) if g.size else 0.0 for g, w in zip(got, want))
    print(f"{what}: largest difference {worst:.3g} over {len(want)} weights")
    for index, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, atol=atol, rtol=0, err_msg=f"{what}: weight {index}")


def predicted_logits(matrix_cell, built, log_dir):
    batches = []
    mox.run(input_fn=realmodels.input_fn_for(matrix_cell.model), model_fn=built.model_fn,
            run_mode=mox.ModeKeys.PREDICT, batch_size=BATCH, checkpoint_path=str(log_dir),
            output_fn=batches.append, output_every_n_steps=1)
    return np.concatenate([output["logits"] for call in batches for output in call])


def served_logits(matrix_cell, log_dir):
    (path,) = glob.glob(os.path.join(str(log_dir), "model", "*"))
    serve = tf.saved_model.load(path).signatures["serving_default"]
    features, _ = realmodels.eval_arrays(matrix_cell.model)
    inputs = features if isinstance(features, dict) else {"inputs": features}
    return serve(**{key: tf.constant(value) for key, value in inputs.items()})["logits"].numpy()


def fresh_process_losses(cells):
    """{log_dir: EVAL loss} of ``cells`` (dicts for realmodels' __main__), in one fresh process."""
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "tests.realmodels", json.dumps(cells)], cwd=ROOT, env=environ,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads(line[len("RESULT "):]) for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    return {one["log_dir"]: one["loss"] for one in results}


@pytest.mark.parametrize("matrix_cell", CELLS, ids=[one.id for one in CELLS])
def test_real_model_cell(matrix_cell, tmp_path):
    checks = matrix_cell.checks
    straight_dir = tmp_path / "straight"
    steps = TRAIN_ONLY_STEPS if checks == ("train",) else STEPS
    straight, result = train(matrix_cell, straight_dir, steps, export="export" in checks)
    assert np.isfinite(result["loss"]), f"{matrix_cell.id}: loss {result['loss']}"
    straight_weights = realmodels.weights_of(straight.network())
    assert all(np.all(np.isfinite(w)) for w in straight_weights), f"{matrix_cell.id}: a weight is not finite"
    evaluates = {"eval", "fresh_eval"} & set(checks)
    independent = realmodels.independent_loss(straight.network(), matrix_cell.model) if evaluates else None

    if "resume" in checks:
        train(matrix_cell, tmp_path / "resumed", STEPS // 2, seed=0)
        resumed, _ = train(matrix_cell, tmp_path / "resumed", STEPS, seed=1)   # a new model, other weights
        assert_same_weights(realmodels.weights_of(resumed.network()), straight_weights, RESUME_ATOL,
                            f"{matrix_cell.id}: 2 + 2 steps against 4")

    if "replicas" in checks:
        two, _ = train(matrix_cell, tmp_path / "two_replicas", STEPS, num_gpus=2)
        assert_same_weights(realmodels.weights_of(two.network()), straight_weights, REPLICA_ATOL,
                            f"{matrix_cell.id}: 2 replicas x 2 against 1 x 4")

    if "export" in checks:
        mox.set_flag("amp_level", amp_level(matrix_cell.level))
        predicted = predicted_logits(matrix_cell, straight, straight_dir)
        np.testing.assert_allclose(served_logits(matrix_cell, straight_dir), predicted, atol=SERVE_ATOL,
                                   err_msg=f"{matrix_cell.id}: served against PREDICT")

    if "eval" in checks:   # at O0, as the float32 reference computes (an O1 cell's checkpoint included)
        mox.set_flag("amp_level", "O0")
        here = mox.run(input_fn=realmodels.input_fn_for(matrix_cell.model), model_fn=straight.model_fn,
                       run_mode=mox.ModeKeys.EVAL, batch_size=BATCH, checkpoint_path=str(straight_dir))
        print(f"{matrix_cell.id}: EVAL here {here['loss']:.7g}, Keras and numpy {independent:.7g}")
        assert here["loss"] == pytest.approx(independent, rel=EVAL_RTOL), f"{matrix_cell.id}: EVAL in this process"

    if "fresh_eval" in checks:
        fresh = fresh_process_losses([{"model": matrix_cell.model, "style": matrix_cell.style,
                                       "amp_level": "O0", "log_dir": str(straight_dir)}])[str(straight_dir)]
        print(f"{matrix_cell.id}: EVAL in a fresh process {fresh:.7g}, Keras and numpy {independent:.7g}")
        assert fresh == pytest.approx(independent, rel=EVAL_RTOL), f"{matrix_cell.id}: EVAL in a fresh process"
