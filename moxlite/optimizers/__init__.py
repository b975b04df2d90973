"""Optimizers: the factory, learning-rate schedules and stackable wrappers.

    optimizer_fn = get_optimizer_fn("momentum", "5:0.1->0.4,10:0.4", momentum=0.9)
    optimizer_fn = get_optimizer_wrapper_fn("lars", optimizer_fn, ratio=0.001)
    optimizer_fn = get_optimizer_wrapper_fn("batch_gradients", optimizer_fn, num_batches=8)

The face is lazy (PEP 562), like ``moxlite``'s: each name below is imported on
first use, so ``moxlite.optimizers.recipe_tables`` (the names and parameters a recipe
may use) is read without importing TensorFlow.
"""

import importlib
import importlib.util

# name -> the module that defines it.
_EXPORTS = {
    "OPTIMIZER_NAMES": "named_optimizers", "get_optimizer_fn": "named_optimizers",
    "WRAPPER_NAMES": "wrapper_stack", "describe_stack": "wrapper_stack", "get_optimizer_wrapper_fn": "wrapper_stack",
    "wrapper_parameters": "wrapper_stack",
    "current_learning_rate": "schedules",
    "LayerStatisticsRequest": "wrapper", "OptimizerWrapper": "wrapper", "is_optimizer": "wrapper",
    "Pipeline": "pipeline", "StepInputs": "pipeline",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f"{__name__}.{name}")   # a submodule (optimizers.wrapper, ...)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
