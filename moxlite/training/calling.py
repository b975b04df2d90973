"""Calling user functions the way MoXing did.

Real MoXing scripts declare ``def input_fn(mode)`` and ``def model_fn(inputs,
mode)`` without ``**kwargs``; moxlite passes extra keyword arguments only to
functions that declare them (by name or through ``**kwargs``).

Every call of a user function goes through ``call_user_function`` (or
``call_with_accepted_kwargs``): AutoGraph does not convert moxlite's own code
(see ``compat.leave_unconverted``), so a user function called while tracing is
converted here, as it was when its caller was converted.
"""

import functools
import inspect

from moxlite import compat


@functools.lru_cache(maxsize=256)
def _accepted(function):
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return True, frozenset()
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    names = frozenset(p.name for p in parameters
                      if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY))
    return takes_any, names


def call_with_accepted_kwargs(function, *args, **kwargs):
    """Call ``function(*args, **kwargs)``, dropping keyword arguments it does not accept."""
    try:
        takes_any, names = _accepted(function)
    except TypeError:  # unhashable callables
        takes_any, names = _accepted.__wrapped__(function)
    if not takes_any:
        kwargs = {key: value for key, value in kwargs.items() if key in names}
    return call_user_function(function, *args, **kwargs)


def call_user_function(function, *args, **kwargs):
    """Call the user's ``function``: converted by AutoGraph inside a trace, as a converted caller would."""
    return compat.converted_user_function(function)(*args, **kwargs)
