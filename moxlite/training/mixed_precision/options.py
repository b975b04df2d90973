"""The mixed-precision, loss-scaling and gradient-clipping settings, declared once: each key's type,
default, range and help, and the rules across them.

A recipe's ``precision`` section is this block; MoXing's flags of the same names are read into it
(``moxlite.training.mixed_precision.settings.from_values`` checks them against it), so a flag and a
recipe key accept the same values and say the same when refused.

Nothing here imports TensorFlow.
"""

import dataclasses
from typing import List, Optional, Union

from moxlite import ranges
from moxlite.declarations import Rule, nearest, setting, with_rules

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


# Keras 3.15's layer classes (keras.layers), for precision.keep_fp32 without importing Keras;
# tests/test_catalog.py compares the list with keras.layers. "Layer" itself is left out: it is
# the base of every layer, so keeping it would keep the whole network in float32. "GELU" names
# an Activation layer computing GELU (moxlite.training.mixed_precision.levels).
KERAS_LAYER_NAMES = (
    "Activation", "ActivityRegularization", "AdaptiveAveragePooling1D", "AdaptiveAveragePooling2D",
    "AdaptiveAveragePooling3D", "AdaptiveMaxPooling1D", "AdaptiveMaxPooling2D", "AdaptiveMaxPooling3D", "Add",
    "AdditiveAttention", "AlphaDropout", "Attention", "AugMix", "AutoContrast", "Average", "AveragePooling1D",
    "AveragePooling2D", "AveragePooling3D", "AvgPool1D", "AvgPool2D", "AvgPool3D", "BatchNormalization",
    "Bidirectional", "CategoryEncoding", "CenterCrop", "Concatenate", "ContrastLimitedAdaptiveHistogramEqualization",
    "Conv1D", "Conv1DTranspose", "Conv2D", "Conv2DTranspose", "Conv3D", "Conv3DTranspose", "ConvLSTM1D",
    "ConvLSTM2D", "ConvLSTM3D", "Convolution1D", "Convolution1DTranspose", "Convolution2D",
    "Convolution2DTranspose", "Convolution3D", "Convolution3DTranspose", "Cropping1D", "Cropping2D", "Cropping3D",
    "CutMix", "Dense", "DepthwiseConv1D", "DepthwiseConv2D", "Discretization", "Dot", "Dropout", "ELU",
    "EinsumDense", "Embedding", "Equalization", "Flatten", "FlaxLayer", "GRU", "GRUCell", "GaussianDropout",
    "GaussianNoise", "GlobalAveragePooling1D", "GlobalAveragePooling2D", "GlobalAveragePooling3D",
    "GlobalAvgPool1D", "GlobalAvgPool2D", "GlobalAvgPool3D", "GlobalMaxPool1D", "GlobalMaxPool2D",
    "GlobalMaxPool3D", "GlobalMaxPooling1D", "GlobalMaxPooling2D", "GlobalMaxPooling3D", "GroupNormalization",
    "GroupQueryAttention", "HashedCrossing", "Hashing", "Identity", "InputLayer", "IntegerLookup", "JaxLayer",
    "LSTM", "LSTMCell", "Lambda", "LayerNormalization", "LeakyReLU", "Masking", "MaxNumBoundingBoxes",
    "MaxPool1D", "MaxPool2D", "MaxPool3D", "MaxPooling1D", "MaxPooling2D", "MaxPooling3D", "Maximum",
    "MelSpectrogram", "Minimum", "MixUp", "MultiHeadAttention", "Multiply", "Normalization", "PReLU", "Permute",
    "Pipeline", "RMSNormalization", "RNN", "RandAugment", "RandomBrightness", "RandomColorDegeneration",
    "RandomColorJitter", "RandomContrast", "RandomCrop", "RandomElasticTransform", "RandomErasing", "RandomFlip",
    "RandomGaussianBlur", "RandomGrayscale", "RandomHue", "RandomInvert", "RandomPerspective",
    "RandomPosterization", "RandomRotation", "RandomSaturation", "RandomSharpness", "RandomShear",
    "RandomTranslation", "RandomZoom", "ReLU", "RepeatVector", "Rescaling", "Reshape", "Resizing",
    "ReversibleEmbedding", "STFTSpectrogram", "SeparableConv1D", "SeparableConv2D", "SeparableConvolution1D",
    "SeparableConvolution2D", "SimpleRNN", "SimpleRNNCell", "Softmax", "Solarization", "SpatialDropout1D",
    "SpatialDropout2D", "SpatialDropout3D", "SpectralNormalization", "StackedRNNCells", "StringLookup",
    "Subtract", "TFSMLayer", "TextVectorization", "TimeDistributed", "TorchModuleWrapper", "UnitNormalization",
    "UpSampling1D", "UpSampling2D", "UpSampling3D", "Wrapper", "ZeroPadding1D", "ZeroPadding2D", "ZeroPadding3D",
)
KEEP_FP32_NAMES = KERAS_LAYER_NAMES + ("GELU",)


def nearest_layer_name(name):
    """The name of KEEP_FP32_NAMES nearest to ``name`` (a prefix match first: 'Layernorm'), or None."""
    return nearest(str(name).strip(), KEEP_FP32_NAMES, prefix_first=True, ignore_case=True)


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
                                             valid=ranges.names_in(KEEP_FP32_NAMES, "Keras layer class names (or GELU)",
                                                                   "a Keras layer class name", nearest_layer_name))
    keep_batchnorm_fp32: Optional[bool] = setting(None, "Keep BatchNormalization in float32 (null: the level's default, O2 true, O3 false).")
    use_fp16: bool = setting(False, "Alias of amp_level O3 with compute_dtype float16.")
    loss_scale: Union[float, str] = setting(0, "0 (off; dynamic with float16), a fixed number that never changes, or 'dynamic'.",
                                            valid=ranges.Range("0 (off), a finite number > 0, 'dynamic' or "
                                                               "'dynamic:<start>' (start > 0)", _is_loss_scale))
    drop_overflow_update: bool = setting(True, "Skip a step whose gradients overflow; false (fixed scale only) applies it.")
    gradient_clip: float = setting(0.0, "Clip threshold; 0 disables clipping.", valid=ranges.number(minimum=0))
    gradient_clip_type: str = setting("global_norm", "How gradients are clipped.", ("global_norm", "norm"))
