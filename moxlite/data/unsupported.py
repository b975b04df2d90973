"""MoXing classes moxlite does not provide, under their names: using one is one line that says why and what to use.

A script that subclasses ``mox.AggregativeSessionRunHook`` or builds a
``mox.MultilabelClassificationRawDataset`` gets this line when the object is
made, not an AttributeError at import: the class exists, instantiating it is
refused. Each is a row "refused" of the conformance table (``tools/conformance/tensorflow_api.py``).
"""

from moxlite import errors

_TF1_HOOK = ("is a TF1 SessionRunHook, and TF2 has no tf.Session to run it; give ModelSpec(hooks=[...]) "
             "callables hook(global_step, log_values), or mox.EarlyStoppingHook")

MESSAGES = {
    "MultilabelClassificationRawMetadata": "is not provided by moxlite; read the images with "
                                           "ImageClassificationRawMetadata or build a tf.data.Dataset in input_fn",
    "MultilabelClassificationRawDataset": "is not provided by moxlite; build a tf.data.Dataset of (image, "
                                          "multi-hot labels) in input_fn",
    "AggregativeSessionRunHook": _TF1_HOOK,
    "FeedSessionRunHook": _TF1_HOOK + " (feed data through input_fn instead of placeholders)",
    "LogEvaluationMetricHook": "is not provided by moxlite; run(inter_mode=mox.ModeKeys.EVAL) logs the "
                               "[VALIDATION METRICS] line at every checkpoint",
    "PreprocessingKeys": "is not provided by moxlite; get_data_augmentation_fn takes the network's name "
                         "(e.g. 'resnet_v1_50') and picks its preprocessing",
    "PlateauLREarlyStoppingHook": "is not provided by moxlite; use mox.EarlyStoppingHook (it stops, it does not "
                                  "lower the learning rate)",
}


def _refused(name):
    def __init__(self, *args, **kwargs):
        raise errors.ArgumentError(f"mox.{name} {MESSAGES[name]}")
    return type(name, (), {"__init__": __init__, "__doc__": f"Refused: mox.{name} {MESSAGES[name]}.",
                           "__module__": __name__})


MultilabelClassificationRawMetadata = _refused("MultilabelClassificationRawMetadata")
MultilabelClassificationRawDataset = _refused("MultilabelClassificationRawDataset")
AggregativeSessionRunHook = _refused("AggregativeSessionRunHook")
FeedSessionRunHook = _refused("FeedSessionRunHook")
LogEvaluationMetricHook = _refused("LogEvaluationMetricHook")
PlateauLREarlyStoppingHook = _refused("PlateauLREarlyStoppingHook")


class _RefusedKeys(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise errors.ArgumentError(f"mox.PreprocessingKeys {MESSAGES['PreprocessingKeys']}")


PreprocessingKeys = _RefusedKeys("PreprocessingKeys", (), {"__module__": __name__,
                                                           "__doc__": "Refused: see MESSAGES['PreprocessingKeys']."})
