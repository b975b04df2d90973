"""Keras imported as a fresh clone imports it: without IPython, matplotlib and pandas.

Keras imports these three at its own import when they are installed (its file editor's
notebook display, its image-gallery plot, its DataFrame data adapter): about 0.9 of the
4.8 CPU s a process pays for `import keras` on this machine, and a cluster test starts up to
six such processes. A fresh clone's `pip install -e ".[test]"` installs neither IPython nor
matplotlib, so there Keras imports without them already; pandas it does install (for a
ported script's DataFrame), but Keras's DataFrame adapter serves `model.fit` and
`model.predict`, which neither moxlite's loop (it reads tf.data) nor a test calls. Only an
import made by Keras's own modules is refused (Keras treats the package as absent); any
other importer gets the package as usual. keras-hub's kagglehub imports IPython too (to
detect Colab; absent, it says no), so it is refused there too: `import keras_hub, tensorflow_text`
measured 5.1 -> 3.9 CPU s.

tests/conftest.py puts this folder first on PYTHONPATH (so every process a test starts
runs this at start-up, as Python runs any `sitecustomize` on its path) and installs the
same finder in the pytest process.
"""

import sys

KERAS_OPTIONAL = frozenset({"IPython", "matplotlib", "pandas"})
# Keras, and kagglehub (keras-hub's preset downloader), which imports IPython to detect Colab.
KERAS_STACK = frozenset({"keras", "kagglehub"})


class KerasOptionalImportsRefused:
    """A meta-path finder that answers ImportError when a KERAS_STACK module imports a KERAS_OPTIONAL package."""

    def find_spec(self, name, path=None, target=None):
        if path is not None or name not in KERAS_OPTIONAL:
            return None
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
            frame = frame.f_back
        importer = frame.f_globals.get("__name__", "") if frame is not None else ""
        if importer.partition(".")[0] in KERAS_STACK:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden from Keras in the tests)", name=name)
        return None


def install():
    if not any(type(finder).__name__ == KerasOptionalImportsRefused.__name__ for finder in sys.meta_path):
        sys.meta_path.insert(0, KerasOptionalImportsRefused())


install()
