"""MoXing's ``moxing.tensorflow.executor``: the names its API documentation qualifies with this path."""

from moxlite.contract import ExportSpec, ModeKeys, ModelSpec
from moxlite.dtype_scope import var_scope
from moxlite.flags import get_flag, set_flag
from moxlite.graph_collections import get_collection
from moxlite.training.hooks import EarlyStoppingHook
from moxlite.training.run import run

__all__ = ["EarlyStoppingHook", "ExportSpec", "ModeKeys", "ModelSpec", "get_collection", "get_flag", "run",
           "set_flag", "var_scope"]
