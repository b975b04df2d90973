"""The package's layers: data flows one way, recipes -> runner -> optimizers.

``moxlite.optimizers`` is used by ``moxlite.training`` (the pipeline, the wrappers), so an
import the other way is a cycle waiting to happen and ties an optimizer to the runner's
internals. ``moxlite.recipes`` builds on the runner, so nothing outside it imports it: the
ranges and rules both read live beside the settings and the models. Read from the source
(every ``import``, also inside functions, in every module and sub-package), no import done.
"""

import ast
import glob
import os

from tests import ROOT as REPO


def _imported_modules(path):
    """Every module an ``import`` or ``from ... import`` in ``path`` names (names imported
    from a package count as modules too: ``from moxlite import training``)."""
    tree = ast.parse(open(path, encoding="utf-8").read(), filename=path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _modules(*package):
    """Every module of ``moxlite/<package>``, sub-packages included."""
    return sorted(glob.glob(os.path.join(REPO, "moxlite", *package, "**", "*.py"), recursive=True))


def _importers(paths, layer):
    """{module: the names of ``layer`` it imports} for each of ``paths`` that imports it."""
    offenders = {}
    for path in paths:
        upward = sorted(name for name in _imported_modules(path) if name == layer or name.startswith(layer + "."))
        if upward:
            offenders[os.path.relpath(path, REPO)] = upward
    return offenders


def test_the_module_walk_sees_sub_packages():
    assert os.path.join(REPO, "moxlite", "optimizers", "thor", "schedules.py") in _modules("optimizers")


def test_no_optimizer_module_imports_the_runner():
    assert _importers(_modules("optimizers"), "moxlite.training") == {}


def test_nothing_outside_the_recipes_imports_them():
    recipes = os.path.join(REPO, "moxlite", "recipes") + os.sep
    outside = [path for path in _modules() if not path.startswith(recipes)]
    # The console script's entry point (python -m moxlite) is the recipes' CLI itself.
    outside.remove(os.path.join(REPO, "moxlite", "__main__.py"))
    assert _importers(outside, "moxlite.recipes") == {}


def test_the_stable_names_module_imports_nothing_of_the_runner_nor_tensorflow():
    names = _imported_modules(os.path.join(REPO, "moxlite", "stable_names.py"))
    assert not [name for name in names if name.startswith(("moxlite", "tensorflow", "keras"))]


def _uses_tf_summary(path):
    """True when ``path`` names ``tf.summary`` (or ``tf.compat.v1.summary``) anywhere."""
    tree = ast.parse(open(path, encoding="utf-8").read(), filename=path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "summary":
            chain = node.value
            while isinstance(chain, ast.Attribute):
                chain = chain.value
            if isinstance(chain, ast.Name) and chain.id == "tf":
                return True
    return False


def test_summaries_are_written_by_one_module():
    """Every TensorBoard write is reporting's (the controller decides when); no other module
    of the package touches tf.summary."""
    paths = glob.glob(os.path.join(REPO, "moxlite", "**", "*.py"), recursive=True)
    writers = sorted(os.path.relpath(path, REPO) for path in paths if _uses_tf_summary(path))
    assert writers == [os.path.join("moxlite", "training", "reporting.py")]
