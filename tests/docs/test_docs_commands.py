"""The commands, imports and names in README.md, docs/ and the recipes' headers work as written
(issue 44).

- Every `moxlite-run` line of a fenced code block of README.md and docs/, and of a recipe's
  header comment, runs in-process from the repository root, with `--dry-run` added where the
  line trains (a dry run checks the whole recipe, its data and model, and writes nothing).
  `--help-recipe` runs as it is.
- A line whose comment begins with `needs` (data the user brings) must be followed by the same
  command plus the `--set` overrides (and `--dry-run`) that run it without that data; the
  override line runs like any other, and the marked line either runs or stops with one line
  (exit 2), as the docs say.
- Every `import` / `from ... import` line of a python block, and every moxlite import in the
  guide's inline code, runs, and every `moxlite.x.y` / `mox.x.y` named in the guide's inline
  code resolves, all in one subprocess.

A failure names the file and the line.
"""

import json
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

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCUMENTS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
GUIDE = sorted([ROOT / "README.md", *(ROOT / "docs" / "guide").glob("*.md")])
RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))
MOXLITE_NAME = re.compile(r"(?<![\w.])(?:mox|moxlite)(?:\.[A-Za-z_]\w*)+")
FENCE = re.compile(r"^\s*(```|~~~)\s*(\S*)")
IMPORT = re.compile(r"^\s*(import \w|from [\w.]+ import \w)")


def joined(numbered_lines):
    """(line number, line) with each backslash continuation joined onto the line it continues."""
    pending = None
    for number, line in numbered_lines:
        if pending is not None:
            number, line = pending[0], pending[1] + " " + line.strip()
        if line.rstrip().endswith("\\"):
            pending = (number, line.rstrip()[:-1].rstrip())
            continue
        pending = None
        yield number, line


def code_lines(path):
    """(line number, language, line) of every line inside a fenced code block of ``path``."""
    inside, language, lines = False, "", []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fence = FENCE.match(line)
        if fence:
            inside, language = not inside, fence.group(2)
        elif inside:
            lines.append((number, language, line))
    languages = {number: language for number, language, _ in lines}
    return [(number, languages[number], line) for number, line in joined((n, l) for n, _, l in lines)]


def header_lines(path):
    """(line number, line) of the comment block that opens a recipe, without the leading '#'."""
    header = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.startswith("#"):
            break
        header.append((number, line[1:].strip()))
    return list(joined(header))


def split_comment(line):
    """The shell words of ``line`` and its trailing comment ('' when none)."""
    comment = re.search(r"(?:^|\s)#(.*)$", line)
    return shlex.split(line, comments=True), comment.group(1).strip() if comment else ""


def commands():
    """(where, words, comment) of every moxlite-run line of the docs' code blocks and the recipes' headers."""
    numbered = [(path, number, line) for path in DOCUMENTS for number, _, line in code_lines(path)]
    numbered += [(path, number, line) for path in RECIPES for number, line in header_lines(path)]
    found = []
    for path, number, line in numbered:
        if line.strip().startswith("moxlite-run "):
            found.append((f"{path.relative_to(ROOT)}:{number}", *split_comment(line.strip())))
    return found


def doc_imports():
    """(where, line) of every import line of a python code block of the docs, and of every
    moxlite import in the guide's inline code (`from moxlite.framework import file`)."""
    found = [(f"{path.relative_to(ROOT)}:{number}", line.strip())
             for path in DOCUMENTS for number, language, line in code_lines(path)
             if language == "python" and IMPORT.match(line)]
    for path in GUIDE:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            found += [(f"{path.relative_to(ROOT)}:{number}", span) for span in re.findall(r"`([^`]+)`", line)
                      if IMPORT.match(span) and re.match(r"(import|from) moxlite\b", span)]
    return found


def doc_names():
    """(where, name) of every `moxlite.x.y` or `mox.x.y` in the inline code of README.md and the
    guide (the reference pages are generated, and list refused MoXing paths on purpose)."""
    found = []
    for path in GUIDE:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for span in re.findall(r"`([^`]+)`", line):
                found += [(f"{path.relative_to(ROOT)}:{number}", name) for name in MOXLITE_NAME.findall(span)]
    return found


COMMANDS = commands()


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
    assert {"README.md", "docs/guide/recipes.md", "docs/guide/language-models.md",
            "recipes/swin_tiny_imagenet.yaml"} <= where, where
    assert any("--dry-run" in words for _, words, _ in COMMANDS)
    assert any(comment.startswith("needs") for _, _, comment in COMMANDS)
    assert len(doc_imports()) >= 4


def test_each_command_marked_as_needing_data_is_followed_by_its_override():
    for index, (where, words, comment) in enumerate(COMMANDS):
        if not comment.startswith("needs"):
            continue
        following = COMMANDS[index + 1][1] if index + 1 < len(COMMANDS) else []
        override = [word for word in following[len(words):] if word != "--dry-run"]
        assert following[:len(words)] == words and override and all(word == "--set" for word in override[::2]), (
            f"{where}: a command marked '{comment}' must be followed by the same command plus the --set "
            f"that runs it without that data; the next is {shlex.join(following)}")


def distinct_commands():
    """Each command once: (the places it is written, its words, whether one place marks it as
    needing the user's data), the dry runs of the BERT-base and BERT-large recipes marked slow
    (building the model for the dtype table: 7 and 23 s on the 2-core machine)."""
    places = {}
    for where, words, comment in COMMANDS:
        places.setdefault(tuple(words), []).append((where, comment.startswith("needs")))
    return [pytest.param(", ".join(w for w, _ in found), list(words), any(n for _, n in found),
                         id=found[0][0], marks=[pytest.mark.slow, pytest.mark.own_process] * any("_pretrain_thor" in w for w in words))
            for words, found in places.items()]


@pytest.mark.parametrize("where, words, needs_data", distinct_commands())
def test_each_documented_command_runs_as_written(capsys, monkeypatch, where, words, needs_data):
    monkeypatch.chdir(ROOT)
    runs_before = tree_state(ROOT / "runs")
    if "--help-recipe" in words:
        code, out, err = run_cli(capsys, words)
        assert code == 0 and "run.log_dir" in out, f"{where}: {shlex.join(words)} exited {code}: {err}"
        return
    dry = words if "--dry-run" in words else [*words, "--dry-run"]
    code, out, err = run_cli(capsys, dry)
    if needs_data and code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("moxlite-run: error:"), f"{where}: {err}"
    else:
        assert code == 0, f"{where}: {shlex.join(dry)} exited {code}:\n{err[-2000:]}"
        assert "Dry run: the recipe is valid" in out, f"{where}: {out[-2000:]}"
    assert tree_state(ROOT / "runs") == runs_before, f"{where}: the dry run wrote under runs/"


CHECK_SCRIPT = textwrap.dedent("""
    import importlib, json, sys

    def resolve(name):
        obj, path = importlib.import_module("moxlite"), "moxlite"
        for part in name.split(".")[1:]:
            path += "." + part
            try:
                obj = getattr(obj, part)
            except AttributeError:
                obj = importlib.import_module(path)

    failed = []
    for kind, where, text in json.load(sys.stdin):
        try:
            exec(text, {}) if kind == "import" else resolve(text)
        except Exception as error:
            failed.append([kind, f"{where}: {text}: {type(error).__name__}: {error}"])
    print(json.dumps(failed))
""")


@pytest.fixture(scope="module")
def python_failures():
    """The import lines and moxlite names of the docs that fail, checked in one subprocess."""
    items = [("import", where, line) for where, line in doc_imports()] + [
        ("name", where, name) for where, name in doc_names()]
    result = subprocess.run([sys.executable, "-c", CHECK_SCRIPT], input=json.dumps(items), cwd=ROOT,
                            capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_each_documented_import_runs(python_failures):
    assert not [message for kind, message in python_failures if kind == "import"]


def test_each_moxlite_name_in_the_guide_resolves(python_failures):
    """`moxlite.optimizers.thor.schedules`, `mox.file.copy_parallel`, ...: a module or attribute
    that moved fails here, with the page and line that still name it."""
    assert len(doc_names()) >= 20
    assert not [message for kind, message in python_failures if kind == "name"]


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_each_bundled_recipe_writes_to_runs_under_its_own_name(recipe):
    """The recipes page: each bundled recipe writes to runs/<recipe>."""
    assert yaml.safe_load(recipe.read_text())["run"]["log_dir"] == f"runs/{recipe.stem}"
