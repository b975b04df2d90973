"""The TensorFlow-API and data rows of moxlite's conformance table with MoXing's public documentation.

Sources, read for these rows: huaweicloud/ModelArts-Lab ``docs/moxing_api_doc/``
(``MoXing_API_TensorFlow_apidoc.md``, ``MoXing_API_UserInstructions.md``, ``MoXing_API_Flowers.md``,
``scripts/``) and ``official_examples/``. Each row: ``api`` (MoXing's spelling), ``name`` (where it is
in moxlite: ``module:attribute``, ``module:function(argument)``, or a module path), ``kind``,
``status`` (same / different / refused / untested: no test shows it yet), ``note`` (what differs and why, or the refusal's message) and ``test``, the test that shows a "same" row
(``links.py``, beside this file).
``tests/moxing/test_conformance_rows.py`` checks every row against the code, so the table cannot drift.
The file-API rows are in ``file_api.py``; ``tools/conformance_table.py`` prints both.
"""

import collections

from conformance import links
from moxlite.data import unsupported

Row = collections.namedtuple("Row", ["api", "name", "kind", "status", "note", "test"], defaults=("",))

KINDS = ("function", "class", "argument", "mode", "exception", "hook", "import_path")
STATUSES = ("same", "different", "refused", "untested")
_UNTESTED = "accepted as documented; no test shows it yet (tools/conformance/links.py)"

_TF1 = "TF2 has no graph sessions"


def _args(api, name, arguments, status="same", note=""):
    return [Row(f"{api}({argument})", f"{name}({argument})", "argument", status, note) for argument in arguments]


ROWS = [
    # ------------------------------------------------------------------ flags, modes
    Row("mox.get_flag", "moxlite:get_flag", "function", "same", ""),
    Row("mox.set_flag", "moxlite:set_flag", "function", "same", ""),
    Row("mox.ModeKeys", "moxlite:ModeKeys", "class", "same", ""),
    *[Row(f"mox.ModeKeys.{mode}", f"moxlite:ModeKeys.{mode}", "mode", "same", f"the string '{mode}'")
      for mode in ("TRAIN", "EVAL", "PREDICT", "EXPORT")],
    # ------------------------------------------------------------------ raw images
    Row("mox.ImageClassificationRawMetadata", "moxlite:ImageClassificationRawMetadata", "class", "same",
        "num_classes, total_num_samples, labels_list; labels.txt orders the classes"),
    *_args("mox.ImageClassificationRawMetadata", "moxlite:ImageClassificationRawMetadata",
           ["base_dir"]),
    *_args("mox.ImageClassificationRawMetadata", "moxlite:ImageClassificationRawMetadata", ["labels_filename"],
           "untested", _UNTESTED),
    *_args("mox.ImageClassificationRawMetadata", "moxlite:ImageClassificationRawMetadata", ["redirect_dir"],
           "different", "accepted; moxlite reads base_dir (a local copy when it is on object storage)"),
    Row("mox.ImageClassificationRawDataset", "moxlite:ImageClassificationRawDataset", "class", "different",
        "features image, label, label_desc and image_name; get() names what input_fn returns, and tensor work "
        "on them in input_fn runs per sample (tf.data), where MoXing built graph tensors"),
    *_args("mox.ImageClassificationRawDataset", "moxlite:ImageClassificationRawDataset",
           ["metadata", "batch_size", "num_epochs", "shuffle", "image_size", "augmentation_fn",
            "reader_class"]),
    *_args("mox.ImageClassificationRawDataset", "moxlite:ImageClassificationRawDataset", ["label_one_hot"],
           "untested", _UNTESTED),
    *_args("mox.ImageClassificationRawDataset", "moxlite:ImageClassificationRawDataset",
           ["num_readers", "shuffle_buffer_size", "capacity", "cache_dir", "preprocess_threads",
            "remove_cache_on_finish", "private_num_threads", "reader_kwargs", "drop_remainder"], "different",
           "accepted and not needed: tf.data reads, shuffles (the whole list) and prefetches itself; the runner "
           "drops a short last batch in TRAIN only"),
    *_args("mox.ImageClassificationRawDataset", "moxlite:ImageClassificationRawDataset", ["preprocess_fn"],
           "refused", "preprocess_fn (a batched function of the raw image buffers) is not supported; give "
           "augmentation_fn"),
    Row("mox.AsyncRawGenerator", "moxlite:AsyncRawGenerator", "class", "different",
        "accepted as reader_class; tf.data already reads ahead"),
    Row("mox.MultilabelClassificationRawMetadata", "moxlite:MultilabelClassificationRawMetadata", "class",
        "refused", "mox.MultilabelClassificationRawMetadata " + unsupported.MESSAGES["MultilabelClassificationRawMetadata"]),
    Row("mox.MultilabelClassificationRawDataset", "moxlite:MultilabelClassificationRawDataset", "class",
        "refused", "mox.MultilabelClassificationRawDataset " + unsupported.MESSAGES["MultilabelClassificationRawDataset"]),
    Row("split_image_classification_dataset", "moxlite:split_image_classification_dataset", "function",
        "different", "each class split on its own, seeded shuffle (seed=0), round(fraction * n) per split, the "
        "rest to the last; overwrite=False keeps a split folder that holds files (the documentation leaves "
        "these open)"),
    # ------------------------------------------------------------------ TFRecords
    Row("mox.ImageClassificationTFRecordMetadata", "moxlite:ImageClassificationTFRecordMetadata", "class", "same",
        "num_samples counted when not given; labels.txt read into labels_to_names"),
    *_args("mox.ImageClassificationTFRecordMetadata", "moxlite:ImageClassificationTFRecordMetadata",
           ["base_dir", "file_pattern", "num_samples", "num_classes"]),
    *_args("mox.ImageClassificationTFRecordMetadata", "moxlite:ImageClassificationTFRecordMetadata",
           ["label_map_file"], "untested", _UNTESTED),
    *_args("mox.ImageClassificationTFRecordMetadata", "moxlite:ImageClassificationTFRecordMetadata",
           ["redirect_dir"], "different", "accepted; moxlite reads base_dir (a local copy when remote)"),
    Row("mox.ImageClassificationTFRecordDataset", "moxlite:ImageClassificationTFRecordDataset", "class", "same",
        "features image (decoded uint8) and label, plus custom_feature_keys"),
    *_args("mox.ImageClassificationTFRecordDataset", "moxlite:ImageClassificationTFRecordDataset",
           ["metadata", "shuffle", "num_parallel", "num_epochs", "image_size",
            "custom_feature_keys", "custom_feature_values", "label_one_hot"]),
    *_args("mox.ImageClassificationTFRecordDataset", "moxlite:ImageClassificationTFRecordDataset",
           ["batch_size", "shuffle_buffer_size", "augmentation_fn"], "untested", _UNTESTED),
    *_args("mox.ImageClassificationTFRecordDataset", "moxlite:ImageClassificationTFRecordDataset",
           ["cache_dir", "remove_cache_on_finish", "private_num_threads", "drop_remainder"], "different",
           "accepted and not needed on tf.data; the runner drops a short last batch in TRAIN only"),
    *_args("mox.ImageClassificationTFRecordDataset", "moxlite:ImageClassificationTFRecordDataset",
           ["preprocess_fn"], "refused", "preprocess_fn (a batched queue-reader function) is not supported; give "
           "augmentation_fn"),
    Row("BaseTFRecordDataset", "moxlite:BaseTFRecordDataset", "class", "same",
        "feature_keys/feature_values, or an overridden _parser (MoXing's older form)"),
    Row("BaseTFRecordDataset._build_features", "moxlite:BaseTFRecordDataset._build_features", "hook", "same",
        "one argument per parsed feature; calls self._add_feature"),
    Row("BaseTFRecordDataset._build_feature", "moxlite:BaseTFRecordDataset._build_feature", "hook", "same",
        "the other spelling; a subclass overrides one of the two"),
    Row("BaseTFRecordDataset._parser", "moxlite:BaseTFRecordDataset._parser", "hook", "same",
        "record -> tuple (to _build_features) or dict (features as they are)"),
    Row("BaseTFRecordDataset._add_feature", "moxlite:BaseTFRecordDataset._add_feature", "hook", "same", ""),
    Row("BaseTFRecordDataset._parse_example (any other _parse*/_build*/_decode* override)",
        "moxlite:BaseTFRecordDataset._parse_example", "hook", "refused",
        "which moxlite never calls; the hooks it calls are _parser(self, record) and _build_features"),
    Row("mox.get_tfrecord", "moxlite:get_tfrecord", "function", "same",
        "items built by handlers with slim's protocol (keys, tensors_to_item)"),
    *_args("mox.get_tfrecord", "moxlite:get_tfrecord",
           ["dataset_dir", "file_pattern", "num_samples", "keys_to_features", "items_to_handlers", "shuffle",
            "num_epochs"]),
    Row("slim.tfexample_decoder.Tensor", "moxlite:tfexample_decoder.Tensor", "class", "different",
        "tf.contrib.slim is gone in TF2: mox.tfexample_decoder.Tensor, same arguments"),
    Row("slim.tfexample_decoder.Image", "moxlite:tfexample_decoder.Image", "class", "different",
        "mox.tfexample_decoder.Image, same arguments; repeated=True refused"),
    # ------------------------------------------------------------------ named data sets
    Row("mox.get_dataset_meta", "moxlite:get_dataset_meta", "function", "same",
        "mnist, cifar10, flowers, imagenet with slim's file patterns and split sizes, training split first"),
    Row("mox.get_dataset", "moxlite:get_dataset", "function", "same", "features image and label"),
    *_args("mox.get_dataset", "moxlite:get_dataset", ["name", "split_name", "dataset_dir"]),
    *_args("mox.get_dataset", "moxlite:get_dataset", ["capacity"], "different", "accepted; tf.data prefetches"),
    Row("mox.get_dataset_meta('svhn')", "moxlite:get_dataset_meta", "exception", "refused",
        "unknown data set 'svhn'; moxlite knows cifar10, flowers, imagenet, mnist"),
    # ------------------------------------------------------------------ augmentation, models
    Row("mox.get_data_augmentation_fn", "moxlite:get_data_augmentation_fn", "function", "same", ""),
    *_args("mox.get_data_augmentation_fn", "moxlite:get_data_augmentation_fn",
           ["name", "run_mode", "output_height", "output_width"]),
    Row("mox.PreprocessingKeys", "moxlite:PreprocessingKeys", "class", "refused",
        "mox.PreprocessingKeys " + unsupported.MESSAGES["PreprocessingKeys"]),
    Row("mox.get_model_fn", "moxlite:get_model_fn", "function", "different",
        "Keras Applications behind MoXing's names; networks without one are refused by name"),
    *_args("mox.get_model_fn", "moxlite:get_model_fn",
           ["name", "run_mode", "num_classes", "weight_decay", "data_format", "batch_norm_fused"]),
    *_args("mox.get_model_fn", "moxlite:get_model_fn", ["batch_renorm", "image_height", "image_width", "preprocess_fn"],
           "untested", _UNTESTED),
    Row("mox.get_model_fn(name='lenet')", "moxlite:get_model_fn", "exception", "refused",
        "'lenet' is a MoXing network with no Keras Applications counterpart, so moxlite does not build it"),
    Row("mox.get_model_meta", "moxlite:get_model_meta", "function", "different",
        "default_labels_offset is 1 for every network (Keras Applications classify 1000 classes)"),
    Row("mox.NetworkKeys", "moxlite:NetworkKeys", "class", "different", "the mapped networks only"),
    # ------------------------------------------------------------------ executor
    Row("mox.ModelSpec", "moxlite:ModelSpec", "class", "same", ""),
    *_args("mox.ModelSpec", "moxlite:ModelSpec", ["loss", "var_scopes", "log_info", "output_info", "export_spec"]),
    *_args("mox.ModelSpec", "moxlite:ModelSpec", ["hooks"], "different",
           "callables hook(global_step, log_values) and EarlyStoppingHook; " + _TF1 + " for SessionRunHooks"),
    Row("mox.ExportSpec", "moxlite:ExportSpec", "class", "different",
        "inputs_dict must name inputs model_fn received (the served signature's inputs)"),
    *_args("mox.ExportSpec", "moxlite:ExportSpec", ["inputs_dict", "outputs_dict", "version"]),
    Row("mox.ExportKeys.TF_SERVING", "moxlite:ExportKeys.TF_SERVING", "mode", "different",
        "the SavedModel goes to log_dir/model/<version>"),
    Row("mox.get_collection", "moxlite:get_collection", "function", "same", ""),
    Row("mox.var_scope", "moxlite:var_scope", "function", "same", ""),
    Row("mox.EarlyStoppingHook", "moxlite:EarlyStoppingHook", "class", "different",
        "needs inter_mode=EVAL as documented; logs the number of steps done, one more than MoXing's 0-based "
        "step; mode='min' added for losses"),
    *_args("mox.EarlyStoppingHook", "moxlite:EarlyStoppingHook",
           ["monitor_info", "monitor", "batch_size", "samples_in_train", "samples_in_eval",
            "evaluate_every_n_epochs", "min_delta", "patience", "prefix"]),
    Row("mox.AggregativeSessionRunHook", "moxlite:AggregativeSessionRunHook", "class", "refused",
        "mox.AggregativeSessionRunHook " + unsupported.MESSAGES["AggregativeSessionRunHook"]),
    Row("FeedSessionRunHook", "moxlite:FeedSessionRunHook", "class", "refused",
        "mox.FeedSessionRunHook " + unsupported.MESSAGES["FeedSessionRunHook"]),
    Row("mox.LogEvaluationMetricHook", "moxlite:LogEvaluationMetricHook", "class", "refused",
        "mox.LogEvaluationMetricHook " + unsupported.MESSAGES["LogEvaluationMetricHook"]),
    Row("mox.PlateauLREarlyStoppingHook", "moxlite:PlateauLREarlyStoppingHook", "class", "refused",
        "mox.PlateauLREarlyStoppingHook " + unsupported.MESSAGES["PlateauLREarlyStoppingHook"]),
    # ------------------------------------------------------------------ optimizers
    Row("mox.get_optimizer_fn", "moxlite:get_optimizer_fn", "function", "same", ""),
    *_args("mox.get_optimizer_fn", "moxlite:get_optimizer_fn", ["name"]),
    *_args("mox.get_optimizer_fn", "moxlite:get_optimizer_fn", ["learning_rate"], "same",
           "a number, an epoch string, a tensor that optimizer_fn computed from the global step, a function of "
           "the step or the functools.partial of a TF1 decay function; evaluated at every update "
           "(tests/optimizers/test_tf1_step_rates.py)"),
    Row("mox.get_optimizer_fn('foo')", "moxlite:get_optimizer_fn", "exception", "same",
        "a ValueError naming the known optimizers"),
    Row("mox.get_optimizer_wrapper_fn", "moxlite:get_optimizer_wrapper_fn", "function", "same", ""),
    Row("learning_rate_scheduler.piecewise_lr", "moxlite.optimizer.learning_rate_scheduler:piecewise_lr", "function",
        "different", "a function of the global step (what a TF2 optimizer takes), where MoXing gave a tensor"),
    # ------------------------------------------------------------------ run
    Row("mox.run", "moxlite:run", "function", "same", ""),
    *_args("mox.run", "moxlite:run",
           ["input_fn", "output_fn", "model_fn", "optimizer_fn", "run_mode", "inter_mode", "batch_size",
            "auto_batch", "log_dir", "max_number_of_steps", "checkpoint_path", "log_every_n_steps",
            "output_every_n_steps", "save_summary_steps", "save_model_secs", "export_model", "save_model_steps"]),
    *_args("mox.run", "moxlite:run", ["fetch_strategy_fn"], "refused",
           "is not supported (MoXing's documentation gives it no meaning, and moxlite has no session fetches)"),
    Row("mox.run(run_mode='invalid')", "moxlite:run", "exception", "same",
        "a ValueError (moxlite's ArgumentError) naming run_mode"),
    # ------------------------------------------------------------------ import paths
    Row("import moxing.tensorflow as mox", "moxlite.tensorflow", "import_path", "same",
        "also: import moxlite as mox"),
    Row("moxing.tensorflow.datasets", "moxlite.tensorflow.datasets", "import_path", "same", ""),
    Row("moxing.tensorflow.datasets.tfrecord_common", "moxlite.tensorflow.datasets.tfrecord_common",
        "import_path", "same", ""),
    Row("moxing.tensorflow.datasets.raw.raw_dataset", "moxlite.tensorflow.datasets.raw.raw_dataset",
        "import_path", "same", ""),
    Row("moxing.tensorflow.datasets.reader.raw_reader", "moxlite.tensorflow.datasets.reader.raw_reader",
        "import_path", "same", ""),
    Row("moxing.tensorflow.optimizer.learning_rate_scheduler", "moxlite.tensorflow.optimizer",
        "import_path", "same", "from moxlite.tensorflow.optimizer import learning_rate_scheduler"),
    Row("moxing.tensorflow.executor", "moxlite.tensorflow.executor", "import_path", "same", ""),
    Row("moxing.tensorflow.nets", "moxlite.tensorflow.nets", "import_path", "same", ""),
    Row("moxing.tensorflow.preprocessing", "moxlite.tensorflow.preprocessing", "import_path", "same", ""),
    Row("from moxing.framework import file", "moxlite.framework", "import_path", "same", ""),
    Row("moxing.framework.util.compat", "moxlite.framework.util.compat", "import_path", "same", ""),
    Row("moxing.tensorflow.executor.hooks", "moxlite.tensorflow.executor.hooks", "import_path", "refused",
        "No module named 'moxlite.tensorflow.executor.hooks'"),
    Row("moxing.tensorflow.utils.tf_util", "moxlite.tensorflow.utils", "import_path", "refused",
        "No module named 'moxlite.tensorflow.utils'"),
]
ROWS = links.linked(ROWS)   # each row's test (the 'test' field)


def counts():
    """{status: number of rows}."""
    return dict(collections.Counter(row.status for row in ROWS))
