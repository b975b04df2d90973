"""Regenerate moxlite's bundled English corpus from the docstrings of Python's standard library.

The corpus (moxlite/data/text_corpus/) is real English that no one on this project
wrote: the docstrings of the modules, classes and functions of the standard library
of the Python that runs this script, under the PSF License Agreement (its text is
copied next to the corpus, as the licence asks). It is read with ``ast`` (nothing is
imported), one prose paragraph per line, one source file after another with a blank
line between files. Paragraphs that are code rather than prose are left out: those
with an indented line (examples, tables, argument lists), doctest prompts, fewer
than MIN_WORDS words, or less than MIN_LETTER_SHARE letters and spaces. A paragraph
seen before (in an earlier file) is left out too, so the held-out split does not
repeat the training text.

Held-out split: every HELD_OUT_EVERY-th source file (sorted by path) goes to
heldout.txt, the rest to train.txt, so held-out paragraphs come from files the
training split never saw.

The WordPiece vocabulary (vocab.txt) is learned from train.txt with
``moxlite.data.wordpiece.learn_vocabulary`` (tensorflow-text's BERT vocabulary
learner), about ``wordpiece.BUNDLED_VOCAB_SIZE`` tokens with BERT's reserved tokens first.

    python tools/make_text_corpus.py [--out moxlite/data/text_corpus] [--no-vocab]
"""

import argparse
import ast
import os
import platform
import re
import shutil
import sys
import sysconfig

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(os.path.dirname(HERE), "moxlite", "data", "text_corpus")
SKIPPED_FOLDERS = {"test", "tests", "idle_test", "site-packages", "__pycache__", "encodings", "lib2to3"}
MIN_WORDS = 6
MIN_LETTER_SHARE = 0.8
HELD_OUT_EVERY = 10


def source_files(root):
    """The standard library's .py files under ``root``, sorted, without tests and site-packages."""
    found = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(name for name in subfolders if name not in SKIPPED_FOLDERS)
        found.extend(os.path.join(folder, name) for name in sorted(files) if name.endswith(".py"))
    return sorted(found, key=lambda path: os.path.relpath(path, root))


def docstrings(path):
    """The docstrings of the module, classes and functions in ``path``, in source order."""
    with open(path, encoding="utf-8") as handle:
        try:
            tree = ast.parse(handle.read())
        except (SyntaxError, ValueError):
            return []
    nodes = [node for node in ast.walk(tree)
             if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    nodes.sort(key=lambda node: getattr(node, "lineno", 0))
    return [text for text in (ast.get_docstring(node, clean=True) for node in nodes) if text]


def is_prose(paragraph_lines):
    """True for a paragraph of English prose, False for code, tables, prompts and headings."""
    if any(line[:1].isspace() for line in paragraph_lines) or any(">>>" in line for line in paragraph_lines):
        return False
    text = " ".join(paragraph_lines)
    if len(text.split()) < MIN_WORDS:
        return False
    letters = sum(character.isalpha() or character == " " for character in text)
    return letters / len(text) >= MIN_LETTER_SHARE


def paragraphs(docstring):
    """The prose paragraphs of one docstring, each as one line with single spaces."""
    found, current = [], []
    for line in docstring.splitlines() + [""]:
        if line.strip():
            current.append(line.rstrip())
            continue
        if current and is_prose(current):
            found.append(re.sub(r"\s+", " ", " ".join(current)).strip())
        current = []
    return found


def build(root):
    """(train documents, held-out documents): each a list of paragraphs of one source file."""
    seen, train, held_out = set(), [], []
    for index, path in enumerate(source_files(root)):
        document = []
        for docstring in docstrings(path):
            for paragraph in paragraphs(docstring):
                if paragraph not in seen:
                    seen.add(paragraph)
                    document.append(paragraph)
        if document:
            (held_out if index % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else train).append(document)
    return train, held_out


def write_documents(path, documents):
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        handle.write("\n\n".join("\n".join(document) for document in documents) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=DEFAULT_OUT, help="folder of train.txt, heldout.txt, vocab.txt")
    parser.add_argument("--no-vocab", action="store_true", help="leave vocab.txt as it is")
    args = parser.parse_args(argv)
    root = sysconfig.get_paths()["stdlib"]
    train, held_out = build(root)
    os.makedirs(args.out, exist_ok=True)
    write_documents(os.path.join(args.out, "train.txt"), train)
    write_documents(os.path.join(args.out, "heldout.txt"), held_out)
    shutil.copyfile(os.path.join(root, "LICENSE.txt"), os.path.join(args.out, "LICENSE-PYTHON.txt"))
    counts = {name: (len(documents), sum(len(d) for d in documents), os.path.getsize(os.path.join(args.out, name)))
              for name, documents in (("train.txt", train), ("heldout.txt", held_out))}
    for name, (files, lines, size) in counts.items():
        print(f"{name}: {files} source files, {lines} paragraphs, {size} bytes")
    print(f"from the standard library of Python {platform.python_version()} at {root}")
    if not args.no_vocab:
        sys.path.insert(0, os.path.dirname(HERE))
        from moxlite.data import wordpiece

        vocabulary = wordpiece.learn_vocabulary([os.path.join(args.out, "train.txt")], wordpiece.BUNDLED_VOCAB_SIZE)
        wordpiece.write_vocabulary(os.path.join(args.out, "vocab.txt"), vocabulary)
        print(f"vocab.txt: {len(vocabulary)} tokens")


if __name__ == "__main__":
    main()
