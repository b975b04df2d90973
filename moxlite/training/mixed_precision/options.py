"""The mixed-precision, loss-scaling and gradient-clipping settings, declared once: each key's type,
default, range and help, and the rules across them.

A recipe's ``precision`` section is this block; MoXing's flags of the same names are read into it
(``moxlite.training.mixed_precision.settings.from_values`` checks them against it), so a flag and a
recipe key accept the same values and say the same when refused.

Nothing here imports TensorFlow until keep_fp32 names a layer (``keep_fp32_names``).
"""

import dataclasses
import functools
from typing import List, Optional, Union

from moxlite import ranges
from moxlite.declarations import Rule, nearest, setting, with_rules
from moxlite.optimizers.recipe_tables import CLIP_TYPES

AMP_LEVELS = ("", "O0", "O1", "O2", "O3")
COMPUTE_DTYPES = ("float16", "bfloat16")


def _fp16_with_float32_level(values, image_shape):
    if values["use_fp16"] and str(values["amp_level"]).strip().upper() == "O0":
        return ("True asks for float16 but amp_level O0 for float32; drop one of them "
                "(use_fp16 is an alias of amp_level O3 with compute_dtype float16)")
    if values["use_fp16"] and values["compute_dtype"] != "float16":
        return (f"True asks for float16 but compute_dtype is {values['compute_dtype']!r}; use amp_level with "
                f"compute_dtype {values['compute_dtype']!r} instead of use_fp16")
    return None


def _no_drop_needs_fixed_scale(values, image_shape):
    if values["drop_overflow_update"] or not _is_loss_scale(values["loss_scale"]):
        return None
    from moxlite import flags

    scale = flags.parse_loss_scale(values["loss_scale"])
    if scale is None or str(scale).startswith("dynamic"):
        return (f"False needs a fixed loss_scale (a number); with loss_scale {values['loss_scale']!r} "
                f"overflowing steps are always dropped")
    return None


@functools.lru_cache(maxsize=None)
def keep_fp32_names():
    """The names keep_fp32 accepts: Keras's layer classes, read from ``keras.layers`` itself (so a
    recipe that names one imports Keras, and TensorFlow, while it is checked, still before anything
    is written), but the base ``Layer``, which would keep the whole network in float32; and "GELU",
    an Activation layer computing GELU (moxlite.training.mixed_precision.levels)."""
    import keras

    layers = sorted(name for name, value in vars(keras.layers).items()
                    if isinstance(value, type) and issubclass(value, keras.layers.Layer) and name != "Layer")
    return tuple(layers) + ("GELU",)


def nearest_layer_name(name):
    """The name keep_fp32 accepts nearest to ``name`` (a prefix match first: 'Layernorm'), or None."""
    return nearest(str(name).strip(), keep_fp32_names(), prefix_first=True, ignore_case=True)


def _is_loss_scale(value):
    from moxlite import flags   # the one reading of the value (recipes and the --loss_scale flag)

    try:
        flags.parse_loss_scale(value)
    except ValueError:
        return False
    return True


@with_rules(Rule("use_fp16", _fp16_with_float32_level), Rule("drop_overflow_update", _no_drop_needs_fixed_scale))
@dataclasses.dataclass(kw_only=True)
class PrecisionOptions:
    """Numeric precision and gradient clipping flags."""

    amp_level: str = setting("", "O0 float32, O1 mixed with the keep_fp32 list, O2 all but BatchNorm, O3 all ('' is O0, or O3 with use_fp16).", AMP_LEVELS)
    compute_dtype: str = setting("float16", "Compute dtype of O1-O3; bfloat16 needs no loss scaling.", COMPUTE_DTYPES)
    keep_fp32: Optional[List[str]] = setting(None, "Keras layer classes computed in float32 (null: the level's list; O1's is Softmax, LayerNormalization, BatchNormalization, GroupNormalization, GELU).",
                                             valid=ranges.names_in(keep_fp32_names, "Keras layer class names (or GELU)",
                                                                   "a Keras layer class name", nearest_layer_name))
    keep_batchnorm_fp32: Optional[bool] = setting(None, "Keep BatchNormalization in float32 (null: the level's default, O2 true, O3 false).")
    use_fp16: bool = setting(False, "Alias of amp_level O3 with compute_dtype float16.")
    loss_scale: Union[float, str] = setting(0, "0 (off; dynamic with float16), a fixed number that never changes, or 'dynamic'.",
                                            valid=ranges.Range("0 (off), a finite number > 0, 'dynamic' or "
                                                               "'dynamic:<start>' (start > 0)", _is_loss_scale))
    drop_overflow_update: bool = setting(True, "Skip a step whose gradients overflow; false (fixed scale only) applies it.")
    gradient_clip: float = setting(0.0, "Clip threshold; 0 disables clipping.", valid=ranges.number(minimum=0))
    gradient_clip_type: str = setting("global_norm", "How gradients are clipped.", CLIP_TYPES)
