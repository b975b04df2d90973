"""``get_optimizer_fn``: MoXing's optimizer names and spellings on Keras 3 optimizers.

MoXing scripts say ``mox.get_optimizer_fn("momentum", 0.1, momentum=0.9)`` and
pass the result as ``optimizer_fn``. Here each name maps to a Keras 3 class,
and TF1's keyword spellings (``beta1``, ``use_nesterov``, RMSProp's ``decay``)
map to Keras's. Validation happens when the factory is made, so a typo fails
before training starts; the optimizer itself is built when the factory is
called (inside ``moxlite.run``, under the strategy's scope).

Defaults are Keras's, except ``momentum`` (0.9 when not given, since TF1's
MomentumOptimizer had no default). TF1's ``use_locking`` is accepted and
ignored: TF2 variables have no locking option.
"""

import inspect

import keras

from moxlite import errors
from moxlite.optimizers import schedules

# name -> (Keras class, fixed keyword arguments, TF1/MoXing spelling -> Keras spelling).
_OPTIMIZERS = {
    "sgd": (keras.optimizers.SGD, {"momentum": 0.0}, {}),
    "momentum": (keras.optimizers.SGD, {}, {"use_nesterov": "nesterov"}),
    "adam": (keras.optimizers.Adam, {}, {"beta1": "beta_1", "beta2": "beta_2"}),
    "adamw": (keras.optimizers.AdamW, {}, {"beta1": "beta_1", "beta2": "beta_2"}),
    "rmsprop": (keras.optimizers.RMSprop, {}, {"decay": "rho"}),
    "adagrad": (keras.optimizers.Adagrad, {}, {}),
    "adadelta": (keras.optimizers.Adadelta, {}, {}),
    "ftrl": (keras.optimizers.Ftrl, {}, {}),
    "nadam": (keras.optimizers.Nadam, {}, {"beta1": "beta_1", "beta2": "beta_2"}),
    "lamb": (keras.optimizers.Lamb, {}, {"beta1": "beta_1", "beta2": "beta_2"}),
}

OPTIMIZER_NAMES = tuple(sorted(_OPTIMIZERS))

_DEFAULTS = {"momentum": {"momentum": 0.9}}
_IGNORED = ("use_locking",)
# Keras's own accumulation raises under MirroredStrategy; batch_gradients replaces it.
_REFUSED = {"gradient_accumulation_steps": "use get_optimizer_wrapper_fn('batch_gradients', ...) instead"}


def _keras_arguments(cls):
    names = [name for name, parameter in inspect.signature(cls.__init__).parameters.items()
             if name not in ("self", "learning_rate") and parameter.kind is not parameter.VAR_KEYWORD]
    return [name for name in names if name not in _REFUSED]


def accepted_arguments(name):
    """The keyword arguments ``get_optimizer_fn(name, ...)`` accepts, MoXing spellings included."""
    cls, fixed, aliases = _OPTIMIZERS[_checked_name(name)]
    names = [n for n in _keras_arguments(cls) if n not in fixed]
    return sorted(set(names) | set(aliases) | set(_IGNORED))


def _checked_name(name):
    key = name.lower() if isinstance(name, str) else name
    if key not in _OPTIMIZERS:
        raise errors.OptimizerError(
            f"optimizer name {errors.describe(name)} is unknown; valid names: {', '.join(OPTIMIZER_NAMES)}")
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
                f"{key}: unknown argument {argument!r}; accepted: {', '.join(accepted)}")
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
    learning_rate: a positive float, a Keras ``LearningRateSchedule`` or a
        MoXing epoch string (see ``moxlite.optimizers.schedules``).
    kwargs: the optimizer's arguments, in Keras or MoXing/TF1 spelling.

    Errors (unknown name or argument, bad learning rate) are raised here, not
    when the factory is called; an invalid value for a known argument is
    reported by Keras when the optimizer is built, re-raised as OptimizerError.
    """
    cls, arguments = keras_arguments(name, **kwargs)
    schedules.check_learning_rate(learning_rate)
    label = _checked_name(name)

    def optimizer_fn():
        try:
            return cls(learning_rate=schedules.resolve_learning_rate(learning_rate), **arguments)
        except errors.MoxliteError:
            raise
        except (ValueError, TypeError) as error:
            raise errors.OptimizerError(f"{label}: {error}") from None

    return optimizer_fn
