"""What a precision level promises at its edges (issue 18): nothing leaks out of a run, keep_fp32 covers
a listed layer's sub-layers, O0 means float32 whatever the global policy, model_fn's values reach
moxlite in float32, and a fixed loss scale that overflows on every step stops the run."""

import os
import signal

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite.training.capture import interception
from tests import runlib, thorlib
from tests.precisionlib import make_model

BATCH = 16
FEATURES = 24   # the width of the Dense/Reshape in front of attention below


def model_fn_over(model, seen=None):
    def model_fn(inputs, mode):
        images, labels = inputs
        logits = model(images)
        if seen is not None:
            seen["logits"] = logits.dtype
        return runlib.spec_for(images, labels, logits)
    return model_fn


def train(log_dir, model_fn, steps=3, optimizer_fn=None, **kwargs):
    images, labels = runlib.mnist_rows(BATCH * 4)
    return runlib.train(log_dir, runlib.input_fn_for(images, labels), model_fn,
                        optimizer_fn or mox.get_optimizer_fn("sgd", learning_rate=0.1), steps=steps,
                        batch_size=BATCH, **kwargs)


def keras_classes():
    """Every Keras layer class reachable from keras.layers, with Layer, Operation and Model."""
    found = {keras.layers.Layer, keras.Model, keras.Operation}
    for value in vars(keras.layers).values():
        if isinstance(value, type) and issubclass(value, keras.layers.Layer):
            found.update(cls for cls in value.__mro__ if isinstance(cls, type) and cls.__module__.startswith("keras"))
    return found


def snapshot(model):
    """The classes' own attributes (by identity), each layer's policy and instance attributes, the global policy."""
    classes = {cls: dict(vars(cls)) for cls in keras_classes()}
    layers = [model, *model._flatten_layers(include_self=False, recursive=True)]
    return classes, [(layer, layer.dtype_policy, set(vars(layer))) for layer in layers], \
        keras.config.dtype_policy().name


def assert_as_before(before, model):
    classes, layers, policy = before
    now_classes, now_layers, now_policy = snapshot(model)
    for cls, attributes in classes.items():
        now = now_classes[cls]
        assert set(now) == set(attributes), f"{cls.__name__}: {set(now) ^ set(attributes)}"
        changed = [name for name in attributes if now[name] is not attributes[name]]
        assert not changed, f"{cls.__name__}.{changed} replaced"
    for (layer, was, attributes), (_, is_now, now_attributes) in zip(layers, now_layers):
        assert is_now is was, f"{layer.name}: policy {was.name} -> {is_now.name}"
        assert now_attributes == attributes, f"{layer.name}: {now_attributes ^ attributes}"
    assert now_policy == policy
    assert not interception.installed()


class Interrupt:
    """A hook that sends this process SIGINT at the first log line (moxlite then stops, saves, re-raises)."""

    def __call__(self, step, values):
        os.kill(os.getpid(), signal.SIGINT)


@pytest.mark.parametrize("case", ["O2", "thor", "sigint", "error"])
def test_every_keras_class_and_layer_policy_is_as_before_after_a_run(tmp_path, case):
    model = make_model()
    model(np.zeros((1, runlib.NUM_FEATURES), np.float32))
    before = snapshot(model)
    model_fn = model_fn_over(model)
    optimizer_fn = None
    if case == "O2":
        mox.set_flag("amp_level", "O2")
    if case == "thor":
        mox.set_flag("amp_level", "O1")
        optimizer_fn = thorlib.thor_optimizer_fn(damping=0.05, frequency=2)
    if case == "sigint":
        mox.set_flag("amp_level", "O3")

        def model_fn(inputs, mode):   # noqa: F811
            spec = model_fn_over(model)(inputs, mode)
            spec.hooks = [Interrupt()]
            return spec
    if case == "error":
        mox.set_flag("amp_level", "O2")

        def model_fn(inputs, mode):   # noqa: F811
            model(inputs[0])
            raise ValueError("model_fn broke")
    if case == "sigint":
        with pytest.raises(KeyboardInterrupt):
            train(tmp_path, model_fn, steps=50, log_every_n_steps=1)
    elif case == "error":
        with pytest.raises(ValueError, match="model_fn broke"):
            train(tmp_path, model_fn)
    else:
        train(tmp_path, model_fn, optimizer_fn=optimizer_fn)
    assert_as_before(before, model)


def test_after_o2_the_model_computes_in_float32_and_an_o0_eval_matches_float64(tmp_path):
    model = make_model()
    mox.set_flag("amp_level", "O2")
    seen = {}
    train(tmp_path, model_fn_over(model, seen))
    assert seen["logits"] == tf.float16                  # the run computed in float16
    images, labels = runlib.mnist_rows(BATCH * 2, offset=500)
    reference = make_model("float64")
    reference.set_weights([w.astype(np.float64) for w in model.get_weights()])
    want = np.asarray(reference(images.astype(np.float64)))
    got = model(images)
    assert got.dtype == "float32"
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-5)

    mox.set_flag("amp_level", "O0")

    def eval_model_fn(inputs, mode):
        images, labels = inputs
        logits = model(images)
        return mox.ModelSpec(log_info={"first": logits[0, 0], "mean": tf.reduce_mean(logits)})

    metrics = mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=eval_model_fn,
                      run_mode=mox.ModeKeys.EVAL, batch_size=BATCH * 2, checkpoint_path=str(tmp_path))
    assert metrics["first"] == pytest.approx(want[0, 0], abs=1e-6)
    assert metrics["mean"] == pytest.approx(want.mean(), abs=1e-6)


def test_keep_fp32_covers_the_projections_of_attention_and_the_cell_of_an_lstm_at_o3(tmp_path):
    seen = {}

    def model_fn(inputs, mode):
        images, labels = inputs
        x = keras.layers.Dense(FEATURES, kernel_initializer=keras.initializers.GlorotUniform(seed=1))(images)
        x = keras.layers.Reshape((3, 8))(x)
        attention = keras.layers.MultiHeadAttention(2, 4, seed=3)
        lstm = keras.layers.LSTM(6, seed=5)
        attended = attention(x, x)
        h = lstm(attended)
        logits = keras.layers.Dense(runlib.NUM_CLASSES)(h)
        seen["attended"], seen["lstm_out"] = attended.dtype, h.dtype
        seen["compute"] = {name: layer.compute_dtype for name, layer in [
            ("attention", attention), ("query", attention._query_dense), ("key", attention._key_dense),
            ("value", attention._value_dense), ("output", attention._output_dense),
            ("softmax", attention._softmax), ("lstm", lstm), ("cell", lstm.cell)]}
        return runlib.spec_for(images, labels, logits)

    calls = []

    class Calls:
        """Records the dtype each projection and cell call hands on, inside the run."""

        def around(self, call, args, kwargs, proceed):
            outputs = proceed(args, kwargs)
            if isinstance(call.layer, (keras.layers.EinsumDense, keras.layers.LSTMCell)):
                first = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
                calls.append((type(call.layer).__name__, first.dtype))
            return outputs

    mox.set_flag("amp_level", "O3")
    mox.set_flag("keep_fp32", "MultiHeadAttention,LSTM")
    with interception.intercepting(Calls()):
        train(tmp_path, model_fn, steps=2)
    assert set(seen["compute"].values()) == {"float32"}, seen["compute"]
    # The kept layers hand their outputs on in the compute dtype; inside them all is float32.
    assert seen["attended"] == tf.float16 and seen["lstm_out"] == tf.float16
    assert {kind for kind, _ in calls} == {"EinsumDense", "LSTMCell"}
    assert {dtype for _, dtype in calls} == {tf.float32}, calls


def test_o0_computes_in_float32_under_a_global_mixed_policy_and_restores_it(tmp_path, capsys):
    seen = {}

    def model_fn(inputs, mode):
        images, labels = inputs
        logits = keras.layers.Dense(runlib.NUM_CLASSES, kernel_initializer="zeros")(images)
        seen["logits"] = logits.dtype
        return runlib.spec_for(images, labels, logits)

    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        images, labels = runlib.mnist_rows(400)
        mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=model_fn,
                optimizer_fn=mox.get_optimizer_fn("sgd", learning_rate=0.5), run_mode=mox.ModeKeys.TRAIN,
                batch_size=20, log_dir=str(tmp_path), max_number_of_steps=6)
        assert keras.config.dtype_policy().name == "mixed_float16"     # the user's, back
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert seen["logits"] == tf.float32
    lines = [line for line in capsys.readouterr().out.splitlines() if "global Keras dtype policy" in line]
    assert len(lines) == 1 and "'mixed_float16' is overridden" in lines[0], lines
    kernel, bias = runlib.checkpoint_variables(tmp_path)
    expected_kernel, expected_bias = runlib.numpy_softmax_regression(images, labels, 20, 6, 0.5)
    np.testing.assert_allclose(kernel, expected_kernel, atol=2e-6)
    np.testing.assert_allclose(bias, expected_bias, atol=2e-6)


def test_values_model_fn_returns_are_float32_after_o2_in_predict_and_the_saved_model(tmp_path):
    def model_fn(inputs, mode):
        images, labels = inputs
        logits = keras.layers.Dense(runlib.NUM_CLASSES,
                                    kernel_initializer=keras.initializers.GlorotUniform(seed=2))(images)
        assert logits.dtype == tf.float16
        return mox.ModelSpec(loss=runlib.cross_entropy(logits, labels), log_info={"top": tf.reduce_max(logits)},
                             output_info={"logits": logits},
                             export_spec=mox.ExportSpec(inputs_dict={"images": images}, outputs_dict={"logits": logits}))

    mox.set_flag("amp_level", "O2")
    images, labels = runlib.mnist_rows(BATCH * 2)
    input_fn = runlib.input_fn_for(images, labels)
    train(tmp_path, model_fn, steps=2)
    outputs = []
    mox.run(input_fn=input_fn, model_fn=model_fn, run_mode=mox.ModeKeys.PREDICT, batch_size=BATCH,
            checkpoint_path=str(tmp_path), output_fn=outputs.append)
    batches = [output for call in outputs for output in call]
    assert batches and all(batch["logits"].dtype == np.float32 for batch in batches)
    path = mox.run(input_fn=input_fn, model_fn=model_fn, run_mode=mox.ModeKeys.EXPORT, batch_size=BATCH,
                   checkpoint_path=str(tmp_path), log_dir=str(tmp_path / "export"))
    loaded = tf.saved_model.load(path)
    signature = loaded.signatures["serving_default"]
    result = signature(images=tf.constant(images[:4]))
    assert result["logits"].dtype == tf.float32
    np.testing.assert_allclose(result["logits"].numpy(), batches[0]["logits"][:4], atol=1e-6)


def test_a_fixed_loss_scale_that_overflows_on_every_step_stops_the_run(tmp_path):
    def model_fn(inputs, mode):
        images, labels = inputs
        logits = keras.layers.Dense(runlib.NUM_CLASSES, kernel_initializer="zeros")(images)
        # Every step's gradient overflows while the loss stays finite (a float16 overflow's signature).
        logits = runlib.poison_gradient(logits, tf.ones([tf.shape(images)[0]]))
        return runlib.spec_for(images, labels, logits)

    mox.set_flag("loss_scale", "1024")
    mox.set_flag("max_consecutive_nonfinite", 3)
    with pytest.raises(mox.errors.UserInputError) as raised:
        train(tmp_path / "run", model_fn, steps=20, log_every_n_steps=1)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("3 steps in a row overflowed the fixed loss scale 1024 and were skipped"), message
    assert "up to global step 3" in message and "--loss_scale=dynamic" in message
    assert tf.train.latest_checkpoint(str(tmp_path / "run")) is None   # nothing saved


def test_the_dry_run_table_reports_the_sub_layers_of_a_kept_layer_in_float32():
    from moxlite.training.mixed_precision import levels

    attention = keras.layers.MultiHeadAttention(2, 4, name="attention")
    lstm = keras.layers.LSTM(4, name="lstm")
    dense = keras.layers.Dense(3, name="dense")
    x = tf.ones((2, 3, 8))
    with levels.layer_policies(levels.plan_for("O3", keep_fp32=["MultiHeadAttention", "LSTM"])):
        dense(lstm(attention(x, x)))
        rows = {row[0]: row[2] for row in levels.layer_dtypes(levels.configured_layers())}
    for name in ("attention", "attention/query", "attention/key", "attention/value", "attention/attention_output",
                 "lstm", "lstm/lstm_cell"):
        assert rows[name] == "float32", rows
    assert rows["dense"] == "float16"
    assert attention._query_dense.compute_dtype == "float32" and dense.compute_dtype == "float32"   # as before
