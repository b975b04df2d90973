"""Built-in models as MoXing model_fn's: mlp, lenet, resnet50, small_resnet, swin_tiny, vit_tiny.

    model_fn = moxlite.models.build_model_fn("lenet", num_classes=10, filters=[32, 64])

The network takes its input shape from the first batch model_fn receives.
"""

from moxlite import errors
from moxlite.models.classifier import classifier_model_fn
from moxlite.models.networks import NETWORKS


def build_model_fn(name, num_classes, weight_decay=0.0, label_smoothing=0.0, **options):
    """model_fn(inputs, mode) of built-in network ``name`` with its ``options`` (see moxlite.models.networks)."""
    if name not in NETWORKS:
        raise errors.ArgumentError(f"model {name!r} is not built in; choose one of {', '.join(NETWORKS)}")
    builder = NETWORKS[name]
    return classifier_model_fn(lambda image_shape: builder(image_shape, num_classes, **options), weight_decay,
                               label_smoothing=label_smoothing)


__all__ = ["NETWORKS", "build_model_fn", "classifier_model_fn"]
