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
