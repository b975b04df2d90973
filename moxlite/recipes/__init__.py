"""YAML recipes for moxlite.run: schema, loader, builders and the ``moxlite-run`` CLI.

    from moxlite import recipes
    loaded = recipes.load(["recipes/mnist_mlp.yaml"], overrides=["run.steps=50"])
    print(loaded.resolved_yaml())

``moxlite-run --help-recipe`` lists every key (see moxlite.recipes.schema).
"""

from moxlite.recipes.loader import LoadedRecipe, load
from moxlite.recipes.schema import Recipe, describe_schema

__all__ = ["LoadedRecipe", "Recipe", "describe_schema", "load"]
