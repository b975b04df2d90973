"""The types of MoXing's public contract: ModeKeys, ModelSpec, ExportSpec, ExportKeys.

These are the names MoXing scripts import (``mox.ModeKeys.TRAIN``,
``mox.ModelSpec(loss=..., log_info=...)``); moxlite keeps them and their
defaults so that such scripts keep working.
"""

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Sequence, Union


class ModeKeys:
    """The four run modes; values are MoXing's strings."""

    TRAIN = "TRAIN"
    EVAL = "EVAL"
    PREDICT = "PREDICT"
    EXPORT = "EXPORT"

    ALL = (TRAIN, EVAL, PREDICT, EXPORT)


class ExportKeys:
    """What ``export_model`` may ask for."""

    TF_SERVING = "TF_SERVING"


@dataclasses.dataclass
class ExportSpec:
    """What to export: named input tensors, named output tensors and a version.

    ``inputs_dict`` values must be elements of the ``inputs`` that ``model_fn``
    received; the exported signature takes them by key. ``version=-1`` means
    one more than the largest integer version already exported; a string (such
    as ``"model"``) names the directory; an existing version is an error.
    """

    inputs_dict: Dict[str, Any]
    outputs_dict: Dict[str, Any]
    version: Union[int, str] = -1


@dataclasses.dataclass
class ModelSpec:
    """What ``model_fn`` returns.

    loss: a scalar, or a list of scalars (one per optimizer); required in TRAIN.
    var_scopes: with several losses, a list of name-prefix lists, one per loss,
        choosing the variables that loss trains.
    log_info: dict of scalars to log; in EVAL they are averaged over the whole
        evaluation set; required in EVAL.
    output_info: dict of tensors handed to ``output_fn``; required in PREDICT.
    export_spec: an ExportSpec; required in EXPORT.
    hooks: in TRAIN, callables ``hook(global_step, log_values)`` the loop calls with the
        numpy log values at every log line and once at the end (TF2 has no SessionRunHook;
        this is its plain-Python stand-in).
    """

    loss: Any = None
    var_scopes: Optional[Sequence[Sequence[str]]] = None
    log_info: Optional[Dict[str, Any]] = None
    output_info: Optional[Dict[str, Any]] = None
    export_spec: Optional[ExportSpec] = None
    hooks: Optional[List[Callable]] = None

    @property
    def losses(self):
        """``loss`` as a list (empty when there is none)."""
        if self.loss is None:
            return []
        if isinstance(self.loss, (list, tuple)):
            return list(self.loss)
        return [self.loss]
