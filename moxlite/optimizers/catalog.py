"""What the optimizer section of a recipe may name, known without importing TensorFlow.

- the optimizer names, their MoXing spellings and the Keras arguments each accepts;
- the recipe-visible wrappers and their parameters (default, description, accepted range
  and its check), which the wrapper classes use as their ``PARAMETERS``.

``factory``, ``registry`` and the wrapper classes read these tables, and the recipe
loader checks a recipe against them before TensorFlow is imported, so a typo is
rejected in a fraction of a second. The Keras argument lists are written out for the
pinned Keras 3.15; tests/test_compat.py compares them with the classes' signatures.
"""

import dataclasses
from typing import Any, Callable

from moxlite import errors


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One wrapper parameter: default, one-line description, accepted range and its check."""

    default: Any
    description: str
    accepted: str
    check: Callable[[Any], bool]


def checked_parameters(owner, table, parameters):
    """``parameters`` with the defaults of ``table`` filled in; an OptimizerError naming the first bad one."""
    unknown = sorted(set(parameters) - set(table))
    if unknown:
        raise errors.OptimizerError(f"{owner}: unknown parameter {unknown[0]!r}; accepted: {', '.join(table)}")
    values = {}
    for key, parameter in table.items():
        value = parameters.get(key, parameter.default)
        if not parameter.check(value):
            raise errors.OptimizerError(
                f"{owner}: {key}={errors.describe(value)} is out of range; expected {parameter.accepted}")
        values[key] = value
    return values


# ----------------------------------------------------------------- parameter checks

def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _integer_at_least(minimum):
    return lambda value: isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _valid_patterns(value):
    import re

    if not isinstance(value, (list, tuple)) or not all(isinstance(p, str) for p in value):
        return False
    try:
        for pattern in value:
            re.compile(pattern)
    except re.error:
        return False
    return True


def number(default, description, minimum=0.0, above=False):
    """A number >= minimum (> minimum with ``above``)."""
    accepted = f"a number {'>' if above else '>='} {minimum:g}"
    return Parameter(default, description, accepted,
                     lambda v: _number(v) and (v > minimum if above else v >= minimum))


def integer(default, description, minimum):
    """An integer >= minimum."""
    return Parameter(default, description, f"an integer >= {minimum}", _integer_at_least(minimum))


def patterns(default, description):
    """A list of regular expressions."""
    return Parameter(default, description, "a list of regular expressions", _valid_patterns)


def one_of(default, description, choices):
    """One of ``choices``, of its type (so 1 is not True)."""
    accepted = " or ".join(repr(c) if isinstance(c, str) else str(c) for c in choices)
    return Parameter(default, description, accepted, lambda v: any(isinstance(v, type(c)) and v == c for c in choices))


# ----------------------------------------------------------------- wrappers

# Biases and normalisation parameters, as in the LARS paper's ResNet recipes.
DEFAULT_EXCLUDE = ("bias", "beta", "gamma", "batch_norm", "batchnorm", "layer_norm", "layernorm")

LARS_PARAMETERS = {
    "ratio": number(0.001, "LARS coefficient (eta): trust = ratio*||w||/(||g||+weight_decay*||w||+epsilon)",
                    above=True),
    "weight_decay": number(0.0001, "L2 weight decay added to the gradient of non-excluded variables"),
    "epsilon": number(0.0, "added to the trust ratio's denominator"),
    "exclude": patterns(DEFAULT_EXCLUDE, "regular expressions; variables whose path matches one are not scaled"),
}

BATCH_GRADIENTS_PARAMETERS = {
    "num_batches": integer(8, "micro-batches whose mean gradient is applied once", 1),
    "sync_on_apply": one_of(True, "all-reduce only when applying (True) or on every micro-batch (False)",
                            (True, False)),
    "accumulate_on": one_of("device", "where the accumulators live: 'device' (per replica) or 'cpu' (host memory)",
                            ("device", "cpu")),
}

THOR_PARAMETERS = {
    "damping": Parameter(
        0.03, "lambda added to both factors as sqrt(lambda); a number or a schedule (callable of the step)",
        "a number >= 0 or a callable step -> number", lambda v: callable(v) or (_number(v) and v >= 0)),
    "frequency": integer(100, "refresh factors and inverses once every this many applied updates", 2),
    "block_size": integer(128, "invert diagonal blocks of this size (MindSpore: 128); 0 = the full inverse", 0),
    "weight_decay": number(
        0.0, "L2 weight decay added after preconditioning to variables not matching weight_decay_exclude"),
    "weight_decay_exclude": patterns(
        DEFAULT_EXCLUDE, "regular expressions; variables whose path matches one get no weight decay"),
    "include": patterns(
        (), "regular expressions; if given, only layers whose kernel's checkpoint name (a full path such as "
            "block0/attention/query/kernel) matches one are preconditioned"),
    "exclude": patterns((), "regular expressions; layers whose kernel's checkpoint name matches one get the plain "
                            "gradient"),
    "loss_reduction": one_of("mean", "how model_fn's loss reduces over the batch (G needs per-sample gradients)",
                             ("mean", "sum")),
}

# The wrappers a recipe (and get_optimizer_wrapper_fn) may name.
WRAPPER_PARAMETERS = {"batch_gradients": BATCH_GRADIENTS_PARAMETERS, "lars": LARS_PARAMETERS,
                      "thor": THOR_PARAMETERS}
WRAPPER_NAMES = tuple(sorted(WRAPPER_PARAMETERS))


# ----------------------------------------------------------------- optimizers

# Arguments every Keras 3.15 optimizer takes besides learning_rate (gradient_accumulation_steps
# is left out: the factory refuses it, batch_gradients replaces it).
_KERAS_COMMON = ("weight_decay", "clipnorm", "clipvalue", "global_clipnorm", "use_ema", "ema_momentum",
                 "ema_overwrite_frequency", "loss_scale_factor", "name")
# Keras class -> the arguments of its own.
KERAS_ARGUMENTS = {
    "SGD": ("momentum", "nesterov"),
    "Adam": ("beta_1", "beta_2", "epsilon", "amsgrad"),
    "AdamW": ("beta_1", "beta_2", "epsilon", "amsgrad"),
    "RMSprop": ("rho", "momentum", "epsilon", "centered"),
    "Adagrad": ("initial_accumulator_value", "epsilon"),
    "Adadelta": ("rho", "epsilon"),
    "Ftrl": ("learning_rate_power", "initial_accumulator_value", "l1_regularization_strength",
             "l2_regularization_strength", "l2_shrinkage_regularization_strength", "beta"),
    "Nadam": ("beta_1", "beta_2", "epsilon"),
    "Lamb": ("beta_1", "beta_2", "epsilon"),
}
_ADAM_SPELLINGS = {"beta1": "beta_1", "beta2": "beta_2"}
# name -> (Keras class, fixed keyword arguments, TF1/MoXing spelling -> Keras spelling).
OPTIMIZERS = {
    "sgd": ("SGD", {"momentum": 0.0}, {}),
    "momentum": ("SGD", {}, {"use_nesterov": "nesterov"}),
    "adam": ("Adam", {}, _ADAM_SPELLINGS),
    "adamw": ("AdamW", {}, _ADAM_SPELLINGS),
    "rmsprop": ("RMSprop", {}, {"decay": "rho"}),
    "adagrad": ("Adagrad", {}, {}),
    "adadelta": ("Adadelta", {}, {}),
    "ftrl": ("Ftrl", {}, {}),
    "nadam": ("Nadam", {}, _ADAM_SPELLINGS),
    "lamb": ("Lamb", {}, _ADAM_SPELLINGS),
}
OPTIMIZER_NAMES = tuple(sorted(OPTIMIZERS))
# TF1's use_locking is accepted and ignored: TF2 variables have no locking option.
IGNORED_ARGUMENTS = ("use_locking",)


def keras_arguments(class_name):
    """The keyword arguments of Keras optimizer ``class_name`` besides learning_rate, as moxlite passes them."""
    return KERAS_ARGUMENTS[class_name] + _KERAS_COMMON


def accepted_arguments(name):
    """The keyword arguments optimizer ``name`` (one of OPTIMIZER_NAMES) accepts, MoXing spellings included."""
    class_name, fixed, aliases = OPTIMIZERS[name]
    names = [n for n in keras_arguments(class_name) if n not in fixed]
    return sorted(set(names) | set(aliases) | set(IGNORED_ARGUMENTS))
