"""Optimizers: the factory, learning-rate schedules and stackable wrappers.

    optimizer_fn = get_optimizer_fn("momentum", "5:0.1->0.4,10:0.4", momentum=0.9)
    optimizer_fn = get_optimizer_wrapper_fn("lars", optimizer_fn, ratio=0.001)
    optimizer_fn = get_optimizer_wrapper_fn("batch_gradients", optimizer_fn, num_batches=8)
"""

from moxlite.optimizers.factory import OPTIMIZER_NAMES, get_optimizer_fn
from moxlite.optimizers.registry import (
    WRAPPER_NAMES, describe_stack, get_optimizer_wrapper_fn, wrapper_parameters)
from moxlite.optimizers.schedules import current_learning_rate
from moxlite.optimizers.wrapper import (
    LayerStatisticsRequest, OptimizerWrapper, is_optimizer, layer_statistics_request)
