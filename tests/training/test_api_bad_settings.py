"""Bad settings of the newer features through the Python API: a moxlite error, before anything is written.

The API checks the declarations the recipe loader checks (the ranges and rules of
moxlite.models.options, moxlite.data.augment_options and moxlite.training.mixed_precision.options,
moxlite.optimizers.recipe_tables's wrapper and schedule tables), so each mistake of
tests/bad_recipes/cases.yaml has its API twin here: the error is a moxlite error of the
stated type whose message names the argument and the value, and ``log_dir``, which holds a
file from an earlier run, is byte for byte what it was.
"""

import math
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite import declarations, errors, models
from moxlite.data.augment_options import AugmentOptions
from moxlite.data import train_augmentation as augment
from moxlite.optimizers.thor import schedules as thor_schedules
from tests import runlib

BATCH = 8


def snapshot(path):
    """Every directory and file below ``path`` with the file's bytes."""
    state = {}
    for root, directories, files in os.walk(path):
        for name in directories:
            state[os.path.relpath(os.path.join(root, name), path)] = "<dir>"
        for name in files:
            full = os.path.join(root, name)
            with open(full, "rb") as handle:
                state[os.path.relpath(full, path)] = handle.read()
    return state


@pytest.fixture
def log_dir(tmp_path):
    """A log_dir an earlier run left a file in; the test asserts it is unchanged afterwards."""
    directory = tmp_path / "logs"
    directory.mkdir()
    (directory / "earlier.txt").write_bytes(b"from an earlier run\n")
    before = snapshot(directory)
    yield directory
    assert snapshot(directory) == before


def image_input_fn(shape=(32, 32, 3), count=16):
    images = np.random.default_rng(0).random((count,) + shape).astype(np.float32)
    labels = np.arange(count, dtype=np.int32) % 10
    return runlib.input_fn_for(images, labels)


def train(log_dir, model_fn=runlib.softmax_model_fn, optimizer_fn=None, input_fn=None):
    if input_fn is None:
        images, labels = runlib.mnist_rows(32)
        input_fn = runlib.input_fn_for(images, labels)
    return runlib.train(log_dir, input_fn, model_fn, optimizer_fn or mox.get_optimizer_fn("sgd", 0.1),
                        steps=2, batch_size=BATCH)


def raised(error_type, call):
    with pytest.raises(error_type) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    return message


# ----------------------------------------------------------------- models (moxlite.models.options)

@pytest.mark.parametrize("name, options, argument, fragment", [
    ("vit_tiny", {"patch_size": 8, "depth": 0}, "depth", "depth=0 is out of range; expected an integer >= 1"),
    ("vit_tiny", {"patch_size": 8, "drop_path": 1.5}, "drop_path", "drop_path=1.5 is out of range"),
    ("vit_tiny", {"patch_size": 8, "embed_dim": 100, "num_heads": 3}, "num_heads",
     "num_heads=3 does not divide embed_dim=100"),
    ("vit_tiny", {"patch_size": 0}, "patch_size", "patch_size=0 is out of range"),
    ("vit_tiny", {"mlp_ratio": math.inf}, "mlp_ratio", "mlp_ratio=inf is out of range; expected a finite number > 0"),
    ("swin_tiny", {"window_size": 0}, "window_size", "window_size=0 is out of range"),
    ("swin_tiny", {"depths": [2, 2], "num_heads": [3, 6, 12]}, "num_heads",
     "num_heads=[3, 6, 12] has 3 stages, depths [2, 2] has 2"),
    ("swin_tiny", {"num_heads": (5, 6, 12, 24)}, "num_heads", "stage 0 has 96 channels"),
    ("swin_tiny", {"depths": [2, 0, 6, 2]}, "depths", "depths=[2, 0, 6, 2] is out of range"),
    ("swin_tiny", {"drop_path": math.nan}, "drop_path", "drop_path=nan is out of range"),
    ("mlp", {"dropout": 1.0}, "dropout", "dropout=1.0 is out of range; expected a finite number in [0, 1)"),
    ("lenet", {"kernel_size": 0}, "kernel_size", "kernel_size=0 is out of range"),
    ("vit_tiny", {"patch_sise": 8}, "patch_sise", "unknown option 'patch_sise' (did you mean 'patch_size'?)"),
])
def test_model_options_are_checked_when_the_model_fn_is_made(log_dir, name, options, argument, fragment):
    message = raised(errors.ArgumentError,
                     lambda: train(log_dir, models.build_model_fn(name, 10, **options), input_fn=image_input_fn()))
    assert message.startswith(f"{name}: ") and argument in message and fragment in message, message


@pytest.mark.parametrize("argument, value, fragment", [
    ("label_smoothing", 1.5, "label_smoothing=1.5 is out of range; expected a finite number in [0, 1)"),
    ("label_smoothing", -0.1, "label_smoothing=-0.1 is out of range"),
    ("weight_decay", math.inf, "weight_decay=inf is out of range; expected a finite number >= 0"),
])
def test_the_shared_model_arguments_are_checked(log_dir, argument, value, fragment):
    message = raised(errors.ArgumentError, lambda: train(log_dir, models.build_model_fn("mlp", 10, **{argument: value})))
    assert fragment in message


def test_num_classes_below_two_is_refused(log_dir):
    message = raised(errors.ArgumentError, lambda: train(log_dir, models.build_model_fn("mlp", 1)))
    assert "num_classes=1 is out of range; expected an integer >= 2" in message


@pytest.mark.parametrize("name, options, shape, fragment", [
    ("vit_tiny", {"patch_size": 5}, (32, 32, 3), "vit_tiny: patch_size=5 does not divide the 32x32 images"),
    ("swin_tiny", {}, (28, 28, 1), "swin_tiny: patch_size=4 gives 7x7 tokens at stage 0 of 28x28 images"),
    ("swin_tiny", {"window_size": 7}, (64, 64, 3), "swin_tiny: window_size=7 does not fit stage 0's 16x16 tokens"),
])
def test_rules_about_the_image_are_checked_at_the_first_batch_before_anything_is_written(log_dir, name, options,
                                                                                       shape, fragment):
    model_fn = models.build_model_fn(name, 10, **options)   # the image is not known yet: accepted here
    message = raised(errors.ArgumentError, lambda: train(log_dir, model_fn, input_fn=image_input_fn(shape)))
    assert fragment in message


# ----------------------------------------------------------------- augmentation (moxlite.data.augment_options)

@pytest.mark.parametrize("argument, value, fragment", [
    ("rand_augment_magnitude", 5, "rand_augment_magnitude=5 is out of range; expected a finite number in [0, 1]"),
    ("random_erasing", 1.5, "random_erasing=1.5 is out of range"),
    ("mix_batch", 0, "mix_batch=0 is out of range; expected an integer >= 2"),
    ("mixup_alpha", -1.0, "mixup_alpha=-1.0 is out of range; expected a finite number >= 0"),
    ("cutmix_alpha", math.inf, "cutmix_alpha=inf is out of range"),
    ("switch_prob", 2.0, "switch_prob=2.0 is out of range"),
    ("value_range", (1.0, 0.0), "value_range=(1.0, 0.0) must be [low, high] with low < high"),
    ("rand_augment_ops", -1, "rand_augment_ops=-1 is out of range; expected an integer >= 0"),
])
def test_augmentation_settings_are_checked_when_made(argument, value, fragment):
    message = raised(errors.ArgumentError, lambda: augment.Augmentation(**{argument: value}))
    assert message.startswith("Augmentation: ") and fragment in message


# ----------------------------------------------------------------- THOR, lars and their schedules (catalog)

@pytest.mark.parametrize("name, parameters, fragment", [
    ("thor", {"damping": math.inf}, "thor: damping=inf is out of range; expected a finite number >= 0"),
    ("thor", {"damping": math.nan}, "thor: damping=nan is out of range"),
    ("thor", {"weight_decay": math.inf}, "thor: weight_decay=inf is out of range"),
    ("lars", {"ratio": math.inf}, "lars: ratio=inf is out of range; expected a finite number > 0"),
    ("lars", {"epsilon": math.nan}, "lars: epsilon=nan is out of range"),
])
def test_infinite_and_nan_wrapper_parameters_are_refused(log_dir, name, parameters, fragment):
    message = raised(errors.OptimizerError, lambda: train(
        log_dir, optimizer_fn=mox.get_optimizer_wrapper_fn(name, mox.get_optimizer_fn("momentum", 0.1), **parameters)))
    assert fragment in message


@pytest.mark.parametrize("schedule, fragment", [
    (lambda step: -1.0, "gives -1.0 at step 0"),
    (lambda step: float("nan") if step else 0.03, "gives nan at step 1"),
    (lambda step: np.float32(np.inf), "gives inf at step 0"),
    (thor_schedules.ThorDamping.__new__(thor_schedules.ThorDamping), "calling the schedule"),
])
def test_a_damping_callable_is_checked_at_its_first_values(log_dir, schedule, fragment):
    message = raised(errors.OptimizerError, lambda: train(
        log_dir, optimizer_fn=mox.get_optimizer_wrapper_fn("thor", mox.get_optimizer_fn("momentum", 0.1),
                                                           damping=schedule)))
    assert message.startswith("thor: damping: ") and fragment in message, message


def test_a_good_damping_callable_passes_the_check():
    factory = mox.get_optimizer_wrapper_fn("thor", mox.get_optimizer_fn("momentum", 0.1),
                                           damping=thor_schedules.ThorDamping(0.03, 0.5, 10))
    assert callable(factory)


class _Negative(keras.optimizers.schedules.LearningRateSchedule):
    def __call__(self, step):
        return tf.constant(-0.1) + 0.0 * tf.cast(step, tf.float32)


@pytest.mark.parametrize("schedule, fragment", [
    (keras.optimizers.schedules.CosineDecay(-1.0, 10), "gives -1.0 at step 0"),
    (keras.optimizers.schedules.ExponentialDecay(math.inf, 10, 0.5), "gives inf at step 0"),
    (_Negative(), "gives -0.1"),
])
def test_a_learning_rate_schedule_is_checked_at_its_first_values(log_dir, schedule, fragment):
    message = raised(errors.OptimizerError, lambda: train(log_dir, optimizer_fn=mox.get_optimizer_fn("sgd", schedule)))
    assert message.startswith("learning_rate: the schedule ") and fragment in message, message


@pytest.mark.parametrize("call, fragment", [
    (lambda: thor_schedules.bert_thor_learning_rate(total_step=100),
     "bert_thor_learning_rate: unknown argument 'total_step' (did you mean 'total_steps'?)"),
    (lambda: thor_schedules.bert_thor_damping(power=-1.0), "thor_polynomial: power=-1.0 is out of range"),
    (lambda: thor_schedules.ThorLearningRate(math.inf, 4.0, 50, 100), "thor: lr_init=inf is out of range"),
    (lambda: thor_schedules.ThorDamping(0.03, 0.5, math.inf), "thor_damping: steps_per_epoch=inf is out of range"),
])
def test_thor_schedule_functions_name_the_argument(log_dir, call, fragment):
    message = raised(errors.OptimizerError, lambda: train(log_dir, optimizer_fn=mox.get_optimizer_fn("sgd", call())))
    assert fragment in message


# ----------------------------------------------------------------- precision (moxlite.training.mixed_precision.options)

@pytest.mark.parametrize("settings, fragment", [
    ({"amp_level": "O1", "loss_scale": "inf"}, "--loss_scale='inf' is out of range"),
    ({"amp_level": "O1", "loss_scale": "dynamic:nan"}, "--loss_scale='dynamic:nan' is out of range"),
    ({"gradient_clip": math.inf}, "--gradient_clip=inf is out of range; expected a finite number >= 0"),
    ({"use_fp16": True, "amp_level": "O0"}, "--use_fp16=True asks for float16 but amp_level O0"),
    ({"amp_level": "O1", "keep_fp32": "Layer"}, "--keep_fp32: 'Layer' is not a Keras layer class"),
    ({"amp_level": "O1", "keep_fp32": "Xyzzy"},
     "--keep_fp32: 'Xyzzy' is not a Keras layer class; give Keras layer class names"),
])
def test_precision_settings_are_checked_before_anything_is_written(log_dir, settings, fragment):
    for name, value in settings.items():
        mox.set_flag(name, value)
    message = raised(errors.ArgumentError, lambda: train(log_dir))
    assert fragment in message, message
    assert "did you mean 'Layer'" not in message


# ----------------------------------------------------------------- one declaration

def test_recipe_and_api_read_the_same_range_objects():
    from moxlite.optimizers import recipe_tables

    assert declarations.field_range(AugmentOptions, "mix_batch").check(2)
    assert not declarations.field_range(AugmentOptions, "mix_batch").check(1)
    lars_ratio = recipe_tables.WRAPPER_PARAMETERS["lars"]["ratio"]
    assert lars_ratio.check(0.001) and not lars_ratio.check(math.inf)
    assert recipe_tables.schedule_problem("cosine", {"initial_learning_rate": "abc"})[0] == "initial_learning_rate"
