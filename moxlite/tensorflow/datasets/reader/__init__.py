"""MoXing's ``moxing.tensorflow.datasets.reader`` (older docs): ``raw_reader.split_image_classification_dataset``."""
