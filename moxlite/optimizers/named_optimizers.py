"""``get_optimizer_fn``: MoXing's optimizer names and spellings on Keras 3 optimizers.

MoXing scripts say ``mox.get_optimizer_fn("momentum", 0.1, momentum=0.9)`` and
pass the result as ``optimizer_fn``. Here each name maps to a Keras 3 class,
and TF1's keyword spellings (``beta1``, ``use_nesterov``, RMSProp's ``decay``)
map to Keras's. Validation happens when the factory is made, so a typo fails
before training starts; the optimizer itself is built when the factory is
called (inside ``moxlite.run``, under the strategy's scope).

The learning rate may also be what a MoXing script computes from the global
step: a tensor (followed by ``step_trace`` when ``optimizer_fn`` computed it),
a function of the step, or the ``functools.partial`` of a TF1 decay function
(``schedules.StepFunctionLearningRate``). Other hyperparameters (momentum...)
may be tensors of the step too.

Defaults are Keras's, except ``momentum`` (0.9 when not given, since TF1's
MomentumOptimizer had no default). TF1's ``use_locking`` is accepted and
ignored: TF2 variables have no locking option.
"""

import keras
import tensorflow as tf

from moxlite import errors
from moxlite.declarations import did_you_mean
from moxlite.optimizers import recipe_tables, schedules, step_trace

# name -> (Keras class, fixed keyword arguments, TF1/MoXing spelling -> Keras spelling).
_OPTIMIZERS = {name: (getattr(keras.optimizers, class_name), fixed, aliases)
               for name, (class_name, fixed, aliases) in recipe_tables.OPTIMIZERS.items()}

OPTIMIZER_NAMES = recipe_tables.OPTIMIZER_NAMES

_DEFAULTS = {"momentum": {"momentum": 0.9}}
_IGNORED = recipe_tables.IGNORED_ARGUMENTS
# Keras's own accumulation raises under MirroredStrategy; batch_gradients replaces it.
_REFUSED = {name: "use get_optimizer_wrapper_fn('batch_gradients', ...) instead"
            for name in recipe_tables.REFUSED_ARGUMENTS}


def accepted_arguments(name):
    """The keyword arguments ``get_optimizer_fn(name, ...)`` accepts, MoXing spellings included."""
    return recipe_tables.accepted_arguments(_checked_name(name))


def _checked_name(name):
    key = name.lower() if isinstance(name, str) else name
    if key not in _OPTIMIZERS:
        raise errors.OptimizerError(
            f"optimizer name {errors.describe(name)} is unknown{did_you_mean(str(key), OPTIMIZER_NAMES)}; "
            f"valid names: {', '.join(OPTIMIZER_NAMES)}")
    return key


def keras_arguments(name, **kwargs):
    """Translate MoXing keyword arguments for optimizer ``name`` into the Keras class's."""
    key = _checked_name(name)
    cls, fixed, aliases = _OPTIMIZERS[key]
    accepted = accepted_arguments(key)
    translated = dict(_DEFAULTS.get(key, {}))
    translated.update(fixed)
    for argument, value in kwargs.items():
        if argument in _REFUSED:
            raise errors.OptimizerError(f"{key}: {argument}={value!r} is not supported; {_REFUSED[argument]}")
        if argument not in accepted:
            raise errors.OptimizerError(
                f"{key}: unknown argument {argument!r}{did_you_mean(argument, accepted)}; "
                f"accepted: {', '.join(accepted)}")
        if argument in _IGNORED:
            continue
        keras_name = aliases.get(argument, argument)
        if keras_name in kwargs and keras_name != argument:
            raise errors.OptimizerError(
                f"{key}: both {argument!r} and {keras_name!r} given; keep one of them")
        translated[keras_name] = value
    return cls, translated


def get_optimizer_fn(name, learning_rate, **kwargs):
    """A zero-argument factory of the Keras 3 optimizer ``name``.

    name: one of OPTIMIZER_NAMES (case-insensitive).
    learning_rate: a positive float, a Keras ``LearningRateSchedule``, a
        MoXing epoch string, a scalar tensor (of the global step, inside
        ``optimizer_fn``), a function of the global step or the ``functools.partial``
        of a TF1 decay function (see ``moxlite.optimizers.schedules``).
    kwargs: the optimizer's arguments, in Keras or MoXing/TF1 spelling.

    Errors (unknown name or argument, bad learning rate) are raised here, not
    when the factory is called; an invalid value for a known argument is
    reported by Keras when the optimizer is built, re-raised as OptimizerError.
    """
    cls, arguments = keras_arguments(name, **kwargs)
    schedules.check_learning_rate(learning_rate)
    label = _checked_name(name)

    def build():
        try:
            return cls(learning_rate=schedules.resolve_learning_rate(learning_rate),
                       **{key: _number_now(value) for key, value in arguments.items()})
        except errors.MoxliteError:
            raise
        except (ValueError, TypeError) as error:
            raise errors.OptimizerError(f"{label}: {error}") from None

    def optimizer_fn():
        return step_trace.site({"learning_rate": learning_rate, **arguments}, build)

    return optimizer_fn


def _number_now(value):
    """A tensor hyperparameter (momentum of the step...) as its value now, which Keras's checks take;
    step_trace makes one that optimizer_fn computed from the step follow it afterwards."""
    if isinstance(value, (tf.Tensor, tf.Variable)) and not tf.is_symbolic_tensor(value) and value.shape.rank == 0:
        return float(value) if value.dtype.is_floating else value.numpy().item()
    return value
