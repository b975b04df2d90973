"""lars's ``exclude`` and thor's ``weight_decay_exclude`` are searched in the stable name (the
checkpoint key THOR's include/exclude use) and, as before, in the process's own Keras path."""

import keras
import numpy as np

import moxlite as mox
from moxlite.training.capture import interception

# What a run's template answers: the made-up "dense_7" is "dense" in a fresh process.
STABLE = {"dense_7/kernel": "encoder/dense/kernel", "dense_7/bias": "encoder/dense/bias"}


def _layer():
    layer = keras.layers.Dense(3, name="dense_7", kernel_initializer="ones", bias_initializer="ones")
    layer.build((None, 2))
    return layer


def _wrapped(name, **parameters):
    sgd = mox.get_optimizer_fn("sgd", learning_rate=0.1)
    return mox.get_optimizer_wrapper_fn(name, sgd, **parameters)()


def test_lars_exclude_matches_the_stable_name_and_still_the_keras_path():
    kernel = _layer().kernel
    by_stable = _wrapped("lars", exclude=["^encoder/dense/kernel$"])
    by_path = _wrapped("lars", exclude=["^dense_7/kernel$"])
    with interception.stable_names_scope(lambda variable: STABLE.get(variable.path)):
        assert by_stable.is_excluded(kernel) and by_path.is_excluded(kernel)
    assert not by_stable.is_excluded(kernel) and by_path.is_excluded(kernel)   # no run: no stable name


def test_thor_weight_decay_exclude_matches_the_stable_name_and_still_the_keras_path():
    layer = _layer()
    zeros = [np.zeros((2, 3), np.float32), np.zeros(3, np.float32)]
    variables = [layer.kernel, layer.bias]
    for patterns in (["^encoder/dense/kernel$"], ["^dense_7/kernel$"]):
        thor = _wrapped("thor", weight_decay=0.5, weight_decay_exclude=patterns)
        with interception.stable_names_scope(lambda variable: STABLE.get(variable.path)):
            (kernel, bias), _ = thor._precondition(zeros, variables)
        np.testing.assert_array_equal(kernel, zeros[0])                  # excluded: no decay
        np.testing.assert_array_equal(bias, 0.5 * layer.bias.numpy())   # not excluded: + wd * w
    (kernel, _), _ = _wrapped("thor", weight_decay=0.5, weight_decay_exclude=["^encoder/"])._precondition(zeros, variables)
    np.testing.assert_array_equal(kernel, np.full((2, 3), 0.5, np.float32))   # outside a run: only the path
