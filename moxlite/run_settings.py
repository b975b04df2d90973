"""The settings a run takes besides ``run``'s arguments, each declared once: MoXing's flags.

Each is a field of one block (``DistributeOptions``, ``RunOptions``, ``ScriptOptions`` here,
``PrecisionOptions`` beside mixed precision), made by ``moxlite.declarations.setting``: its name,
type, default, range and help. Everything else reads that field:

- ``moxlite.flags`` defines one absl flag per field (``FLAGS``: its kind, default and help, from
  the field), and ``from_flag`` reads a flag's value into the field's type once (a comma list
  into a list, ``--keep_fp32=none`` into ``[]``);
- the recipe schema nests the blocks as its ``distribute``, ``run`` and ``precision`` keys;
- ``RunConfig`` (``moxlite.training.config``) takes the typed values, from a recipe directly or
  from the flags through ``from_flag``;
- the reference docs list the flags from ``FLAGS``.

Nothing here imports TensorFlow.
"""

import dataclasses
import typing
from typing import List, Optional, Union

from moxlite import errors, ranges
from moxlite.declarations import defaults, setting
from moxlite.training.mixed_precision.options import PrecisionOptions

CLUSTER_SOURCES = ("auto", "flags", "tf_config", "slurm", "single")


@dataclasses.dataclass(kw_only=True)
class DistributeOptions:
    """Replicas and cluster: MoXing's distribution flags."""

    num_gpus: int = setting(1, "Local devices (replicas) per worker; >1 on CPU splits it into logical devices.")
    sync_replicas: bool = setting(True, "Synchronous data parallelism (true) or asynchronous parameter-server training (false).")
    job_name: str = setting("", "This task's job: 'worker', 'ps' or 'chief' ('' for one process).", ("", "worker", "ps", "chief"))
    task_index: int = setting(0, "This task's index within its job; worker 0 is the chief.")
    ps_hosts: List[str] = setting([], "host:port of each parameter server.")
    worker_hosts: List[str] = setting([], "host:port of each worker.")
    chief_hosts: str = setting("", "host:port of the coordinator in asynchronous mode ('' picks a free port).")
    tpu: str = setting("", "TPU name or grpc:// address; selects TPUStrategy.")
    cluster: str = setting("auto", "Where the cluster comes from: auto (the hosts above if set, else TF_CONFIG, else the Slurm job step srun started, else one process), flags, tf_config, slurm or single.", CLUSTER_SOURCES)
    log_first_clone: bool = setting(True, "Log the first replica's log_info (true) or the mean over replicas (false).")


@dataclasses.dataclass(kw_only=True)
class RunOptions:
    """The run's checkpoints, non-finite policy and traced calls."""

    keep_checkpoint_max: int = setting(5, "Checkpoints kept in log_dir.")
    nonfinite_policy: str = setting("stop", "At a non-finite loss or gradient: stop (nothing saved, the last finite checkpoint kept) or skip the step.", ("stop", "skip"))
    allow_input_restart: bool = setting(True, "Resume with the input restarted when the saved input position no longer fits the input pipeline (false: stop).")
    max_consecutive_nonfinite: int = setting(10, "With nonfinite_policy: skip, stop after this many non-finite steps in a row.",
                                             valid=ranges.integer(1))
    steps_per_loop: Union[int, str] = setting("auto", "Training steps run inside one traced call; 'auto' runs each call up to the next log line, summary, checkpoint or the end (bounded to about a second).")
    jit_compile: Union[bool, str] = setting("auto", "Compile the train step with XLA: auto (time both after tracing, keep the faster), true or false.", ("auto", True, False))
    checkpoint_exclude_patterns: List[str] = setting([], "Variable-name patterns not restored from checkpoint_path.")
    trainable_exclude_patterns: List[str] = setting([], "Variable-name patterns left out of training.")


@dataclasses.dataclass(kw_only=True)
class ScriptOptions:
    """Flags a script reads, or ``run`` takes when not given the argument; a recipe has its own keys."""

    batch_size: Optional[int] = setting(None, "Per-replica batch size, used when run() is not given one.")
    log_dir: Optional[str] = setting(None, "Directory for checkpoints, summaries and exports, used when run() is not given one.")
    num_samples: int = setting(0, "Training samples per epoch, for epoch-based learning-rate strings when the input is infinite (0: from the input).")
    data_url: str = setting("", "Data location passed by the platform to every job.")
    train_url: str = setting("", "Output location passed by the platform to every job.")


# Every block of flags, in the order the flags are listed.
BLOCKS = (DistributeOptions, ScriptOptions, RunOptions, PrecisionOptions)
FIELDS = {field.name: (block, field) for block in BLOCKS for field in dataclasses.fields(block)}
DEFAULTS = {name: value for block in BLOCKS for name, value in defaults(block).items()}


def _hints(block):
    return typing.get_type_hints(block)


TYPES = {name: _hints(block)[name] for name, (block, _) in FIELDS.items()}


def flag_kind(name):
    """The absl kind of setting ``name``'s flag: integer, boolean, float, 'integer or auto' or string."""
    kind = TYPES[name]
    return {int: "integer", Optional[int]: "integer", bool: "boolean", float: "float",
            Union[int, str]: "integer or auto"}.get(kind, "string")


def flag_text(name, value):
    """Typed ``value`` of setting ``name`` as its flag holds it (a list comma-joined, None as '')."""
    kind = TYPES[name]
    if kind == List[str]:
        return ",".join(value)
    if kind == Optional[List[str]]:
        return "" if value is None else (",".join(value) or "none")
    if kind == Optional[bool]:
        return "" if value is None else str(value).lower()
    if kind == Union[bool, str] and isinstance(value, bool):
        return str(value).lower()
    if kind == Union[float, str] and not isinstance(value, str):
        return f"{value:g}"
    return value


def from_flag(name, value):
    """The flag value of setting ``name`` (as absl holds it) in the setting's declared type.

    ``--ps_hosts=a:1,b:2`` is ``["a:1", "b:2"]``, ``--keep_fp32=''`` None (the level's list) and
    ``none`` ``[]``, ``--keep_batchnorm_fp32`` '' None; other kinds are absl's already (a loss scale's
    text, '0' or 'dynamic', is a value of its type, read by ``flags.parse_loss_scale``).
    """
    kind = TYPES[name]
    if kind == List[str]:
        return [part.strip() for part in str(value or "").split(",") if part.strip()]
    if kind == Optional[List[str]]:
        text = str(value).strip()
        return None if not text else [] if text.lower() == "none" else from_flag("checkpoint_exclude_patterns", text)
    if kind == Optional[bool]:
        text = str(value).strip().lower()
        if text not in ("", "true", "false"):
            raise errors.ArgumentError(f"--{name}={value!r} is not valid; use true, false or '' (the level's default)")
        return {"": None, "true": True, "false": False}[text]
    return value


# name -> (kind, default, help) of every flag, as moxlite.flags defines them.
FLAGS = {name: (flag_kind(name), flag_text(name, DEFAULTS[name]), field.metadata["help"])
         for name, (_, field) in FIELDS.items()}
