"""The tables the recipe loader checks without TensorFlow agree with the code they stand for.

moxlite.optimizers.recipe_tables (its SCHEDULES and optimizer arguments) writes out what Keras's and
moxlite's signatures say, for the pinned Keras 3.15; an upgrade that changes one fails here
by name, instead of letting a recipe through that the builder then rejects (or the reverse).
The schema's defaults are checked the same way against the network functions.
"""

import dataclasses
import inspect
import os
import typing

import keras
import pytest

from moxlite.data import datasets
from moxlite.optimizers import recipe_tables
from moxlite.optimizers import named_optimizers
from moxlite.optimizers import wrapper_stack
from moxlite.optimizers.thor import schedules as thor_schedules
from moxlite import declarations
from moxlite.data.augment_options import AugmentOptions
from moxlite.models import options as model_options
from moxlite.recipes import schema
from tests import ROOT
from moxlite.training.mixed_precision import options as precision_options


def _arguments(cls, leave_out=("self", "name")):
    parameters = inspect.signature(cls.__init__).parameters
    names = [n for n, p in parameters.items() if n not in leave_out and p.kind is not p.VAR_KEYWORD]
    return names, [n for n in names if parameters[n].default is inspect.Parameter.empty]


@pytest.mark.parametrize("class_name", sorted({entry[0] for entry in recipe_tables.OPTIMIZERS.values()}))
def test_keras_optimizer_arguments_are_the_class_signature_less_the_refused(class_name):
    names, _ = _arguments(getattr(keras.optimizers, class_name), leave_out=("self", "learning_rate"))
    assert "gradient_accumulation_steps" in names   # Keras's, refused: batch_gradients replaces it
    assert set(recipe_tables.keras_arguments(class_name)) == set(names) - {"gradient_accumulation_steps"}


def test_every_optimizer_name_maps_to_a_listed_keras_class():
    for name, (class_name, fixed, aliases) in recipe_tables.OPTIMIZERS.items():
        accepted = recipe_tables.accepted_arguments(name)
        assert not set(fixed) & set(accepted), name
        assert set(aliases.values()) <= set(recipe_tables.keras_arguments(class_name)), name
        assert named_optimizers._OPTIMIZERS[name][0] is getattr(keras.optimizers, class_name)


def test_the_wrapper_classes_use_the_catalog_tables():
    assert set(wrapper_stack.WRAPPERS) == set(recipe_tables.WRAPPER_PARAMETERS)
    for name, cls in wrapper_stack.WRAPPERS.items():
        assert cls.PARAMETERS is recipe_tables.WRAPPER_PARAMETERS[name]
        assert all(parameter.check(parameter.default) for parameter in cls.PARAMETERS.values()), name


@pytest.mark.parametrize("kind", sorted(recipe_tables.SCHEDULES))
def test_schedule_arguments_are_the_class_signature(kind):
    schedule = recipe_tables.SCHEDULES[kind]
    if schedule.owner == recipe_tables.THOR_SCHEDULES:
        cls = thor_schedules.SCHEDULE_CLASSES[kind]
    else:
        cls = getattr(keras.optimizers.schedules, schedule.owner)
    names, required = _arguments(cls)
    assert (schedule.required, schedule.optional) == (tuple(required), tuple(n for n in names if n not in required)), (
        f"{cls.__name__}{inspect.signature(cls.__init__)}; update recipe_tables.SCHEDULES[{kind!r}]")
    assert set(recipe_tables.SCHEDULES) == set(thor_schedules.SCHEDULE_CLASSES) | {
        kind for kind, schedule in recipe_tables.SCHEDULES.items() if schedule.owner != recipe_tables.THOR_SCHEDULES}


def test_the_mnist_image_shape_the_loader_assumes_is_the_data_sets():
    assert tuple(datasets.build("mnist", {}).image_shape) == schema.MNIST_IMAGE_SHAPE


def test_the_lazy_optimizers_face_gives_its_names_and_submodules():
    import moxlite.optimizers as optimizers
    from moxlite.optimizers import wrapper

    assert optimizers.get_optimizer_fn is named_optimizers.get_optimizer_fn
    assert optimizers.WRAPPER_NAMES == recipe_tables.WRAPPER_NAMES
    assert optimizers.wrapper is wrapper
    with pytest.raises(AttributeError, match="no attribute 'get_optimiser_fn'"):
        optimizers.get_optimiser_fn  # noqa: B018


@pytest.mark.parametrize("wrapper, key, good, bad", [
    ("batch_gradients", "sync_on_apply", [True, False], [1, 0, "true", None]),
    ("batch_gradients", "accumulate_on", ["device", "cpu"], ["gpu", 1, None]),
    ("thor", "loss_reduction", ["mean", "sum"], ["avg", None]),
    ("lars", "ratio", [0.001, 2], [0, -1, True, "0.1"]),
    ("thor", "frequency", [2, 100], [1, 2.0, True]),
    ("thor", "damping", [0.0, 0.03, lambda step: 0.1], [-0.1, "0.03"]),
    ("lars", "exclude", [(), ["bias"], ("gamma", "beta")], ["bias", ["("], [1]]),
])
def test_the_parameter_checks_accept_and_refuse_what_they_say(wrapper, key, good, bad):
    parameter = recipe_tables.WRAPPER_PARAMETERS[wrapper][key]
    assert all(parameter.check(value) for value in good), parameter.accepted
    assert not any(parameter.check(value) for value in bad), parameter.accepted


@pytest.mark.parametrize("block, network", [("swin_tiny", "swin"), ("vit_tiny", "vit")])
def test_the_transformer_blocks_defaults_are_the_network_functions(block, network):
    # The schema states them for --help-recipe; the functions hold them for moxlite.run users.
    from moxlite.models import vision_transformers

    parameters = inspect.signature(getattr(vision_transformers, network)).parameters
    options = dataclasses.asdict(getattr(schema.ModelSection(name="mlp"), block))
    for key, value in options.items():
        default = parameters[key].default
        assert (list(default) if isinstance(default, tuple) else default) == value, (
            f"model.{block}.{key}: schema default {value!r}, {network}() default {default!r}")


def test_the_keep_fp32_names_are_keras_layer_classes_but_the_base_class():
    # keep_fp32 reads keras.layers itself; "Layer" is left out on purpose (keeping it would keep
    # every layer in float32), and GELU names an Activation layer computing GELU.
    names = precision_options.keep_fp32_names()
    assert "Layer" not in names and {"LayerNormalization", "Softmax", "Dense", "GELU"} <= set(names)
    assert all(issubclass(getattr(keras.layers, name), keras.layers.Layer) for name in names if name != "GELU")


def _blocks(cls=schema.Recipe, prefix=""):
    for field in dataclasses.fields(cls):
        if dataclasses.is_dataclass(field.type):
            yield prefix + field.name, field.type
            yield from _blocks(field.type, prefix + field.name + ".")


def test_every_declared_default_is_inside_its_declared_range():
    image_shapes = {"swin_tiny": [224, 224, 3], "vit_tiny": [224, 224, 3]}
    for path, cls in _blocks():
        if any(f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
               for f in dataclasses.fields(cls)):
            continue   # a block with required keys (run, input, ...) has no complete default
        values = dataclasses.asdict(cls())
        assert declarations.check_values(cls, values, image_shapes.get(path.split(".")[-1])) is None, path
    for name, table in recipe_tables.WRAPPER_PARAMETERS.items():
        assert all(parameter.check(parameter.default) for parameter in table.values()), name


# The recipe sections issue 21 lists: every key has a declared range (a Range, choices or a
# rule), except booleans, which the type check settles.
CHECKED_SECTIONS = (precision_options.PrecisionOptions, AugmentOptions, model_options.SwinTinyOptions,
                    model_options.VitTinyOptions)


@pytest.mark.parametrize("cls", CHECKED_SECTIONS, ids=lambda cls: cls.__name__)
def test_every_key_of_the_newer_sections_has_a_declared_range(cls):
    ruled = {rule.key for rule in declarations.rules_of(cls)}
    unchecked = [f.name for f in dataclasses.fields(cls)
                 if not (f.metadata.get("valid") or f.metadata.get("choices") or f.name in ruled)
                 and f.type not in (bool, typing.Optional[bool])]
    assert unchecked == []


def test_the_count_of_keys_with_a_declared_range_matches_the_tool():
    import subprocess
    import sys

    root = ROOT
    printed = subprocess.run([sys.executable, os.path.join(root, "tools", "count_ranged_keys.py")], cwd=root,
                             capture_output=True, text=True, check=True,
                             env=dict(os.environ, PYTHONPATH=root)).stdout
    assert f"{len(schema.ranged_keys())} keys with a declared range" in printed


def test_only_thors_schedules_that_take_steps_per_epoch_derive_it_from_the_run():
    derived = {kind for kind, schedule in recipe_tables.SCHEDULES.items() if schedule.derived_from_run}
    assert derived == {"thor", "thor_damping"}
