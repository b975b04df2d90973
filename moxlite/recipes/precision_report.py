"""``--dry-run``'s table of every layer's compute and variable dtype under the recipe's precision."""

import tensorflow as tf

from moxlite import compat
from moxlite.contract import ModeKeys
from moxlite.training.mixed_precision import levels, settings


def _zeros_like(spec):
    return tf.nest.map_structure(lambda s: tf.zeros((1,) + tuple(s.shape), s.dtype), spec)


def layer_dtype_lines(plan):
    """Lines: the level, then one row per layer of the recipe's model built on one zero sample."""
    precision = settings.from_values({name: plan.settings[name] for name in settings.NAMES})
    level = precision.amp_plan
    header = f"Precision: amp_level {level.level}"
    if level.mixed:
        header += (f", compute {level.compute_dtype}, float32 variables, kept in float32: "
                   f"{', '.join(level.keep_fp32) or 'none'}")
    header += f"; loss scale {precision.loss_scale or 'off'}"
    if precision.gradient_clip:
        header += f"; clip {precision.gradient_clip_type} {precision.gradient_clip:g}"
    input_fn = plan.run_arguments["input_fn"]
    sample = _zeros_like(input_fn(ModeKeys.TRAIN).element_spec)
    model_fn = plan.make_model_fn()
    # The table is read inside the block: the policies are the run's only there.
    with levels.layer_policies(level, record=True):
        model_fn(sample, ModeKeys.TRAIN)
        layers = levels.configured_layers()
        network = getattr(model_fn, "network", None)
        if network is not None and network() is not None:   # a built-in model: every layer, nested ones too
            layers = list(_walk_network(network()))
        table = levels.describe_layers(layers)
    return [header, "Layers (compute dtype, variable dtypes):", *("  " + line for line in table.splitlines())]


def _walk_network(network):
    """A Keras model's layers; a network of several Keras parts (``keras_layers()``: BERT's encoder
    and heads) gives each part, then its layers under its name."""
    if not hasattr(network, "keras_layers"):
        yield from _walk(network)
        return
    for part in network.keras_layers():
        yield _Named(part, part.name)
        yield from _walk(part, part.name + "/")


def _walk(layer, prefix=""):
    """Every sublayer, depth first, each with ``path`` set to its chain of names (for the table)."""
    for child in compat.direct_sublayers(layer):
        name = f"{prefix}{child.name}"
        yield _Named(child, name)
        yield from _walk(child, name + "/")


class _Named:
    """A layer seen under a path of our choosing (Keras gives weightless sublayers a bare name)."""

    def __init__(self, layer, path):
        self._layer, self.path = layer, path

    def __getattr__(self, attribute):
        return getattr(self._layer, attribute)
