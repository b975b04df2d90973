"""Built-in models as MoXing model_fn's: mlp, lenet, resnet50, small_resnet.

    model_fn = moxlite.models.build_model_fn("lenet", image_shape=(28, 28, 1), num_classes=10)
"""

from moxlite import errors
from moxlite.models.classifier import classifier_model_fn
from moxlite.models.networks import NETWORKS


def build_model_fn(name, image_shape, num_classes, weight_decay=0.0, **options):
    """model_fn(inputs, mode) of built-in network ``name`` with its ``options``."""
    if name not in NETWORKS:
        raise errors.ArgumentError(f"model {name!r} is not built in; choose one of {', '.join(NETWORKS)}")
    builder = NETWORKS[name]
    return classifier_model_fn(lambda: builder(tuple(image_shape), num_classes, **options), weight_decay)


__all__ = ["NETWORKS", "build_model_fn", "classifier_model_fn"]
