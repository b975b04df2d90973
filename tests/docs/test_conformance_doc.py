"""docs/reference/conformance.md is what tools/conformance_table.py prints, and its examples exist.

The rows themselves are checked against the code by tests/moxing/test_conformance_file.py and
tests/moxing/test_conformance_rows.py; this keeps the published table from drifting from those rows.
"""

import importlib.util
import os
import pathlib
import sys

from tests import ROOT

sys.path.insert(0, os.path.join(ROOT, "tools"))
from conformance import file_api  # noqa: E402

ROOT_PATH = pathlib.Path(ROOT)


def _tool():
    spec = importlib.util.spec_from_file_location("conformance_table", ROOT_PATH / "tools" / "conformance_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_published_table_is_what_the_tool_prints():
    published = (ROOT_PATH / "docs" / "reference" / "conformance.md").read_text()
    assert published == _tool().document(), (
        "docs/reference/conformance.md is stale: run python tools/make_reference_docs.py")


def test_every_ported_example_has_its_script_and_a_test_that_runs_it():
    tests = "".join(path.read_text() for path in (ROOT_PATH / "tests" / "moxing").glob("test_ports*.py"))
    for port, source, status, note in file_api.EXAMPLES:
        assert (ROOT_PATH / "tests" / "moxing_ports" / port).is_file(), port
        assert port.removesuffix(".py") in tests, f"no test runs {port}"
        assert status in file_api.STATUSES and (status == "same" or note)
