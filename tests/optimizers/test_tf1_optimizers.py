"""tf.compat.v1.train optimizers returned by optimizer_fn (issue 8 item 9) and TypeError kinds (item 11).

Each optimizer is checked three ways: moxlite's translation, TF1's own kernel
(still callable eagerly in TF2) and the numpy reference in tests/tf1_reference.py,
with a learning rate that changes mid-run; then on MNIST softmax regression on one
and two replicas, under lars and batch_gradients, and through moxlite.run with a
TF1 schedule of the global step.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite import errors
from moxlite.optimizers import get_optimizer_wrapper_fn, tf1, tf1_adapter
from tests import runlib
from tests.optimizer_loop import Trainer, mnist_rows
from tests.tf1_reference import NumpyTF1

CONFIGS = [
    ("GradientDescent", {}),
    ("Momentum", {"momentum": 0.9}),
    ("Momentum", {"momentum": 0.9, "use_nesterov": True}),
    ("Adam", {}),
    ("Adam", {"beta1": 0.8, "beta2": 0.99, "epsilon": 1e-3}),
    ("RMSProp", {}),
    ("RMSProp", {"momentum": 0.5, "decay": 0.8}),
    ("RMSProp", {"momentum": 0.5, "centered": True}),
    ("Adagrad", {}),
    ("Adagrad", {"initial_accumulator_value": 0.5}),
    ("Adadelta", {"rho": 0.9}),
    ("Ftrl", {}),
    ("Ftrl", {"l1_regularization_strength": 0.01, "l2_regularization_strength": 0.02,
              "l2_shrinkage_regularization_strength": 0.03, "beta": 0.1}),
]
LEARNING_RATES = [0.1, 0.1, 0.1, 0.01, 0.01, 0.05]


def tf1_optimizer(name, learning_rate, **hyperparameters):
    cls = getattr(tf.compat.v1.train, f"{name}Optimizer")
    if name == "Momentum":
        hyperparameters.setdefault("momentum", 0.9)
    return cls(learning_rate, **hyperparameters)


@pytest.mark.parametrize("name, hyperparameters", CONFIGS, ids=lambda c: str(c))
def test_update_equals_numpy_and_tf1_kernel_when_the_learning_rate_changes(name, hyperparameters):
    rng = np.random.RandomState(len(name))
    start = rng.randn(2, 3).astype(np.float32)
    grads = rng.randn(len(LEARNING_RATES), 2, 3).astype(np.float32)
    learning_rate = tf.Variable(LEARNING_RATES[0])
    ours = tf1_adapter.as_keras_optimizer(tf1_optimizer(name, learning_rate, **hyperparameters))
    assert isinstance(ours, tf1.TF1Optimizer)
    kernel_optimizer = tf1_optimizer(name, learning_rate, **hyperparameters)
    ours_variable, kernel_variable = keras.Variable(start), tf.Variable(start)
    reference, expected = NumpyTF1(name, **hyperparameters), [start.astype(np.float64)]
    for grad, rate in zip(grads, LEARNING_RATES):
        learning_rate.assign(rate)
        ours.apply_gradients([(tf.constant(grad), ours_variable)])
        kernel_optimizer.apply_gradients([(tf.constant(grad), kernel_variable)])
        reference.step(expected, [grad], rate)
    np.testing.assert_allclose(kernel_variable.numpy(), expected[0], atol=3e-6)
    np.testing.assert_allclose(ours_variable.numpy(), expected[0], atol=3e-6)


def test_tf1_momentum_differs_from_keras_momentum_after_a_learning_rate_drop():
    """The distinction the translation exists for: Keras folds lr into its velocity, TF1 does not."""
    grads = [np.ones(1, np.float32)] * 4
    tf1_result = [np.zeros(1)]
    reference = NumpyTF1("Momentum", momentum=0.9)
    learning_rate = tf.Variable(1.0)
    ours = tf1_adapter.as_keras_optimizer(tf.compat.v1.train.MomentumOptimizer(learning_rate, 0.9))
    keras_sgd = keras.optimizers.SGD(learning_rate=1.0, momentum=0.9)
    ours_variable, keras_variable = keras.Variable(np.zeros(1, np.float32)), keras.Variable(np.zeros(1, np.float32))
    for step, grad in enumerate(grads):
        rate = 1.0 if step < 2 else 0.01
        learning_rate.assign(rate)
        keras_sgd.learning_rate = rate
        ours.apply_gradients([(tf.constant(grad), ours_variable)])
        keras_sgd.apply_gradients([(tf.constant(grad), keras_variable)])
        reference.step(tf1_result, [grad], rate)
    np.testing.assert_allclose(ours_variable.numpy(), tf1_result[0], rtol=1e-6)
    # TF1: -(1 + 1.9) - 0.01 * (2.71 + 3.439) = -2.96149; Keras keeps the big velocity: -5.36...
    assert abs(float(keras_variable.numpy()[0]) - float(ours_variable.numpy()[0])) > 2.0


def numpy_softmax_tf1(name, hyperparameters, weights, batches, learning_rates):
    """Softmax regression trained with the numpy TF1 reference, batch by batch."""
    weights = [w.astype(np.float64) for w in weights]
    reference = NumpyTF1(name, **hyperparameters)
    for (images, labels), rate in zip(batches, learning_rates):
        reference.step(weights, softmax_gradients(weights, images, labels), rate)
    return weights


def softmax_gradients(weights, images, labels):
    images = images.astype(np.float64)
    probabilities = runlib.softmax_probabilities(images @ weights[0] + weights[1])
    probabilities[np.arange(len(labels)), labels] -= 1.0
    return [images.T @ probabilities / len(labels), probabilities.mean(axis=0)]


def translating_trainer(strategy, optimizer_fn):
    """tests/optimizer_loop's Trainer, calling optimizer_fn the way moxlite.run does."""
    return Trainer(strategy, lambda: tf1_adapter.call_optimizer_fn(optimizer_fn))


def piecewise_tf1_fn(name, boundary, values, **hyperparameters):
    """optimizer_fn as a MoXing script writes it: a TF1 schedule of TF1's global step."""

    def optimizer_fn():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        learning_rate = tf.compat.v1.train.piecewise_constant(global_step, [boundary], values)
        return tf1_optimizer(name, learning_rate, **hyperparameters)

    return optimizer_fn


# Adam with epsilon 1e-3, not TF1's 1e-8: its step lr * g / (|g| + eps) has absolute condition
# lr / (4 eps) in g where |g| is near eps, and a float32 gradient of 64 samples carries an error
# up to 64 * 2**-24 * sum|terms| (sum|terms| <= 1 here), so at eps 1e-8 one weight of 7,840 can
# differ from numpy by 1e-6 or more on one CPU and not another. At 1e-3 that bound is 5e-8 a step.
MNIST_CASES = [("GradientDescent", {}), ("Momentum", {"momentum": 0.9, "use_nesterov": True}),
               ("Adam", {"epsilon": 1e-3}),
               ("RMSProp", {"momentum": 0.5, "centered": True}), ("Adagrad", {}), ("Adadelta", {}),
               ("Ftrl", {"l1_regularization_strength": 0.001})]


@pytest.mark.parametrize("replicas", [1, 2])
@pytest.mark.parametrize("name, hyperparameters", MNIST_CASES, ids=lambda c: str(c))
def test_mnist_steps_follow_the_global_step_schedule_on_one_and_two_replicas(
        mnist_arrays, two_device_strategy, replicas, name, hyperparameters):
    images, labels = mnist_rows(mnist_arrays, 256)
    batches = [(images[s:s + 64], labels[s:s + 64]) for s in range(0, 256, 64)]
    strategy = two_device_strategy if replicas == 2 else tf.distribute.get_strategy()
    # The rate drops after global step 2: TF1's "x > boundary" takes values[1] from step 3 on.
    trainer = translating_trainer(strategy, piecewise_tf1_fn(name, 2, [0.05, 0.005], **hyperparameters))
    assert isinstance(trainer.optimizer, tf1.TF1Optimizer)
    expected = numpy_softmax_tf1(name, hyperparameters, trainer.weights(), batches, [0.05, 0.05, 0.05, 0.005])
    for batch in batches:
        trainer.step(*batch)
    # float32 against float64: each of the 4 steps moves a weight by at most lr times a
    # normalised gradient, with a rounding error of about 64 * 2**-24 of it (a sum of 64
    # samples), so 4 * 0.05 * 64 * 6e-8 = 8e-7; 2e-6 leaves a factor 2.5 for the update's own
    # rounding and the accumulators' (well conditioned in every case above).
    for got, want in zip(trainer.weights(), expected):
        np.testing.assert_allclose(got, want, atol=2e-6)


def numpy_lars_gradient(weights, grads, ratio, weight_decay):
    scaled = []
    for w, g in zip(weights, grads):
        w_norm, g_norm = np.linalg.norm(w), np.linalg.norm(g)
        trust = ratio * w_norm / (g_norm + weight_decay * w_norm) if w_norm > 0 and g_norm > 0 else 1.0
        scaled.append(trust * (g + weight_decay * w))
    return scaled


def test_lars_over_tf1_momentum_equals_numpy_on_two_replicas(mnist_arrays, two_device_strategy):
    images, labels = mnist_rows(mnist_arrays, 192)
    batches = [(images[s:s + 64], labels[s:s + 64]) for s in range(0, 192, 64)]
    optimizer_fn = get_optimizer_wrapper_fn(
        "lars", lambda: tf.compat.v1.train.MomentumOptimizer(0.5, 0.9), ratio=0.02, weight_decay=0.001, exclude=())
    trainer = translating_trainer(two_device_strategy, optimizer_fn)
    weights = [w.astype(np.float64) for w in trainer.weights()]
    reference = NumpyTF1("Momentum", momentum=0.9)
    for images_batch, labels_batch in batches:
        grads = numpy_lars_gradient(weights, softmax_gradients(weights, images_batch, labels_batch), 0.02, 0.001)
        reference.step(weights, grads, 0.5)
        trainer.step(images_batch, labels_batch)
    for got, want in zip(trainer.weights(), weights):
        np.testing.assert_allclose(got, want, atol=2e-6)


@pytest.mark.parametrize("name", ["Momentum", "Adam"])
def test_batch_gradients_over_tf1_equals_one_big_batch_on_two_replicas(mnist_arrays, two_device_strategy, name):
    images, labels = mnist_rows(mnist_arrays, 256)
    accumulated = translating_trainer(two_device_strategy, get_optimizer_wrapper_fn(
        "batch_gradients", lambda: tf1_optimizer(name, 0.05), num_batches=2))
    expected = numpy_softmax_tf1(name, {}, accumulated.weights(),
                                 [(images[s:s + 128], labels[s:s + 128]) for s in (0, 128)], [0.05, 0.05])
    for start in range(0, 256, 64):
        accumulated.step(images[start:start + 64], labels[start:start + 64])
    for got, want in zip(accumulated.weights(), expected):
        np.testing.assert_allclose(got, want, atol=2e-6)


def schedule_made_before_run(boundary, values):
    """A script that made its step and schedule at module level, before moxlite.run existed."""
    own_step = tf.Variable(0, dtype=tf.int64, trainable=False)
    learning_rate = tf.compat.v1.train.piecewise_constant(own_step, [boundary], values)
    return lambda: tf.compat.v1.train.MomentumOptimizer(learning_rate, momentum=0.9)


def lambda_over_the_tf1_step(boundary, values):
    """A learning rate written by hand over get_or_create_global_step(), not a TF1 decay function."""

    def optimizer_fn():
        step = tf.compat.v1.train.get_or_create_global_step()
        return tf.compat.v1.train.MomentumOptimizer(
            lambda: tf.where(step <= boundary, values[0], values[1]), momentum=0.9)

    return optimizer_fn


@pytest.mark.parametrize("where, replicas", [("inside optimizer_fn", 1), ("before run", 1),
                                             ("inside optimizer_fn", 2), ("lambda", 1)])
def test_moxlite_run_follows_a_tf1_piecewise_schedule_of_the_global_step(tmp_path, where, replicas):
    """MoXing's own example through moxlite.run, with the rate dropping after global step 5."""
    images, labels = runlib.mnist_rows(320)
    log_dir = str(tmp_path / "run")
    mox.set_flag("num_gpus", replicas)   # 2 x 16 rows per step: the same 32 rows as 1 x 32
    if where == "before run":
        optimizer_fn = schedule_made_before_run(5, [0.1, 0.01])
    elif where == "lambda":
        optimizer_fn = lambda_over_the_tf1_step(5, [0.1, 0.01])
    else:
        optimizer_fn = piecewise_tf1_fn("Momentum", 5, [0.1, 0.01], momentum=0.9)
    mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=runlib.softmax_model_fn,
            optimizer_fn=optimizer_fn,
            run_mode=mox.ModeKeys.TRAIN, batch_size=32 // replicas, max_number_of_steps=10, log_dir=log_dir,
            save_summary_steps=0, log_every_n_steps=0)
    batches = [(images[s:s + 32], labels[s:s + 32]) for s in range(0, 320, 32)]
    start = [np.zeros((784, 10)), np.zeros(10)]
    expected = numpy_softmax_tf1("Momentum", {"momentum": 0.9}, start, batches, [0.1] * 6 + [0.01] * 4)
    kernel, bias = _kernel_and_bias(log_dir)
    np.testing.assert_allclose(kernel, expected[0], atol=2e-6)
    np.testing.assert_allclose(bias, expected[1], atol=2e-6)


def _kernel_and_bias(log_dir):
    values = runlib.checkpoint_variables(log_dir)
    kernel = next(v for v in values if v.shape == (784, 10))
    bias = next(v for v in values if v.shape == (10,))
    return kernel, bias


def test_an_untranslatable_tf1_optimizer_is_a_type_error_naming_the_supported_ones():
    with pytest.raises(TypeError, match="ProximalAdagradOptimizer, which moxlite cannot translate.*Momentum"):
        tf1_adapter.as_keras_optimizer(tf.compat.v1.train.ProximalAdagradOptimizer(0.1))

    class MyMomentum(tf.compat.v1.train.MomentumOptimizer):
        pass

    with pytest.raises(errors.OptimizerTypeError, match="cannot translate"):
        tf1_adapter.as_keras_optimizer(MyMomentum(0.1, 0.9))
    with pytest.raises(TypeError, match="momentum is a function"):
        tf1_adapter.as_keras_optimizer(tf.compat.v1.train.MomentumOptimizer(0.1, lambda: 0.9))


def test_a_wrapper_factory_takes_a_tf1_instance_and_translates_it_afresh_each_call():
    factory = get_optimizer_wrapper_fn("lars", tf.compat.v1.train.AdamOptimizer(0.01, epsilon=1e-3))
    first, second = factory(), factory()
    assert isinstance(first.inner_optimizer, tf1.TF1Adam) and first.inner_optimizer.epsilon == 1e-3
    assert first.inner_optimizer is not second.inner_optimizer


def test_errors_about_the_kind_of_an_argument_are_type_errors(tmp_path):
    images, labels = runlib.mnist_rows(64)
    common = dict(input_fn=runlib.input_fn_for(images, labels), model_fn=runlib.softmax_model_fn,
                  run_mode=mox.ModeKeys.TRAIN, batch_size=32, max_number_of_steps=1, log_dir=str(tmp_path / "r"))
    cases = [
        (dict(common, optimizer_fn=tf.compat.v1.train.MomentumOptimizer(0.1, 0.9)), "is an optimizer instance"),
        (dict(common, optimizer_fn=keras.optimizers.SGD(0.1)), "is an optimizer instance"),
        (dict(common, optimizer_fn=lambda: "sgd"), "not an optimizer"),
        (dict(common, optimizer_fn=lambda: keras.optimizers.SGD(0.1), input_fn=3), "input_fn=3 is not callable"),
        (dict(common, optimizer_fn=lambda: keras.optimizers.SGD(0.1), model_fn=lambda inputs, mode: 1.0),
         "model_fn returned 1.0"),
    ]
    for arguments, message in cases:
        with pytest.raises(TypeError, match=message) as caught:
            mox.run(**arguments)
        assert isinstance(caught.value, errors.UserInputError)   # still one line, exit 2 from the CLI
    with pytest.raises(TypeError, match="expected a Keras 3 optimizer"):
        get_optimizer_wrapper_fn("lars", 3)
    with pytest.raises(TypeError, match="is not a number"):
        mox.get_optimizer_fn("sgd", [0.1])


def recipe_optimizer_fn():
    """A recipe's optimizer.name reference to a MoXing-style optimizer_fn returning a TF1 optimizer."""
    global_step = tf.compat.v1.train.get_or_create_global_step()
    return tf.compat.v1.train.MomentumOptimizer(
        tf.compat.v1.train.piecewise_constant(global_step, [2], [0.1, 0.01]), momentum=0.9)


def test_a_recipe_stacks_lars_over_an_optimizer_fn_returning_a_tf1_optimizer(capsys, tmp_path):
    from moxlite.recipes import cli

    log_dir = tmp_path / "recipe"
    recipe = tmp_path / "tf1.yaml"
    recipe.write_text(f"run: {{steps: 4, batch_size: 32, eval_steps: 1, log_dir: {log_dir}}}\n"
                      "input: {name: mnist}\nmodel: {name: mlp, mlp: {hidden_units: [16]}}\n"
                      "optimizer:\n  name: tests.optimizers.test_tf1_optimizers:recipe_optimizer_fn\n"
                      "  wrappers: [{name: lars, ratio: 0.01}]\n")
    arguments = [str(recipe)]
    assert cli.main(arguments + ["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "1. lars(ratio=0.01" in out and "recipe_optimizer_fn" in out and "-> keras.optimizers.TF1Momentum" in out, out
    assert not log_dir.exists()
    assert cli.main(arguments) == 0, capsys.readouterr().err
    assert runlib.checkpoint_step(str(log_dir)) == 4


@pytest.mark.parametrize("name, hyperparameters", [("Adam", {}), ("RMSProp", {"momentum": 0.5, "centered": True})],
                         ids=["Adam", "RMSProp-centered"])
def test_a_resumed_tf1_run_equals_the_uninterrupted_numpy_run(tmp_path, name, hyperparameters):
    """Slots, and Adam's step count (its bias correction), come back from the checkpoint."""
    images, labels = runlib.mnist_rows(320)
    log_dir = str(tmp_path / "resumed")
    for steps in (4, 10):   # a run of 4 steps, then the same log_dir continued to 10
        mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=runlib.softmax_model_fn,
                optimizer_fn=lambda: tf1_optimizer(name, 0.01, **hyperparameters), run_mode=mox.ModeKeys.TRAIN,
                batch_size=32, max_number_of_steps=steps, log_dir=log_dir, save_summary_steps=0,
                log_every_n_steps=0)
    assert runlib.checkpoint_step(log_dir) == 10
    batches = [(images[s:s + 32], labels[s:s + 32]) for s in range(0, 320, 32)]
    expected = numpy_softmax_tf1(name, hyperparameters, [np.zeros((784, 10)), np.zeros(10)], batches, [0.01] * 10)
    kernel, bias = _kernel_and_bias(log_dir)
    np.testing.assert_allclose(kernel, expected[0], atol=2e-6)
    np.testing.assert_allclose(bias, expected[1], atol=2e-6)
