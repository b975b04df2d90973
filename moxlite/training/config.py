"""``RunConfig``: everything one ``run`` reads, frozen and typed, checked in one place.

``moxlite.run(...)`` builds it from its keyword arguments, taking what they
leave out from MoXing's flags (``--batch_size``, ``--log_dir``, precision,
checkpoint patterns, the cluster ...), so a script that sets flags works as
before. A recipe builds it from its own typed values (``from_run_arguments(...,
settings=...)``; each setting is declared once in ``moxlite.run_settings``) and sets no flag.
After that the runner reads only the config: no flag, no dict of arguments.
"""

import collections.abc
import dataclasses
import typing
from typing import Any, Callable, Mapping, Optional, Tuple, Union

from moxlite import declarations, errors, flags, run_settings
from moxlite.contract import ModeKeys
from moxlite.training.trainers import nonfinite as nonfinite_lib
from moxlite.training.mixed_precision import settings as precision_settings
from moxlite.training.validation import validate_run_arguments


# ----------------------------------------------------------------- typed fields

def check_types(instance):
    """Raise ArgumentError naming the first field of the dataclass ``instance`` whose value is not of its type."""
    hints = typing.get_type_hints(type(instance))
    for field in dataclasses.fields(instance):
        value = getattr(instance, field.name)
        kind = hints[field.name]
        if not declarations.matches(value, kind):
            raise errors.ArgumentError(
                f"{type(instance).__name__}.{field.name}={errors.describe(value)} is not valid; "
                f"pass {_kind_name(kind)}")


def _kind_name(kind):
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is type(None):
        return "None"
    if origin is Union:
        return " or ".join(_kind_name(option) for option in args)
    if origin is tuple:
        return f"a tuple of {_kind_name(args[0])}"
    if origin is collections.abc.Callable or kind is Callable:
        return "a callable"
    return _KIND_NAMES.get(kind) or f"a {getattr(kind, '__name__', kind)}"


_KIND_NAMES = {int: "an integer", float: "a number", bool: "True or False", str: "a string"}


def _declared(name):
    """The declared default of setting ``name`` (moxlite.run_settings), lists as tuples (a frozen config)."""
    value = run_settings.DEFAULTS[name]
    return tuple(value) if isinstance(value, list) else value


# ----------------------------------------------------------------- the config

@dataclasses.dataclass(frozen=True)
class Distribution:
    """The cluster a run uses, as MoXing's flags name it (read by ``moxlite.distribute.setup``)."""

    num_gpus: int = _declared("num_gpus")
    sync_replicas: bool = _declared("sync_replicas")
    job_name: str = _declared("job_name")
    task_index: int = _declared("task_index")
    ps_hosts: Tuple[str, ...] = _declared("ps_hosts")
    worker_hosts: Tuple[str, ...] = _declared("worker_hosts")
    chief_hosts: str = _declared("chief_hosts")
    tpu: str = _declared("tpu")
    cluster: str = _declared("cluster")

    def __post_init__(self):
        check_types(self)

    @classmethod
    def of(cls, value_of):
        """The Distribution whose field ``name`` is ``value_of(name)`` (a list as a tuple)."""
        return cls(**{field.name: _frozen(value_of(field.name)) for field in dataclasses.fields(cls)})

    def get_flag(self, name):
        """The value as its flag holds it: ``distribute.setup(get_flag=...)`` reads the cluster from it."""
        return run_settings.flag_text(name, getattr(self, name))


def _frozen(value):
    return tuple(value) if isinstance(value, list) else value


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One call of ``run``: its arguments (MoXing's names and meaning, see ``run``) with every
    default filled in and checked, plus the flag-given settings the runner uses."""

    input_fn: Callable
    model_fn: Callable
    run_mode: str
    batch_size: Optional[int]                 # None: input_fn's elements are the batches
    log_dir: Optional[str] = None
    optimizer_fn: Tuple[Callable, ...] = ()   # one factory per loss (one for all when a single one)
    output_fn: Optional[Callable] = None
    inter_mode: Optional[str] = None
    auto_batch: bool = True
    max_number_of_steps: int = 0
    checkpoint_path: Optional[str] = None
    log_every_n_steps: int = 10
    output_every_n_steps: int = 0
    save_summary_steps: int = 100
    save_model_secs: Optional[int] = None
    save_model_steps: Optional[int] = None
    export_model: Union[bool, str, None] = False
    steps_per_loop: Union[int, str] = _declared("steps_per_loop")   # a positive integer or "auto" (see controller)
    keep_checkpoint_max: int = _declared("keep_checkpoint_max")
    jit_compile: str = _declared("jit_compile")   # "auto", "true" or "false" (see training.compiled.jit_choice)
    # An EVAL of the same model_fn follows this TRAIN run (a recipe's run.evaluate): its spec is
    # checked before training, so that a model_fn without log_info fails before the first step.
    evaluation_follows: bool = False
    # Settings declared in moxlite.run_settings, from MoXing's flags or a recipe, not run()'s arguments.
    num_samples: int = _declared("num_samples")   # training samples per epoch; 0: from the input
    log_first_clone: bool = _declared("log_first_clone")
    checkpoint_exclude_patterns: Tuple[str, ...] = _declared("checkpoint_exclude_patterns")
    trainable_exclude_patterns: Tuple[str, ...] = _declared("trainable_exclude_patterns")
    allow_input_restart: bool = _declared("allow_input_restart")
    nonfinite_policy: nonfinite_lib.Policy = nonfinite_lib.Policy()
    precision: precision_settings.PrecisionSettings = precision_settings.PrecisionSettings()
    distribution: Distribution = Distribution()

    def __post_init__(self):
        check_types(self)

    @property
    def save_every(self):
        """(save_model_secs, save_model_steps) as the checkpointer uses them: 600 s when neither is set."""
        if not self.save_model_secs and not self.save_model_steps:
            return 600, self.save_model_steps
        return self.save_model_secs, self.save_model_steps


# run()'s arguments, in its order: RunConfig fields of the same names.
RUN_ARGUMENTS = ("input_fn", "output_fn", "model_fn", "optimizer_fn", "run_mode", "inter_mode", "batch_size",
                 "auto_batch", "log_dir", "max_number_of_steps", "checkpoint_path", "log_every_n_steps",
                 "output_every_n_steps", "save_summary_steps", "save_model_secs", "export_model",
                 "save_model_steps", "steps_per_loop", "keep_checkpoint_max", "jit_compile")
_PLAIN_SETTINGS = ("num_samples", "log_first_clone", "checkpoint_exclude_patterns", "trainable_exclude_patterns",
                   "allow_input_restart")


def from_run_arguments(arguments: Mapping[str, Any], settings: Optional[Mapping[str, Any]] = None) -> RunConfig:
    """The RunConfig of ``run(**arguments)``.

    ``settings`` gives the values of settings of moxlite.run_settings by name, in their declared
    types (a recipe gives all of them); a setting it does not give is read from its flag
    (``run_settings.from_flag``). Raises a one-line moxlite error naming the argument, the value
    and the fix.
    """
    settings = dict(settings or {})
    unknown = sorted(set(settings) - set(run_settings.FIELDS))
    if unknown:
        raise errors.ArgumentError(f"RunConfig settings {unknown} are not MoXing flags; known: "
                                   f"{', '.join(sorted(run_settings.FIELDS))}")

    def setting(name, read=flags.get_flag):
        return settings[name] if name in settings else run_settings.from_flag(name, read(name))

    checked = validate_run_arguments({name: arguments.get(name, _RUN_DEFAULTS.get(name)) for name in RUN_ARGUMENTS},
                                     setting=setting)
    # Checked as a list of factories in TRAIN; the other modes never call it (MoXing ignored it).
    checked["optimizer_fn"] = tuple(checked["optimizer_fn"]) if checked["run_mode"] == ModeKeys.TRAIN else ()
    return RunConfig(
        **checked,
        **{name: _frozen(setting(name)) for name in _PLAIN_SETTINGS},
        nonfinite_policy=nonfinite_lib.Policy.from_values(setting("nonfinite_policy"),
                                                          setting("max_consecutive_nonfinite")),
        precision=precision_settings.from_values({name: setting(name) for name in precision_settings.NAMES}),
        distribution=Distribution.of(lambda name: setting(name, read=flags.flag_value)))


_RUN_DEFAULTS = {"run_mode": "invalid", "auto_batch": True, "max_number_of_steps": 0, "log_every_n_steps": 10,
                 "output_every_n_steps": 0, "save_summary_steps": 100, "export_model": False}
