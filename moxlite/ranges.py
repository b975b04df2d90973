"""Accepted ranges of settings: declared once, checked by the recipe loader and by the Python API.

A ``Range`` is what a setting accepts, in words (``accepted``, shown to the user) and as a
test (``check``). The recipe schema attaches one to a key (``schema.setting(..., valid=...)``),
the optimizer catalog to a wrapper or schedule parameter; the recipe loader and the API
functions (``build_model_fn``, ``Augmentation``, ``get_optimizer_wrapper_fn``, the schedules)
read the same object, so the two cannot disagree. Every number range refuses infinity and
NaN: a number a setting asks for is finite.

Nothing here imports TensorFlow.
"""

import dataclasses
import math
import numbers
import re
from typing import Any, Callable, Optional, Sequence


@dataclasses.dataclass(frozen=True)
class Range:
    """What a setting accepts: ``accepted`` in words, ``check(value) -> bool``."""

    accepted: str
    check: Callable[[Any], bool]
    explain: Optional[Callable[[Any], str]] = None   # a closer 'what is wrong' than 'out of range'

    def problem(self, value):
        """None when ``value`` is accepted; otherwise 'VALUE is out of range; expected ACCEPTED'."""
        if self.check(value):
            return None
        wrong = self.explain(value) if self.explain is not None else None
        return f"{wrong or describe(value) + ' is out of range'}; expected {self.accepted}"


def describe(value, limit=60):
    """A short, single-line repr (as moxlite.errors.describe; repeated here to keep this module leaf)."""
    text = repr(value).replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_number(value):
    """A finite real number (int, float or a NumPy scalar), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def is_integer(value):
    """An integer (int or a NumPy integer), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _bounds_text(minimum, maximum, above, below):
    low = f"> {above:g}" if above is not None else f">= {minimum:g}" if minimum is not None else None
    high = f"< {below:g}" if below is not None else f"<= {maximum:g}" if maximum is not None else None
    if low and high:
        left = "(" if above is not None else "["
        right = ")" if below is not None else "]"
        first = above if above is not None else minimum
        last = below if below is not None else maximum
        return f" in {left}{first:g}, {last:g}{right}"
    return f" {low or high}" if (low or high) else ""


def _within(value, minimum, maximum, above, below):
    return ((minimum is None or value >= minimum) and (maximum is None or value <= maximum)
            and (above is None or value > above) and (below is None or value < below))


def number(minimum=None, maximum=None, above=None, below=None):
    """A finite number within the bounds (``minimum``/``maximum`` inclusive, ``above``/``below`` strict)."""
    return Range(f"a finite number{_bounds_text(minimum, maximum, above, below)}",
                 lambda v: is_number(v) and _within(v, minimum, maximum, above, below))


def integer(minimum=None, maximum=None):
    """An integer (not a bool) within the inclusive bounds."""
    return Range(f"an integer{_bounds_text(minimum, maximum, None, None)}",
                 lambda v: is_integer(v) and _within(v, minimum, maximum, None, None))


def probability():
    """A number in [0, 1]."""
    return number(minimum=0, maximum=1)


def fraction():
    """A number in [0, 1): a rate that must leave something (dropout, drop path, label smoothing)."""
    return number(minimum=0, below=1)


def list_of(item: Range, length=None, min_length=1):
    """A list (or tuple) of at least ``min_length`` items (exactly ``length``), each accepted by ``item``."""
    size = f"{length}" if length is not None else f"{min_length} or more"
    item_text = item.accepted.replace("a finite number", "finite numbers").replace("an integer", "integers")

    def check(value):
        if not isinstance(value, (list, tuple)):
            return False
        if (length is not None and len(value) != length) or len(value) < min_length:
            return False
        return all(item.check(v) for v in value)

    return Range(f"a list of {size} {item_text}", check)


def one_of(choices: Sequence):
    """One of ``choices``, of its type (so 1 is not True)."""
    accepted = " or ".join(repr(c) if isinstance(c, str) else str(c) for c in choices)
    return Range(accepted, lambda v: any(isinstance(v, type(c)) and v == c for c in choices))


def names_in(known, what, one, hint=None):
    """A list of names, each one of ``known``: ``what`` they are ('Keras layer class names'), ``one`` of them.

    ``known`` is a sequence, or a function returning one (read when a value is checked: the
    names of a library imported only then). ``hint(name)``, if given, is the nearest known name
    or None; an unknown name is reported as "'X' is not <one> (did you mean 'Y'?)".
    """
    def known_set():
        return frozenset(known() if callable(known) else known)

    def explain(value):
        if not isinstance(value, (list, tuple)):
            return None
        names = known_set()
        unknown = next((n for n in value if not (isinstance(n, str) and n in names)), None)
        near = hint(unknown) if hint else None
        return f"{describe(unknown)} is not {one}" + (f" (did you mean {near!r}?)" if near else "")

    def check(value):
        return isinstance(value, (list, tuple)) and all(isinstance(n, str) and n in known_set() for n in value)

    return Range(f"a list of {what}", check, explain)


def patterns():
    """A list of regular expressions."""
    def check(value):
        if not isinstance(value, (list, tuple)) or not all(isinstance(p, str) for p in value):
            return False
        try:
            for pattern in value:
                re.compile(pattern)
        except re.error:
            return False
        return True

    return Range("a list of regular expressions", check)


def either(first: Range, second: Range, accepted: Optional[str] = None):
    """Accepted by ``first`` or by ``second``."""
    return Range(accepted or f"{first.accepted} or {second.accepted}", lambda v: first.check(v) or second.check(v))
