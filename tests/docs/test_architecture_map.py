"""moxlite/ARCHITECTURE.md's module map lists every module of moxlite/, one line each, and only those.

The map is the table under "### The module map": one row per module, its path from the
repository root in the first cell. The test reads the paths from the map and from the tree, so
it keeps working when modules move into sub-packages: a moved module changes its row.
"""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\|\s*`(?P<path>[^`]+)`\s*\|\s*(?P<what>.*?)\s*\|\s*$")


def map_rows(text):
    """(path, description) of each row of the module map's table, in order."""
    section = text.split("### The module map", 1)[1]
    section = re.split(r"^#{1,3} ", section, maxsplit=1, flags=re.MULTILINE)[0]
    return [(match["path"], match["what"]) for match in map(ROW.match, section.splitlines()) if match]


def tree_modules():
    return sorted(str(path.relative_to(ROOT)) for path in (ROOT / "moxlite").rglob("*.py")
                  if "__pycache__" not in path.parts)


def test_the_map_lists_every_module_once_with_a_line_of_its_own():
    rows = map_rows((ROOT / "moxlite" / "ARCHITECTURE.md").read_text(encoding="utf-8"))
    listed = [path for path, _ in rows]
    modules = tree_modules()
    missing = sorted(set(modules) - set(listed))
    unknown = sorted(set(listed) - set(modules))
    repeated = sorted({path for path in listed if listed.count(path) > 1})
    assert not missing, f"modules missing from ARCHITECTURE.md's module map: {missing}"
    assert not unknown, f"the module map names modules that do not exist: {unknown}"
    assert not repeated, f"the module map lists these twice: {repeated}"
    assert all(what for _, what in rows), [path for path, what in rows if not what]


def test_the_map_reader_sees_a_missing_and_a_made_up_module():
    text = ("### The module map\n\n| module | what it holds |\n| --- | --- |\n"
            "| `moxlite/a.py` | one |\n| `moxlite/sub/b.py` | two |\n\n### Next\n| `moxlite/c.py` | not the map |\n")
    assert map_rows(text) == [("moxlite/a.py", "one"), ("moxlite/sub/b.py", "two")]
