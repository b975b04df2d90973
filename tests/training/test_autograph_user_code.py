"""AutoGraph leaves moxlite's own functions unconverted and converts the user's as before.

moxlite's modules carry a DoNotConvert rule (``compat.leave_unconverted``), so the
user functions it calls while tracing are converted explicitly
(``compat.converted_user_function``). A model_fn with Python control flow on
tensors trains as the same model written without it (numpy's softmax regression
on the plain path; the control-flow-free model_fn under O1 and THOR). A Keras
layer's ``call`` is not converted by Keras 3, and moxlite's interception does not
start converting it: such a layer fails as it did before.
"""

import importlib.util
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite import compat
from tests import runlib, thorlib

BATCH = 16
STEPS = 3
LEARNING_RATE = 0.5

PROBE_SOURCE = '''
import tensorflow as tf

from moxlite import compat


def branch(x):
    if tf.reduce_sum(x) > 0:
        return x * 2.0
    return x - 1.0


def call_plainly(function, x):
    return function(x)


def call_converted(function, x):
    return compat.converted_user_function(function)(x)
'''


def _load_probe(tmp_path, module_name):
    """PROBE_SOURCE as module ``module_name`` (a real file: AutoGraph reads a function's source)."""
    path = tmp_path / (module_name.replace(".", "_") + ".py")
    path.write_text(PROBE_SOURCE)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def probes(tmp_path):
    """The probe loaded once inside moxlite's package name and once under a user's module name."""
    names = ("moxlite.autograph_probe", "user_autograph_probe")
    try:
        yield [_load_probe(tmp_path, name) for name in names]
    finally:
        for name in names:
            sys.modules.pop(name, None)


def user_branch(x):
    if tf.reduce_sum(x) > 0:
        return x * 2.0
    return x - 1.0


def test_moxlite_modules_are_left_unconverted_and_user_modules_are_not():
    assert compat.is_left_unconverted("moxlite")
    assert compat.is_left_unconverted("moxlite.training.trainers.steps")
    assert not compat.is_left_unconverted("moxlite_extensions")   # a prefix of a name is not the package
    assert not compat.is_left_unconverted(__name__)
    assert not compat.is_left_unconverted("__main__")


def test_a_moxlite_function_is_not_converted_and_the_same_user_function_is(probes):
    inside_moxlite, user_module = probes
    ones = tf.ones([2])
    np.testing.assert_allclose(tf.function(lambda x: user_module.branch(x))(ones), [2.0, 2.0])
    with pytest.raises(tf.errors.OperatorNotAllowedInGraphError):
        tf.function(lambda x: inside_moxlite.branch(x))(ones)


def test_a_user_function_moxlite_calls_while_tracing_is_converted_through_the_helper(probes):
    inside_moxlite, _ = probes
    ones = tf.ones([2])
    np.testing.assert_allclose(tf.function(lambda x: inside_moxlite.call_converted(user_branch, x))(ones), [2.0, 2.0])
    np.testing.assert_allclose(tf.function(lambda x: inside_moxlite.call_converted(user_branch, x))(-ones), [-2.0, -2.0])
    with pytest.raises(tf.errors.OperatorNotAllowedInGraphError):   # what the helper is for
        tf.function(lambda x: inside_moxlite.call_plainly(user_branch, x))(ones)


def test_the_helper_keeps_the_users_own_autograph_settings(probes):
    inside_moxlite, _ = probes
    unconverted = tf.autograph.experimental.do_not_convert(user_branch)
    with pytest.raises(tf.errors.OperatorNotAllowedInGraphError):
        tf.function(lambda x: inside_moxlite.call_converted(unconverted, x))(tf.ones([2]))
    with pytest.raises(tf.errors.OperatorNotAllowedInGraphError):
        tf.function(lambda x: inside_moxlite.call_converted(user_branch, x), autograph=False)(tf.ones([2]))
    assert compat.converted_user_function(user_branch) is user_branch   # eager code is never converted


# ---- model_fn and a custom layer, trained --------------------------------------------------------

def halved(images):
    """images * 0.5, reached through a tensor ``if`` and a loop over ``tf.range``."""
    if tf.reduce_sum(images) > 0:
        images = images * 0.25
    else:
        images = images * 4.0
    factor = tf.constant(0.0)
    for step in tf.range(3):
        factor += tf.cast(step, tf.float32)   # 0 + 1 + 2
    return images * (factor / 1.5)


def control_flow_model_fn(inputs, mode):
    images, labels = inputs
    logits = keras.layers.Dense(runlib.NUM_CLASSES, kernel_initializer="zeros", bias_initializer="zeros")(
        halved(images))
    return runlib.spec_for(images, labels, logits)


def static_model_fn(inputs, mode):
    images, labels = inputs
    logits = keras.layers.Dense(runlib.NUM_CLASSES, kernel_initializer="zeros", bias_initializer="zeros")(
        images * 0.5)
    return runlib.spec_for(images, labels, logits)


class BranchingDense(keras.layers.Layer):
    """A custom layer with a tensor ``if`` in ``call`` (Keras 3 does not convert ``call``)."""

    def build(self, input_shape):
        self.dense = keras.layers.Dense(runlib.NUM_CLASSES, kernel_initializer="zeros")

    def call(self, x):
        if tf.reduce_sum(x) > 0:
            x = x * 0.5
        return self.dense(x)


def branching_layer_model_fn(inputs, mode):
    images, labels = inputs
    return runlib.spec_for(images, labels, BranchingDense()(images))


def sgd_optimizer_fn():
    return mox.get_optimizer_fn("sgd", learning_rate=LEARNING_RATE)()


PATHS = {
    "plain": ("O0", sgd_optimizer_fn),
    "O1": ("O1", sgd_optimizer_fn),           # the interception: amp's precision handler
    "thor": ("O0", thorlib.thor_optimizer_fn(lr=0.05, damping=0.05, frequency=2)),   # and THOR's recorder
}


def train(log_dir, model_fn, path):
    level, optimizer_fn = PATHS[path]
    images, labels = runlib.mnist_rows(BATCH * STEPS)
    mox.set_flag("amp_level", level)
    runlib.train(log_dir, runlib.input_fn_for(images, labels), model_fn, optimizer_fn, steps=STEPS,
                 batch_size=BATCH)
    return runlib.checkpoint_variables(str(log_dir))


def test_a_model_fn_with_tensor_control_flow_trains_as_numpy_says(tmp_path):
    kernel, bias = train(tmp_path, control_flow_model_fn, "plain")
    images, labels = runlib.mnist_rows(BATCH * STEPS)
    want_kernel, want_bias = runlib.numpy_softmax_regression(images * 0.5, labels, BATCH, STEPS, LEARNING_RATE)
    np.testing.assert_allclose(kernel, want_kernel, atol=1e-5)
    np.testing.assert_allclose(bias, want_bias, atol=1e-5)


@pytest.mark.parametrize("path", ["O1", "thor"])
def test_a_model_fn_with_tensor_control_flow_trains_as_without_it_under_interception(tmp_path, path):
    got = train(tmp_path / "flow", control_flow_model_fn, path)
    want = train(tmp_path / "static", static_model_fn, path)
    assert len(got) == len(want) == 2
    for value, reference in zip(got, want):
        assert np.any(reference != 0.0)
        np.testing.assert_allclose(value, reference, rtol=0, atol=1e-6)


@pytest.mark.parametrize("path", ["plain", "O1", "thor"])
def test_a_layer_call_with_tensor_control_flow_fails_in_the_trace_as_in_keras(tmp_path, path):
    with pytest.raises(tf.errors.OperatorNotAllowedInGraphError):
        train(tmp_path, branching_layer_model_fn, path)
