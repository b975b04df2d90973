"""The wrappers moxlite offers, in one table, and the factory that stacks them.

The recipe layer lists them (``WRAPPER_NAMES``, ``wrapper_parameters``) for
``--help-recipe`` and validation, and ``describe_stack`` prints a built stack
for ``--dry-run``.
"""

from moxlite import errors
from moxlite.optimizers import pipeline, step_trace, tf1_adapter, wrapper as wrapper_lib
from moxlite.optimizers import recipe_tables
from moxlite.optimizers.batch_gradients import BatchGradients
from moxlite.optimizers.lars import LARS
from moxlite.optimizers.thor.preconditioner import THOR

# The classes of the wrappers the catalog lists (a test checks they are the same set).
WRAPPERS = {cls.NAME: cls for cls in (BatchGradients, LARS, THOR)}
WRAPPER_NAMES = recipe_tables.WRAPPER_NAMES


def wrapper_class(name):
    if name not in WRAPPERS:
        raise errors.OptimizerError(
            f"optimizer wrapper {errors.describe(name)} is unknown; valid wrappers: {', '.join(WRAPPER_NAMES)}")
    return WRAPPERS[name]


def wrapper_parameters(name):
    """``{parameter: (default, description)}`` of wrapper ``name``; descriptions end with the accepted range."""
    return {key: (parameter.default, f"{parameter.description} ({parameter.accepted})")
            for key, parameter in wrapper_class(name).PARAMETERS.items()}


def get_optimizer_wrapper_fn(name, opt, **kwargs):
    """A zero-argument factory of wrapper ``name`` around ``opt``.

    opt: a Keras 3 optimizer, a wrapper, or a zero-argument factory of either
        (such as another ``get_optimizer_fn`` / ``get_optimizer_wrapper_fn``
        result); a factory is called when this factory is.
    kwargs: the wrapper's parameters (see ``wrapper_parameters(name)``),
        checked now so that a mistake fails before the run starts.
    """
    cls = wrapper_class(name)
    cls.validate_parameters(kwargs)
    if not (wrapper_lib.is_optimizer(opt) or callable(opt) or tf1_adapter.is_tf1_optimizer(opt)
            or isinstance(opt, step_trace.StandIn)):
        raise errors.OptimizerTypeError(
            f"{name}: expected a Keras 3 optimizer or a zero-argument factory of one to wrap, "
            f"got {type(opt).__name__}: {errors.describe(opt)}")

    def wrapper_fn():
        built = not callable(opt) or wrapper_lib.is_optimizer(opt) or tf1_adapter.is_tf1_optimizer(opt)
        inner = opt if built else opt()
        if step_trace.tracing():   # optimizer_fn traced as a function of the step: the inner sites record
            tf1_adapter.as_keras_optimizer(inner)
            return step_trace.STAND_IN
        return cls(inner, **kwargs)

    return wrapper_fn


def _short(value):
    """Floats to 6 significant digits (float32 learning rates read back as 0.10000000149...)."""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict) and "class_name" in value:
        return value["class_name"]
    return repr(value)


def describe_stack(optimizer):
    """The stack, outermost first, one line each: wrappers with their parameters, then the Keras optimizer."""
    links, base = pipeline.links_of(optimizer)
    config = base.get_config()
    shown = {key: config[key] for key in ("learning_rate", "momentum", "nesterov", "beta_1", "beta_2",
                                          "epsilon", "rho", "weight_decay") if config.get(key) is not None}
    arguments = ", ".join(f"{key}={_short(value)}" for key, value in shown.items())
    return [link.describe() for link in links] + [f"{type(base).__name__}({arguments})"]
