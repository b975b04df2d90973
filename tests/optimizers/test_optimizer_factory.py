"""get_optimizer_fn, the wrapper registry and the wrapper mechanism's surface."""

import logging

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite
from moxlite import errors, flags, logs
from moxlite.optimizers import (
    OPTIMIZER_NAMES, WRAPPER_NAMES, describe_stack, get_optimizer_fn, get_optimizer_wrapper_fn, is_optimizer,
    wrapper_parameters)
from moxlite.optimizers import pipeline as pipeline_lib
from moxlite.optimizers import wrapper as wrapper_lib
from tests.optimizer_loop import Trainer, linear_model, mnist_rows


@pytest.mark.parametrize("name, kwargs, cls, expected", [
    ("sgd", {}, keras.optimizers.SGD, {"momentum": 0.0, "nesterov": False}),
    ("momentum", {}, keras.optimizers.SGD, {"momentum": 0.9}),
    ("momentum", {"momentum": 0.5, "use_nesterov": True}, keras.optimizers.SGD, {"momentum": 0.5, "nesterov": True}),
    ("adam", {"beta1": 0.8, "beta2": 0.99, "epsilon": 1e-8}, keras.optimizers.Adam,
     {"beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-8}),
    ("adamw", {"weight_decay": 0.01, "beta1": 0.85}, keras.optimizers.AdamW, {"weight_decay": 0.01, "beta_1": 0.85}),
    ("rmsprop", {"decay": 0.8, "momentum": 0.1, "centered": True}, keras.optimizers.RMSprop,
     {"rho": 0.8, "momentum": 0.1, "centered": True}),
    ("adagrad", {"initial_accumulator_value": 0.2}, keras.optimizers.Adagrad, {"initial_accumulator_value": 0.2}),
    ("adadelta", {"rho": 0.9, "epsilon": 1e-6}, keras.optimizers.Adadelta, {"rho": 0.9, "epsilon": 1e-6}),
    ("ftrl", {"learning_rate_power": -0.4, "l1_regularization_strength": 0.01}, keras.optimizers.Ftrl,
     {"learning_rate_power": -0.4, "l1_regularization_strength": 0.01}),
    ("nadam", {"beta1": 0.7}, keras.optimizers.Nadam, {"beta_1": 0.7}),
    ("lamb", {"beta2": 0.98, "use_locking": True}, keras.optimizers.Lamb, {"beta_2": 0.98}),
])
def test_each_name_builds_its_keras_class_with_translated_hyper_parameters(name, kwargs, cls, expected):
    optimizer = get_optimizer_fn(name, 0.25, **kwargs)()
    assert type(optimizer) is cls
    config = optimizer.get_config()
    assert config["learning_rate"] == pytest.approx(0.25)
    for key, value in expected.items():
        assert config[key] == pytest.approx(value)


def test_every_advertised_name_builds():
    assert set(OPTIMIZER_NAMES) >= {"sgd", "momentum", "adam", "adamw", "rmsprop", "adagrad", "adadelta",
                                    "ftrl", "nadam", "lamb"}
    for name in OPTIMIZER_NAMES:
        assert is_optimizer(get_optimizer_fn(name.upper(), 0.1)())


def test_unknown_name_lists_the_valid_names():
    with pytest.raises(errors.OptimizerError,
                       match=r"'adamax' is unknown \(did you mean 'adam'\?\); valid names: adadelta, adagrad"):
        get_optimizer_fn("adamax", 0.1)


def test_a_misspelt_name_gets_the_nearest_one():
    with pytest.raises(errors.OptimizerError, match=r"'momentun' is unknown \(did you mean 'momentum'\?\)"):
        get_optimizer_fn("momentun", 0.1)


def test_unknown_argument_is_named_with_the_accepted_ones():
    with pytest.raises(errors.OptimizerError, match=r"adam: unknown argument 'betta1' \(did you mean 'beta1'\?\); accepted: .*beta1.*beta_1"):
        get_optimizer_fn("adam", 0.1, betta1=0.9)


def test_keras_own_accumulation_is_refused_in_favour_of_batch_gradients():
    with pytest.raises(errors.OptimizerError, match="batch_gradients"):
        get_optimizer_fn("sgd", 0.1, gradient_accumulation_steps=4)


@pytest.mark.parametrize("learning_rate, message", [
    (0.0, "must be a finite number > 0"),
    (-1, "must be a finite number > 0"),
    (float("nan"), "must be a finite number > 0"),
    (None, "is not a number"),
    (True, "is not a number"),
    ("fast", "has no 'epoch:lr' form"),
    ("5:0.1->x", "'x' in piece '5:0.1->x' is not a number"),
])
def test_bad_learning_rates_raise_a_helpful_error(learning_rate, message):
    with pytest.raises(errors.OptimizerError, match=message):
        get_optimizer_fn("sgd", learning_rate)


def test_bad_value_of_a_known_argument_is_an_optimizer_error():
    with pytest.raises(errors.OptimizerError, match="adam:"):
        get_optimizer_fn("adam", 0.1, amsgrad=True, clipnorm=1.0, clipvalue=1.0)()


def _numpy_softmax_gradients(weights, images, labels):
    kernel, bias = weights
    logits = images @ kernel + bias
    logits -= logits.max(axis=1, keepdims=True)
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    probabilities[np.arange(len(labels)), labels] -= 1.0
    dlogits = probabilities / len(labels)
    return [images.T @ dlogits, dlogits.sum(axis=0)]


@pytest.mark.parametrize("name, momentum, nesterov", [("sgd", 0.0, False), ("momentum", 0.9, False),
                                                      ("momentum", 0.9, True)])
def test_sgd_and_momentum_steps_equal_numpy(mnist_arrays, name, momentum, nesterov):
    images, labels = mnist_rows(mnist_arrays, 96)
    kwargs = {"momentum": momentum, "use_nesterov": nesterov} if name == "momentum" else {}
    trainer = Trainer(tf.distribute.get_strategy(), get_optimizer_fn(name, 0.3, **kwargs))
    weights = [w.astype(np.float64) for w in trainer.weights()]
    velocities = [np.zeros_like(w) for w in weights]
    for start in range(0, 96, 32):
        batch = images[start:start + 32].astype(np.float64), labels[start:start + 32]
        trainer.step(images[start:start + 32], labels[start:start + 32])
        for i, gradient in enumerate(_numpy_softmax_gradients(weights, *batch)):
            # Keras SGD: v = mu*v - lr*g; w += v (Nesterov: w += mu*v - lr*g).
            velocities[i] = momentum * velocities[i] - 0.3 * gradient
            weights[i] = weights[i] + (momentum * velocities[i] - 0.3 * gradient if nesterov else velocities[i])
    for got, want in zip(trainer.weights(), weights):
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)


def test_is_optimizer_tells_instances_from_factories():
    factory = get_optimizer_fn("sgd", 0.1)
    wrapped = get_optimizer_wrapper_fn("lars", factory)()
    assert is_optimizer(factory()) and is_optimizer(wrapped)
    assert not is_optimizer(factory) and not is_optimizer("sgd")


def test_top_level_exports_are_the_factories():
    assert moxlite.get_optimizer_fn is get_optimizer_fn
    assert moxlite.get_optimizer_wrapper_fn is get_optimizer_wrapper_fn


# Wrappers: registry, validation, stacking, serialisation, MoXing's warning.

def test_registry_lists_wrappers_and_their_parameters():
    assert WRAPPER_NAMES == ("batch_gradients", "lars", "thor")
    parameters = wrapper_parameters("batch_gradients")
    assert parameters["num_batches"][0] == 8 and parameters["sync_on_apply"][0] is True
    assert "integer >= 1" in parameters["num_batches"][1]
    assert wrapper_parameters("lars")["ratio"][0] == 0.001
    assert wrapper_parameters("lars")["weight_decay"][0] == 0.0001


def test_unknown_wrapper_lists_the_valid_ones():
    with pytest.raises(errors.OptimizerError, match="'thorn' is unknown; valid wrappers: batch_gradients, lars, thor"):
        get_optimizer_wrapper_fn("thorn", get_optimizer_fn("sgd", 0.1))


@pytest.mark.parametrize("kwargs, message", [
    ({"num_batches": 0}, "num_batches=0 is out of range; expected an integer >= 1"),
    ({"num_batches": 2.5}, "num_batches=2.5 is out of range"),
    ({"accumulate_on": "gpu"}, "accumulate_on='gpu' is out of range; expected 'device' or 'cpu'"),
    ({"num_batch": 4}, "unknown parameter 'num_batch'; accepted: num_batches, sync_on_apply, accumulate_on"),
])
def test_bad_wrapper_parameters_name_the_parameter_and_range(kwargs, message):
    with pytest.raises(errors.OptimizerError, match=message):
        get_optimizer_wrapper_fn("batch_gradients", get_optimizer_fn("sgd", 0.1), **kwargs)


@pytest.mark.parametrize("kwargs", [{"tied_embedding": "sum"}, {"precondition_biases": True}])
def test_a_parameter_thor_does_not_take_is_one_line_naming_it_and_the_accepted_ones(kwargs):
    (name,) = kwargs
    with pytest.raises(errors.OptimizerError) as info:
        get_optimizer_wrapper_fn("thor", get_optimizer_fn("sgd", 0.1), **kwargs)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"thor: unknown parameter {name!r}; accepted: damping, frequency, "), message
    assert name not in message.split("accepted: ")[1], message


def test_wrapping_a_non_optimizer_is_a_type_error_saying_what_was_given():
    with pytest.raises(TypeError, match="got str: 'sgd'"):
        get_optimizer_wrapper_fn("lars", "sgd")
    with pytest.raises(TypeError, match="got int: 3"):
        get_optimizer_wrapper_fn("lars", lambda: 3)()


def test_wrappers_accept_instances_and_factories_and_delegate_iterations_and_learning_rate():
    inner = get_optimizer_fn("momentum", 0.2)()
    stack = get_optimizer_wrapper_fn("batch_gradients", get_optimizer_wrapper_fn("lars", inner), num_batches=2)()
    assert wrapper_lib.innermost(stack) is inner
    assert stack.iterations is inner.iterations
    assert float(stack.learning_rate) == pytest.approx(0.2)
    stack.learning_rate = 0.05
    assert float(inner.learning_rate) == pytest.approx(0.05)


def test_describe_stack_lists_outermost_first_with_parameters():
    stack = get_optimizer_wrapper_fn(
        "batch_gradients", get_optimizer_wrapper_fn("lars", get_optimizer_fn("momentum", 0.1), ratio=0.002),
        num_batches=4)()
    lines = describe_stack(stack)
    assert lines[0] == "batch_gradients(num_batches=4, sync_on_apply=True, accumulate_on='device')"
    assert lines[1].startswith("lars(ratio=0.002, weight_decay=0.0001, epsilon=0.0, exclude=(")
    assert lines[2] == "SGD(learning_rate=0.1, momentum=0.9, nesterov=False)"


def test_config_round_trip_rebuilds_the_whole_stack():
    stack = get_optimizer_wrapper_fn(
        "batch_gradients",
        get_optimizer_wrapper_fn("lars", get_optimizer_fn("adam", 0.01, beta1=0.8), ratio=0.01, exclude=["bias"]),
        num_batches=3, sync_on_apply=False)()
    rebuilt = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(stack))
    assert describe_stack(rebuilt) == describe_stack(stack)
    assert rebuilt.get_config() == stack.get_config()
    assert wrapper_lib.innermost(rebuilt).get_config()["beta_1"] == pytest.approx(0.8)


def test_layer_statistics_interface_defaults_to_no_request_through_a_stack():
    stack = get_optimizer_wrapper_fn("lars", get_optimizer_fn("sgd", 0.1))()
    assert pipeline_lib.Pipeline(stack).layer_statistics_request() is None
    assert pipeline_lib.Pipeline(get_optimizer_fn("sgd", 0.1)()).layer_statistics_request() is None
    assert pipeline_lib.Pipeline(stack).receive(pipeline_lib.StepInputs(layer_records=())) == (None,)   # lars reads none


@pytest.fixture
def absl_warnings(caplog):
    wrapper_lib._reset_sync_replicas_warning()
    caplog.set_level(logging.WARNING)
    logger = logs.get_logger()   # moxlite's channel does not propagate to the root logger caplog listens on
    logger.addHandler(caplog.handler)
    yield lambda: [r for r in caplog.records if r.getMessage() == wrapper_lib.SYNC_REPLICAS_WARNING]
    logger.removeHandler(caplog.handler)
    wrapper_lib._reset_sync_replicas_warning()


def test_moxing_warning_is_logged_once_on_a_synchronous_cluster(absl_warnings):
    flags.set_flag("sync_replicas", True)
    flags.set_flag("worker_hosts", "host0:2222,host1:2222")
    for _ in range(3):
        get_optimizer_wrapper_fn("lars", get_optimizer_fn("sgd", 0.1))()
    assert len(absl_warnings()) == 1


@pytest.mark.parametrize("workers", [1, 2])
def test_moxing_warning_follows_the_workers_of_the_run_in_progress(absl_warnings, workers):
    from moxlite import context

    flags.set_flag("worker_hosts", "host0:2222,host1:2222")   # the run's own count wins
    with context.activate(context.RunContext(global_step=None, global_batch_size=8, num_workers=workers)):
        get_optimizer_wrapper_fn("lars", get_optimizer_fn("sgd", 0.1))()
    assert len(absl_warnings()) == (workers > 1)


def test_no_moxing_warning_on_one_process(absl_warnings):
    """sync_replicas is true by default: on one process there is no cluster to warn about."""
    flags.set_flag("sync_replicas", True)
    get_optimizer_wrapper_fn("lars", get_optimizer_fn("sgd", 0.1))()
    assert absl_warnings() == []


def test_no_moxing_warning_in_asynchronous_mode(absl_warnings):
    flags.set_flag("sync_replicas", False)
    get_optimizer_wrapper_fn("batch_gradients", get_optimizer_fn("sgd", 0.1))()
    assert absl_warnings() == []


def test_model_fixture_is_softmax_regression():
    # The numpy reference above assumes this model: logits = x @ kernel + bias.
    model = linear_model()
    images = np.random.RandomState(0).rand(3, 784).astype(np.float32)
    kernel, bias = [v.numpy() for v in model.trainable_variables]
    np.testing.assert_allclose(model(images).numpy(), images @ kernel + bias, rtol=1e-5, atol=1e-6)
