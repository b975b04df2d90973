"""MoXing's ``moxing.tensorflow.nets``: the model zoo under its documented path."""

from moxlite.zoo import NetworkKeys, get_model_fn, get_model_meta

__all__ = ["NetworkKeys", "get_model_fn", "get_model_meta"]
