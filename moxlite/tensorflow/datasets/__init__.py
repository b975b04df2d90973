"""MoXing's ``moxing.tensorflow.datasets``: the data-set classes and helpers under their documented path."""

from moxlite.data.dataset_catalog import get_dataset, get_dataset_meta
from moxlite.data.raw_images import AsyncRawGenerator, ImageClassificationRawDataset, ImageClassificationRawMetadata
from moxlite.data.split_dataset import split_image_classification_dataset
from moxlite.data.tfrecord_dataset import (BaseTFRecordDataset, ImageClassificationTFRecordDataset,
                                           ImageClassificationTFRecordMetadata, get_tfrecord)

__all__ = ["AsyncRawGenerator", "BaseTFRecordDataset", "ImageClassificationRawDataset",
           "ImageClassificationRawMetadata", "ImageClassificationTFRecordDataset",
           "ImageClassificationTFRecordMetadata", "get_dataset", "get_dataset_meta", "get_tfrecord",
           "split_image_classification_dataset"]
