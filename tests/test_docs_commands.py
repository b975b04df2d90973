"""The commands and imports in the code blocks of README.md and docs/ work as written (issue 44).

- Every `moxlite-run` line of a fenced code block runs in-process from the repository root,
  with `--dry-run` added where the line trains (a dry run checks the whole recipe, its data
  and model, and writes nothing). `--help-recipe` runs as it is.
- A line whose comment begins with `needs` (data the user brings) must be followed by the same
  command plus the `--set` overrides that run it without that data; the override line runs like
  any other, and the marked line either runs or stops with one line (exit 2), as the docs say.
- Every `import` / `from ... import` line of a python block runs, all in one subprocess.

A failure names the document and the line. The recipe headers' commands are checked by hand
(several train for minutes); their `log_dir`s are checked here against the recipes page.
"""

import os
import pathlib
import re
import shlex
import subprocess
import sys
import textwrap

import pytest
import yaml

from moxlite.recipes import cli

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCUMENTS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
FENCE = re.compile(r"^\s*(```|~~~)\s*(\S*)")
COMMAND = ("moxlite-run",)
IMPORT = re.compile(r"^\s*(import \w|from [\w.]+ import \w)")


def code_lines(path):
    """(line number, language, line) of every line inside a fenced code block of ``path``,
    backslash continuations joined onto the line that starts them."""
    inside, language, pending = False, "", None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fence = FENCE.match(line)
        if fence:
            inside, language = not inside, fence.group(2)
            continue
        if not inside:
            continue
        if pending is not None:
            start, text = pending
            line, number = text + " " + line.strip(), start
        if line.rstrip().endswith("\\"):
            pending = (number, line.rstrip()[:-1].rstrip())
            continue
        pending = None
        yield number, language, line


def split_comment(line):
    """The shell words of ``line`` and its trailing comment ('' when none)."""
    comment = re.search(r"(?:^|\s)#(.*)$", line)
    return shlex.split(line, comments=True), comment.group(1).strip() if comment else ""


def doc_commands():
    """(where, words, comment) of every moxlite-run line in a code block of the docs."""
    found = []
    for path in DOCUMENTS:
        for number, _, line in code_lines(path):
            words, comment = split_comment(line.strip())
            if words and words[0] in COMMAND:
                found.append((f"{path.relative_to(ROOT)}:{number}", words, comment))
    return found


def doc_imports():
    """(where, line) of every import line of a python code block of the docs."""
    return [(f"{path.relative_to(ROOT)}:{number}", line.strip())
            for path in DOCUMENTS for number, language, line in code_lines(path)
            if language == "python" and IMPORT.match(line)]


COMMANDS = doc_commands()


def tree_state(path):
    """Every file and folder under ``path`` with its size and modification time."""
    return sorted((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in path.rglob("*")) if path.exists() else []


def run_cli(capsys, words):
    code = cli.main(words[1:])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_docs_hold_the_commands_this_module_runs():
    """The extraction finds the documented commands (an empty list would pass every test below)."""
    where = {w.split(":")[0] for w, _, _ in COMMANDS}
    assert {"README.md", "docs/guide/recipes.md", "docs/guide/language-models.md"} <= where, where
    assert any("--dry-run" in words for _, words, _ in COMMANDS)
    assert any(comment.startswith("needs") for _, _, comment in COMMANDS)
    assert len(doc_imports()) >= 4


@pytest.mark.parametrize("where, words, comment", COMMANDS, ids=[w for w, _, _ in COMMANDS])
def test_each_documented_command_runs_as_written(capsys, monkeypatch, where, words, comment):
    monkeypatch.chdir(ROOT)
    runs_before = tree_state(ROOT / "runs")
    if comment.startswith("needs"):
        following = COMMANDS[COMMANDS.index((where, words, comment)) + 1]
        override = following[1][len(words):]
        assert following[1][:len(words)] == words and override and all(
            word == "--set" for word in override[::2]), (
            f"{where}: a command marked '{comment}' must be followed by the same command plus the "
            f"--set that runs it without that data; the next is {shlex.join(following[1])}")
    if "--help-recipe" in words:
        code, out, err = run_cli(capsys, words)
        assert code == 0 and "run.log_dir" in out, f"{where}: {shlex.join(words)} exited {code}: {err}"
        return
    dry = words if "--dry-run" in words else [*words, "--dry-run"]
    code, out, err = run_cli(capsys, dry)
    if comment.startswith("needs") and code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("moxlite-run: error:"), f"{where}: {err}"
    else:
        assert code == 0, f"{where}: {shlex.join(dry)} exited {code}:\n{err[-2000:]}"
        assert "Dry run: the recipe is valid" in out, f"{where}: {out[-2000:]}"
    assert tree_state(ROOT / "runs") == runs_before, f"{where}: the dry run wrote under runs/"


def test_each_documented_import_runs():
    """All import lines in one subprocess; each failure is reported with its document and line."""
    imports = doc_imports()
    script = textwrap.dedent("""
        import sys, traceback
        failed = []
        for where, line in {imports!r}:
            try:
                exec(line, {{}})
            except Exception as error:
                failed.append(f"{{where}}: {{line}}: {{type(error).__name__}}: {{error}}")
        print("\\n".join(failed))
        sys.exit(1 if failed else 0)
    """).format(imports=imports)
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=300)
    assert result.returncode == 0, result.stdout or result.stderr[-2000:]


@pytest.mark.parametrize("recipe", sorted((ROOT / "recipes").glob("*.yaml")), ids=lambda p: p.name)
def test_each_bundled_recipe_writes_to_runs_under_its_own_name(recipe):
    """The recipes page: each bundled recipe writes to runs/<recipe>."""
    assert yaml.safe_load(recipe.read_text())["run"]["log_dir"] == f"runs/{recipe.stem}"
