"""Built-in models as MoXing model_fn's: mlp, lenet, resnet50, small_resnet, swin_tiny, vit_tiny,
and BERT pre-training (bert_tiny, bert_base, bert_large; moxlite.models.bert).

    model_fn = moxlite.models.build_model_fn("lenet", num_classes=10, filters=[32, 64])
    model_fn = moxlite.models.build_bert_model_fn("bert_tiny", vocabulary_size=1000)

The network takes its input shape from the first batch model_fn receives. The options each
model takes are declared in ``moxlite.models.options`` (read by these functions and by the
recipe schema); importing this package, or that module, imports no TensorFlow.
"""

import dataclasses

from moxlite import errors
from moxlite.declarations import check_values, did_you_mean
from moxlite.models import options as model_options


def __getattr__(name):
    """``NETWORKS`` and ``classifier_model_fn``, imported (with TensorFlow) on first use."""
    if name == "NETWORKS":
        from moxlite.models.networks import NETWORKS

        return NETWORKS
    if name == "classifier_model_fn":
        from moxlite.models.classifier import classifier_model_fn

        return classifier_model_fn
    raise AttributeError(f"module 'moxlite.models' has no attribute {name!r}")


def _checked_options_class(name, arguments, options):
    """The options dataclass of model ``name``, once ``arguments`` (keys of ClassifierArguments such
    as weight_decay) and the network's ``options`` pass their declared ranges and rules.

    An unknown option (with the closest accepted name) or a value out of range is an
    ArgumentError naming it, as the recipe loader would say it.
    """
    options_class = model_options.OPTIONS[name]
    accepted = [field.name for field in dataclasses.fields(options_class)]
    for key in options:
        if key not in accepted:
            raise errors.ArgumentError(f"{name}: unknown option {key!r}{did_you_mean(key, accepted)}; "
                                       f"accepted: {', '.join(accepted)}")
    found = check_values(model_options.ClassifierArguments, arguments) or check_values(options_class, options)
    if found:
        raise errors.ArgumentError(f"{name}: {found[0]}={found[1]}")
    return options_class


def build_model_fn(name, num_classes, weight_decay=0.0, label_smoothing=0.0, allow_single_class=False, **options):
    """model_fn(inputs, mode) of built-in network ``name`` with its ``options`` (see moxlite.models.networks).

    Arguments and options are checked now against their declaration
    (moxlite.models.options: each key's range and the rules across keys), so a mistake is
    an ArgumentError naming it before the run starts; the rules about the image (patch
    size, Swin's windows) are checked when the first batch gives the image shape, before
    the network is built. ``allow_single_class`` accepts ``num_classes=1``, for a data set that
    says one class is meant (its own ``allow_single_class``).
    """
    from moxlite.models.classifier import classifier_model_fn
    from moxlite.models.networks import NETWORKS

    if name not in NETWORKS:
        bert_hint = " (a BERT: use build_bert_model_fn)" if name.startswith("bert_") else ""
        raise errors.ArgumentError(f"model {name!r} is not built in{bert_hint}; choose one of {', '.join(NETWORKS)}")
    arguments = {"weight_decay": weight_decay, "label_smoothing": label_smoothing}
    if not (allow_single_class and num_classes == 1):
        arguments["num_classes"] = num_classes
    options_class = _checked_options_class(name, arguments, options)
    builder = NETWORKS[name]

    def build_network(image_shape):
        problem = check_values(options_class, options, list(image_shape))
        if problem:
            raise errors.ArgumentError(f"{name}: {problem[0]}={problem[1]}")
        return builder(image_shape, num_classes, **options)

    return classifier_model_fn(build_network, weight_decay, label_smoothing=label_smoothing)


def build_bert_model_fn(name, weight_decay=0.0, **options):
    """model_fn of built-in BERT ``name`` (bert_tiny, bert_base, bert_large) with its ``options``.

    Options (vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim,
    max_sequence_length, dropout) are checked against their declaration now,
    so a mistake is an ArgumentError naming it before the run starts.
    """
    from moxlite.models import bert

    if name not in bert.MODEL_NAMES:
        raise errors.ArgumentError(f"model {name!r} is not a built-in BERT; choose one of {', '.join(bert.MODEL_NAMES)}")
    _checked_options_class(name, {"weight_decay": weight_decay}, options)
    return bert.bert_model_fn(bert.MODEL_NAMES[name], weight_decay=weight_decay, **options)


__all__ = ["NETWORKS", "build_bert_model_fn", "build_model_fn", "classifier_model_fn"]
