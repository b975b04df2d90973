"""MoXing's zoo names and the Keras Applications network each one maps to.

Every entry names the ``keras.applications`` constructor that builds the
feature extractor, its keyword arguments (MobileNet widths), MoXing's default
image size, and how inputs are normalised (the ``preprocess_input`` mode of
that Keras module, which pretrained Keras weights expect). How each network
differs from MoXing's TF-slim original is in the zoo table of docs/guide/porting.md.
"""

import collections
import dataclasses
from typing import Dict

from moxlite import errors

# Normalisation modes of keras.applications' preprocess_input.
CAFFE = "caffe"   # RGB -> BGR, minus the ImageNet channel means (0..255 scale)
TF = "tf"         # x / 127.5 - 1
TORCH = "torch"   # x / 255, minus mean, over std (per RGB channel)


@dataclasses.dataclass(frozen=True)
class ZooEntry:
    keras_name: str          # attribute of keras.applications
    image_size: int          # MoXing's default_image_size
    preprocessing: str       # CAFFE, TF or TORCH
    family: str              # geometric augmentation style: "vgg" or "inception"
    keras_kwargs: tuple = ()  # extra constructor arguments, as (name, value) pairs
    flatten_top: bool = False  # VGG: fc1/fc2 on the flattened feature map, as Keras's include_top

    @property
    def kwargs(self) -> Dict:
        return dict(self.keras_kwargs)


def _mobilenet(alpha, version):
    return ZooEntry("MobileNet" if version == 1 else "MobileNetV2", 224, TF, "inception", (("alpha", alpha),))


CATALOG = {
    "resnet_v1_50": ZooEntry("ResNet50", 224, CAFFE, "vgg"),
    "resnet_v1_101": ZooEntry("ResNet101", 224, CAFFE, "vgg"),
    "resnet_v1_152": ZooEntry("ResNet152", 224, CAFFE, "vgg"),
    "resnet_v2_50": ZooEntry("ResNet50V2", 224, TF, "inception"),
    "resnet_v2_101": ZooEntry("ResNet101V2", 224, TF, "inception"),
    "resnet_v2_152": ZooEntry("ResNet152V2", 224, TF, "inception"),
    "inception_v3": ZooEntry("InceptionV3", 299, TF, "inception"),
    "inception_resnet_v2": ZooEntry("InceptionResNetV2", 299, TF, "inception"),
    "mobilenet_v1": _mobilenet(1.0, 1),
    "mobilenet_v1_075": _mobilenet(0.75, 1),
    "mobilenet_v1_050": _mobilenet(0.5, 1),
    "mobilenet_v1_025": _mobilenet(0.25, 1),
    "mobilenet_v2": _mobilenet(1.0, 2),
    "mobilenet_v2_140": _mobilenet(1.4, 2),
    "mobilenet_v2_035": _mobilenet(0.35, 2),
    "vgg_16": ZooEntry("VGG16", 224, CAFFE, "vgg", flatten_top=True),
    "vgg_19": ZooEntry("VGG19", 224, CAFFE, "vgg", flatten_top=True),
    "nasnet_mobile": ZooEntry("NASNetMobile", 224, TF, "inception"),
    "nasnet_large": ZooEntry("NASNetLarge", 331, TF, "inception"),
}

# MoXing names with no Keras Applications counterpart.
NOT_MAPPED = ("alexnet_v2", "cifarnet", "inception_v1", "inception_v2", "inception_v4", "lenet",
              "resnet_v1_18", "resnet_v1_20", "resnet_v1_50_8k", "resnet_v1_110", "resnet_v1_200",
              "resnet_v2_200", "resnext_b_50", "resnext_b_101", "resnext_c_50", "resnext_c_101", "pvanet",
              "overfeat", "nasnet_cifar", "pnasnet_large", "pnasnet_mobile")

DEFAULT_LOGITS_PATTERN = "logits"

ModelMeta = collections.namedtuple(
    "ModelMeta", ["default_image_size", "default_labels_offset", "default_logits_pattern", "keras_application"])


class NetworkKeys:
    """MoXing's ``mox.NetworkKeys``: the zoo names moxlite builds, as constants."""


for _name in CATALOG:
    setattr(NetworkKeys, _name.upper(), _name)


def entry(name, what="get_model_fn"):
    """The catalog entry of ``name``, or a one-line error listing the names that work."""
    key = name.lower() if isinstance(name, str) else name
    if key in CATALOG:
        return CATALOG[key]
    if key in NOT_MAPPED:
        raise errors.ArgumentError(
            f"{what}: {name!r} is a MoXing network with no Keras Applications counterpart, so moxlite does "
            f"not build it; pick one of {', '.join(CATALOG)} or build the network in model_fn")
    raise errors.ArgumentError(f"{what}: unknown network {errors.describe(name)}; use one of {', '.join(CATALOG)}")


def get_model_meta(name):
    """MoXing's model meta: default image size, labels offset and the logits variables' pattern.

    default_labels_offset is 1 for every network: the Keras Applications classify the 1,000
    ImageNet classes without slim's background class 0.
    """
    found = entry(name, "get_model_meta")
    return ModelMeta(default_image_size=found.image_size, default_labels_offset=1,
                     default_logits_pattern=DEFAULT_LOGITS_PATTERN,
                     keras_application=f"keras.applications.{found.keras_name}")
