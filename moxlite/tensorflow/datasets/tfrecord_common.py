"""MoXing's ``moxing.tensorflow.datasets.tfrecord_common``: the TFRecord classes under their documented path."""

from moxlite.data.tfrecord_dataset import (BaseTFRecordDataset, ImageClassificationTFRecordDataset,
                                           ImageClassificationTFRecordMetadata, get_tfrecord)

__all__ = ["BaseTFRecordDataset", "ImageClassificationTFRecordDataset", "ImageClassificationTFRecordMetadata",
           "get_tfrecord"]
