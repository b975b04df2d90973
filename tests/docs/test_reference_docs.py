"""docs/reference/ is what tools/make_reference_docs.py writes from the code's own tables.

Each page is regenerated in memory and compared with the file, so a flag, a recipe key, a
wrapper parameter or a conformance row added to the code without rewriting the page fails here.
"""

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("make_reference_docs", ROOT / "tools" / "make_reference_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TOOL = _tool()


@pytest.mark.parametrize("path", sorted(TOOL.PAGES))
def test_the_published_page_is_what_the_tool_writes(path):
    published = (ROOT / path).read_text(encoding="utf-8")
    assert published == TOOL.PAGES[path](), f"{path} is stale: run python tools/make_reference_docs.py"


def test_every_flag_and_every_recipe_key_has_its_row():
    from moxlite import flags
    from moxlite.optimizers import recipe_tables
    from moxlite.recipes import schema

    flag_page = TOOL.flags_page()
    for name, (_, default, _) in flags.FLAG_TABLE.items():
        assert f"| `--{name}` |" in flag_page, name
    keys_page = TOOL.recipe_keys_page()
    for key in schema.leaf_keys():
        assert f"| `{key}` |" in keys_page, key
    for wrapper, table in recipe_tables.WRAPPER_PARAMETERS.items():
        assert f"### {wrapper}" in keys_page
        for parameter in table:
            assert f"| `{parameter}` |" in keys_page, (wrapper, parameter)
    for kind, schedule in recipe_tables.SCHEDULES.items():
        for argument in schedule.arguments:
            assert f"| `{kind}` |" in keys_page and f"| `{argument}` |" in keys_page, (kind, argument)


def test_a_stale_page_is_named_by_the_check(tmp_path):
    for path, page in TOOL.PAGES.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(page(), encoding="utf-8")
    assert TOOL.stale_pages(tmp_path) == []
    flags_file = tmp_path / "docs" / "reference" / "flags.md"
    flags_file.write_text(flags_file.read_text().replace("| `--num_gpus` |", "| `--num_gpu` |"))
    (tmp_path / "docs" / "reference" / "conformance.md").unlink()
    assert TOOL.stale_pages(tmp_path) == ["docs/reference/flags.md", "docs/reference/conformance.md"]
