"""THOR finds its layers by stable names (issue 18): the same layers in every run and process, one
projection of a composite layer by its full path, and a layer it cannot record named, not crashed on."""

import json
import os
import re
import subprocess
import sys

import keras
import numpy as np

import moxlite as mox
from tests import runlib, thorlib
from tests.precisionlib import make_model
from tests import ROOT

BATCH = 16


def _sgd_thor(**thor):
    def optimizer_fn():
        sgd = mox.get_optimizer_fn("sgd", learning_rate=0.1)()
        return mox.get_optimizer_wrapper_fn("thor", sgd, **thor)() if thor else sgd
    return optimizer_fn


def _run(log_dir, model_fn, optimizer_fn, inputs, steps):
    images, labels = inputs
    runlib.train(log_dir, runlib.input_fn_for(images, labels), model_fn, optimizer_fn, steps=steps,
                 batch_size=BATCH)
    return runlib.checkpoint_variables(log_dir)


def thor_script(log_dir):
    """A user's script: three Dense built inside model_fn, ``include=["dense_1"]`` (the second, as a
    fresh process names it). Returns its weights after 4 steps."""
    def model_fn(inputs, mode):
        x, y = inputs
        h = keras.layers.Dense(16, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(seed=1))(x)
        h = keras.layers.Dense(12, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(seed=2))(h)
        logits = keras.layers.Dense(10, kernel_initializer=keras.initializers.GlorotUniform(seed=3))(h)
        return runlib.spec_for(x, y, logits)

    return _run(log_dir, model_fn, _sgd_thor(damping=0.05, frequency=2, include=["dense_1"]),
                thorlib.small_digits(BATCH * 4), 4)


def _preconditioned(out):
    return [line.split("INFO:moxlite:")[-1] for line in out.splitlines() if "thor: preconditioning" in line]


def _in_a_fresh_process(log_dir):
    code = ("import json, sys; from tests.optimizers.thor.test_names import thor_script; "
            "weights = thor_script(sys.argv[1]); "
            "print('WEIGHTS ' + json.dumps([w.tolist() for w in weights]))")
    environ = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
    environ["PYTHONPATH"] = ROOT + os.pathsep + environ.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", code, str(log_dir)], cwd=ROOT, env=environ, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout + done.stderr
    weights = next(line for line in out.splitlines() if line.startswith("WEIGHTS "))
    return _preconditioned(out), [np.asarray(w, np.float32) for w in json.loads(weights[len("WEIGHTS "):])]


def test_the_same_thor_script_finds_the_same_layers_twice_in_one_process_and_in_two_processes(tmp_path, capsys):
    first = thor_script(tmp_path / "first")
    second = thor_script(tmp_path / "second")
    lines = _preconditioned(capsys.readouterr().out)
    assert len(lines) == 2 and lines[0] == lines[1], lines
    assert lines[0].startswith("thor: preconditioning 1 layer(s): dense_1/kernel (Dense: A 16x16, G 12x12)"), lines
    fresh = [_in_a_fresh_process(tmp_path / name) for name in ("process_a", "process_b")]
    for process_lines, _ in fresh:
        assert process_lines == lines[:1]
    for weights in (second, fresh[0][1], fresh[1][1]):
        assert len(weights) == len(first)
        for got, want in zip(weights, first):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_include_picks_one_projection_of_a_composite_layer_by_its_full_path(tmp_path, capsys):
    model = make_model()

    def model_fn(inputs, mode):
        images, labels = inputs
        return runlib.spec_for(images, labels, model(images))

    _run(tmp_path, model_fn, _sgd_thor(damping=0.05, frequency=2, include=["block0/attention/query/kernel"]),
         runlib.mnist_rows(BATCH * 2), 2)
    out = capsys.readouterr().out
    line = _preconditioned(out)[0]
    assert line.startswith("thor: preconditioning 1 layer(s): net/block0/attention/query/kernel (EinsumDense"), line
    plain = next(l for l in out.splitlines() if "thor: plain gradient" in l)
    for name in ("key", "value", "attention_output"):
        assert f"net/block0/attention/{name}/kernel" in plain, plain
    assert "net/block0/dense/kernel" in plain and "block0/kernel:0" not in plain


class DenseCell(keras.layers.Layer):
    """A recurrent cell computing with a Dense: under an RNN it runs inside a tf.while_loop."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.state_size = units
        self.dense = keras.layers.Dense(units, activation="tanh", name="dense",
                                        kernel_initializer=keras.initializers.GlorotUniform(seed=7))

    def build(self, input_shape):
        self.dense.build((input_shape[0], input_shape[-1] + self.units))

    def call(self, inputs, states):
        h = self.dense(keras.ops.concatenate([inputs, states[0]], axis=-1))
        return h, [h]


def _rnn_model_fn(inputs, mode):
    x, y = inputs
    h = keras.layers.RNN(DenseCell(8, name="cell"), name="rnn")(keras.ops.reshape(x, (-1, thorlib.SIDE, thorlib.SIDE)))
    logits = keras.layers.Dense(10, kernel_initializer=keras.initializers.GlorotUniform(seed=2), name="head")(h)
    return runlib.spec_for(x, y, logits)


def test_a_dense_inside_an_rnn_cell_gets_the_plain_gradient_under_thor_and_is_named(tmp_path, capsys):
    inputs = thorlib.small_digits(BATCH)
    plain = _run(tmp_path / "sgd", _rnn_model_fn, _sgd_thor(), inputs, 1)
    thor = _run(tmp_path / "thor", _rnn_model_fn, _sgd_thor(damping=0.05, frequency=2), inputs, 1)
    out = capsys.readouterr().out
    assert _preconditioned(out)[0].startswith("thor: preconditioning 1 layer(s): head/kernel (Dense"), out
    plain_line = next(l for l in out.splitlines() if "thor: plain gradient" in l)
    assert re.search(r"layers not preconditioned: rnn/cell/dense/kernel \(Dense: called inside a loop", plain_line), \
        plain_line
    # Step one: the cell's kernel got the plain gradient (as under sgd); the head's was preconditioned.
    np.testing.assert_allclose(thor[0], plain[0], atol=1e-6)
    assert np.max(np.abs(thor[2] - plain[2])) > 1e-4
    assert all(np.all(np.isfinite(w)) for w in thor)


class OptedIn(keras.layers.Layer):
    """A custom projection that asks THOR to treat it as a Dense (the documented opt-in)."""

    moxlite_layer_kind = "Dense"

    def __init__(self, units, seed, **kwargs):
        super().__init__(**kwargs)
        self.units, self.seed = units, seed
        self.activation = keras.activations.get(None)

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units), name="kernel",
                                      initializer=keras.initializers.GlorotUniform(seed=self.seed))
        self.bias = self.add_weight(shape=(self.units,), name="bias", initializer="zeros")

    def call(self, x):
        return self.activation(keras.ops.matmul(x, self.kernel) + self.bias)


class Bypassing(keras.layers.Dense):
    """A Dense subclass whose call never applies self.activation: THOR cannot see its output."""

    def call(self, x):
        return keras.ops.matmul(x, self.kernel) + self.bias


def test_a_custom_layer_opted_in_is_preconditioned_as_a_dense_and_a_bypassing_subclass_is_named(tmp_path, capsys):
    inputs = thorlib.small_digits(BATCH * 2)

    def model_fn_with(head):
        def model_fn(inputs, mode):
            x, y = inputs
            h = Bypassing(12, name="bypass", kernel_initializer=keras.initializers.GlorotUniform(seed=1))(x)
            return runlib.spec_for(x, y, head()(h))
        return model_fn

    optimizer_fn = _sgd_thor(damping=0.05, frequency=2)
    custom = _run(tmp_path / "custom", model_fn_with(lambda: OptedIn(10, seed=2, name="head")), optimizer_fn,
                  inputs, 3)
    dense = _run(tmp_path / "dense", model_fn_with(lambda: keras.layers.Dense(
        10, name="head", kernel_initializer=keras.initializers.GlorotUniform(seed=2))), optimizer_fn, inputs, 3)
    out = capsys.readouterr().out
    lines = _preconditioned(out)
    assert len(lines) == 2 and all(l.startswith("thor: preconditioning 1 layer(s): head/kernel (Dense") for l in lines)
    plain = [l for l in out.splitlines() if "thor: plain gradient" in l]
    assert all("bypass/kernel (Dense: its call never applied self.activation)" in l for l in plain), plain
    for got, want in zip(custom, dense):
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_the_start_up_line_gives_a_reason_for_grouped_and_separable_convolution_kernels(tmp_path, capsys):
    net = keras.Sequential([keras.layers.Conv2D(4, 3, groups=2, name="grouped"),
                            keras.layers.SeparableConv2D(4, 3, name="separable"),
                            keras.layers.Flatten(), keras.layers.Dense(10, name="head")])

    def model_fn(inputs, mode):
        images, labels = inputs
        return runlib.spec_for(images, labels, net(images))

    images = np.random.default_rng(0).random((BATCH, 8, 8, 4), dtype=np.float32)
    _run(tmp_path / "run", model_fn, _sgd_thor(frequency=2), (images, np.zeros(BATCH, np.int32)), 1)
    plain = next(line for line in capsys.readouterr().out.splitlines() if "thor: plain gradient for" in line)
    skipped = plain.split("layers not preconditioned: ")[1].split("; ")
    assert skipped == ["sequential/grouped/kernel (Conv2D: grouped convolution)",
                       "sequential/separable/depthwise_kernel (SeparableConv2D: separable convolution)",
                       "sequential/separable/pointwise_kernel (SeparableConv2D: separable convolution)"], plain
