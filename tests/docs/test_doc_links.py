"""Every relative link in the README, docs/ and the maintainers' and suite's notes resolves.

A link's file must exist, and its anchor (``page.md#section``) must be a heading of that page,
with headings turned into anchors as GitHub does (lower case, punctuation dropped, spaces to
hyphens, ``-1``, ``-2`` for repeats). Links inside code blocks and inline code are not links.
"""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCUMENTS = sorted({ROOT / "README.md", ROOT / "moxlite" / "ARCHITECTURE.md", ROOT / "tests" / "README.md",
                    ROOT / "tools" / "README.md", *(ROOT / "docs").rglob("*.md")})
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(text):
    """The lines of ``text`` outside fenced code blocks, with inline code removed."""
    inside = False
    for line in text.splitlines():
        if FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            yield re.sub(r"`[^`]*`", "", line)


def heading_anchors(text):
    """The anchors GitHub gives the headings of a markdown ``text``."""
    anchors, seen = set(), {}
    for line in prose_lines(text.replace("`", "")):
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = "".join(c for c in match.group(1).strip().lower() if c.isalnum() or c in " -_").replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def links(path):
    for line in prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if not re.match(r"[a-z][a-z0-9+.-]*:", target):
                yield target


def test_the_slugs_are_githubs():
    text = "# `run` and `model_fn`\n## Compiled steps (XLA): `jit_compile`\n## THOR's formulas\n## Tests\n## Tests\n"
    assert heading_anchors(text) == {"run-and-model_fn", "compiled-steps-xla-jit_compile", "thors-formulas",
                                     "tests", "tests-1"}


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_resolves(document):
    broken = []
    for target in links(document):
        file_part, _, anchor = target.partition("#")
        resolved = (document.parent / file_part).resolve() if file_part else document
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in heading_anchors(resolved.read_text(encoding="utf-8")):
            broken.append(f"{target}: no heading with anchor #{anchor}")
    assert not broken, f"{document.relative_to(ROOT)}: " + "; ".join(broken)
