"""moxlite's test suite: tests in folders laid out like the package, shared helpers here."""

import os

# The repository root, for tests that read its files (recipes/, docs/, tools/) from any folder.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
