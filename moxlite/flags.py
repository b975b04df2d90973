"""MoXing's command-line flags, on absl.

Scripts read them with ``get_flag(name)`` and set them with
``set_flag(name, value)`` before calling ``run``; the same names may be passed
on the command line (``python train.py --num_gpus=2``). Flags that moxlite
does not know are left for the script's own parser.
"""

import json
import math
import os
import sys

from absl import flags as absl_flags

from moxlite import errors, run_settings
from moxlite.declarations import did_you_mean

FLAGS = absl_flags.FLAGS

# Flags of MoXing's that absl or TensorFlow define first: absl.logging's --log_dir (imported by
# TensorFlow). Scripts define --log_dir themselves (README); moxlite lets their definition win.
_LIBRARY_MODULES = ("absl.", "tensorflow")


def _import_absl_logging():
    """Import absl.logging, which defines --log_dir, after a script's own --log_dir too.

    A script that defined --log_dir before anything imported absl.logging would get
    DuplicateFlagError from that import (moxlite's, or TensorFlow's later): absl's definition
    is let in, then the script's flag is put back in its place.
    """
    if "absl.logging" in sys.modules or "log_dir" not in FLAGS:
        from absl import logging as _absl_logging  # noqa: F401
        return
    script_flag = FLAGS["log_dir"]
    script_flag.allow_override = True
    try:
        from absl import logging as _absl_logging  # noqa: F401,F811
    finally:
        script_flag.allow_override = False
    if FLAGS["log_dir"] is not script_flag:
        FLAGS["log_dir"].allow_override = True
        FLAGS["log_dir"] = script_flag


# absl.logging defines --log_dir unconditionally when TensorFlow imports it; importing it
# first lets _define_all() see the name (and let a script's definition replace absl's).
_import_absl_logging()

# name -> (kind, default, help) of every flag: each a setting declared once in moxlite.run_settings.
FLAG_TABLE = run_settings.FLAGS

class _IntegerOrAutoParser(absl_flags.ArgumentParser):
    """A positive integer, or the word ``auto``."""

    def parse(self, argument):
        if isinstance(argument, str) and argument.strip().lower() == "auto":
            return "auto"
        try:
            value = int(argument)
        except (TypeError, ValueError):
            value = None
        if value is None or isinstance(argument, bool) or value < 1:
            raise ValueError(f"{argument!r} is neither a positive integer nor 'auto'")
        return value

    def flag_type(self):
        return "integer or auto"


def _define_integer_or_auto(name, default, help_text, **kwargs):
    absl_flags.DEFINE(_IntegerOrAutoParser(), name, default, help_text, **kwargs)


_DEFINERS = {
    "integer or auto": _define_integer_or_auto,
    "integer": absl_flags.DEFINE_integer,
    "string": absl_flags.DEFINE_string,
    "boolean": absl_flags.DEFINE_boolean,
    "float": absl_flags.DEFINE_float,
}


# The Flag objects moxlite defined. ModelArts scripts define --data_url, --train_url,
# often --batch_size or --num_gpus themselves after importing MoXing; moxlite's flags
# allow override, so the script's definition replaces moxlite's instead of raising
# DuplicateFlagError, and get_flag reads the script's flag in moxlite's kind.
_OWN_FLAGS = {}


def _define_all():
    for name, (kind, default, help_text) in FLAG_TABLE.items():
        if name not in FLAGS:
            _DEFINERS[kind](name, default, help_text, allow_override=True)
            _OWN_FLAGS[name] = FLAGS[name]
        elif (FLAGS.find_module_defining_flag(name) or "").startswith(_LIBRARY_MODULES):
            # absl's --log_dir: a script's later definition replaces it, as it replaces moxlite's
            FLAGS[name].allow_override = True


def _in_moxlite_kind(name, value):
    """A script-defined flag's value as moxlite reads the flag (``--num_gpus`` as an integer, ...)."""
    kind = FLAG_TABLE[name][0]
    if value is None or FLAGS[name] is _OWN_FLAGS.get(name):
        return value
    try:
        if kind == "integer" and not isinstance(value, bool) and float(value) == int(float(value)):
            return int(float(value))
        if kind == "float" and not isinstance(value, bool):
            return float(value)
        if kind == "boolean":
            text = str(value).strip().lower()
            if text in ("true", "1", "yes", "false", "0", "no"):
                return text in ("true", "1", "yes")
        if kind == "string":
            return str(value)
        if kind == "integer or auto":
            return _IntegerOrAutoParser().parse(value)
    except (TypeError, ValueError):
        pass
    raise errors.ArgumentError(
        f"--{name}={value!r}: the script defines this flag itself, and moxlite reads it as "
        f"{'an' if kind == 'integer' else 'a'} {kind}; pass a value of that kind or define the flag as one")


_define_all()


def _flag_name(argument):
    """The moxlite flag an argument sets (``--num_gpus=2``, ``--num_gpus``, ``--nosync_replicas``), or None."""
    if not argument.startswith("-"):
        return None
    name = argument.lstrip("-").split("=", 1)[0]
    if name in FLAG_TABLE:
        return name
    if name.startswith("no") and FLAG_TABLE.get(name[2:], ("",))[0] == "boolean":
        return name[2:]
    return None


def _ensure_parsed():
    """Parse moxlite's flags from sys.argv once, leaving every other argument to the script."""
    if FLAGS.is_parsed():
        return
    argv = sys.argv[1:] if sys.argv else []
    known = [sys.argv[0]] if sys.argv else ["moxlite"]
    index = 0
    while index < len(argv):
        argument = argv[index]
        name = _flag_name(argument)
        if name is not None:
            known.append(argument)
            takes_value = "=" not in argument and FLAG_TABLE[name][0] != "boolean"
            if takes_value and index + 1 < len(argv):   # "--num_gpus 2"
                index += 1
                known.append(argv[index])
        index += 1
    try:
        FLAGS(known)
    except absl_flags.Error as error:
        raise errors.ArgumentError(f"command-line flag: {error}") from None


# MoXing flags that moxlite does not implement, and what a script that passes one gets instead.
# A key ending in "_" stands for every flag it begins (MoXing's --dgc_* family).
NOT_IMPLEMENTED = {
    "variable_update": "the distribution comes from --num_gpus, --worker_hosts/--ps_hosts (or TF_CONFIG) "
                       "and --sync_replicas",
    "dgc_": "deep gradient compression is not in moxlite; gradients are reduced uncompressed",
    "clone_on_cpu": "replicas run on the local devices --num_gpus gives; there is no CPU clone",
}
# Flags absl's app handles itself, defined only once absl.app is imported.
_ABSL_APP_FLAGS = ("help", "helpfull", "helpshort", "helpxml", "flagfile", "undefok", "only_check_args",
                   "pdb", "pdb_post_mortem", "run_with_pdb", "run_with_profiling", "profile_file",
                   "use_cprofile_for_profiling")


def unheeded_command_line_flags(argv=None):
    """One line for each command-line flag that nothing here will read and that looks meant for
    moxlite: a MoXing flag moxlite does not implement, or a near miss of a moxlite flag.

    ``tf.compat.v1.app.run`` tolerates flags nobody defined, so ``--num_gpu=2`` or MoXing's
    ``--variable_update`` would otherwise train as if not passed, without a word. A flag the
    script defines through absl is its own; one its argparse reads is not seen here, so other
    unknown names are left alone. ``argv``: the arguments after the program (default sys.argv's).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    lines = []
    for argument in argv:
        if argument == "--":
            break
        if not argument.startswith("-") or _flag_name(argument) is not None:
            continue
        name = argument.lstrip("-").split("=", 1)[0]
        bare = name[2:] if name.startswith("no") else None
        if not name or name in FLAGS or (bare and bare in FLAGS) or name in _ABSL_APP_FLAGS:
            continue
        instead = next((why for key, why in NOT_IMPLEMENTED.items()
                        if name == key or (key.endswith("_") and name.startswith(key))), None)
        if instead:
            lines.append(f"{argument}: a MoXing flag moxlite does not implement, ignored; {instead}")
            continue
        near = did_you_mean(name, FLAG_TABLE, cutoff=0.8, quote=lambda flag: "--" + flag)
        if near:
            lines.append(f"{argument}: not a moxlite flag, and the script defines no absl flag of that name; "
                         f"moxlite ignores it{near}")
    return lines


def flag_value(name):
    """The value of MoXing flag ``name`` exactly as set (what the cluster resolver reads)."""
    if name not in FLAG_TABLE:
        raise errors.ArgumentError(
            f"get_flag: unknown flag {name!r}; known flags: {', '.join(sorted(FLAG_TABLE))}")
    _ensure_parsed()
    return _in_moxlite_kind(name, FLAGS[name].value)


def get_flag(name):
    """The value of MoXing flag ``name``, as scripts read it.

    ``worker_hosts`` and ``ps_hosts`` come without empty entries or spaces, and
    ``worker_hosts`` describes the cluster however it was given (the flag, or
    TF_CONFIG's chief and workers), so that MoXing's
    ``len(mox.get_flag('worker_hosts').split(','))`` counts the workers: '' (one
    entry) in a single process.
    """
    value = flag_value(name)
    if name in ("worker_hosts", "ps_hosts"):
        value = ",".join(host.strip() for host in (value or "").split(",") if host.strip())
        if name == "worker_hosts" and not value:
            value = _tf_config_workers()
    return value


def _tf_config_workers():
    """TF_CONFIG's worker hosts (with the chief, which is a worker unless parameter servers are used)."""
    try:
        cluster = json.loads(os.environ.get("TF_CONFIG", "") or "{}").get("cluster", {})
    except (ValueError, AttributeError):
        return ""   # the cluster resolver reports a malformed TF_CONFIG with the fix
    if not isinstance(cluster, dict):
        return ""
    jobs = ("worker",) if cluster.get("ps") else ("chief", "worker")
    return ",".join(str(host) for job in jobs for host in (cluster.get(job) or []))


def set_flag(name, value):
    """Set MoXing flag ``name`` to ``value`` (checked against the flag's type)."""
    if name not in FLAG_TABLE:
        raise errors.ArgumentError(
            f"set_flag: unknown flag {name!r}; known flags: {', '.join(sorted(FLAG_TABLE))}")
    _ensure_parsed()
    try:
        if isinstance(value, str) and FLAG_TABLE[name][0] != "string":
            FLAGS[name].parse(value)
        else:
            setattr(FLAGS, name, value)
    except (absl_flags.Error, ValueError, TypeError) as error:
        raise errors.ArgumentError(
            f"set_flag: {name}={errors.describe(value)} is not a valid "
            f"{FLAG_TABLE[name][0]}: {error}") from None


def parse_loss_scale(value):
    """The ``loss_scale`` flag's meaning: None (off), ``"dynamic"``, ``"dynamic:<start>"`` or a positive float.

    Off is 0 or an empty, "none" or "off" value; ``dynamic:<start>`` is a
    dynamic scale from another start (MindSpore's default is 2**24). Raises
    ValueError saying what is accepted for anything else. The one reading of
    the value, for the recipe check and the run.
    """
    text = str(value).strip().lower()
    if text in ("0", "0.0", "", "none", "off"):
        return None
    if text == "dynamic":
        return "dynamic"
    if text.startswith("dynamic:"):
        try:
            start = float(text.split(":", 1)[1])
        except ValueError:
            start = -1.0
        if start > 0 and math.isfinite(start):
            return f"dynamic:{start:g}"
        raise ValueError("'dynamic:<start>' needs a finite positive starting scale, e.g. dynamic:16777216")
    try:
        scale = float(text)
    except ValueError:
        scale = -1.0
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError("use 0 (off), a positive number (a fixed scale) or 'dynamic'; the number must be finite")
    return scale


def reset_flags():
    """Put every moxlite flag back to its default (for tests and repeated runs)."""
    _ensure_parsed()
    for name in FLAG_TABLE:
        FLAGS[name].unparse()
        FLAGS[name].value = FLAG_TABLE[name][1] if FLAGS[name] is _OWN_FLAGS.get(name) else FLAGS[name].default
