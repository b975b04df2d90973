"""Each setting is declared once: every flag, recipe key and RunConfig field comes from one field.

The declarations are the dataclass fields of moxlite.run_settings' blocks, of
moxlite.training.mixed_precision.options.PrecisionOptions and of the option blocks beside the
models and the augmentation; the flags, the recipe schema and RunConfig read them
(moxlite.declarations). Here each reader is walked and traced back to its declaration.
"""

import dataclasses
import typing

from moxlite import declarations, flags, run_settings
from moxlite.recipes import builders, schema
from moxlite.training import config

# Recipe keys named like a flag that are not that flag: run()'s own arguments, which the flag of
# the same name only stands in for when a script's run() call leaves them out.
RUN_ARGUMENTS_NAMED_LIKE_FLAGS = {"run.batch_size": "batch_size", "run.log_dir": "log_dir"}


def _leaf_fields(cls=schema.Recipe, prefix=""):
    for field in dataclasses.fields(cls):
        if dataclasses.is_dataclass(field.type):
            yield from _leaf_fields(field.type, prefix + field.name + ".")
        elif not field.metadata.get("rest"):
            yield prefix + field.name, cls, field


def _declaration(cls, field):
    """The (class, field name) that declares a field a class holds."""
    return declarations.declared_in(field) or cls, field.name


def test_every_flag_is_one_declared_field():
    assert list(flags.FLAG_TABLE) == list(run_settings.FIELDS)
    for name, (kind, default, help_text) in flags.FLAG_TABLE.items():
        block, field = run_settings.FIELDS[name]
        assert block.__dataclass_fields__[name] is field
        assert help_text == field.metadata["help"], name
        assert default == run_settings.flag_text(name, run_settings.DEFAULTS[name]), name
        read, declared = run_settings.from_flag(name, default), run_settings.DEFAULTS[name]
        if name == "loss_scale":   # the flag's '0' and the declared 0 are both "off"
            read, declared = flags.parse_loss_scale(read), flags.parse_loss_scale(declared)
        assert read == declared, name
        if flags.FLAGS[name] is flags._OWN_FLAGS.get(name):
            assert flags.FLAGS[name].help == help_text, name


def test_no_name_is_declared_by_two_blocks():
    blocks = run_settings.BLOCKS
    names = [field.name for block in blocks for field in dataclasses.fields(block)]
    assert len(names) == len(set(names))


def test_every_recipe_key_comes_from_one_declaration():
    declared_by = {}
    for key, cls, field in _leaf_fields():
        declared_by.setdefault(_declaration(cls, field), []).append(key)
        section, name = key.split(".")[0], key.rsplit(".", 1)[-1]
        if section in ("run", "distribute", "precision") and name in run_settings.FIELDS:
            if key in RUN_ARGUMENTS_NAMED_LIKE_FLAGS:
                continue
            assert _declaration(cls, field) == (run_settings.FIELDS[name][0], name), key
    # One key per declaration, but for the options a family of built-ins shares (a base class's
    # field, other defaults per member through with_defaults) and the blocks nested twice.
    shared = {declaration: keys for declaration, keys in declared_by.items() if len(keys) > 1}
    for (cls, name), keys in shared.items():
        assert all(key.rsplit(".", 1)[-1] == name for key in keys), keys
    assert not [keys for (cls, name), keys in shared.items() if cls in run_settings.BLOCKS]


def test_the_recipe_holds_every_setting_a_run_reads_by_its_declaration():
    recipe = schema.Recipe(run=schema.RunSection(log_dir="unused"), input=schema.InputSection(name="mnist"),
                           model=schema.ModelSection(name="mlp"))
    settings = builders.settings_of(recipe)
    script_only = {field.name for field in dataclasses.fields(run_settings.ScriptOptions)}
    assert set(settings) == set(run_settings.FIELDS) - script_only
    # A recipe that leaves a setting out gets the flag's default: both are the one declared default.
    assert settings == {name: run_settings.DEFAULTS[name] for name in settings}


def test_every_runconfig_setting_is_declared_with_its_default():
    fields = {field.name: field for field in dataclasses.fields(config.RunConfig)}
    arguments = set(config.RUN_ARGUMENTS)
    built = {"nonfinite_policy", "precision", "distribution"}   # made from declared settings below
    built |= {"evaluation_follows"}   # set by moxlite.recipes.execution, which knows an EVAL follows; no user gives it
    assert set(fields) - arguments - built <= set(run_settings.FIELDS)
    # run()'s batch_size and log_dir have no default of their own (the flag stands in).
    for name in (set(fields) - built) & set(run_settings.FIELDS) - {"batch_size", "log_dir"}:
        assert fields[name].default == config._declared(name), name
    distribution = {field.name: field for field in dataclasses.fields(config.Distribution)}
    assert set(distribution) <= {field.name for field in dataclasses.fields(run_settings.DistributeOptions)}
    for name, field in distribution.items():
        assert field.default == config._declared(name), name
    from moxlite.training.mixed_precision import options, settings

    assert settings.NAMES == tuple(field.name for field in dataclasses.fields(options.PrecisionOptions))


def test_each_setting_types_the_same_in_the_flags_the_recipe_and_runconfig():
    hints = typing.get_type_hints(schema.RunSection) | typing.get_type_hints(schema.DistributeSection)
    for name, kind in run_settings.TYPES.items():
        if name in hints and f"run.{name}" not in RUN_ARGUMENTS_NAMED_LIKE_FLAGS:
            assert hints[name] == kind, name
