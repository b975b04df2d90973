"""How a setting is declared, once: its name, type, default, range and help, as a dataclass field.

A block of settings is a dataclass whose fields come from ``setting(default, help, choices,
valid)``; ``valid`` is a ``moxlite.ranges.Range``. Rules across the keys of one block are
attached with ``@with_rules(Rule(...))``. Everything that reads a setting reads that field:
the recipe schema (``moxlite.recipes.schema`` nests the blocks into sections), the Python API
(``check_values``), ``--help-recipe`` and the reference docs. The blocks live beside what they
configure: the built-in models' options in ``moxlite.models.options``, augmentation's in
``moxlite.data.augment_options``, precision's in ``moxlite.training.mixed_precision.options``.

Also here, used by every layer: the one runtime type check (``matches``) and the one
"did you mean" (``did_you_mean``, ``nearest``).

Nothing here imports TensorFlow.
"""

import collections.abc
import dataclasses
import difflib
import types
import typing
from typing import Any, Callable, Dict, List, Union

REQUIRED = dataclasses.MISSING


def setting(default, help_text, choices=None, valid=None):
    """A declared field: its default, a one-line description, allowed values and accepted range.

    ``default=REQUIRED`` makes the key mandatory. Lists and dicts are copied per instance.
    ``valid`` is a ``moxlite.ranges.Range``: the recipe loader and the Python API
    (``check_values``) both check a value against it; null passes where the key's type
    allows null.
    """
    metadata = {"help": help_text, "choices": choices, "valid": valid}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=metadata)
    if dataclasses.is_dataclass(default):
        return dataclasses.field(default_factory=type(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def options_block(options_class):
    """A built-in's options block: its defaults, described by the first line of its docstring."""
    return setting(options_class(), options_class.__doc__.splitlines()[0])


def with_options_blocks(**blocks):
    """Class decorator: one options block per built-in, declared after the class's own fields.

    ``@with_options_blocks(mnist=MnistOptions)`` adds the field ``mnist: MnistOptions``
    holding MnistOptions' defaults (apply it below ``@dataclasses.dataclass``).
    """
    def add_blocks(cls):
        for name, options_class in blocks.items():
            cls.__annotations__[name] = options_class
            setattr(cls, name, options_block(options_class))
        return cls
    return add_blocks


def with_settings_of(declared):
    """Class decorator: the fields of dataclass ``declared``, declared there, added after the class's own.

    A recipe section that holds settings declared beside the runner (``model.num_classes``,
    the precision settings) names them this way instead of declaring them again
    (apply it below ``@dataclasses.dataclass``).
    """
    def add_settings(cls):
        hints = typing.get_type_hints(declared)
        for field in dataclasses.fields(declared):
            cls.__annotations__[field.name] = hints[field.name]
            setattr(cls, field.name, _copy(field, owner=declared))
        _RULES[cls] = _RULES.get(cls, ()) + _RULES.get(declared, ())
        return cls
    return add_settings


def _copy(field, default=dataclasses.MISSING, owner=None):
    """``field`` for another class; ``owner``, the class that declares it, is kept as ``declared_in``."""
    if default is dataclasses.MISSING:
        default = field.default if field.default is not dataclasses.MISSING else (
            field.default_factory() if field.default_factory is not dataclasses.MISSING else REQUIRED)
    copied = (params_field(field.metadata["help"]) if field.metadata.get("rest") else
              setting(default, field.metadata["help"], field.metadata["choices"], field.metadata.get("valid")))
    owner = declared_in(field) or owner
    if owner is not None:
        copied.metadata = types.MappingProxyType(dict(copied.metadata, declared_in=owner))
    return copied


def declared_in(field):
    """The class that declares ``field`` when another class holds it (with_settings_of), else None."""
    return field.metadata.get("declared_in")


def with_defaults(**defaults):
    """Class decorator: other defaults for fields a dataclass inherits, keeping their help and choices.

    A family of built-ins declares the options they share once, in a base
    class, and each member states only its own values:
    ``@with_defaults(patch_size=16)`` (apply it below ``@dataclasses.dataclass``).
    """
    def set_defaults(cls):
        # The class is not a dataclass yet, so its fields are still the base's.
        inherited = {field.name: field for field in dataclasses.fields(cls)}
        for name, default in defaults.items():
            if name not in inherited:
                raise TypeError(f"{cls.__name__}: with_defaults names {name!r}, which no base class declares")
            cls.__annotations__[name] = inherited[name].type
            setattr(cls, name, _copy(inherited[name], default))
        return cls
    return set_defaults


def params_field(help_text):
    """A field that collects every key of its mapping not declared as a field.

    Used where the accepted keys depend on another key's value (a wrapper's
    parameters depend on its name); they are checked once the name is known.
    """
    return dataclasses.field(default_factory=dict, metadata={"help": help_text, "choices": None, "rest": True})


# ----------------------------------------------------------------- rules across keys

@dataclasses.dataclass(frozen=True)
class Rule:
    """A rule between keys of one block: ``problem(values, image_shape)`` is None or a message about ``key``.

    ``values`` maps the block's keys to their values; ``image_shape`` is [height, width,
    channels] when known (rules with ``needs_image`` are skipped when it is not). A message
    starts with the value of ``key``, so that it reads after 'dotted.key: ' and after 'key='.
    """

    key: str
    problem: Any
    needs_image: bool = False


_RULES: Dict[type, tuple] = {}


def with_rules(*rules):
    """Class decorator: the rules across the keys of a declared block (a subclass inherits none)."""
    def attach(cls):
        _RULES[cls] = _RULES.get(cls, ()) + rules
        return cls
    return attach


def rules_of(cls):
    """The rules attached to block ``cls`` (``()`` when none)."""
    return _RULES.get(cls, ())


def field_range(cls, name):
    """The declared Range of key ``name`` of block ``cls`` (None when it has none)."""
    return cls.__dataclass_fields__[name].metadata.get("valid")


def check_values(cls, values, image_shape=None):
    """(key, message) of the first value of block ``cls`` outside its declared range or breaking a rule; else None.

    ``values`` maps keys of ``cls`` to values (keys left out take the defaults for the
    rules). The recipe loader and the Python API call this, so both read the one
    declaration: the ``valid`` of each ``setting`` and the block's rules.
    """
    for field in dataclasses.fields(cls):
        valid = field.metadata.get("valid")
        if valid is None or field.name not in values or values[field.name] is None:
            continue
        problem = valid.problem(values[field.name])
        if problem:
            return field.name, problem
    complete = {**defaults(cls), **values}
    for rule in rules_of(cls):
        if rule.needs_image and image_shape is None:
            continue
        problem = rule.problem(complete, image_shape)
        if problem:
            return rule.key, problem
    return None


def defaults(cls):
    """The default of every key of block ``cls`` that has one (e.g. a BERT size's encoder sizes)."""
    result = {}
    for field in dataclasses.fields(cls):
        if field.default is not dataclasses.MISSING:
            result[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            result[field.name] = field.default_factory()
    return result


# ----------------------------------------------------------------- the type check

def matches(value, kind):
    """True when ``value`` is of the declared type ``kind``.

    An int is not a bool, a float accepts an int, a list or mapping is checked for its kind
    only (a recipe's items are checked one by one, each at its own path), a tuple item by item.
    """
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is Any:
        return True
    if kind is type(None):
        return value is None
    if origin is Union:
        return any(matches(value, option) for option in args)
    if origin is tuple:
        return isinstance(value, tuple) and all(matches(item, args[0]) for item in value)
    if origin in (list, dict):
        return isinstance(value, origin)
    if origin is collections.abc.Callable or kind is Callable:
        return callable(value)
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, kind)


def type_name(annotation):
    """A short readable name of a field type, e.g. 'list of int' or 'number or string'."""
    origin = getattr(annotation, "__origin__", None)
    args = getattr(annotation, "__args__", ())
    if origin is Union:
        parts = [type_name(a) for a in args if a is not type(None)]
        text = " or ".join(parts)
        return text + " or null" if type(None) in args else text
    if origin in (list, List):
        return f"list of {type_name(args[0])}"
    if origin in (dict, Dict):
        return "mapping"
    if dataclasses.is_dataclass(annotation):
        return "mapping"
    names = {int: "integer", float: "number", str: "string", bool: "boolean", Any: "any"}
    return names.get(annotation, str(annotation))


# ----------------------------------------------------------------- did you mean

def nearest(word, candidates, cutoff=0.6, prefix_first=False, ignore_case=False):
    """The candidate nearest to ``word`` (difflib's ratio at least ``cutoff``), or None.

    ``prefix_first``: a candidate that starts with ``word`` wins ('Layernorm' ->
    'LayerNormalization'); ``ignore_case`` compares lower-cased.
    """
    word = str(word)
    candidates = [str(candidate) for candidate in candidates]
    fold = str.lower if ignore_case else (lambda text: text)
    if prefix_first and word:
        prefixed = [candidate for candidate in candidates if fold(candidate).startswith(fold(word))]
        if prefixed:
            return prefixed[0]
    folded = {fold(candidate): candidate for candidate in candidates}
    close = difflib.get_close_matches(fold(word), list(folded), n=1, cutoff=cutoff)
    return folded[close[0]] if close else None


def did_you_mean(word, candidates, cutoff=0.6, quote=repr, **options):
    """' (did you mean X?)' naming the candidate nearest to ``word``, or '' when none is near.

    ``quote`` writes the candidate (``repr`` by default; ``lambda name: '--' + name`` for a flag).
    """
    near = nearest(word, candidates, cutoff, **options)
    return f" (did you mean {quote(near)}?)" if near is not None else ""
