"""Data that ships with moxlite and built-in input functions.

The masked-LM data sets' Python API is here too, imported on first use (importing
``moxlite.data`` or its TensorFlow-free modules, as the recipe loader does, imports no
TensorFlow): ``text_mlm_dataset``, ``bert_tfrecord_dataset``, ``write_bert_tfrecord``,
``bert_synthetic_sequences`` (``moxlite.data.text_datasets``) and ``check_sequence_length``,
``check_masking`` (``moxlite.data.text_checks``).
"""

_LAZY = {
    "text_mlm_dataset": "text_datasets", "bert_tfrecord_dataset": "text_datasets",
    "write_bert_tfrecord": "text_datasets", "bert_synthetic_sequences": "text_datasets",
    "check_sequence_length": "text_checks", "check_masking": "text_checks",
}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'moxlite.data' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"moxlite.data.{_LAZY[name]}"), name)
