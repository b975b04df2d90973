"""docs/reference/conformance.md is what tools/conformance_table.py prints, and its examples exist.

The rows themselves are checked against the code by tests/moxing/test_conformance_file.py and
tests/moxing/test_conformance_rows.py; this keeps the published table from drifting from those rows.
"""

import importlib.util
import pathlib

from moxlite import conformance

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("conformance_table", ROOT / "tools" / "conformance_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_published_table_is_what_the_tool_prints():
    published = (ROOT / "docs" / "reference" / "conformance.md").read_text()
    assert published == _tool().document(), (
        "docs/reference/conformance.md is stale: run python tools/make_reference_docs.py")


def test_every_ported_example_has_its_script_and_a_test_that_runs_it():
    tests = "".join(path.read_text() for path in (ROOT / "tests" / "moxing").glob("test_ports*.py"))
    for port, source, status, note in conformance.EXAMPLES:
        assert (ROOT / "tests" / "moxing_ports" / port).is_file(), port
        assert port.removesuffix(".py") in tests, f"no test runs {port}"
        assert status in conformance.STATUSES and (status == "same" or note)
