"""MoXing's ``moxing.tensorflow`` import path: ``import moxlite.tensorflow as mox`` is ``import moxlite as mox``.

Every public name of ``moxlite`` resolves here too (lazily, as on the package
face). The sub-modules give MoXing's documented import paths:
``moxlite.tensorflow.datasets.tfrecord_common``, ``...datasets.raw.raw_dataset``,
``...datasets.reader.raw_reader``, ``...optimizer.learning_rate_scheduler``,
``...executor``, ``...nets``, ``...preprocessing``.
"""

import importlib
import importlib.util

import moxlite as _moxlite


def __getattr__(name):
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        value = getattr(_moxlite, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_moxlite.__all__))
