"""``python -m moxlite recipe.yaml ...``: the same as the ``moxlite-run`` console script."""

import sys

from moxlite.recipes.cli import main

sys.exit(main())
