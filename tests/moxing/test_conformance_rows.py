"""Every TensorFlow-API/data row of the conformance table holds in the code: it cannot drift.

A row ``same``/``different`` must name something that exists in moxlite (a function, class,
hook, mode, an explicit argument of the named callable, an importable module); a ``refused``
row must be refused with its note's message. Exception rows are triggered and checked.
"""

import importlib
import inspect
import os
import sys

import pytest

import moxlite as mox
from moxlite import errors
from tests import ROOT

sys.path.insert(0, os.path.join(ROOT, "tools"))
from conformance.tensorflow_api import KINDS, ROWS, STATUSES, counts  # noqa: E402


def _resolve(name):
    module_name, _, attribute = name.partition(":")
    value = importlib.import_module(module_name)
    for part in attribute.split("."):
        value = getattr(value, part)
    return value


def _split_argument(name):
    target, _, argument = name.partition("(")
    return target, argument.rstrip(")")


def _raising(function):
    with pytest.raises(Exception) as caught:
        function()
    return caught.value


def _parse_example_override():
    class Misnamed(mox.BaseTFRecordDataset):
        def _parse_example(self, record):
            return record
    return Misnamed(meta=None, feature_keys=["a"], feature_values=[None])


PROBES = {   # rows whose check is a call: api -> (function, expected exception type)
    "mox.ImageClassificationRawDataset(preprocess_fn)": (
        lambda: mox.ImageClassificationRawDataset(None, preprocess_fn=lambda *a: a), errors.ArgumentError),
    "mox.ImageClassificationTFRecordDataset(preprocess_fn)": (
        lambda: mox.ImageClassificationTFRecordDataset(None, preprocess_fn=lambda *a: a), errors.ArgumentError),
    "BaseTFRecordDataset._parse_example (any other _parse*/_build*/_decode* override)": (
        _parse_example_override, errors.ArgumentError),
    "mox.get_dataset_meta('svhn')": (lambda: mox.get_dataset_meta("svhn"), errors.ArgumentError),
    "mox.get_model_fn(name='lenet')": (lambda: mox.get_model_fn("lenet", mox.ModeKeys.TRAIN, 10), ValueError),
    "mox.get_optimizer_fn('foo')": (lambda: mox.get_optimizer_fn("foo", 0.1)(), ValueError),
    "mox.run(fetch_strategy_fn)": (lambda: mox.run(fetch_strategy_fn=lambda: None), errors.ArgumentError),
    "mox.run(run_mode='invalid')": (lambda: mox.run(run_mode="invalid"), ValueError),
    "mox.PreprocessingKeys": (lambda: mox.PreprocessingKeys.RESNET_V1_50, errors.ArgumentError),
}


def test_rows_are_well_formed_and_unique():
    for row in ROWS:
        assert row.kind in KINDS and row.status in STATUSES, row
        assert row.status == "same" or row.note, f"{row.api}: a different/refused row needs its reason"
    apis = [row.api for row in ROWS]
    assert len(apis) == len(set(apis))
    assert sum(counts().values()) == len(ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[row.api for row in ROWS])
def test_row_holds(row):
    if row.api in PROBES:
        function, expected = PROBES[row.api]
        error = _raising(function)
        assert isinstance(error, expected), (row.api, error)
        if row.status == "refused" or row.kind == "exception" and row.status != "same":
            assert row.note in str(error), (row.note, str(error))
        return
    if row.kind == "import_path":
        if row.status == "refused":
            with pytest.raises(ModuleNotFoundError, match=row.note.replace("'", ".")):
                importlib.import_module(row.name)
        else:
            importlib.import_module(row.name)
        return
    if row.kind == "argument":
        target, argument = _split_argument(row.name)
        parameters = inspect.signature(_resolve(target)).parameters
        assert argument in parameters, f"{target} has no argument {argument!r}"
        return
    if row.kind == "class" and row.status == "refused":
        with pytest.raises(errors.ArgumentError) as caught:
            _resolve(row.name)()
        assert row.note in str(caught.value)
        return
    assert row.status != "refused", f"{row.api}: a refused row needs a probe"
    value = _resolve(row.name)
    if row.kind == "mode" and row.name.startswith("moxlite:ModeKeys."):
        assert value == row.name.rsplit(".", 1)[1]
    if row.kind in ("function", "class"):
        assert callable(value)


def test_counts_are_reported():
    table = counts()
    assert set(table) <= set(STATUSES) and table.get("same", 0) > table.get("refused", 0)
