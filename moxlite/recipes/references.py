"""Resolve 'package.module:function' references: the only way a recipe reaches code.

A recipe names user functions explicitly (``input.name: mypkg.data:input_fn``);
nothing else in a recipe is ever imported or evaluated.
"""

import importlib
import inspect

from moxlite.declarations import did_you_mean


class UnresolvedReference(Exception):
    """Why a reference did not resolve (turned into a located RecipeError by the caller)."""


def resolve(reference):
    """The callable named by 'package.module:attribute[.attribute]'."""
    module_name, _, attribute_path = reference.partition(":")
    if not module_name or not attribute_path:
        raise UnresolvedReference(f"{reference!r} must look like 'package.module:function'")
    try:
        target = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise UnresolvedReference(f"cannot import module {module_name!r} ({error}); "
                              f"check the name and that its folder is on PYTHONPATH") from None
    except Exception as error:  # the user's module failed while importing
        raise UnresolvedReference(f"importing {module_name!r} raised {type(error).__name__}: {error}") from None
    for name in attribute_path.split("."):
        if not hasattr(target, name):
            public = [n for n in dir(target) if not n.startswith("_")]
            raise UnresolvedReference(f"{getattr(target, '__name__', module_name)!r} has no attribute {name!r}"
                                      f"{did_you_mean(name, public)}")
        target = getattr(target, name)
    if not callable(target):
        raise UnresolvedReference(f"{reference!r} is not a function (it is {type(target).__name__} {target!r})")
    return target


def rejected_kwargs(function, names):
    """The names in ``names`` that ``function`` does not accept as keyword arguments."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return []
    keyword = {n for n, p in parameters.items()
               if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
    return [n for n in names if n not in keyword]
