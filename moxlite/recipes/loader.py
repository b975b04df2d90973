"""Read recipe files, merge them, apply ``--set`` overrides and check them against the schema.

The order is TF Model Garden's: files are merged in the order given (a later
file overrides an earlier one key by key; lists are replaced whole), then each
``--set dotted.key=value`` applies, its value parsed as a YAML scalar or list.

YAML is read with the safe loader only, numbers as YAML 1.2 writes them: ``1e-3`` and
``1.0e4`` are numbers (PyYAML follows YAML 1.1, where they are strings), and a whole number
written with an exponent (``run.steps: 1e4``) is taken where an integer is expected.
Each key remembers the file and line
it came from (from the YAML node marks), so that every mistake is reported on
one line as ``file:line: dotted.key: what is wrong; what is accepted``.
"""

import dataclasses
import math
import os
import re
import typing
from typing import Any, Dict, List, Optional, Union

import yaml

from moxlite import declarations, errors
from moxlite.data import sources
from moxlite.distribute import cluster
from moxlite.optimizers import learning_rates
from moxlite.optimizers import recipe_tables
from moxlite.recipes import references, schema


@dataclasses.dataclass(frozen=True)
class Origin:
    """Where a value was set: a file and line, or a --set override."""

    source: str
    line: Optional[int] = None

    def __str__(self):
        return f"{self.source}:{self.line}" if self.line is not None else self.source


class Locations:
    """Maps key paths (tuples of keys and list indices) to the Origin that set them."""

    def __init__(self, default_source="<recipe>"):
        self._origins: Dict[tuple, Origin] = {}
        self.default_source = default_source

    def record(self, path, origin):
        self._origins[tuple(path)] = origin

    def forget_below(self, path):
        """Drop the origins under ``path`` (its value was replaced whole)."""
        path = tuple(path)
        for key in [k for k in self._origins if k[: len(path)] == path and len(k) > len(path)]:
            del self._origins[key]

    def origin(self, path):
        """The origin of ``path``, or of its nearest recorded parent."""
        path = tuple(path)
        while path:
            if path in self._origins:
                return self._origins[path]
            path = path[:-1]
        return self._origins.get((), Origin(self.default_source))

    def error(self, path, message):
        """A RecipeError located at ``path``: 'file:line: dotted.key: message'."""
        return errors.RecipeError(f"{self.origin(path)}: {dotted(path)}: {message}")


def dotted(path):
    """('optimizer', 'wrappers', 0, 'ratio') -> 'optimizer.wrappers[0].ratio'."""
    text = ""
    for key in path:
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else str(key))
    return text or "<recipe>"


@dataclasses.dataclass
class LoadedRecipe:
    """A checked recipe: the typed dataclasses, and where each value came from."""

    recipe: schema.Recipe
    locations: Locations
    sources: List[str]

    def error(self, path, message):
        return self.locations.error(path, message)

    def resolved(self):
        """The full recipe (defaults filled in) as plain data, for recipe.yaml and --dry-run."""
        return to_plain(self.recipe)

    def resolved_yaml(self):
        return yaml.safe_dump(self.resolved(), sort_keys=False, default_flow_style=None, width=100)


# ----------------------------------------------------------------- YAML with line numbers

class ExponentNumber(float):
    """A number written with an exponent (``1e4``, ``2.5E-3``): a float, and an integer where
    one is expected when it is whole (YAML 1.2 reads ``1e4`` as 10000.0). ``convert`` turns it
    into a plain int or float; it never reaches a built recipe."""


class RecipeYamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader, reading the exponent forms YAML 1.1 leaves as strings as numbers."""


_EXPONENT_TAG = "tag:moxlite.invalid,2026:exponent-number"
_EXPONENT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")
# Tried before YAML 1.1's float (which takes 1.0e+4 but not 1e4), so every exponent form is one kind.
RecipeYamlLoader.yaml_implicit_resolvers = {
    first: ([(_EXPONENT_TAG, _EXPONENT)] if first in "-+0123456789." else []) + list(resolvers)
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
RecipeYamlLoader.add_constructor(
    _EXPONENT_TAG, lambda loader, node: ExponentNumber(loader.construct_scalar(node).replace("_", "")))


def load_yaml_value(text):
    """One YAML value (a ``--set`` value), numbers read as YAML 1.2 writes them."""
    return yaml.load(text, Loader=RecipeYamlLoader)   # a SafeLoader: no Python objects


def plain_numbers(value):
    """``value`` with every ExponentNumber inside it as a plain float."""
    if isinstance(value, ExponentNumber):
        return float(value)
    if isinstance(value, dict):
        return {key: plain_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain_numbers(item) for item in value]
    return value


def read_yaml_file(path, locations):
    """The mapping in ``path`` as plain data; records each key's line in ``locations``."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as error:
        raise errors.RecipeError(f"{path}: cannot read the recipe: {error.strerror}") from None
    return parse_yaml_text(text, path, locations)


def parse_yaml_text(text, source, locations):
    """Parse YAML ``text`` (named ``source`` in messages) with the safe loader."""
    loader = RecipeYamlLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return {}
        locations.record((), Origin(source, node.start_mark.line + 1))
        if not isinstance(node, yaml.MappingNode):
            raise errors.RecipeError(
                f"{source}:{node.start_mark.line + 1}: a recipe must be a mapping of sections "
                f"(run, input, model, ...), not a {_node_kind(node)}")
        return _to_data(node, (), loader, source, locations, _Expansion(source))
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = "; ".join(str(part) for part in (error.context, error.problem) if part)
        raise errors.RecipeError(f"{source}{line}: YAML syntax error: {problem}") from None
    except yaml.YAMLError as error:
        raise errors.RecipeError(f"{source}: YAML syntax error: {' '.join(str(error).split())}") from None
    finally:
        loader.dispose()


def _node_kind(node):
    return {yaml.MappingNode: "mapping", yaml.SequenceNode: "list"}.get(type(node), "scalar")


_PLAIN_TAGS = {yaml.MappingNode: "tag:yaml.org,2002:map", yaml.SequenceNode: "tag:yaml.org,2002:seq"}


class _Expansion:
    """Bounds what YAML aliases can expand to, so that a few nested anchors (a "billion
    laughs" file) fail at once instead of exhausting memory. Real recipes use a few
    hundred values; the bound is far above that."""

    MAX_VALUES = 20_000
    MAX_DEPTH = 64

    def __init__(self, source):
        self.source = source
        self.values = 0

    def count(self, node, path):
        self.values += 1
        if self.values > self.MAX_VALUES or len(path) > self.MAX_DEPTH:
            what = (f"expands to more than {self.MAX_VALUES} values" if self.values > self.MAX_VALUES
                    else f"nests deeper than {self.MAX_DEPTH} levels")
            raise errors.RecipeError(
                f"{self.source}:{node.start_mark.line + 1}: {dotted(path)}: the recipe {what} through YAML "
                "aliases (*name); write the values out or use fewer nested aliases")


def _to_data(node, path, loader, source, locations, expansion):
    expansion.count(node, path)
    locations.record(path, Origin(source, node.start_mark.line + 1))
    if type(node) in _PLAIN_TAGS and node.tag != _PLAIN_TAGS[type(node)]:
        # Collections are walked here, not by the constructor, so tags must be refused here.
        raise errors.RecipeError(f"{source}:{node.start_mark.line + 1}: {dotted(path)}: YAML tag {node.tag!r} "
                                 f"is not allowed; recipes hold plain mappings, lists and scalars")
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)  # resolves '<<' merge keys
        result = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise errors.RecipeError(
                    f"{source}:{key_node.start_mark.line + 1}: {dotted(path)}: key {key!r} must be a string")
            if key in result:
                raise errors.RecipeError(
                    f"{source}:{key_node.start_mark.line + 1}: {dotted(path + (key,))}: duplicate key "
                    f"(first given on line {locations.origin(path + (key,)).line}); keep one")
            locations.record(path + (key,), Origin(source, key_node.start_mark.line + 1))
            result[key] = _to_data(value_node, path + (key,), loader, source, locations, expansion)
            locations.record(path + (key,), Origin(source, key_node.start_mark.line + 1))
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_to_data(item, path + (index,), loader, source, locations, expansion)
                for index, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)


# ----------------------------------------------------------------- merging and overrides

def merge_into(base, update, path, locations, update_locations):
    """Merge mapping ``update`` into ``base`` in place: dicts key by key, anything else replaced."""
    for key, value in update.items():
        key_path = path + (key,)
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            locations.record(key_path, update_locations.origin(key_path))
            merge_into(base[key], value, key_path, locations, update_locations)
        else:
            base[key] = value
            locations.forget_below(key_path)
            _copy_origins(key_path, value, locations, update_locations.origin)


def _copy_origins(path, value, locations, origin_of):
    """Record ``origin_of(p)`` for ``path`` and every path below it in ``value``."""
    locations.record(path, origin_of(path))
    if isinstance(value, dict):
        for key, item in value.items():
            _copy_origins(path + (key,), item, locations, origin_of)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _copy_origins(path + (index,), item, locations, origin_of)


@dataclasses.dataclass(frozen=True)
class Override:
    """A ``dotted.key=value`` override and the command-line argument it was written as
    (``--cluster=slurm`` for ``distribute.cluster="slurm"``), which messages name."""

    text: str
    written: str

    @classmethod
    def of(cls, override):
        """``override`` as an Override: a plain string is a ``--set`` one."""
        return override if isinstance(override, cls) else cls(override, f"--set {override}")


def apply_override(data, override, locations):
    """Apply one ``dotted.key=value`` override (a string, or an Override) to ``data`` in place."""
    override = Override.of(override)
    text, origin = override.text, Origin(override.written)
    if "=" not in text:
        raise errors.RecipeError(f"{origin}: expected dotted.key=value, e.g. --set run.steps=100")
    key_text, value_text = text.split("=", 1)
    keys = [k.strip() for k in key_text.strip().split(".")]
    if not key_text.strip() or any(not k for k in keys):
        raise errors.RecipeError(f"{origin}: {key_text!r} is not a dotted key such as run.steps")
    try:
        value = load_yaml_value(value_text) if value_text.strip() else ""
    except yaml.MarkedYAMLError as error:
        raise errors.RecipeError(f"{origin}: the value is not valid YAML: {error.problem}") from None
    except yaml.YAMLError as error:
        raise errors.RecipeError(f"{origin}: the value is not valid YAML: {' '.join(str(error).split())}") from None
    path = tuple(int(k) if k.isdigit() else k for k in keys)
    container = data
    for depth, key in enumerate(path[:-1]):
        here = path[: depth + 1]
        if isinstance(container, list):
            if not isinstance(key, int) or key >= len(container):
                raise errors.RecipeError(f"{origin}: {dotted(path[:depth])} is a list of {len(container)}; "
                                         f"index it with 0..{len(container) - 1}")
            container = container[key]
            continue
        if not isinstance(container, dict):
            raise errors.RecipeError(f"{origin}: {dotted(path[:depth])} is not a mapping, so it has no key {key!r}")
        if key not in container or container[key] is None:
            container[key] = {}
            locations.record(here, origin)
        container = container[key]
    last = path[-1]
    if isinstance(container, list):
        if not isinstance(last, int) or last >= len(container):
            raise errors.RecipeError(f"{origin}: {dotted(path[:-1])} is a list of {len(container)}; "
                                     f"index it with 0..{len(container) - 1}")
    elif not isinstance(container, dict):
        raise errors.RecipeError(f"{origin}: {dotted(path[:-1])} is not a mapping, so it has no key {last!r}")
    container[last] = value
    locations.forget_below(path)
    _copy_origins(path, value, locations, lambda _path: origin)


# ----------------------------------------------------------------- building the dataclasses

def load(paths, overrides=(), data=None):
    """Read, merge, override and check: a LoadedRecipe, or a RecipeError on the first mistake.

    ``paths``: recipe files, merged in order; ``overrides``: 'dotted.key=value'
    strings (or Override's); ``data``: an optional mapping merged before the files (for tests
    and programmatic use).
    """
    locations = Locations(paths[0] if paths else "<recipe>")
    merged = {}
    if data is not None:
        own = Locations("<data>")
        merge_into(merged, _deep_copy(data), (), locations, own)
    for path in paths:
        file_locations = Locations(path)
        content = read_yaml_file(path, file_locations)
        merge_into(merged, content, (), locations, file_locations)
    if not paths and data is None:
        raise errors.RecipeError("no recipe given: pass one or more recipe files, e.g. moxlite-run recipes/mnist_mlp.yaml")
    overrides = [Override.of(override) for override in overrides]
    for override in overrides:
        apply_override(merged, override, locations)
    _check_not_an_overlay_alone(paths, merged)
    recipe = build(schema.Recipe, merged, (), locations)
    loaded = LoadedRecipe(recipe=recipe, locations=locations,
                          sources=list(paths) + [override.written for override in overrides])
    check(loaded)
    return loaded


def _check_not_an_overlay_alone(paths, merged):
    """A RecipeError when the one recipe file given lacks sections a recipe needs and reads as an
    overlay: its header names the base it follows, or it has neither input nor model."""
    required = [f.name for f in dataclasses.fields(schema.Recipe)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [name for name in required if name not in merged]
    if len(paths) != 1 or not missing:
        return
    command = _command_in_header(paths[0])
    if command is None and not {"input", "model"} <= set(missing):
        return
    example = command or f"moxlite-run recipes/mnist_mlp.yaml {paths[0]}"
    raise errors.RecipeError(
        f"{paths[0]}: has no {' and no '.join(missing)} section: it is an overlay, meant to follow a base "
        f"recipe on the command line, e.g. {example}")


def _command_in_header(path):
    """The ``moxlite-run <base> ... <path>`` command a recipe's header comment names, or None."""
    name = os.path.basename(path)
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if not line.startswith("#"):
                    return None
                words = line.lstrip("#").split()
                files = [word for word in words[1:] if word.endswith((".yaml", ".yml"))]
                if (words[:1] == ["moxlite-run"] and len(files) > 1
                        and os.path.basename(files[-1]) == name):
                    return " ".join(words)
    except OSError:
        return None
    return None


def _deep_copy(value):
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


def build(cls, mapping, path, locations):
    """Build dataclass ``cls`` from ``mapping`` strictly: unknown keys, wrong types and missing keys are errors."""
    if mapping is None:
        mapping = {}
    if not isinstance(mapping, dict):
        raise locations.error(path, f"expected a mapping of {_accepted(cls)}, got {_kind(mapping)} {errors.describe(mapping)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    rest_field = next((f for f in fields.values() if f.metadata.get("rest")), None)
    hints = typing.get_type_hints(cls)
    values, rest = {}, {}
    for key, value in mapping.items():
        key_path = path + (key,)
        if key not in fields or fields[key].metadata.get("rest"):
            if rest_field is not None:
                rest[key] = plain_numbers(value)
                continue
            raise locations.error(key_path, f"unknown key{declarations.did_you_mean(key, _declared(cls))}; accepted: {_accepted(cls)}")
        values[key] = convert(value, hints[key], key_path, locations, fields[key])
    for name, field in fields.items():
        if name in values or field.metadata.get("rest"):
            continue
        if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise locations.error(path + (name,), f"missing required key ({field.metadata['help']})")
    if rest_field is not None:
        values[rest_field.name] = rest
    return cls(**values)


def convert(value, annotation, path, locations, field=None):
    """``value`` checked against ``annotation``, the field's choices and its declared range; ints widen to floats."""
    value = _convert(value, annotation, path, locations, field)
    valid = field.metadata.get("valid") if field is not None else None
    if valid is not None and value is not None:
        problem = valid.problem(value)
        if problem:
            raise locations.error(path, problem)
    return value


def _convert(value, annotation, path, locations, field=None):
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Union:
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        for option in options:
            if _matches(value, option):
                return _convert(value, option, path, locations, field)
        raise locations.error(path, f"expected {declarations.type_name(annotation)}, got {_kind(value)} {errors.describe(value)}")
    if dataclasses.is_dataclass(annotation):
        return build(annotation, value, path, locations)
    if origin is list:
        if not isinstance(value, list):
            raise locations.error(path, f"expected {declarations.type_name(annotation)}, got {_kind(value)} {errors.describe(value)}")
        return [convert(item, args[0], path + (index,), locations) for index, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise locations.error(path, f"expected a mapping, got {_kind(value)} {errors.describe(value)}")
        return plain_numbers(dict(value))
    if annotation is Any:
        return plain_numbers(value)
    if annotation is int and isinstance(value, ExponentNumber) and value.is_integer():
        return int(value)
    if not _matches(value, annotation):
        raise locations.error(path, f"expected {declarations.type_name(annotation)}, got {_kind(value)} {errors.describe(value)}")
    value = plain_numbers(value)
    if annotation is float:
        value = float(value)
        if not math.isfinite(value):
            raise locations.error(path, f"{value} is not a finite number; give a finite number (YAML .inf and .nan "
                                        f"are not accepted)")
    choices = field.metadata.get("choices") if field is not None else None
    if choices and value not in choices and not (field.name == "name" and schema.is_reference(value)):
        extra = " or a 'package.module:function' reference" if field.name == "name" else ""
        raise locations.error(path, f"{value!r} is not one of {', '.join(repr(c) for c in choices)}{extra}"
                                    f"{declarations.did_you_mean(str(value), [str(c) for c in choices])}")
    return value


def _matches(value, annotation):
    """The declared type check, a recipe's block being a mapping (not yet its dataclass)."""
    if annotation is int and isinstance(value, ExponentNumber):
        return value.is_integer()
    if dataclasses.is_dataclass(annotation):
        return isinstance(value, dict)
    return declarations.matches(value, annotation)


def _kind(value):
    if value is None:
        return "null"
    kind = float if isinstance(value, ExponentNumber) else type(value)
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "list", dict: "mapping"}.get(
        kind, kind.__name__)


def _declared(cls):
    return [f.name for f in dataclasses.fields(cls) if not f.metadata.get("rest")]


def _accepted(cls):
    return ", ".join(_declared(cls))


def shadowed_package(log_dir, cwd=None):
    """'moxlite' when ``log_dir`` lies in a directory of that name right in the current directory.

    Python puts the current (or the script's) directory first on sys.path, so such a
    directory, which a run creates, would be imported instead of the package.
    """
    cwd = os.path.abspath(cwd or os.getcwd())
    relative = os.path.relpath(os.path.abspath(os.path.expanduser(log_dir)), cwd)
    first = relative.split(os.sep)[0]
    return first if first == "moxlite" else None


def _choices(word, candidates):
    """The end of a message about a ``word`` not among ``candidates``: the closest one, then all."""
    return f"{declarations.did_you_mean(word, list(candidates))}; accepted: {', '.join(candidates)}"


# ----------------------------------------------------------------- checks across fields

def check(loaded):
    """Checks that need more than one field (no TensorFlow, no imports of user code)."""
    recipe, error = loaded.recipe, loaded.error
    run = recipe.run
    positive = {"batch_size": run.batch_size, "log_every_n_steps": run.log_every_n_steps,
                "keep_checkpoint_max": run.keep_checkpoint_max, "save_summary_steps": run.save_summary_steps}
    for name, value in positive.items():
        if value < 1:
            raise error(("run", name), f"{value} must be a positive integer")
    if run.steps_per_loop != "auto" and (isinstance(run.steps_per_loop, str) or run.steps_per_loop < 1):
        raise error(("run", "steps_per_loop"), f"{run.steps_per_loop!r} must be a positive integer or 'auto' (the "
                                               f"default)")
    for name in ("steps", "eval_steps", "output_every_n_steps"):
        if getattr(run, name) < 0:
            raise error(("run", name), f"{getattr(run, name)} must be 0 or more")
    for name in ("save_model_secs", "save_model_steps"):
        if getattr(run, name) is not None and getattr(run, name) < 1:
            raise error(("run", name), f"{getattr(run, name)} must be a positive integer or null")
    if not run.log_dir.strip():
        raise error(("run", "log_dir"), "must name a directory")
    shadowing = shadowed_package(run.log_dir)
    if shadowing:
        raise error(("run", "log_dir"), f"{run.log_dir!r} would make a directory {shadowing!r} in the current "
                                        f"directory, which hides the installed {shadowing} package from scripts "
                                        f"and recipes run here; use e.g. runs/<name>")
    if run.output_fn is not None and not schema.is_reference(run.output_fn):
        raise error(("run", "output_fn"), f"{run.output_fn!r} must be a 'package.module:function' reference")
    if run.mode == "train" and recipe.input.epochs is None and run.steps == 0:
        raise error(("run", "steps"), "0 with input.epochs: null would train forever; set run.steps or input.epochs")
    if recipe.input.epochs is not None and recipe.input.epochs < 1:
        raise error(("input", "epochs"), f"{recipe.input.epochs} must be a positive integer or null")
    if run.mode == "train" and recipe.optimizer.name is None:
        raise error(("optimizer", "name"), "missing: training needs an optimizer (e.g. momentum, sgd, adam)")
    for section in ("input", "model"):
        block = getattr(recipe, section)
        if block.kwargs and not schema.is_reference(block.name):
            raise error((section, "kwargs"), f"only used with a 'package.module:function' {section}.name; "
                                             f"options of the built-in {block.name!r} go in {section}.{block.name}")
    _check_data_options(loaded)
    _check_model_options(loaded)
    if run.mode == "train":   # as the builder: other modes build no optimizer
        _check_optimizer(loaded)
    _check_distribute(loaded)
    _check_precision(loaded)


def _check_rules(loaded, path, block, image_shape=None):
    """The rules across the keys of ``block`` (its declaration's), as a located error on the key a rule names."""
    found = declarations.check_values(type(block), dataclasses.asdict(block), image_shape)
    if found:
        raise loaded.error(path + (found[0],), found[1])


def _check_data_options(loaded):
    recipe, error = loaded.recipe, loaded.error
    _check_rules(loaded, ("input", "augment"), recipe.input.augment)
    augment = recipe.input.augment
    if schema.is_reference(recipe.input.name) and (augment.rand_augment_ops or augment.random_erasing
                                                   or augment.mixup_alpha or augment.cutmix_alpha):
        raise error(("input", "augment"), "applies to the built-in data sets only; augment inside your input_fn "
                                          "(moxlite.data.train_augmentation.augmented_input_fn)")
    synthetic = recipe.input.synthetic
    if len(synthetic.image_shape) not in (1, 2, 3) or min(synthetic.image_shape) < 1:
        raise error(("input", "synthetic", "image_shape"), f"{synthetic.image_shape} must be 1 to 3 positive sizes, e.g. [32, 32, 3]")
    for name in ("num_classes", "num_samples", "eval_samples"):
        if getattr(synthetic, name) < 1:
            raise error(("input", "synthetic", name), f"{getattr(synthetic, name)} must be a positive integer")
    if not 0.0 < recipe.input.mnist.validation_fraction < 1.0:
        raise error(("input", "mnist", "validation_fraction"), f"{recipe.input.mnist.validation_fraction} must be between 0 and 1")
    for block in ("tfrecord", "image_folder"):
        _check_rules(loaded, ("input", block), getattr(recipe.input, block))
        shape = getattr(recipe.input, block).image_shape
        if len(shape) != 3 or min(shape) < 1 or shape[2] not in (1, 3):
            raise error(("input", block, "image_shape"), f"{shape} must be [height, width, channels] with 1 or 3 channels")
    if recipe.input.shuffle_buffer < 0:
        raise error(("input", "shuffle_buffer"), f"{recipe.input.shuffle_buffer} must be 0 or more")
    for block in schema.TEXT_DATASET_NAMES:
        _check_rules(loaded, ("input", block), getattr(recipe.input, block))
    if recipe.input.name in schema.TEXT_DATASET_NAMES and (augment.rand_augment_ops or augment.random_erasing
                                                          or augment.mixup_alpha or augment.cutmix_alpha):
        raise error(("input", "augment"), f"augments images, and the {recipe.input.name} data set gives token ids; "
                                          f"remove input.augment")
    if recipe.input.name in ("tfrecord", "image_folder") + schema.TEXT_DATASET_NAMES:
        try:
            sources.check_files(recipe.input.name, dataclasses.asdict(getattr(recipe.input, recipe.input.name)))
        except sources.DataOptionError as problem:
            raise error(("input", recipe.input.name, problem.option), problem.detail) from None


def data_image_shape(recipe):
    """The image shape a built-in data set gives (None for your own input_fn), known before reading it."""
    name = recipe.input.name
    if schema.is_reference(name) or name in schema.TEXT_DATASET_NAMES:
        return None
    return list(schema.MNIST_IMAGE_SHAPE) if name == "mnist" else list(getattr(recipe.input, name).image_shape)


def _check_model_options(loaded):
    recipe, error = loaded.recipe, loaded.error
    model = recipe.model
    image_shape = data_image_shape(recipe)
    for name in schema.MODEL_NAMES:
        # Rules between keys of every block; those about the image only for the model that sees it.
        _check_rules(loaded, ("model", name), getattr(model, name),
                     image_shape if name == model.name and image_shape and len(image_shape) == 3 else None)
    if model.name in schema.IMAGE_MODEL_NAMES and recipe.input.name in schema.TEXT_DATASET_NAMES:
        raise error(("model", "name"), f"{model.name} reads images, and the {recipe.input.name} data set gives "
                                       f"masked-LM token ids; use a masked-LM model, or an image data set")
    if model.name == "resnet50" and image_shape is not None and min(image_shape[:2]) < 32:
        raise error(("model", "name"), f"resnet50 needs images of at least 32x32, the data set gives "
                                       f"{image_shape}; use small_resnet, lenet or mlp")
    if model.name in ("lenet", "small_resnet", "resnet50", "swin_tiny", "vit_tiny") and image_shape is not None \
            and len(image_shape) != 3:
        raise error(("model", "name"), f"{model.name} needs [height, width, channels] images, the data "
                                       f"set gives {image_shape}")


def _check_optimizer(loaded):
    """Names, arguments, learning rate and wrapper parameters, against moxlite.optimizers.recipe_tables.

    Everything a recipe can get wrong here is known without TensorFlow; building the
    optimizer (recipes.builders) only derives THOR's steps_per_epoch and constructs.
    """
    section, error = loaded.recipe.optimizer, loaded.error
    if section.name is not None and schema.is_reference(section.name):
        if section.kwargs:
            raise error(("optimizer", "kwargs"), "only used with a built-in optimizer name; "
                                                 "your optimizer_fn takes no arguments")
    elif section.name is not None:
        if section.name not in recipe_tables.OPTIMIZER_NAMES:
            raise error(("optimizer", "name"), f"{section.name!r} is not an optimizer"
                                               f"{_choices(section.name, recipe_tables.OPTIMIZER_NAMES)} "
                                               f"or a 'package.module:function' reference")
        learning_rate = section.learning_rate
        if isinstance(learning_rate, schema.ScheduleBlock):
            check_schedule(loaded, ("optimizer", "learning_rate"),
                           dict(learning_rate.params, schedule=learning_rate.schedule))
        else:
            try:
                learning_rates.check_number_or_string(learning_rate)
            except errors.UserInputError as problem:
                raise error(("optimizer", "learning_rate"), str(problem)) from None
        # The argument names are Keras's own, checked once it is imported (builders.check_optimizer_arguments).
        for key, value in section.kwargs.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise error(("optimizer", "kwargs", key), f"{value} is not a finite number; give a finite number")
            # Every argument of a Keras optimizer but its name is a number or a switch.
            if key != "name" and value is not None and not isinstance(value, (bool, int, float)):
                raise error(("optimizer", "kwargs", key), f"{_kind(value)} {errors.describe(value)}: optimizer "
                                                          f"{section.name!r} takes a number or true/false for {key} "
                                                          f"(e.g. 0.9 or 9e-1)")
    for index, wrapper in enumerate(section.wrappers):
        _check_wrapper(loaded, ("optimizer", "wrappers", index), wrapper)


def _check_wrapper(loaded, path, wrapper):
    if wrapper.name not in recipe_tables.WRAPPER_NAMES:
        raise loaded.error(path + ("name",), f"{wrapper.name!r} is not a wrapper"
                                             f"{_choices(wrapper.name, recipe_tables.WRAPPER_NAMES)}")
    table = recipe_tables.WRAPPER_PARAMETERS[wrapper.name]
    for key in wrapper.params:
        if key not in table:
            raise loaded.error(path + (key,), f"wrapper {wrapper.name!r} takes no parameter {key!r}"
                                              f"{_choices(key, table)}")
    params = dict(wrapper.params)
    if isinstance(params.get("damping"), dict):   # a schedule block, built into a callable later
        check_schedule(loaded, path + ("damping",), params.pop("damping"))
    try:
        recipe_tables.checked_parameters(wrapper.name, table, params)
    except errors.UserInputError as problem:
        named = [key for key in params if f" {key}=" in str(problem)]
        raise loaded.error(path + tuple(named[:1]), str(problem)) from None


def check_schedule(loaded, path, block):
    """A schedule block ``{schedule: <kind>, <its arguments>}``: the kind and its argument names.

    THOR's ``steps_per_epoch`` may be left out: the builder derives it from the run.
    """
    params = dict(block)
    kind = params.pop("schedule", None)
    kinds = list(recipe_tables.SCHEDULES)
    if kind not in kinds:
        raise loaded.error(path + ("schedule",), f"{kind!r} is not a schedule{_choices(str(kind), kinds)}")
    schedule = recipe_tables.SCHEDULES[kind]
    required, accepted = schedule.required, list(schedule.arguments)
    for key in params:
        if key not in accepted:
            raise loaded.error(path + (key,), f"schedule {kind!r} takes no argument {key!r}"
                                              f"{_choices(key, accepted)}")
    for name in required:
        if name not in params and name not in schedule.derived_from_run:
            raise loaded.error(path + (name,), f"missing: schedule {kind!r} needs {', '.join(required)}")
    found = recipe_tables.schedule_problem(kind, params)
    if found:
        raise loaded.error(path + (found[0],), found[1])


def _check_distribute(loaded):
    recipe, error = loaded.recipe, loaded.error
    dist = recipe.distribute
    if cluster.num_gpus_problem(dist.num_gpus):
        raise error(("distribute", "num_gpus"), f"{dist.num_gpus} {cluster.num_gpus_problem(dist.num_gpus)}")
    for name in ("ps_hosts", "worker_hosts"):
        for index, host in enumerate(getattr(dist, name)):
            problem = cluster.address_problem(host)
            if problem:
                raise error(("distribute", name, index), f"{host!r} must be host:port, e.g. localhost:2222 ({problem})")
    if dist.strategy == "parameter_server":
        if dist.sync_replicas:
            raise error(("distribute", "sync_replicas"), "true contradicts strategy 'parameter_server' (asynchronous); set it to false")
        if not dist.ps_hosts:
            raise error(("distribute", "ps_hosts"), "strategy 'parameter_server' needs at least one parameter server host:port")
    described = [name for name in ("job_name", "worker_hosts", "ps_hosts", "chief_hosts") if getattr(dist, name)]
    if dist.cluster in ("tf_config", "slurm", "single") and described:
        what = "trains in one process" if dist.cluster == "single" else f"takes the cluster from {cluster.SOURCE_NAMES[dist.cluster]}"
        raise error(("distribute", "cluster"), f"{dist.cluster!r} {what}, but distribute.{described[0]} is set too; "
                                               f"remove it or use cluster: flags")
    if dist.cluster == "slurm" and dist.strategy in ("parameter_server", "tpu"):
        raise error(("distribute", "strategy"), f"{dist.strategy!r} contradicts cluster 'slurm' (every Slurm task is a "
                                                f"synchronous worker); use strategy: multi_worker or auto")
    if dist.strategy == "multi_worker" and not dist.worker_hosts and dist.cluster in ("auto", "flags", "single"):
        raise error(("distribute", "worker_hosts"), "strategy 'multi_worker' needs the host:port of every worker")
    if dist.strategy == "tpu" and not dist.tpu:
        raise error(("distribute", "tpu"), "strategy 'tpu' needs a TPU name or grpc:// address")
    if dist.strategy == "mirrored" and (dist.ps_hosts or dist.worker_hosts or dist.tpu):
        raise error(("distribute", "strategy"), "'mirrored' is one worker's devices; remove ps_hosts/worker_hosts/tpu or pick another strategy")
    if not dist.sync_replicas and dist.strategy in ("mirrored", "multi_worker", "tpu"):
        raise error(("distribute", "sync_replicas"), f"false (asynchronous) contradicts strategy {dist.strategy!r}; use 'parameter_server' or 'auto'")
    if dist.job_name and not dist.worker_hosts:
        raise error(("distribute", "worker_hosts"), f"job_name {dist.job_name!r} needs worker_hosts (the cluster)")
    if dist.task_index < 0:
        raise error(("distribute", "task_index"), f"{dist.task_index} must be 0 or more")


def _check_precision(loaded):
    """Ranges were checked key by key (PrecisionOptions); here the rules across its keys."""
    _check_rules(loaded, ("precision",), loaded.recipe.precision)


def resolve_references(loaded):
    """The stage after ``check``: import the functions the recipe names, in the builder's order.

    It imports the user's modules (and TensorFlow only if they do), so a bad
    reference is rejected as fast as its module imports, before the builder
    imports TensorFlow for the built-ins.
    """
    recipe = loaded.recipe
    named = [(("input", "name"), recipe.input.name), (("model", "name"), recipe.model.name)]
    if recipe.run.mode == "train":
        named.append((("optimizer", "name"), recipe.optimizer.name))
    named.append((("run", "output_fn"), recipe.run.output_fn))
    for path, name in named:
        if name is not None and schema.is_reference(name):
            try:
                references.resolve(name)
            except references.UnresolvedReference as problem:
                raise loaded.error(path, str(problem)) from None


def to_plain(value):
    """Dataclasses to plain dicts/lists, with the 'rest' params folded back into their mapping."""
    if dataclasses.is_dataclass(value):
        result = {}
        for field in dataclasses.fields(value):
            item = getattr(value, field.name)
            if field.metadata.get("rest"):
                result.update({k: to_plain(v) for k, v in item.items()})
            else:
                result[field.name] = to_plain(item)
        return result
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_plain(v) for v in value]
    return value
