"""moxlite.training.capture.interception: one scoped way to see layer calls, per thread, into composite layers."""

import threading

import keras
import numpy as np
import pytest
import tensorflow as tf

from moxlite.training.capture import interception


class Seen:
    def __init__(self):
        self.calls = []

    def around(self, call, args, kwargs, proceed):
        self.calls.append((call.layer.name, tuple(parent.name for parent in call.parents)))
        return proceed(args, kwargs)


def test_handlers_see_sublayer_calls_with_their_parents_and_keras_is_untouched_after():
    original = vars(keras.layers.Layer)["__call__"]
    attention = keras.layers.MultiHeadAttention(2, 4, name="attention")
    x = tf.ones((1, 3, 8))
    seen = Seen()
    with interception.intercepting(seen):
        assert interception.installed()
        attention(x, x)
    assert vars(keras.layers.Layer)["__call__"] is original and not interception.installed()
    names = dict(seen.calls)
    assert names["attention"] == ()
    for projection in ("query", "key", "value", "attention_output"):
        assert names[projection] == ("attention",), seen.calls
    attention(x, x)     # no handler: nothing more is seen
    assert len(seen.calls) == len(names)


def test_the_interception_is_put_back_after_an_error_in_the_body():
    original = vars(keras.layers.Layer)["__call__"]
    with pytest.raises(KeyboardInterrupt):
        with interception.intercepting(Seen(), threads="run"):
            raise KeyboardInterrupt
    assert vars(keras.layers.Layer)["__call__"] is original and not interception.installed()


def test_a_thread_handler_sees_only_its_thread_and_a_run_handler_reaches_worker_threads():
    layer = keras.layers.Dense(2)
    layer(tf.ones((1, 2)))
    mine, run = Seen(), Seen()
    other_thread = []

    def worker():
        layer(tf.ones((1, 2)))
        other_thread.append(True)

    with interception.intercepting(run, threads="run"), interception.intercepting(mine):
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        layer(tf.ones((1, 2)))
    assert other_thread and len(mine.calls) == 1 and len(run.calls) == 2


def test_an_attribute_replaced_on_one_thread_is_the_original_on_another_and_put_back():
    layer = keras.layers.Dense(3, activation="relu")
    inputs = np.random.RandomState(0).rand(2, 4).astype("float32")
    layer(inputs)
    kernel, bias = (np.asarray(w) for w in layer.weights)
    linear = inputs @ kernel + bias
    seen, other = [], []
    with interception.on_this_thread(layer, "activation", lambda x: (seen.append(np.asarray(x)), x)[1]):
        thread = threading.Thread(target=lambda: other.append(np.asarray(layer(inputs))))
        thread.start()
        thread.join()
        outputs = np.asarray(layer(inputs))
    np.testing.assert_allclose(seen[0], linear, rtol=1e-5, atol=1e-6)    # the pre-activation output
    np.testing.assert_allclose(outputs, linear, rtol=1e-5, atol=1e-6)    # no relu: the replacement is all
    np.testing.assert_allclose(other[0], np.maximum(linear, 0), rtol=1e-5, atol=1e-6)
    assert "activation" in vars(layer) and layer.activation is keras.activations.relu


def test_stable_name_answers_from_the_run_in_progress():
    variable = tf.Variable(1.0, name="made_up_7")
    assert interception.stable_name(variable) == "made_up_7"
    with interception.stable_names_scope(lambda v: "block0/attention/query/kernel" if v is variable else None):
        assert interception.stable_name(variable) == "block0/attention/query/kernel"
        assert interception.stable_name(tf.Variable(2.0, name="w"), default="fallback") == "fallback"
    assert interception.stable_name(variable) == "made_up_7"


def test_a_layer_class_named_with_a_leading_underscore_trains_as_the_same_class_named_without(tmp_path):
    """Keras names an instance of ``_Block`` '__block', which TensorFlow refused as the root name
    scope of a traced step ("not a valid root scope name"); its checkpoint key is Keras's path."""
    import moxlite as mox
    from tests import runlib

    def block_class(name):
        def __init__(self, **kwargs):
            keras.layers.Layer.__init__(self, **kwargs)
            self.dense = keras.layers.Dense(10, kernel_initializer=keras.initializers.GlorotUniform(seed=2))

        return type(name, (keras.layers.Layer,), {"__init__": __init__, "call": lambda self, x: self.dense(x)})

    images, labels = runlib.mnist_rows(32)
    trained = {}
    for name in ("_Block", "Block"):
        cls = block_class(name)

        def model_fn(inputs, mode):
            x, y = inputs
            return runlib.spec_for(x, y, cls()(x))

        mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=model_fn,
                optimizer_fn=mox.get_optimizer_fn("sgd", learning_rate=0.1), run_mode=mox.ModeKeys.TRAIN,
                batch_size=16, log_dir=str(tmp_path / name), max_number_of_steps=2)
        trained[name] = runlib.checkpoint_by_name(str(tmp_path / name))
    assert list(trained["_Block"]) == ["__" + key for key in trained["Block"]]   # the same keys, Keras's name
    for a, b in zip(trained["_Block"].values(), trained["Block"].values()):
        np.testing.assert_array_equal(a, b)
