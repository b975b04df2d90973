"""MoXing's ``moxing.tensorflow.datasets.raw.raw_dataset``, where its flowers example imports the split helper."""

from moxlite.data.raw_images import AsyncRawGenerator, ImageClassificationRawDataset, ImageClassificationRawMetadata
from moxlite.data.split_dataset import split_image_classification_dataset

__all__ = ["AsyncRawGenerator", "ImageClassificationRawDataset", "ImageClassificationRawMetadata",
           "split_image_classification_dataset"]
