"""MoXing's ``moxing.tensorflow.datasets.raw``: the raw-image classes (see ``raw_dataset``)."""

from moxlite.tensorflow.datasets.raw.raw_dataset import *  # noqa: F401,F403
from moxlite.tensorflow.datasets.raw.raw_dataset import __all__  # noqa: F401
