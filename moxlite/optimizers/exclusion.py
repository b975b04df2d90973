"""Which variables an optimizer wrapper's exclusion patterns match (``lars``'s ``exclude``,
``thor``'s ``weight_decay_exclude``).

A pattern is a regular expression searched in the variable's stable name, its checkpoint key
(``stable_names.stable_name``: the full Keras path with made-up names as a fresh process gives
them, ``transformer_layer_0/feedforward_layer_norm/gamma``), which is the same in every run and
process and is the name THOR's ``include`` / ``exclude`` and the start-up lines use. Patterns
written against the names these wrappers matched before (the Keras path as this process made it
up, ``dense_3/bias``, else the TensorFlow name) still match: a variable is matched if either
name is.
"""

import re

from moxlite import compat


def compiled(patterns):
    """One regular expression for a list of patterns (None: the empty list, which matches nothing)."""
    return re.compile("|".join(patterns)) if patterns else None


def process_path(variable):
    """The variable's Keras path as this process made it up, else its TensorFlow name."""
    return compat.variable_attribute(variable, "path") or variable.name


def names_of(variable):
    """(stable name, the process's own path): the names a pattern is searched in."""
    from moxlite import stable_names

    own = process_path(variable)
    return stable_names.stable_name(variable, default=own), own


def matches(pattern, variable):
    """True if the compiled ``pattern`` is found in one of ``names_of(variable)``."""
    return pattern is not None and any(pattern.search(name) for name in names_of(variable))
