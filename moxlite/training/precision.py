"""Mixed precision, loss scaling and gradient clipping, from MoXing's flags.

``use_fp16`` computes in float16 with float32 variables (Keras's
``mixed_float16`` policy, in force for the duration of the run). ``loss_scale``
multiplies the loss before differentiation and divides the gradients after,
through Keras's ``LossScaleOptimizer`` around the whole optimizer stack:
``dynamic`` adapts the scale (halving it and skipping the step on overflow,
doubling it after 2,000 clean steps); a number starts there and only ever
halves. fp16 without an explicit ``loss_scale`` gets ``dynamic``, as Keras's
``fit`` does. ``gradient_clip`` is applied by the training step, see
``steps.TrainStep``.
"""

import contextlib
import dataclasses
from typing import Optional, Union

import keras

from moxlite import errors, flags

# A fixed loss scale never grows: its growth interval is longer than any run.
_NEVER = 2**31 - 1


@dataclasses.dataclass
class PrecisionSettings:
    use_fp16: bool = False
    loss_scale: Optional[Union[str, float]] = None   # None, "dynamic" or a positive number
    gradient_clip: float = 0.0
    gradient_clip_type: str = "global_norm"


def from_flags():
    """The precision settings the flags ask for, checked."""
    try:
        loss_scale = flags.parse_loss_scale(flags.get_flag("loss_scale"))
    except ValueError:
        raise errors.ArgumentError(
            f"--loss_scale={flags.get_flag('loss_scale')!r} is not valid; use 0 (off), a positive "
            f"number (a fixed starting scale) or 'dynamic'") from None
    use_fp16 = bool(flags.get_flag("use_fp16"))
    if use_fp16 and loss_scale is None:
        loss_scale = "dynamic"
    clip = flags.get_flag("gradient_clip")
    if clip < 0:
        raise errors.ArgumentError(f"--gradient_clip={clip} is not valid; use 0 (off) or a positive threshold")
    clip_type = flags.get_flag("gradient_clip_type")
    if clip_type not in ("global_norm", "norm"):
        raise errors.ArgumentError(
            f"--gradient_clip_type={clip_type!r} is not valid; use 'global_norm' (all gradients together) "
            f"or 'norm' (each variable's gradient)")
    return PrecisionSettings(use_fp16, loss_scale, clip, clip_type)


@contextlib.contextmanager
def compute_policy(settings):
    """Keras's mixed_float16 policy while the body runs, when fp16 is asked for."""
    if not settings.use_fp16:
        yield
        return
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def with_loss_scaling(optimizer, settings):
    """``optimizer`` wrapped in a LossScaleOptimizer when loss scaling is on."""
    if settings.loss_scale is None:
        return optimizer
    if settings.loss_scale == "dynamic":
        return keras.optimizers.LossScaleOptimizer(optimizer)
    return keras.optimizers.LossScaleOptimizer(
        optimizer, initial_scale=settings.loss_scale, dynamic_growth_steps=_NEVER)
