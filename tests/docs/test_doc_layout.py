"""The docs keep their shape: the first page and the maintainers' notes keep their size, and no
passage is written in two places (a second copy drifts from the first).

A passage here is a sentence of 70 characters or more outside code blocks and tables; two
documents holding the same one fail. The generated reference pages are left out (their rows
come from the code).
"""

import collections
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROSE = sorted({ROOT / "README.md", ROOT / "moxlite" / "ARCHITECTURE.md", ROOT / "tests" / "README.md",
                ROOT / "tools" / "README.md", *(ROOT / "docs" / "guide").glob("*.md")})


def sentences(text):
    """The long sentences of a markdown ``text``, outside fenced code and table rows, whitespace folded."""
    text = re.sub(r"^\s*```.*?^\s*```", "", text, flags=re.MULTILINE | re.DOTALL)
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("|"))
    for sentence in re.split(r"(?<=[.;:])\s+", " ".join(text.split())):
        if len(sentence) >= 70:
            yield sentence


def test_the_readme_and_the_maintainers_notes_keep_their_size():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 300
    assert len((ROOT / "moxlite" / "ARCHITECTURE.md").read_text(encoding="utf-8").splitlines()) <= 900


def test_no_passage_is_written_in_two_documents():
    where = collections.defaultdict(set)
    for document in PROSE:
        for sentence in sentences(document.read_text(encoding="utf-8")):
            where[sentence].add(str(document.relative_to(ROOT)))
    twice = {sentence[:100]: sorted(documents) for sentence, documents in where.items() if len(documents) > 1}
    assert not twice, twice


def test_the_sentence_reader_skips_code_and_tables():
    text = ("A sentence long enough to count as a passage of prose in these docs, surely.\n\n"
            "```\nA code line long enough to count as a passage if code were read as prose here.\n```\n"
            "| a table row long enough to count as a passage if tables were read as prose |\n")
    assert list(sentences(text)) == ["A sentence long enough to count as a passage of prose in these docs, surely."]
