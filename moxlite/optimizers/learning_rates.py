"""MoXing's learning rates as numbers and epoch strings, checked without TensorFlow.

``parse_piecewise`` reads MoXing's ``"5:0.1->0.4,10:0.4=>0.8,15:0.8,20:0.08"``
(the format is described in ``moxlite.optimizers.schedules``, which turns it
into a schedule); ``check_number_or_string`` is the check a recipe's
``optimizer.learning_rate`` and ``get_optimizer_fn`` share. Neither imports
TensorFlow, so the recipe loader rejects a bad learning rate before it starts.
"""

import math
import re

from moxlite import errors

LINEAR = "->"
EXPONENTIAL = "=>"

_PIECE = re.compile(r"^\s*([^:]+?)\s*:\s*(.+?)\s*$")


def _number(text, piece, what):
    try:
        value = float(text)
    except ValueError:
        raise errors.OptimizerError(
            f"learning_rate: {what} {text!r} in piece {piece!r} is not a number; "
            f"write pieces as 'epoch:lr', 'epoch:a->b' or 'epoch:a=>b'") from None
    if not math.isfinite(value):
        raise errors.OptimizerError(f"learning_rate: {what} {text!r} in piece {piece!r} must be finite")
    return value


def parse_piecewise(spec):
    """Parse a MoXing epoch string into ``[(start, end, first, last, kind), ...]``.

    kind is "hold", "linear" or "exponential". Raises OptimizerError naming the
    offending piece when the text is malformed, when end epochs do not
    increase, or when a learning rate is not positive.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise errors.OptimizerError(
            f"learning_rate: {errors.describe(spec)} is not a piecewise string; "
            "use e.g. '5:0.1->0.4,10:0.4=>0.8,15:0.8'")
    pieces = []
    start = 0.0
    for piece in spec.split(","):
        match = _PIECE.match(piece)
        if not match:
            raise errors.OptimizerError(
                f"learning_rate: piece {piece.strip()!r} of {spec!r} has no 'epoch:lr' form; "
                "use e.g. '5:0.1->0.4'")
        end = _number(match.group(1), piece.strip(), "epoch")
        body = match.group(2)
        if EXPONENTIAL in body:
            first_text, last_text = body.split(EXPONENTIAL, 1)
            kind = "exponential"
        elif LINEAR in body:
            first_text, last_text = body.split(LINEAR, 1)
            kind = "linear"
        else:
            first_text = last_text = body
            kind = "hold"
        first = _number(first_text, piece.strip(), "learning rate")
        last = _number(last_text, piece.strip(), "learning rate")
        if end <= start:
            raise errors.OptimizerError(
                f"learning_rate: epoch {end:g} in piece {piece.strip()!r} must be greater than "
                f"the previous piece's end {start:g}; epochs must increase")
        if first <= 0 or last <= 0:
            raise errors.OptimizerError(
                f"learning_rate: piece {piece.strip()!r} has a non-positive learning rate; "
                "learning rates must be > 0")
        pieces.append((start, end, first, last, kind))
        start = end
    return pieces


def piecewise_value(pieces, epoch):
    """The learning rate at fractional ``epoch`` (a Python float), for tests and docs."""
    for start, end, first, last, kind in pieces:
        if epoch < end:
            fraction = (epoch - start) / (end - start)
            if kind == "linear":
                return first + (last - first) * fraction
            if kind == "exponential":
                return first * (last / first) ** fraction
            return first
    return pieces[-1][3]


def check_number_or_string(learning_rate):
    """A finite number > 0 (as a float) or a valid epoch string (as is); OptimizerError otherwise."""
    if isinstance(learning_rate, str):
        parse_piecewise(learning_rate)
        return learning_rate
    if isinstance(learning_rate, bool) or not isinstance(learning_rate, (int, float)):
        raise errors.OptimizerTypeError(
            f"learning_rate={errors.describe(learning_rate)} is not a number; give a positive "
            "float, a keras.optimizers.schedules.LearningRateSchedule or an epoch string "
            "such as '5:0.1->0.4,10:0.4'")
    if not math.isfinite(learning_rate) or learning_rate <= 0:
        raise errors.OptimizerError(f"learning_rate={learning_rate!r} must be a finite number > 0")
    return float(learning_rate)
