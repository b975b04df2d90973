"""MoXing's ``moxing.tensorflow.preprocessing``: ``get_data_augmentation_fn`` under its documented path."""

from moxlite.data.zoo_preprocessing import get_data_augmentation_fn

__all__ = ["get_data_augmentation_fn"]
