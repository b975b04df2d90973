"""moxlite: MoXing's ``mox.run`` contract on TensorFlow 2 and Keras 3.

    import moxlite as mox
    mox.run(input_fn=..., model_fn=..., optimizer_fn=mox.get_optimizer_fn("momentum", 0.1, momentum=0.9),
            run_mode=mox.ModeKeys.TRAIN, batch_size=64, log_dir="/tmp/run", max_number_of_steps=1000)

The package face is lazy (PEP 562): ``import moxlite`` imports no TensorFlow,
and each public name is imported on first use. This keeps ``moxlite-run
--help``, ``--help-recipe`` and the rejection of a bad recipe free of
TensorFlow's start-up (seconds). tests/package/test_lazy_import.py holds that promise.

To export a name, add one line to ``_EXPORTS``: the name, then where it lives,
as ``"package.module:attribute"`` for an object or ``"package.module"`` for a
module (``mox.file``, ``mox.errors``). Do not import it at the top of this file.
"""

import importlib
import importlib.util

# MoXing defines its flags (--num_gpus, --batch_size, ...) on import, so scripts can parse
# them before calling anything; absl alone is cheap to import.
from moxlite import flags as _flags  # noqa: F401
# mox.file may be used first in an atexit handler (ModelArts scripts upload their outputs there),
# when Python can no longer import concurrent.futures' thread module, which fsspec imports
# ("can't register atexit after shutdown"). Imported now (standard library, cheap), it is there.
import concurrent.futures.thread as _futures_thread  # noqa: F401,E402

__version__ = "0.1.0"

_EXPORTS = {
    "errors": "moxlite.errors",
    "file": "moxlite.file",
    "File": "moxlite.file:File",
    "ExportKeys": "moxlite.contract:ExportKeys",
    "ExportSpec": "moxlite.contract:ExportSpec",
    "ModeKeys": "moxlite.contract:ModeKeys",
    "ModelSpec": "moxlite.contract:ModelSpec",
    "get_data_augmentation_fn": "moxlite.data.zoo_preprocessing:get_data_augmentation_fn",
    "AsyncRawGenerator": "moxlite.data.raw_images:AsyncRawGenerator",
    "ImageClassificationRawDataset": "moxlite.data.raw_images:ImageClassificationRawDataset",
    "ImageClassificationRawMetadata": "moxlite.data.raw_images:ImageClassificationRawMetadata",
    "BaseTFRecordDataset": "moxlite.data.tfrecord_dataset:BaseTFRecordDataset",
    "ImageClassificationTFRecordDataset": "moxlite.data.tfrecord_dataset:ImageClassificationTFRecordDataset",
    "ImageClassificationTFRecordMetadata": "moxlite.data.tfrecord_dataset:ImageClassificationTFRecordMetadata",
    "get_tfrecord": "moxlite.data.tfrecord_dataset:get_tfrecord",
    "tfexample_decoder": "moxlite.data.tfexample_decoder",
    "get_dataset": "moxlite.data.dataset_catalog:get_dataset",
    "get_dataset_meta": "moxlite.data.dataset_catalog:get_dataset_meta",
    "split_image_classification_dataset": "moxlite.data.split_dataset:split_image_classification_dataset",
    "EarlyStoppingHook": "moxlite.training.hooks:EarlyStoppingHook",
    "MultilabelClassificationRawMetadata": "moxlite.data.unsupported:MultilabelClassificationRawMetadata",
    "MultilabelClassificationRawDataset": "moxlite.data.unsupported:MultilabelClassificationRawDataset",
    "AggregativeSessionRunHook": "moxlite.data.unsupported:AggregativeSessionRunHook",
    "FeedSessionRunHook": "moxlite.data.unsupported:FeedSessionRunHook",
    "LogEvaluationMetricHook": "moxlite.data.unsupported:LogEvaluationMetricHook",
    "PlateauLREarlyStoppingHook": "moxlite.data.unsupported:PlateauLREarlyStoppingHook",
    "PreprocessingKeys": "moxlite.data.unsupported:PreprocessingKeys",
    "var_scope": "moxlite.dtype_scope:var_scope",
    "get_flag": "moxlite.flags:get_flag",
    "set_flag": "moxlite.flags:set_flag",
    "add_to_collection": "moxlite.graph_collections:add_to_collection",
    "get_collection": "moxlite.graph_collections:get_collection",
    "get_optimizer_fn": "moxlite.optimizers:get_optimizer_fn",
    "get_optimizer_wrapper_fn": "moxlite.optimizers:get_optimizer_wrapper_fn",
    "run": "moxlite.training.run:run",
    "strategy_scope": "moxlite.distribute:scope",
    "NetworkKeys": "moxlite.zoo:NetworkKeys",
    "get_model_fn": "moxlite.zoo:get_model_fn",
    "get_model_meta": "moxlite.zoo:get_model_meta",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    """Import a public name on first use and keep it, so later lookups cost nothing.

    A subpackage (``moxlite.training``, ``moxlite.optimizers``, ...) is imported on first
    access too, as it was when this file imported the runner eagerly.
    """
    target = _EXPORTS.get(name)
    if target is None:
        if name.startswith("_") or importlib.util.find_spec(f"{__name__}.{name}") is None:
            raise AttributeError(f"module 'moxlite' has no attribute {name!r}")
        target = f"{__name__}.{name}"
    module_name, _, attribute = target.partition(":")
    value = importlib.import_module(module_name)
    if attribute:
        value = getattr(value, attribute)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
