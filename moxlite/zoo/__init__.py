"""MoXing's model zoo on Keras Applications: ``get_model_fn``, ``get_model_meta``, ``NetworkKeys``."""

from moxlite.zoo.catalog import CATALOG, ModelMeta, NetworkKeys, get_model_meta
from moxlite.zoo.network import get_model_fn

__all__ = ["CATALOG", "ModelMeta", "NetworkKeys", "get_model_fn", "get_model_meta"]
