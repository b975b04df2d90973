"""amp_level O0-O3: every layer's compute and variable dtype against the level's definition."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite.training.capture import interception
from moxlite.training.mixed_precision import levels
from tests import runlib

BATCH = 16
STEPS = 2
KEEP_O1 = {"Softmax", "LayerNormalization", "BatchNormalization", "GroupNormalization", "GELU"}


class ProbedLayerNorm(keras.layers.LayerNormalization):
    """A LayerNormalization that records the dtype its inputs arrive in."""

    seen = []

    def call(self, inputs):
        ProbedLayerNorm.seen.append(inputs.dtype)
        return super().call(inputs)


def build_layers():
    """One layer of each kind the levels treat differently, in call order."""
    return {
        "dense": keras.layers.Dense(32, kernel_initializer=keras.initializers.GlorotUniform(seed=1)),
        "gelu": keras.layers.Activation("gelu"),
        "relu": keras.layers.Activation("relu"),
        "layer_norm": ProbedLayerNorm(),
        "batch_norm": keras.layers.BatchNormalization(),
        "group_norm": keras.layers.GroupNormalization(groups=4),
        "logits": keras.layers.Dense(runlib.NUM_CLASSES, kernel_initializer=keras.initializers.GlorotUniform(seed=2)),
        "softmax": keras.layers.Softmax(),
    }


def forward(layers, images, training, outputs):
    x = layers["dense"](images)
    x = layers["gelu"](x)
    x = layers["relu"](x)
    x = layers["layer_norm"](x)
    outputs["after_keep"] = x.dtype           # a keep-list layer's output, cast back
    x = layers["batch_norm"](x, training=training)
    x = layers["group_norm"](x)
    logits = layers["logits"](x)
    probabilities = layers["softmax"](logits)
    outputs["probabilities"] = probabilities.dtype
    return keras.ops.cast(logits, "float32")


def expected(level, compute, name, cls):
    """(compute dtype, variable dtype) of a layer at ``level``, from the level's definition."""
    kind = "GELU" if name == "gelu" else cls
    if level == "O0":
        return "float32", "float32"
    kept = {"O1": KEEP_O1, "O2": {"BatchNormalization"}, "O3": set()}[level]
    return ("float32" if kind in kept else compute), "float32"


def train(log_dir, model_fn, steps=STEPS):
    images, labels = runlib.mnist_rows(64)
    return runlib.train(log_dir, runlib.input_fn_for(images, labels), model_fn,
                        mox.get_optimizer_fn("sgd", learning_rate=0.1), steps=steps, batch_size=BATCH)


def table(layers):
    """Each layer's (class, dtype row) now: taken inside the run, where the level's policies hold."""
    rows = {row[0]: row for row in levels.layer_dtypes(layers.values())}
    return {name: ("LayerNormalization" if isinstance(layer, ProbedLayerNorm) else type(layer).__name__,
                   rows[getattr(layer, "path", None) or layer.name]) for name, layer in layers.items()}


def check_table(snapshot, level, compute):
    for name, (cls, row) in snapshot.items():
        want = expected(level, compute, name, cls)
        got = (row[2], row[3] if row[3] != "-" else "float32")
        assert got == want, f"{level}/{compute}: {name} ({cls}) is {got}, the level says {want}"


@pytest.mark.parametrize("level, compute", [("O0", "float16"), ("O1", "float16"), ("O1", "bfloat16"),
                                            ("O2", "float16"), ("O3", "float16")])
def test_layers_built_inside_model_fn_follow_the_level(tmp_path, level, compute):
    captured = {}

    def model_fn(inputs, mode):
        images, labels = inputs
        captured["layers"] = build_layers()
        outputs = {}
        logits = forward(captured["layers"], images, mode == mox.ModeKeys.TRAIN, outputs)
        captured["outputs"] = outputs
        captured["table"] = table(captured["layers"])
        return runlib.spec_for(images, labels, logits)

    ProbedLayerNorm.seen.clear()
    mox.set_flag("amp_level", level)
    mox.set_flag("compute_dtype", compute)
    train(tmp_path, model_fn)
    check_table(captured["table"], level, compute)
    mixed = level != "O0"
    # A keep-list layer gets its inputs in float32 and hands the compute dtype on.
    layer_norm_kept = level in ("O0", "O1")
    assert set(ProbedLayerNorm.seen) == {tf.float32 if layer_norm_kept else tf.as_dtype(compute)}
    assert captured["outputs"]["after_keep"] == (tf.as_dtype(compute) if mixed else tf.float32)
    assert captured["outputs"]["probabilities"] == (tf.as_dtype(compute) if mixed else tf.float32)
    assert keras.config.dtype_policy().name == "float32"                  # restored after the run
    assert keras.layers.Layer.__call__ is interception.original_layer_call()   # no interception left
    assert levels.plan_in_force() is None and levels.configured_layers() == []
    kernel = runlib.checkpoint_variables(tmp_path)[0]
    assert kernel.dtype == np.float32                                     # float32 master weights


def test_a_keras_model_closed_over_follows_the_level(tmp_path):
    layers = build_layers()
    inputs = keras.Input((runlib.NUM_FEATURES,))
    outputs = {}
    model = keras.Model(inputs, forward(layers, inputs, None, outputs))   # built in float32, before run

    captured = {}

    def model_fn(inputs, mode):
        images, labels = inputs
        logits = tf.cast(model(images, training=mode == mox.ModeKeys.TRAIN), tf.float32)
        captured["table"] = table(layers)
        return runlib.spec_for(images, labels, logits)

    mox.set_flag("amp_level", "O1")
    train(tmp_path, model_fn)
    check_table(captured["table"], "O1", "float16")
    check_table(table(layers), "O0", "float16")    # and as built (float32) again after the run


def test_keep_list_flags_replace_the_default_and_switch_batchnorm(tmp_path):
    plan = levels.plan_for("O1", "float16", keep_fp32=["Dense"])
    assert plan.keep_fp32 == ("Dense",)
    assert levels.plan_for("O2").keep_fp32 == ("BatchNormalization",)
    assert levels.plan_for("O2", keep_batchnorm_fp32=False).keep_fp32 == ()
    assert levels.plan_for("O3").keep_fp32 == ()
    assert levels.plan_for("O3", keep_batchnorm_fp32=True).keep_fp32 == ("BatchNormalization",)
    captured = {}

    def model_fn(inputs, mode):
        images, labels = inputs
        captured["layers"] = build_layers()
        logits = forward(captured["layers"], images, True, {})
        captured["compute"] = {name: layer.compute_dtype for name, layer in captured["layers"].items()}
        return runlib.spec_for(images, labels, logits)

    mox.set_flag("amp_level", "O3")
    mox.set_flag("keep_fp32", "Dense,Softmax")
    train(tmp_path, model_fn)
    compute = captured["compute"]
    assert compute == {"dense": "float32", "logits": "float32", "softmax": "float32", "gelu": "float16",
                       "relu": "float16", "layer_norm": "float16", "batch_norm": "float16",
                       "group_norm": "float16"}


@pytest.mark.parametrize("flag, value, message", [
    ("amp_level", "O4", r"--amp_level='O4' is not valid; use one of O0, O1, O2, O3"),
    ("compute_dtype", "float64", r"--compute_dtype='float64' is not valid; use 'float16' or 'bfloat16'"),
    ("keep_fp32", "Layernorm", r"--keep_fp32: 'Layernorm' is not a Keras layer class; did you mean 'LayerNormalization'"),
    ("keep_batchnorm_fp32", "yes", r"--keep_batchnorm_fp32='yes' is not valid; use true, false"),
])
def test_bad_amp_flags_are_refused_before_any_work(tmp_path, flag, value, message):
    mox.set_flag("amp_level", "O1")
    mox.set_flag(flag, value)
    with pytest.raises(mox.errors.ArgumentError, match=message):
        train(tmp_path / "never", runlib.softmax_model_fn)
    assert not (tmp_path / "never").exists()


def _precision_from_flags():
    from moxlite import run_settings
    from moxlite.training.mixed_precision import settings

    return settings.from_values({name: run_settings.from_flag(name, mox.get_flag(name)) for name in settings.NAMES})


def test_use_fp16_is_o3_in_float16_and_contradictions_are_refused(tmp_path):
    mox.set_flag("use_fp16", True)
    settings = _precision_from_flags()
    assert settings.amp_plan == levels.plan_for("O3", "float16") and settings.loss_scale == "dynamic"
    mox.set_flag("amp_level", "O0")
    with pytest.raises(mox.errors.ArgumentError, match=r"--use_fp16=True asks for float16 but amp_level O0 for float32; drop one of them"):
        _precision_from_flags()
    mox.set_flag("use_fp16", False)
    mox.set_flag("amp_level", "O1")
    mox.set_flag("compute_dtype", "bfloat16")
    assert _precision_from_flags().loss_scale is None     # bfloat16 needs no loss scaling


def test_two_runs_in_two_threads_each_compute_at_their_own_level(tmp_path):
    """O0 in one thread and O1 in another, both inside their runs at once (a barrier in
    model_fn's first call): each run's layers compute in its own level's dtype."""
    import inspect
    import threading

    from moxlite.training import config as config_lib
    from moxlite.training.run import run_config

    images, labels = runlib.mnist_rows(32)
    meeting = threading.Barrier(2, timeout=120)
    seen = {"O0": [], "O1": []}
    errors = []

    def model_fn_for(level):
        def model_fn(inputs, mode):
            images, labels = inputs
            if not seen[level]:
                meeting.wait()   # the other run is inside its own level too
            hidden = keras.layers.Dense(8)(images)
            logits = keras.layers.Dense(runlib.NUM_CLASSES)(hidden)
            seen[level].append((hidden.dtype, logits.dtype))
            return runlib.spec_for(images, labels, logits)
        return model_fn

    defaults = {name: parameter.default for name, parameter in inspect.signature(mox.run).parameters.items()}
    configs = {level: config_lib.from_run_arguments(
        {**defaults, "input_fn": runlib.input_fn_for(images, labels), "model_fn": model_fn_for(level),
         "optimizer_fn": mox.get_optimizer_fn("sgd", learning_rate=0.1), "run_mode": mox.ModeKeys.TRAIN,
         "batch_size": 8, "log_dir": str(tmp_path / level), "max_number_of_steps": 2},
        {"amp_level": level, "compute_dtype": "float16"}) for level in seen}

    def train_at(level):
        try:
            run_config(configs[level])
        except BaseException as error:   # reported below, on the test's thread
            errors.append((level, error))
            meeting.abort()

    threads = [threading.Thread(target=train_at, args=(level,)) for level in seen]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    assert seen["O0"] and all(dtypes == (tf.float32, tf.float32) for dtypes in seen["O0"]), seen
    assert seen["O1"] and all(dtypes == (tf.float16, tf.float16) for dtypes in seen["O1"]), seen


@pytest.mark.parametrize("flag, value", [("keep_batchnorm_fp32", "true"), ("keep_fp32", "Softmax")])
def test_a_keep_setting_at_o0_trains_in_float32_with_one_warning_line(tmp_path, capsys, flag, value):
    """At O0 every layer is float32 already: the setting changes nothing, and one line says so."""
    mox.set_flag(flag, value)
    train(tmp_path / "o0", runlib.softmax_model_fn)
    warnings = [line for line in capsys.readouterr().out.splitlines() if "has no effect at amp_level O0" in line]
    assert warnings == [f"WARNING:moxlite:--{flag}={value.lower() if flag == 'keep_batchnorm_fp32' else value} "
                        f"(a recipe's precision.{flag}) has no effect at amp_level O0, where every layer "
                        f"computes in float32; drop it, or set amp_level to O1, O2 or O3"]
    mox.set_flag(flag, "")
    train(tmp_path / "plain", runlib.softmax_model_fn)
    assert "has no effect" not in capsys.readouterr().out
    for a, b in zip(runlib.checkpoint_variables(tmp_path / "o0"), runlib.checkpoint_variables(tmp_path / "plain")):
        np.testing.assert_array_equal(a, b)
