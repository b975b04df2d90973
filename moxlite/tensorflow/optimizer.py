"""MoXing's ``moxing.tensorflow.optimizer``: ``learning_rate_scheduler`` and the optimizer factories."""

from moxlite.optimizer import learning_rate_scheduler
from moxlite.optimizers import get_optimizer_fn, get_optimizer_wrapper_fn

__all__ = ["get_optimizer_fn", "get_optimizer_wrapper_fn", "learning_rate_scheduler"]
