"""Count the ``isinstance`` checks on optimizer-wrapper classes in moxlite/ (issue 18's figure).

    python tools/count_wrapper_checks.py

A check counts when the class argument of an ``isinstance`` call names one of ``WRAPPER_CLASSES``:
moxlite's links (and their base classes) and Keras's ``LossScaleOptimizer``, the one Keras
wrapper moxlite looks through. Checks that an object is an optimizer at all
(``keras.optimizers.Optimizer``) do not count. Prints each check, then the total.
"""

import ast
import pathlib
import sys

WRAPPER_CLASSES = {"OptimizerWrapper", "Link", "BatchGradients", "LARS", "THOR", "LossScale", "GradientClip",
                   "SkipNonFinite", "ApplyIfFinite", "_SharedLossScale", "LossScaleOptimizer"}


def _names(node):
    return {n.attr if isinstance(n, ast.Attribute) else n.id
            for n in ast.walk(node) if isinstance(n, (ast.Attribute, ast.Name))}


def checks(root):
    for path in sorted(pathlib.Path(root, "moxlite").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance"
                    and len(node.args) == 2 and _names(node.args[1]) & WRAPPER_CLASSES):
                yield path.relative_to(root), node.lineno, sorted(_names(node.args[1]) & WRAPPER_CLASSES)


if __name__ == "__main__":
    found = sorted(checks(sys.argv[1] if len(sys.argv) > 1 else "."))
    for path, line, names in found:
        print(f"{path}:{line}: {', '.join(names)}")
    print(f"total: {len(found)}")
