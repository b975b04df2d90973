"""Checks of ``run``'s arguments, done before any work and before touching ``log_dir``."""

import inspect

from moxlite import errors, flags
from moxlite.contract import ExportKeys, ModeKeys


JIT_COMPILE_MODES = ("auto", "true", "false")


def jit_compile_mode(value, name="jit_compile"):
    """``value`` as "auto", "true" or "false" (booleans and any case accepted); else a
    one-line ArgumentError naming ``name``, the value and the choices."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value.strip().lower() in JIT_COMPILE_MODES:
        return value.strip().lower()
    raise errors.ArgumentError(f"{name}={errors.describe(value)} is not valid; use 'auto' (the default: "
                               f"time the step with and without XLA and keep the faster), True or False")


def looks_like_optimizer(value):
    """An optimizer instance (Keras 3, a moxlite wrapper, or a TF1 optimizer), not its class.

    The one test of what optimizer_fn is (a factory, not an optimizer) and of what it
    returns (an optimizer, not a class or anything else).
    """
    return hasattr(value, "apply_gradients") and not isinstance(value, type)


def _check_optimizer_fn(optimizer_fn):
    factories = optimizer_fn if isinstance(optimizer_fn, (list, tuple)) else [optimizer_fn]
    for factory in factories:
        if looks_like_optimizer(factory):
            raise errors.OptimizerTypeError(
                f"optimizer_fn is an optimizer instance ({type(factory).__name__}), not a function that "
                f"returns one; wrap it: optimizer_fn=lambda: opt (or use moxlite.get_optimizer_fn(...))")
        if not callable(factory):
            raise errors.OptimizerTypeError(
                f"optimizer_fn={errors.describe(factory)} is not callable; pass a zero-argument function "
                f"that returns an optimizer, e.g. moxlite.get_optimizer_fn('momentum', 0.1, momentum=0.9)")
    return list(factories)


# How moxlite calls each user function (positionally; keyword arguments only where declared, see
# ``calling``): the parameter names a declaration needs, as MoXing's scripts write them.
USER_FUNCTION_CALLS = {"input_fn": ("mode",), "model_fn": ("inputs", "mode"), "output_fn": ("outputs",)}
# The keyword arguments each is given where it declares them.
USER_FUNCTION_KEYWORDS = {"input_fn": ("batch_size",), "model_fn": (), "output_fn": ()}


def check_user_function_signature(name, function, error=errors.ArgumentTypeError):
    """Raise ``error`` when ``function`` cannot take the positional arguments moxlite calls
    ``name`` with (``USER_FUNCTION_CALLS``): a one-line message with its signature as declared
    and the declaration to write, before anything runs."""
    parameters = USER_FUNCTION_CALLS[name]
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):   # a builtin or C callable: nothing to read; the call will tell
        return
    given = {key: None for key in USER_FUNCTION_KEYWORDS[name] if key in signature.parameters}
    try:
        signature.bind(*parameters, **given)
        return
    except TypeError:
        pass
    label = getattr(function, "__qualname__", None) or type(function).__name__
    module = getattr(function, "__module__", None)
    written = f"{module}.{label}" if module and module not in ("__main__", "builtins") else label
    required = [p.name for p in signature.parameters.values()
                if p.default is inspect.Parameter.empty
                and p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                               inspect.Parameter.KEYWORD_ONLY)]
    required = [p for p in required if p not in given]
    detail = (f"; it requires {', '.join(required)}: give the others defaults or bind them (functools.partial, "
              f"or a recipe's kwargs)" if len(required) > len(parameters) else "")
    call = f"{name}({', '.join(parameters)})"
    simple = label.rsplit(".", 1)[-1]
    simple = simple if simple.isidentifier() else name
    raise error(f"{name}={written}{signature} cannot be called as {call}: moxlite calls {name} with "
                f"{' and '.join(parameters)} (and keyword arguments only where declared); declare "
                f"def {simple}({', '.join(parameters)}){detail}")


def _positive_int(name, value, allow_none=True, allow_zero=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (value == 0 and not allow_zero):
        accepted = "a non-negative integer" if allow_zero else "a positive integer"
        raise errors.ArgumentError(f"{name}={errors.describe(value)} is not valid; pass {accepted}")
    return value


def check_log_dir(log_dir, error=errors.ArgumentError):
    """log_dir must be a directory, or not exist yet (it is created)."""
    if not log_dir:
        return
    from moxlite import file as mox_file  # local, s3:// and obs:// (TF's gfile has no s3 in 2.21)

    if mox_file.exists(log_dir) and not mox_file.is_directory(log_dir):
        raise error(f"log_dir={log_dir!r} is a file, not a directory; pass a directory (new or of an "
                    f"earlier run) for checkpoints and summaries")


def validate_run_arguments(args, setting=flags.get_flag):
    """Raise a moxlite error naming the argument, the value and the fix; return the cleaned args.

    ``args`` is a dict of run()'s arguments; the result fills the defaults MoXing takes from
    its flags (batch_size, log_dir, ...) from ``setting(flag_name)``.
    """
    mode = args["run_mode"]
    if mode not in ModeKeys.ALL:
        raise errors.ArgumentError(
            f"run_mode={errors.describe(mode)} is not valid; use one of moxlite.ModeKeys: "
            f"{', '.join(ModeKeys.ALL)}")
    if not callable(args["input_fn"]):
        raise errors.ArgumentTypeError(
            f"input_fn={errors.describe(args['input_fn'])} is not callable; pass a function "
            f"input_fn(mode) that returns a tf.data.Dataset")
    if not callable(args["model_fn"]):
        raise errors.ArgumentTypeError(
            f"model_fn={errors.describe(args['model_fn'])} is not callable; pass a function "
            f"model_fn(inputs, mode) that returns a moxlite.ModelSpec")
    check_user_function_signature("input_fn", args["input_fn"])
    check_user_function_signature("model_fn", args["model_fn"])
    if mode == ModeKeys.TRAIN:
        if args["optimizer_fn"] is None:
            raise errors.OptimizerError(
                "optimizer_fn is required in TRAIN mode; pass e.g. "
                "optimizer_fn=moxlite.get_optimizer_fn('momentum', learning_rate=0.1, momentum=0.9)")
        args["optimizer_fn"] = _check_optimizer_fn(args["optimizer_fn"])
    if args["output_fn"] is not None and not callable(args["output_fn"]):
        raise errors.ArgumentTypeError(
            f"output_fn={errors.describe(args['output_fn'])} is not callable; pass output_fn(outputs) "
            f"taking a list of dicts of numpy arrays")
    if args["output_fn"] is not None:
        check_user_function_signature("output_fn", args["output_fn"])
    if args["inter_mode"] not in (None, ModeKeys.EVAL):
        raise errors.ArgumentError(
            f"inter_mode={errors.describe(args['inter_mode'])} is not supported; use None or "
            f"moxlite.ModeKeys.EVAL (evaluate during TRAIN)")
    if args["inter_mode"] is not None and mode != ModeKeys.TRAIN:
        raise errors.ArgumentError(
            f"inter_mode={args['inter_mode']!r} needs run_mode=TRAIN (got {mode!r}); drop inter_mode")
    if args["batch_size"] is None:
        args["batch_size"] = setting("batch_size")
    # None, as in MoXing's Getting Started: input_fn's elements are the batches (see inputs).
    _positive_int("batch_size", args["batch_size"])
    if args["log_dir"] is None:
        args["log_dir"] = setting("log_dir")
    if mode == ModeKeys.TRAIN and not args["log_dir"]:
        raise errors.ArgumentError(
            "log_dir is required in TRAIN mode (checkpoints and summaries go there); pass log_dir=... "
            "or --log_dir")
    check_log_dir(args["log_dir"])
    # MoXing documents these counts as unused in some modes, and its examples pass None there
    # (the DGC example's EVAL: save_summary_steps=None); None is TF1's "off" (0), in every mode.
    for name in ("max_number_of_steps", "log_every_n_steps", "output_every_n_steps", "save_summary_steps"):
        if args[name] is None:
            args[name] = 0
        _positive_int(name, args[name], allow_none=False, allow_zero=True)
    for name in ("save_model_secs", "save_model_steps"):
        _positive_int(name, args[name])
    if args["steps_per_loop"] is None:
        args["steps_per_loop"] = setting("steps_per_loop")
    value = args["steps_per_loop"]
    if not isinstance(value, str) or value != "auto":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise errors.ArgumentError(f"steps_per_loop={errors.describe(value)} is not valid; pass a positive "
                                       f"integer or 'auto' (the default)")
    if args["jit_compile"] is None:
        args["jit_compile"] = setting("jit_compile")
    args["jit_compile"] = jit_compile_mode(args["jit_compile"])
    if args["keep_checkpoint_max"] is None:
        args["keep_checkpoint_max"] = setting("keep_checkpoint_max")
    _positive_int("keep_checkpoint_max", args["keep_checkpoint_max"], allow_none=False)
    if args["export_model"] is True:   # MoXing's documented "True or False": True exports for TF Serving
        args["export_model"] = ExportKeys.TF_SERVING
    if args["export_model"] not in (False, None, ExportKeys.TF_SERVING):
        raise errors.ArgumentError(
            f"export_model={errors.describe(args['export_model'])} is not valid; use False, True or "
            f"moxlite.ExportKeys.TF_SERVING")
    if not isinstance(args["auto_batch"], bool):
        raise errors.ArgumentError(f"auto_batch={errors.describe(args['auto_batch'])} must be True or False")
    return args
