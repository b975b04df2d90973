"""The file API's rows of ``tools/conformance/file_api.py`` against the real module and the documentation.

``DOCUMENTED`` is typed in from MoXing's file API documentation (huaweicloud/ModelArts-Lab
``docs/moxing_api_doc/MoXing_API_File_apidoc.md``; ``shift`` from ``MoXing_API_File.md``),
independently of the table: every documented name must have exactly one row, every row
must name something documented, and every row must resolve to what ``moxlite.file`` has
(or be refused with the message it states). So neither the code nor the table can drift.
"""

import importlib.util
import inspect
import os
import sys

import pytest

from tests import ROOT

sys.path.insert(0, os.path.join(ROOT, "tools"))
from conformance import file_api  # noqa: E402
from moxlite import file as mox_file  # noqa: E402
from moxlite.errors import MoxliteError  # noqa: E402

# function -> its documented arguments (set_auth's from its signature line; the rest from the lists).
DOCUMENTED = {
    "append": ["url", "data", "binary"],
    "append_remote": ["src_url", "dst_url"],
    "copy": ["src_url", "dst_url", "client_id"],
    "copy_parallel": ["src_url", "dst_url", "file_list", "threads", "is_processing", "use_queue"],
    "exists": ["url"],
    "get_size": ["url", "recursive"],
    "glob": ["url"],
    "is_directory": ["url"],
    "list_directory": ["url", "recursive", "remove_sep", "skip_file", "skip_dir"],
    "make_dirs": ["url"],
    "mk_dir": ["url"],
    "read": ["url", "client_id", "binary"],
    "remove": ["url", "recursive"],
    "rename": ["src_url", "dst_url"],
    "scan_dir": ["url"],
    "set_auth": ["ak", "sk", "server", "port", "is_secure", "ssl_verify", "long_conn_mode", "path_style",
                 "retry", "retry_wait", "client_timeout", "list_max_keys"],
    "stat": ["src_url"],
    "walk": ["url", "topdown", "onerror", "followlinks"],
    "write": ["url", "data", "binary"],
    "shift": [],
    "File": ["name", "mode"],
}
MODES = ["r", "w", "a", "r+", "w+", "a+", "br", "bw", "ba", "br+", "bw+", "ba+"]
FILE_MEMBERS = {"close": "method", "flush": "method", "mode": "attribute", "name": "attribute",
                "read": "method", "readable": "method", "readline": "method", "readlines": "method",
                "seek": "method", "seekable": "method", "size": "method", "tell": "method",
                "writable": "method", "write": "method", "writelines": "method"}
EXCEPTIONS = ["MoxFileNameDuplicateException", "MoxFileNotExistsException", "MoxFileReadException",
              "MoxFileRespException"]
# The examples of remove's table, and the two cases the documentation leaves open or states in prose.
CASES = ["remove('s3://b/file')", "remove('s3://b/file', recursive=True)", "remove('s3://b/dir', recursive=True)",
         "remove('s3://b/dir/', recursive=True)", "remove('s3://b/file/')", "remove('s3://b/dir')",
         "remove('s3://b/dir/')", "copy('s3://b/file', '/existing/folder')", "mk_dir('s3://b/missing/new')"]

# How to trigger each refused row, so its message is checked (none of the file API is refused today).
REFUSALS = {}


def documented_rows():
    expected = {}
    for function, arguments in DOCUMENTED.items():
        expected[function] = "class" if function == "File" else "function"
        expected.update({f"{function}({argument})": "argument" for argument in arguments})
    expected.update({f"File(mode={mode!r})": "mode" for mode in MODES})
    expected.update({f"File.{member}": kind for member, kind in FILE_MEMBERS.items()})
    expected.update({name: "exception" for name in EXCEPTIONS})
    expected.update({case: "case" for case in CASES})
    return expected


FILE_ROWS = [row for row in file_api.ROWS if row.api == "mox.file"]


def test_every_documented_name_has_exactly_one_row_and_no_row_is_undocumented():
    names = [row.name for row in FILE_ROWS]
    assert len(names) == len(set(names)), "a name has two rows"
    assert {row.name: row.kind for row in FILE_ROWS} == documented_rows()
    assert FILE_ROWS == file_api.FILE_ROWS


def test_every_row_is_well_formed_and_says_why_where_it_differs():
    for row in file_api.ROWS:
        assert row.kind in file_api.KINDS and row.status in file_api.STATUSES, row
        assert row.api in file_api.API_MODULES, row
        if row.status != "same":
            assert len(row.note) > 20, f"{row.name}: a {row.status} row needs its reason"


@pytest.fixture
def open_file(tmp_path):
    with mox_file.File(str(tmp_path / "probe.txt"), "w+") as stream:
        yield stream


def test_every_row_resolves_in_the_real_module(open_file):
    for row in FILE_ROWS:
        found = file_api.resolve(row, overrides={"File": open_file} if row.kind in (
            "method", "attribute") else None)
        if row.kind in ("method",):
            assert callable(found), row.name
        if row.kind == "argument":
            assert found.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY), row
        if row.kind == "exception":
            assert isinstance(found, type) and issubclass(found, Exception)


def test_resolve_says_what_is_missing():
    with pytest.raises(LookupError, match="takes no argument 'nonsense'"):
        file_api.resolve(file_api.Row("mox.file", "copy(nonsense)", "argument", "same", ""))
    with pytest.raises(LookupError, match="no_such_function does not exist"):
        file_api.resolve(file_api.Row("mox.file", "no_such_function", "function", "same", ""))


def test_documented_arguments_come_in_the_documented_order():
    for function, arguments in DOCUMENTED.items():
        parameters = list(inspect.signature(getattr(mox_file, function)).parameters)
        assert parameters[:len(arguments)] == arguments, function


def test_every_mode_row_opens_a_file_in_that_mode(tmp_path):
    for row in FILE_ROWS:
        if row.kind == "mode":
            mode = row.name[len("File(mode='"):-2]
            path = tmp_path / "m.txt"
            path.write_text("x")
            with mox_file.File(str(path), mode) as stream:
                assert stream.mode == mode and stream.readable() == ("r" in mode or "+" in mode)


def test_every_moxing_exception_is_a_base_of_an_error_mox_file_raises():
    raised = [value for value in vars(mox_file.errors).values()
              if isinstance(value, type) and issubclass(value, mox_file.ObjectStorageError)]
    for name in EXCEPTIONS:
        moxing_class = getattr(mox_file, name)
        subclasses = [error for error in raised if issubclass(error, moxing_class)]
        assert subclasses, name
        assert all(issubclass(error, (OSError, ConnectionError)) for error in subclasses), name


def test_refused_rows_raise_their_stated_message():
    for row in file_api.ROWS:
        if row.status == "refused" and row.api == "mox.file":
            assert row.name in REFUSALS, f"{row.name}: refused, but no call here checks its message"
            with pytest.raises(MoxliteError) as error:
                REFUSALS[row.name]()
            assert str(error.value) == row.note


def load_generator():
    spec = importlib.util.spec_from_file_location("conformance_table", os.path.join(ROOT, "tools",
                                                                                     "conformance_table.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_markdown_generator_prints_every_row_and_the_counts(capsys):
    load_generator().main(["mox.file"])
    text = capsys.readouterr().out
    lines = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(lines) == len(FILE_ROWS)
    for row, line in zip(FILE_ROWS, lines):
        assert line.startswith(f"| `{row.name}` | {row.kind} | {row.status} |")
    numbers = file_api.counts(FILE_ROWS)["mox.file"]
    assert (f"{len(FILE_ROWS)} rows: {numbers['same']} same, {numbers['different']} different, "
            f"{numbers['refused']} refused, {numbers['untested']} untested.") in text
    assert sum(numbers.values()) == len(FILE_ROWS)


def test_the_generator_merges_rows_of_several_apis():
    rows = FILE_ROWS[:2] + [file_api.Row("mox (TensorFlow)", "run", "function", "different", "a | b")]
    text = load_generator().markdown(rows)
    assert text.index("### `mox.file`") < text.index("### `mox (TensorFlow)`")
    assert "| `run` | function | different | a \\| b |" in text
