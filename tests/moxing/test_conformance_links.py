"""The conformance table says "same" only where a test shows it.

Every "same" row of both tables (``tools/conformance/file_api.py`` and ``tensorflow_api.py``)
names its test as ``tests/<file>.py::<test function>``; the file must exist and define that test
function (found in its syntax tree, so nothing is imported or run). A row no test shows is
"untested", never "same".
"""

import ast
import functools
import os
import sys

from tests import ROOT

sys.path.insert(0, os.path.join(ROOT, "tools"))
from conformance import file_api, links, tensorflow_api  # noqa: E402

ALL_ROWS = list(file_api.ROWS) + list(tensorflow_api.ROWS)


@functools.lru_cache(maxsize=None)
def defined_tests(path):
    """The names of the test functions (module level or in classes) of the file ``path``, or None."""
    full = os.path.join(ROOT, path)
    if not os.path.isfile(full):
        return None
    with open(full, encoding="utf-8") as stream:
        tree = ast.parse(stream.read())
    return frozenset(node.name for node in ast.walk(tree)
                     if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"))


def existing(link):
    path, separator, function = link.partition("::")
    found = defined_tests(path) if separator and path.startswith("tests/") else None
    return found is not None and function in found


def test_every_same_row_names_an_existing_test():
    unlinked = [(row.api, row.name) for row in ALL_ROWS if row.status == "same" and not row.test]
    assert unlinked == [], "same rows without a test: link one in tools/conformance/links.py or call them untested"
    broken = [(row.api, row.name, row.test) for row in ALL_ROWS if row.test and not existing(row.test)]
    assert broken == []


def test_every_link_belongs_to_a_row_and_untested_rows_link_none():
    keys = {(row.api, row.name) for row in ALL_ROWS}
    assert sorted(set(links.TESTS) - keys) == []
    assert [row for row in ALL_ROWS if row.status == "untested" and row.test] == []


def test_the_check_fails_for_a_missing_file_or_function():
    assert existing("tests/moxing/test_conformance_links.py::test_every_same_row_names_an_existing_test")
    assert not existing("tests/moxing/test_conformance_links.py::test_that_does_not_exist")
    assert not existing("tests/test_no_such_file.py::test_every_same_row_names_an_existing_test")
    assert not existing("test_every_same_row_names_an_existing_test")
