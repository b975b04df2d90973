"""What the optimizer section of a recipe may name, known without importing TensorFlow.

- the optimizer names, their Keras classes and MoXing spellings; the Keras arguments each
  accepts are read from the class itself (``keras_arguments``, which imports Keras);
- the recipe-visible wrappers and their parameters (default, description, accepted range
  and its check), which the wrapper classes use as their ``PARAMETERS``.

``named_optimizers``, ``wrapper_stack`` and the wrapper classes read these tables, and the recipe
loader checks a recipe against them before TensorFlow is imported, so a typo is
rejected in a fraction of a second; an optimizer argument's name is checked once Keras is
imported, when the plan is built, still before anything is written.
"""

import dataclasses
from typing import Any, Callable, Dict, Tuple

from moxlite import errors, ranges
from moxlite.declarations import did_you_mean


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
        if callable(value) and key in CALLABLE_RANGES:
            check_first_values(f"{owner}: {key}", value, CALLABLE_RANGES[key])
        values[key] = value
    return values


# Parameters that may be a schedule (a callable of the step): the range of its values.
CALLABLE_RANGES = {"damping": ranges.number(minimum=0)}
# The steps a schedule is evaluated at before training ("its first values").
FIRST_STEPS = (0, 1)


def check_first_values(name, schedule, valid):
    """Evaluate ``schedule`` at FIRST_STEPS; a one-line OptimizerError naming ``name`` unless each
    value is accepted by ``valid``. A callable that needs a tensor step is called with one."""
    for step in FIRST_STEPS:
        value = _value_at(name, schedule, step)
        if value is _SYMBOLIC:
            return   # called while a graph is traced (no value yet): the run's first step will tell
        if not valid.check(value):
            raise errors.OptimizerError(
                f"{name}: the schedule {_callable_name(schedule)} gives {errors.describe(value)} at step {step}; "
                f"expected {valid.accepted} at every step")


def _value_at(name, schedule, step):
    import numpy as np

    try:
        value = schedule(step)
    except Exception:   # noqa: BLE001  (a schedule written for tensors: retry with one)
        import tensorflow as tf

        try:
            value = schedule(tf.constant(step, tf.int64))
        except Exception as error:   # noqa: BLE001
            raise errors.OptimizerError(
                f"{name}: calling the schedule {_callable_name(schedule)} at step {step} failed "
                f"({type(error).__name__}: {' '.join(str(error).split())[:120]}); give a function of the "
                f"step that returns a number") from None
    try:
        return float(np.asarray(value))
    except (TypeError, ValueError, NotImplementedError):
        return _SYMBOLIC if hasattr(value, "dtype") and hasattr(value, "shape") else value


_SYMBOLIC = object()   # a tensor without a value (graph mode)


def _callable_name(schedule):
    name = getattr(schedule, "__name__", None) or type(schedule).__name__
    return f"{name!r}"


# ----------------------------------------------------------------- parameter checks

def _parameter(default, description, valid: ranges.Range):
    return Parameter(default, description, valid.accepted, valid.check)


def number(default, description, minimum=0.0, above=False):
    """A finite number >= minimum (> minimum with ``above``)."""
    valid = ranges.number(above=minimum) if above else ranges.number(minimum=minimum)
    return _parameter(default, description, valid)


def integer(default, description, minimum):
    """An integer >= minimum."""
    return _parameter(default, description, ranges.integer(minimum))


def patterns(default, description):
    """A list of regular expressions."""
    return _parameter(default, description, ranges.patterns())


def one_of(default, description, choices):
    """One of ``choices``, of its type (so 1 is not True)."""
    return _parameter(default, description, ranges.one_of(choices))


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
        "a finite number >= 0 or a callable step -> number (checked at its first steps)",
        lambda v: callable(v) or ranges.number(minimum=0).check(v)),
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
    "statistics": one_of(
        "mindspore", "which rows the factors average and how they are damped: 'mindspore' every row, ds "
                     "scaled by the batch, sqrt(lambda) added to both factors (MindSpore's formula); 'kfac' only "
                     "the rows the loss reaches, ds scaled by the loss's terms (K-FAC expand), each factor damped "
                     "by sqrt(lambda) times its own tr/dim, LayerNorm left plain", ("mindspore", "kfac")),
    "graft": one_of(
        False, "rescale each preconditioned variable's update to the Frobenius norm of its plain gradient (SGD "
               "grafting: THOR's direction, the inner optimizer's step size; a zero gradient stays zero)",
        (False, True)),
    "loss_reduction": one_of("mean", "how model_fn's loss reduces over the batch (G needs per-sample gradients)",
                             ("mean", "sum")),
    # Past MindSpore's open code (moxlite.optimizers.thor.damping, thor_refresh); off by default.
    "pi_damping": one_of(False, "K-FAC's pi-corrected damping: A gets pi*sqrt(lambda), G sqrt(lambda)/pi, "
                                "pi = sqrt((tr A/dim A)/(tr G/dim G)) (Martens & Grosse 2015, 6.3)", (False, True)),
    "refresh": one_of("fixed", "which layers invert at a refresh: 'fixed' every layer (MindSpore), 'trace' only "
                               "those whose factor traces moved by trace_threshold since their last inversion",
                      ("fixed", "trace")),
    "trace_threshold": number(0.2, "refresh 'trace': relative change of tr A or tr G since a layer's last "
                                   "inversion that makes it invert again (0.2: measured, tools/bench_thor.py)"),
    "interval_growth": number(1.0, "refresh 'trace': after each inversion of a layer, the refreshes it waits "
                                   "before its next one are multiplied by this (1 = check at every refresh)",
                              minimum=1.0),
}

# The wrappers a recipe (and get_optimizer_wrapper_fn) may name.
WRAPPER_PARAMETERS = {"batch_gradients": BATCH_GRADIENTS_PARAMETERS, "lars": LARS_PARAMETERS,
                      "thor": THOR_PARAMETERS}
WRAPPER_NAMES = tuple(sorted(WRAPPER_PARAMETERS))


# How gradient_clip clips (the precision settings' gradient_clip_type, and optimizers.clipping).
CLIP_TYPES = ("global_norm", "norm")


# ----------------------------------------------------------------- optimizers

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


# Keras's own accumulation raises under MirroredStrategy; batch_gradients replaces it.
REFUSED_ARGUMENTS = ("gradient_accumulation_steps",)


def keras_arguments(class_name):
    """The keyword arguments of Keras optimizer ``class_name`` besides learning_rate, read from the
    class's signature (so this imports Keras: the recipe loader leaves the names to the plan)."""
    import inspect

    import keras

    parameters = inspect.signature(getattr(keras.optimizers, class_name).__init__).parameters
    return tuple(name for name, parameter in parameters.items()
                 if name not in ("self", "learning_rate", *REFUSED_ARGUMENTS)
                 and parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL))


def accepted_arguments(name):
    """The keyword arguments optimizer ``name`` (one of OPTIMIZER_NAMES) accepts, MoXing spellings included
    (imports Keras, see ``keras_arguments``)."""
    class_name, fixed, aliases = OPTIMIZERS[name]
    names = [n for n in keras_arguments(class_name) if n not in fixed]
    return sorted(set(names) | set(aliases) | set(IGNORED_ARGUMENTS))


# ----------------------------------------------------------------- schedules

_POSITIVE = ranges.number(above=0)
_AT_LEAST_0 = ranges.number(minimum=0)
_STEPS = ranges.number(above=0)


def _is_whole(value):
    return ranges.is_number(value) and float(value).is_integer()


_WHOLE_POSITIVE = ranges.Range("a whole number > 0", lambda v: _is_whole(v) and v > 0)
_WHOLE_AT_LEAST_0 = ranges.Range("a whole number >= 0", lambda v: _is_whole(v) and v >= 0)
_SWITCH = ranges.one_of((True, False))

THOR_SCHEDULES = "moxlite.optimizers.thor.schedules"


@dataclasses.dataclass(frozen=True)
class Schedule:
    """A schedule a recipe may name: its class (a keras.optimizers.schedules name, or THOR's module),
    its arguments' ranges in the class's signature order, the ``required`` ones first, and for
    THOR's what its arguments are (--help-recipe). tests/optimizers/test_recipe_tables.py compares the names with
    the signatures; THOR's steps_per_epoch may be left out (the run gives it)."""

    owner: str
    required: Tuple[str, ...]
    arguments: Dict[str, ranges.Range]
    about: str = ""

    @property
    def optional(self):
        return tuple(name for name in self.arguments if name not in self.required)

    @property
    def derived_from_run(self):
        """Arguments a recipe may leave out because the run knows them."""
        return ("steps_per_epoch",) if self.owner == THOR_SCHEDULES and "steps_per_epoch" in self.required else ()


# Every schedule kind a recipe may name: the one table the recipe loader, the builder, the docs and
# moxlite.optimizers.thor.schedules read.
SCHEDULES = {
    "piecewise_constant": Schedule("PiecewiseConstantDecay", ("boundaries", "values"), {
        "boundaries": ranges.list_of(_AT_LEAST_0, min_length=0), "values": ranges.list_of(_AT_LEAST_0)}),
    "cosine": Schedule("CosineDecay", ("initial_learning_rate", "decay_steps"), {
        "initial_learning_rate": _POSITIVE, "decay_steps": _STEPS, "alpha": ranges.probability(),
        "warmup_target": ranges.either(_POSITIVE, ranges.one_of((None,)), "a finite number > 0 or null"),
        "warmup_steps": _AT_LEAST_0}),
    "cosine_restarts": Schedule("CosineDecayRestarts", ("initial_learning_rate", "first_decay_steps"), {
        "initial_learning_rate": _POSITIVE, "first_decay_steps": _STEPS, "t_mul": _POSITIVE, "m_mul": _POSITIVE,
        "alpha": ranges.probability()}),
    "exponential": Schedule("ExponentialDecay", ("initial_learning_rate", "decay_steps", "decay_rate"), {
        "initial_learning_rate": _POSITIVE, "decay_steps": _STEPS, "decay_rate": _POSITIVE, "staircase": _SWITCH}),
    "polynomial": Schedule("PolynomialDecay", ("initial_learning_rate", "decay_steps"), {
        "initial_learning_rate": _POSITIVE, "decay_steps": _STEPS, "end_learning_rate": _AT_LEAST_0,
        "power": _AT_LEAST_0, "cycle": _SWITCH}),
    "inverse_time": Schedule("InverseTimeDecay", ("initial_learning_rate", "decay_steps", "decay_rate"), {
        "initial_learning_rate": _POSITIVE, "decay_steps": _STEPS, "decay_rate": _AT_LEAST_0, "staircase": _SWITCH}),
    "thor": Schedule(THOR_SCHEDULES, ("lr_init", "lr_decay", "lr_end_epoch", "steps_per_epoch"), {
        "lr_init": _POSITIVE, "lr_decay": _AT_LEAST_0, "lr_end_epoch": _POSITIVE, "steps_per_epoch": _POSITIVE,
        "decay_epochs": _AT_LEAST_0}, "lr_init, lr_decay, lr_end_epoch, decay_epochs (MindSpore's get_thor_lr)"),
    "thor_damping": Schedule(THOR_SCHEDULES, ("damping_init", "decay_rate", "steps_per_epoch"), {
        "damping_init": _POSITIVE, "decay_rate": _POSITIVE, "steps_per_epoch": _POSITIVE},
        "damping_init, decay_rate (get_thor_damping)"),
    "thor_polynomial": Schedule(THOR_SCHEDULES, ("initial_value", "end_value", "total_steps"), {
        "initial_value": _POSITIVE, "end_value": _AT_LEAST_0, "total_steps": _WHOLE_POSITIVE,
        "power": _AT_LEAST_0, "warmup_steps": _WHOLE_AT_LEAST_0},
        "initial_value, end_value, total_steps, power, warmup_steps (the BERT lr and damping)"),
}


def schedule_problem(kind, params):
    """(argument, message) of the first argument of schedule ``kind`` out of its range, or None.

    Checks each given argument against SCHEDULES[kind].arguments and the rules across them
    (piecewise_constant: increasing boundaries, one more value than boundaries).
    """
    table = SCHEDULES[kind].arguments
    for key, value in params.items():
        if key in table:
            problem = table[key].problem(value)
            if problem:
                return key, f"{kind}: {key}={problem}"
    if kind == "piecewise_constant" and "boundaries" in params and "values" in params:
        boundaries, values = params["boundaries"], params["values"]
        if any(later <= earlier for earlier, later in zip(boundaries, boundaries[1:])):
            return "boundaries", f"{kind}: boundaries={ranges.describe(boundaries)} must increase"
        if len(values) != len(boundaries) + 1:
            return "values", (f"{kind}: values has {len(values)} entries; expected one more than the "
                              f"{len(boundaries)} boundaries")
    return None


def check_schedule_arguments(kind, params, accepted):
    """``params`` of schedule ``kind`` checked: unknown names and ranges, as one-line OptimizerErrors.

    ``accepted``: the argument names the schedule takes (SCHEDULES[kind].arguments' or a signature's).
    """
    for key in params:
        if key not in accepted:
            raise errors.OptimizerError(f"{kind}: unknown argument {key!r}{did_you_mean(key, accepted)}; "
                                        f"accepted: {', '.join(accepted)}")
    found = schedule_problem(kind, params)
    if found:
        raise errors.OptimizerError(found[1])
    return params
