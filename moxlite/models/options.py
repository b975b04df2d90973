"""The built-in models' options, declared once: each key's type, default, range and help, and the
rules across keys (a head count that divides the width, a patch that divides the image).

``build_model_fn`` and ``build_bert_model_fn`` check their arguments against these blocks, and the
recipe schema nests them as ``model.<name>`` blocks, so the Python API and a recipe say the same.

Nothing here imports TensorFlow.
"""

import dataclasses
from typing import List, Optional

from moxlite import ranges
from moxlite.declarations import REQUIRED, Rule, setting, with_defaults, with_rules


# ----------------------------------------------------------------- rules across keys

def _heads_divide_embed_dim(values, image_shape):
    if values["embed_dim"] % values["num_heads"]:
        return (f"{values['num_heads']} does not divide embed_dim={values['embed_dim']}; use a divisor of it "
                f"(each head gets embed_dim / num_heads channels)")
    return None


def _patch_divides_image(values, image_shape):
    patch, (height, width) = values["patch_size"], image_shape[:2]
    if height % patch or width % patch:
        return (f"{patch} does not divide the {height}x{width} images; use a patch side that divides both "
                f"(e.g. {_common_divisor_hint(height, width)})")
    return None


def _common_divisor_hint(height, width):
    divisors = [d for d in range(2, min(height, width) + 1) if height % d == 0 and width % d == 0]
    return ", ".join(str(d) for d in divisors[:4]) or "1"


def _stage_lengths_agree(values, image_shape):
    if len(values["depths"]) != len(values["num_heads"]):
        return (f"{values['num_heads']} has {len(values['num_heads'])} stages, depths {values['depths']} has "
                f"{len(values['depths'])}; give one head count per stage")
    return None


def _stage_heads_divide_channels(values, image_shape):
    for stage, heads in enumerate(values["num_heads"]):
        channels = values["embed_dim"] * 2 ** stage
        if channels % heads:
            return (f"{values['num_heads']}: stage {stage} has {channels} channels (embed_dim x 2^{stage}), which "
                    f"{heads} heads do not divide; use a divisor of each stage's channels")
    return None


def _swin_stages(values, image_shape):
    """(stage, token height, token width) of each stage: tokens halve at each patch merging."""
    height, width = image_shape[0] // values["patch_size"], image_shape[1] // values["patch_size"]
    for stage in range(len(values["depths"])):
        yield stage, height, width
        height, width = height // 2, width // 2


def _swin_tokens_merge(values, image_shape):
    last = len(values["depths"]) - 1
    for stage, height, width in _swin_stages(values, image_shape):
        if stage < last and (height % 2 or width % 2):
            side = values["patch_size"] * 2 ** last
            return (f"{values['patch_size']} gives {height}x{width} tokens at stage {stage} of "
                    f"{image_shape[0]}x{image_shape[1]} images, which patch merging cannot halve; use images "
                    f"whose sides are multiples of patch_size x 2^{last} = {side}, or fewer stages")
    return None


def _swin_windows_fit(values, image_shape):
    for stage, height, width in _swin_stages(values, image_shape):
        window = min(values["window_size"], height, width)
        if height % window or width % window:
            return (f"{values['window_size']} does not fit stage {stage}'s {height}x{width} tokens (the window, "
                    f"{window}, must divide both); choose a window_size that divides every stage's tokens")
    return None


def _bert_heads_divide_width(values, image_shape):
    if values["hidden_dim"] % values["num_heads"]:
        return f"{values['num_heads']} does not divide hidden_dim {values['hidden_dim']}; choose heads that divide it"
    return None


# ----------------------------------------------------------------- the options

@dataclasses.dataclass(kw_only=True)
class MlpOptions:
    """A multi-layer perceptron on the flattened image."""

    hidden_units: List[int] = setting([128], "Units of each hidden layer.",
                                      valid=ranges.list_of(ranges.integer(1), min_length=0))
    activation: str = setting("relu", "Activation of the hidden layers (a Keras activation name).")
    dropout: float = setting(0.0, "Dropout rate after each hidden layer.", valid=ranges.fraction())


@dataclasses.dataclass(kw_only=True)
class LenetOptions:
    """A LeNet-style CNN: conv-pool blocks, then a dense layer."""

    filters: List[int] = setting([32, 64], "Filters of each 5x5 convolution (each followed by 2x2 max-pooling).",
                                 valid=ranges.list_of(ranges.integer(1)))
    kernel_size: int = setting(5, "Side of the convolution kernels.", valid=ranges.integer(1))
    dense_units: int = setting(256, "Units of the dense layer before the classifier.", valid=ranges.integer(1))
    dropout: float = setting(0.0, "Dropout rate before the classifier.", valid=ranges.fraction())


@dataclasses.dataclass(kw_only=True)
class Resnet50Options:
    """ResNet-50 from keras.applications, randomly initialised (weights=None)."""

    pooling: str = setting("avg", "Pooling before the classifier.", ("avg", "max"))


@dataclasses.dataclass(kw_only=True)
class SmallResnetOptions:
    """A CIFAR-style ResNet for small (e.g. 32x32) images: depth = 6n + 2 (He et al. 2016)."""

    depth: int = setting(20, "Layers; 6n + 2 (20, 32, 44, 56, 110).",
                         valid=ranges.Range("6n + 2 with n >= 1 (20, 32, 44, 56, 110)",
                                            lambda v: ranges.is_integer(v) and v >= 8 and (v - 2) % 6 == 0,
                                            lambda v: f"{ranges.describe(v)} must be 6n + 2"))
    base_width: int = setting(16, "Filters of the first stage (doubled at each of the three stages).",
                              valid=ranges.integer(1))


@dataclasses.dataclass(kw_only=True)
class VisionTransformerOptions:
    """The options every built-in vision transformer takes; each model states its sizes with with_defaults."""

    # No size defaults here: a model that does not state its own fails when this module is imported.
    patch_size: int = setting(REQUIRED, "Side of the square patches; it divides the image's height and width.",
                              valid=ranges.integer(1))
    mlp_ratio: float = setting(4.0, "MLP width over the channels.", valid=ranges.number(above=0))
    drop_path: float = setting(REQUIRED, "Stochastic-depth rate of the last block (linear from 0).",
                               valid=ranges.fraction())


@with_rules(Rule("num_heads", _stage_lengths_agree), Rule("num_heads", _stage_heads_divide_channels),
            Rule("patch_size", _patch_divides_image, needs_image=True),
            Rule("patch_size", _swin_tokens_merge, needs_image=True),
            Rule("window_size", _swin_windows_fit, needs_image=True))
@dataclasses.dataclass(kw_only=True)
@with_defaults(patch_size=4, drop_path=0.2)
class SwinTinyOptions(VisionTransformerOptions):
    """Swin Transformer, Swin-T sizes by default (moxlite.models.vision_transformers.swin)."""

    embed_dim: int = setting(96, "Channels of the first stage (doubled at each patch merging).",
                             valid=ranges.integer(1))
    depths: List[int] = setting([2, 2, 6, 2], "Blocks per stage.", valid=ranges.list_of(ranges.integer(1)))
    num_heads: List[int] = setting([3, 6, 12, 24], "Attention heads per stage (one per stage; each divides its "
                                   "stage's channels).", valid=ranges.list_of(ranges.integer(1)))
    window_size: int = setting(7, "Side of the attention windows (each stage's tokens must be a multiple of it).",
                               valid=ranges.integer(1))


@with_rules(Rule("num_heads", _heads_divide_embed_dim), Rule("patch_size", _patch_divides_image, needs_image=True))
@dataclasses.dataclass(kw_only=True)
@with_defaults(patch_size=16, drop_path=0.1)
class VitTinyOptions(VisionTransformerOptions):
    """Vision Transformer, ViT-Ti sizes by default (moxlite.models.vision_transformers.vit)."""

    embed_dim: int = setting(192, "Token channels.", valid=ranges.integer(1))
    depth: int = setting(12, "Transformer blocks.", valid=ranges.integer(1))
    num_heads: int = setting(3, "Attention heads (they divide embed_dim).", valid=ranges.integer(1))


@dataclasses.dataclass(kw_only=True)
class BertOptions:
    """The options of every built-in BERT (moxlite.models.bert); each size states its own with with_defaults."""

    # No size defaults here: a size that does not state its own fails when this module is imported.
    vocabulary_size: Optional[int] = setting(REQUIRED, "Tokens in the vocabulary; null takes the data set's.",
                                             valid=ranges.integer(1))
    num_layers: int = setting(REQUIRED, "Transformer layers of the encoder.", valid=ranges.integer(1))
    num_heads: int = setting(REQUIRED, "Attention heads (they divide hidden_dim).", valid=ranges.integer(1))
    hidden_dim: int = setting(REQUIRED, "Width of the encoder.", valid=ranges.integer(1))
    intermediate_dim: int = setting(REQUIRED, "Width of the feed-forward layers.", valid=ranges.integer(1))
    max_sequence_length: int = setting(REQUIRED, "Longest sequence (position embeddings); the data's sequence "
                                       "length may not exceed it.", valid=ranges.integer(1))
    dropout: float = setting(0.1, "Dropout rate of the encoder (BERT's 0.1).", valid=ranges.fraction())


@with_rules(Rule("num_heads", _bert_heads_divide_width))
@dataclasses.dataclass(kw_only=True)
@with_defaults(vocabulary_size=None, num_layers=2, num_heads=2, hidden_dim=64, intermediate_dim=256,
               max_sequence_length=128)
class BertTinyOptions(BertOptions):
    """A 2-layer BERT (hidden 64, 2 heads), for tests and the bundled corpus."""


@with_rules(Rule("num_heads", _bert_heads_divide_width))
@dataclasses.dataclass(kw_only=True)
@with_defaults(vocabulary_size=30522, num_layers=12, num_heads=12, hidden_dim=768, intermediate_dim=3072,
               max_sequence_length=512)
class BertBaseOptions(BertOptions):
    """BERT-base (Devlin et al. 2018): 12 layers, hidden 768, 12 heads, 110M parameters."""


@with_rules(Rule("num_heads", _bert_heads_divide_width))
@dataclasses.dataclass(kw_only=True)
@with_defaults(vocabulary_size=30522, num_layers=24, num_heads=16, hidden_dim=1024, intermediate_dim=4096,
               max_sequence_length=512)
class BertLargeOptions(BertOptions):
    """BERT-large (Devlin et al. 2018): 24 layers, hidden 1024, 16 heads, 340M parameters."""


@dataclasses.dataclass(kw_only=True)
class ClassifierArguments:
    """The arguments every built-in classifier takes beside its network's options."""

    num_classes: Optional[int] = setting(None, "Classes of a built-in classifier; null takes the data set's "
                                         "(BERT models have none).",
                                         valid=ranges.integer(2))
    weight_decay: float = setting(0.0, "L2 penalty on the kernels of a built-in model, added to the loss.",
                                  valid=ranges.number(minimum=0))
    label_smoothing: float = setting(0.0, "Label smoothing of a built-in model's cross-entropy.",
                                     valid=ranges.fraction())


# Built-in model name -> its options block (the recipe's model.<name>).
OPTIONS = {"mlp": MlpOptions, "lenet": LenetOptions, "resnet50": Resnet50Options, "small_resnet": SmallResnetOptions,
           "swin_tiny": SwinTinyOptions, "vit_tiny": VitTinyOptions, "bert_tiny": BertTinyOptions,
           "bert_base": BertBaseOptions, "bert_large": BertLargeOptions}
MODEL_NAMES = tuple(OPTIONS)
# The built-in models that read images (a text data set gives them none).
IMAGE_MODEL_NAMES = ("mlp", "lenet", "resnet50", "small_resnet", "swin_tiny", "vit_tiny")
BERT_MODEL_NAMES = ("bert_tiny", "bert_base", "bert_large")   # masked-LM pre-training: no num_classes
