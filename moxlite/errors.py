"""moxlite's errors: one small hierarchy, raised where a mistake is detected.

Every message names the field, the value that was given and the fix, so that a
user reads one line and knows what to change. The CLI prints ``str(error)`` on
one line and exits with ``error.exit_code``.
"""


class MoxliteError(Exception):
    """Base of every error moxlite raises on purpose."""

    exit_code = 1


class UserInputError(MoxliteError, ValueError):
    """A user mistake in an argument, a flag or a recipe; exits with code 2."""

    exit_code = 2


class ArgumentError(UserInputError):
    """An argument of ``moxlite.run`` (or a factory) has a wrong value."""


class ModelFnError(UserInputError):
    """``model_fn`` returned something the current mode cannot use."""


class OptimizerError(UserInputError):
    """An optimizer name, parameter or factory is wrong."""


class CheckpointError(UserInputError):
    """A checkpoint needed by the run is missing or does not fit the model."""


class ExportError(UserInputError):
    """An export cannot be written as asked (for example, the version exists)."""


class ArgumentTypeError(ArgumentError, TypeError):
    """An argument is the wrong kind of object (MoXing raised TypeError; ``except TypeError`` still works)."""


class ModelFnTypeError(ModelFnError, TypeError):
    """``model_fn`` returned the wrong kind of object."""


class OptimizerTypeError(OptimizerError, TypeError):
    """``optimizer_fn`` is, or returned, the wrong kind of object."""


class RecipeError(UserInputError):
    """A recipe file or override is wrong; the message gives file, line and key."""


class ClusterError(UserInputError):
    """The cluster description (flags, TF_CONFIG or recipe) is wrong or unreachable."""


def describe(value, limit=60):
    """A short, single-line repr of ``value`` for error messages."""
    text = repr(value).replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


class NonFiniteStep(Exception):
    """Raised by a loop at a non-finite step, or by a check that found non-finite weights
    (``in_weights``, with the last step checked before, ``since``, when known); ``run``
    reports it as ``NonFiniteError``. A signal inside a run, not a user error: it lives here so
    that an optimizer link (a fixed loss scale that keeps overflowing) raises it without importing
    the runner."""

    def __init__(self, step, loss, consecutive=None, in_weights=False, since=None, overflow_scale=None):
        super().__init__(f"non-finite step {step}")
        self.step, self.loss, self.consecutive = step, loss, consecutive
        self.in_weights, self.since = in_weights, since
        self.overflow_scale = overflow_scale   # a fixed loss scale that overflowed ``consecutive`` times
