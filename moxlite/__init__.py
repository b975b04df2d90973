"""moxlite: MoXing's ``mox.run`` contract on TensorFlow 2 and Keras 3.

    import moxlite as mox
    mox.run(input_fn=..., model_fn=..., optimizer_fn=mox.get_optimizer_fn("momentum", 0.1, momentum=0.9),
            run_mode=mox.ModeKeys.TRAIN, batch_size=64, log_dir="/tmp/run", max_number_of_steps=1000)
"""

from moxlite import errors, file
from moxlite.file import File
from moxlite.contract import ExportKeys, ExportSpec, ModeKeys, ModelSpec
from moxlite.data.augmentation import get_data_augmentation_fn
from moxlite.data.raw_images import AsyncRawGenerator, ImageClassificationRawDataset, ImageClassificationRawMetadata
from moxlite.data.tfrecord_dataset import BaseTFRecordDataset, ImageClassificationTFRecordMetadata
from moxlite.dtype_scope import var_scope
from moxlite.flags import get_flag, set_flag
from moxlite.graph_collections import add_to_collection, get_collection
from moxlite.optimizers import get_optimizer_fn, get_optimizer_wrapper_fn
from moxlite.training.run import run
from moxlite.zoo import NetworkKeys, get_model_fn, get_model_meta

__version__ = "0.1.0"
