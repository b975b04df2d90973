"""Stable checkpoint keys for model_fn's variables.

A checkpoint keys each variable by a name without ``:0``: a Keras variable by
its Keras path (``variable.path``: ``head/kernel``, ``block_0/dense/kernel``,
``encoder/block/attention/query/kernel``), anything else by the name given to
``get_variable`` under its ``variable_scope`` (``net/W``) or to ``tf.Variable``.
The Keras path is the key even where TensorFlow's own name would be unique:
TensorFlow names every variable of a custom block after the outer layer
(``block_0/kernel``), so that name changes when the block gains a second
sub-layer (then both would be ``block_0/kernel``), while the path of the first
``Dense`` stays ``block_0/dense/kernel`` whatever else the block holds.

Names the user gave are kept as they are. Names Keras made up for unnamed layers
(``dense``, ``dense_3``) depend on how many layers the process created before,
so they differ between a TRAIN and an EVAL run in one process; each such name is
replaced by the one a fresh process would give (the first ``dense`` made by
model_fn is ``dense``, the next ``dense_1``...), which the same model_fn
reproduces in every run. Names Keras made up before model_fn's first call (a
model built before ``run`` and closed over: ``sequential_1``, ``dense_2`` in a
process that trained before) follow the same rule (``made_up_before``): per
prefix, the first such name is ``sequential``, the next ``sequential_1``, and
those made during the call come after them, as in a fresh process that built the
closed-over model first. A layer inserted before others shifts those made-up
names: name the layers a warm start must find.

Optimizers get their variables sorted by these keys (``in_key_order``): Keras
saves slots (momentum, Adam m/v, accumulators) by position in that list, so a
position must mean a name, not a creation order.
"""

import collections
import re

_AUTO_NAME = re.compile(r"^(?P<prefix>.+?)(?:_(?P<index>\d+))?$")

# Keras wrappers that copy the layer they wrap name each copy after it: Bidirectional's
# ``forward_<name>`` and ``backward_<name>`` (``forward_lstm_4``). The wrapped layer's name is
# made up from the process counter like any other, so a copy's name follows the wrapped one's
# fresh-process form (``forward_lstm``). TimeDistributed and the like wrap the layer itself.
_COPY_PREFIXES = ("forward_", "backward_")


def _copied_name(part):
    """(copy prefix, the wrapped layer's name) of a Bidirectional copy's name, else ("", part)."""
    for prefix in _COPY_PREFIXES:
        if part.startswith(prefix) and len(part) > len(prefix):
            return prefix, part[len(prefix):]
    return "", part


def _renamed_part(part, renamed):
    """One path component in its fresh-process form: a made-up name, or a copy named after one."""
    if part in renamed:
        return renamed[part]
    prefix, wrapped = _copied_name(part)
    if prefix and wrapped in renamed:
        return prefix + renamed[wrapped]
    return part


def keras_name_counters():
    """A copy of Keras's counters of made-up layer names (prefix -> names made so far)."""
    from moxlite import compat

    return compat.keras_auto_name_counters()


def made_up_names(before, after):
    """{made-up name: the name a fresh process would give} for names Keras made up between
    two ``keras_name_counters`` snapshots."""
    renamed = {}
    for prefix, end in after.items():
        start = before.get(prefix, 0)
        for index in range(start, end):
            name = prefix if index == 0 else f"{prefix}_{index}"
            fresh = index - start
            renamed[name] = prefix if fresh == 0 else f"{prefix}_{fresh}"
    return renamed


def made_up_before(names, counters, renamed):
    """``renamed`` (see ``made_up_names``) plus the fresh-process form of path components of
    ``names`` that Keras made up before the snapshot ``renamed`` starts from.

    A component counts as made up when it is a name Keras's ``counters`` (after the call)
    have handed out (``prefix`` or ``prefix_<index>`` below the prefix's count) and is not in
    ``renamed``. Per prefix these get ``prefix``, ``prefix_1``, ... in index order, and the
    names in ``renamed`` of that prefix move up past them.
    """
    earlier = collections.defaultdict(set)
    for name in names:
        for part in name.split("/"):
            part = _copied_name(part)[1] if part not in renamed else part
            match = _AUTO_NAME.match(part)
            prefix, index = match.group("prefix"), int(match.group("index") or 0)
            if part not in renamed and prefix in counters and index < counters[prefix] and \
                    (index > 0 or part == prefix):
                earlier[prefix].add(index)
    if not earlier:
        return dict(renamed)
    result = {}
    for name, fresh in renamed.items():
        prefix, index = _split(fresh)
        shift = len(earlier.get(prefix, ()))
        result[name] = _joined(prefix, index + shift)
    for prefix, indices in earlier.items():
        for fresh, index in enumerate(sorted(indices)):
            result[_joined(prefix, index)] = _joined(prefix, fresh)
    return result


def _split(name):
    match = _AUTO_NAME.match(name)
    return match.group("prefix"), int(match.group("index") or 0)


def _joined(prefix, index):
    return prefix if index == 0 else f"{prefix}_{index}"


def variable_name(variable):
    """A variable's name without the ``:0`` output suffix."""
    return variable_name_text(getattr(variable, "name", None) or "<unnamed>")


def variable_name_text(name):
    """``name`` without a ``:0`` output suffix."""
    return name[:-2] if name.endswith(":0") else name


def stable_key(name, renamed):
    """``name`` with each made-up path component replaced by its fresh-process form."""
    return "/".join(_renamed_part(part, renamed) for part in name.split("/"))


def candidate_name(variable, paths):
    """The name a variable's key is made from: the Keras path of the Keras variable around it
    (``paths``: {id of a variable: that path}), else its own name without ``:0``."""
    return paths.get(id(variable)) or variable_name(variable)


def keyed(variables, renamed, paths=None):
    """(ordered {key: variable}, sorted names shared by several variables).

    ``paths``: {id of a variable: the Keras path of the Keras variable around it}, as seen on
    model_fn's first call. A variable with a path is keyed by it (``block_0/dense/kernel``), one
    without by its own name; made-up components are replaced by ``renamed``.

    A name shared by several variables (unnamed ``tf.Variable`` s, two layers given the
    same name) cannot say which is which: each gets ``name~k`` by creation order, and
    the name is reported as ambiguous so that a warm start refuses to guess.
    """
    paths = paths or {}
    keys = [stable_key(candidate_name(v, paths), renamed) for v in variables]
    counts = collections.Counter(keys)
    seen = collections.Counter()
    result = {}
    for key, variable in zip(keys, variables):
        if counts[key] > 1:
            seen[key] += 1
            key = f"{key}~{seen[key] - 1}"
        result[key] = variable
    return result, sorted(k for k, n in counts.items() if n > 1)


def in_key_order(variables, keys_by_id):
    """``variables`` sorted by checkpoint key (``keys_by_id``: id of a variable -> key; a
    variable without one sorts by its own name), so that an optimizer's slot positions
    follow names and not the order in which model_fn created the variables."""
    return sorted(variables, key=lambda v: keys_by_id.get(id(v)) or variable_name(v))
