"""MoXing's ``moxing.tensorflow.datasets.reader.raw_reader`` (the older flowers guide's import path)."""

from moxlite.data.split_dataset import split_image_classification_dataset

__all__ = ["split_image_classification_dataset"]
