"""Mixed precision, loss scaling and gradient clipping: RunConfig.precision, from MoXing's flags or a recipe.

- ``amp_level`` (O0-O3) and ``compute_dtype`` choose each layer's Keras dtype
  policy, with the fp32 keep-list ``keep_fp32`` / ``keep_batchnorm_fp32``: see
  ``moxlite.training.mixed_precision.levels``. ``use_fp16`` is an alias of O3 in float16, the old
  behaviour (every layer in Keras's ``mixed_float16``).
- ``loss_scale``: ``dynamic`` (``dynamic:<start>`` from another starting scale), a
  fixed number that never changes, or 0 (off; a
  float16 compute dtype then gets ``dynamic``, bfloat16 needs none), with
  ``drop_overflow_update``: see ``moxlite.optimizers.loss_scaling``.
- ``gradient_clip`` / ``gradient_clip_type``: on unscaled gradients, after
  accumulation: see ``moxlite.optimizers.clipping``.

The pipeline the loop uses is ``LossScale(user's stack)`` with a ``GradientClip`` link placed
once by the pipeline's rule: below the loss scaling, the lowest ``batch_gradients`` and ``thor``.
"""

import contextlib
import dataclasses
from typing import Optional, Union

from moxlite import errors, flags, logs, run_settings
from moxlite.optimizers import pipeline
from moxlite.declarations import check_values
from moxlite.training.mixed_precision import levels, options
from moxlite.optimizers import clipping
from moxlite.optimizers import loss_scaling


@dataclasses.dataclass(frozen=True)
class PrecisionSettings:
    use_fp16: bool = False
    loss_scale: Optional[Union[str, float]] = None   # None, "dynamic" or a positive number
    gradient_clip: float = 0.0
    gradient_clip_type: str = "global_norm"
    amp_plan: levels.AmpPlan = dataclasses.field(default_factory=levels.AmpPlan)
    drop_overflow_update: bool = True


# The settings (declared in options.PrecisionOptions) that say how a run computes, scales its loss and clips.
NAMES = tuple(field.name for field in dataclasses.fields(options.PrecisionOptions))


def _loss_scale(value):
    try:
        return flags.parse_loss_scale(value)
    except ValueError as problem:
        raise errors.ArgumentError(f"--loss_scale={value!r} is not valid; {problem}") from None


def _amp_plan(values):
    level = str(values["amp_level"]).strip().upper() or ("O3" if values["use_fp16"] else "O0")
    compute_dtype = str(values["compute_dtype"]).strip().lower()
    keep, keep_batchnorm = values["keep_fp32"], values["keep_batchnorm_fp32"]
    if level == "O0":
        _warn_no_effect_at_o0(values)
    try:
        return levels.plan_for(level, compute_dtype, keep, keep_batchnorm)
    except errors.ArgumentError as error:
        raise errors.ArgumentError(f"--{error}") from None


def _warn_no_effect_at_o0(values):
    """One warning line per fp32 keep setting given at O0, where every layer is float32 already."""
    for name in ("keep_fp32", "keep_batchnorm_fp32"):
        if values[name] is not None:
            logs.get_logger().warning(
                "--%s=%s (a recipe's precision.%s) has no effect at amp_level O0, where every layer computes "
                "in float32; drop it, or set amp_level to O1, O2 or O3", name,
                run_settings.flag_text(name, values[name]), name)


def _check_declared(values):
    """The declared precision ranges and rules (options.PrecisionOptions), on ``values``; the
    keep_fp32 names are levels.check_layer_name's to check (it names each one refused)."""
    declared = dict({name: value for name, value in values.items() if name != "keep_fp32"}, use_fp16=bool(values["use_fp16"]), amp_level=str(values["amp_level"]).strip().upper(),
                    compute_dtype=str(values["compute_dtype"]).strip().lower(),
                    drop_overflow_update=bool(values["drop_overflow_update"]))
    found = check_values(options.PrecisionOptions, declared)
    if found:
        raise errors.ArgumentError(f"--{found[0]}={found[1]}")


def from_values(values):
    """The precision settings ``values`` (every setting of NAMES, by name, in its declared type) ask for, checked.

    A flag's value is in its declared type once read by ``moxlite.run_settings.from_flag``
    (``--keep_fp32=none`` is ``[]``); a recipe's already is.
    """
    _check_declared(values)
    plan = _amp_plan(values)
    loss_scale = _loss_scale(values["loss_scale"])
    if loss_scale is None and plan.mixed and plan.compute_dtype == "float16":
        loss_scale = "dynamic"
    clip_type = values["gradient_clip_type"]
    if clip_type not in clipping.CLIP_TYPES:
        raise errors.ArgumentError(
            f"--gradient_clip_type={clip_type!r} is not valid; use 'global_norm' (all gradients together) "
            f"or 'norm' (each variable's gradient)")
    return PrecisionSettings(plan.mixed and plan.compute_dtype == "float16", loss_scale,
                             float(values["gradient_clip"]), clip_type, plan, bool(values["drop_overflow_update"]))


@contextlib.contextmanager
def compute_policy(settings):
    """The level's dtype policies on every layer model_fn calls, while the body runs."""
    with levels.layer_policies(settings.amp_plan):
        yield


def optimizer_pipeline(optimizer, settings, guard=None):
    """The pipeline of ``optimizer`` under loss scaling, as asked, with the clipping link placed
    by the pipeline's rule (see ``moxlite.optimizers.clipping``) and ``guard`` (the non-finite
    policy's apply-if-finite link, or None) on top unless loss scaling already skips."""
    return pipeline.Pipeline(loss_scaled(optimizer, settings), guard=guard,
                             clip=clipping.clipping_link(settings.gradient_clip, settings.gradient_clip_type))


def loss_scaled(optimizer, settings):
    """``optimizer`` with loss scaling around it, as asked (itself without)."""
    if settings.loss_scale is None:
        return optimizer
    if settings.loss_scale == "dynamic":
        return loss_scaling.LossScale(optimizer)
    if str(settings.loss_scale).startswith("dynamic:"):
        return loss_scaling.LossScale(optimizer, initial_scale=float(settings.loss_scale.split(":")[1]))
    return loss_scaling.LossScale(optimizer, initial_scale=float(settings.loss_scale), dynamic=False,
                                  drop_overflow_update=settings.drop_overflow_update)
