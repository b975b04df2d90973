"""Generate moxlite's grammar corpus: made-up sentences whose masked words follow from their neighbours.

The BERT-tiny recipe on Python's docstrings ends on the unigram plateau (issue 32): on a
2-core machine the model learns which tokens are frequent and little else. This corpus is
built so that frequency tells little and context tells much, with a vocabulary small enough
for a 2-layer, 128-wide model to learn it in a few thousand steps:

- CLASSES word classes ("topics"), each with NOUNS nouns (a singular and a plural form),
  ADJECTIVES adjectives and VERBS verbs (a singular form, root + "s", and a plural one). The
  words are made-up syllable strings (nothing is quoted from any text).
- A noun takes only 2 of its class's adjectives; verb i of class c takes its objects from
  class (c + OBJECT_STEP * (i + 1)) % CLASSES, so the subject's class and the object's class
  give the verb; the object's class also gives the preposition of the optional phrase
  that follows it, whose noun is again of the subject's class.
- The verb agrees in number with its subject; the determiner with its noun
  (singular: a / the / each, plural: the / some / all).
- A line is a paragraph of 3-6 sentences about one topic: a subject is of the line's class
  with probability TOPIC_SHARE, else of a random class.

A sentence:  DET [ADJ] NOUN VERB DET [ADJ] NOUN [PREP DET [ADJ] NOUN] .

The training and held-out splits are drawn from the same grammar with different seeds;
vocab.txt lists BERT's special tokens and then every word, so WordPiece keeps words whole.

    python tools/make_grammar_corpus.py [--out moxlite/data/grammar_corpus]
"""

import argparse
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(os.path.dirname(HERE), "moxlite", "data", "grammar_corpus")
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
CLASSES, NOUNS, ADJECTIVES, VERBS, PREPOSITIONS = 24, 8, 4, 4, 6
OBJECT_STEP = 5
TOPIC_SHARE = 0.7
ADJECTIVE_SHARE = 0.6
PHRASE_SHARE = 0.5
PLURAL_SHARE = 0.4
DETERMINERS = {False: ("a", "the", "each"), True: ("the", "some", "all")}
TRAIN_LINES, HELDOUT_LINES = 6000, 600
VOCABULARY_SEED, TRAIN_SEED, HELDOUT_SEED = 0, 1, 2
CONSONANTS, VOWELS = "bdfgklmnprtvz", "aeiou"


def lexicon(seed=VOCABULARY_SEED):
    """The words of each class: {"nouns": [[root, ...]], "adjectives", "verbs"}, the prepositions, noun adjectives."""
    rng = random.Random(seed)
    syllables = [c + v for c in CONSONANTS for v in VOWELS]
    taken = set(DETERMINERS[False] + DETERMINERS[True] + (".",))
    roots = []
    wanted = CLASSES * (NOUNS + ADJECTIVES + VERBS) + PREPOSITIONS
    while len(roots) < wanted:
        root = "".join(rng.choice(syllables) for _ in range(rng.choice((2, 2, 3))))
        forms = {root, root + "s"}
        if forms & taken:
            continue
        taken |= forms
        roots.append(root)
    take = iter(roots)
    words = {kind: [[next(take) for _ in range(size)] for _ in range(CLASSES)]
             for kind, size in (("nouns", NOUNS), ("adjectives", ADJECTIVES), ("verbs", VERBS))}
    prepositions = [next(take) for _ in range(PREPOSITIONS)]
    noun_adjectives = [[rng.sample(range(ADJECTIVES), 2) for _ in range(NOUNS)] for _ in range(CLASSES)]
    return words, prepositions, noun_adjectives


def noun_phrase(rng, words, noun_adjectives, klass):
    """(tokens, plural) of a determiner, maybe an adjective, and a noun of ``klass``."""
    plural = rng.random() < PLURAL_SHARE
    index = rng.randrange(NOUNS)
    noun = words["nouns"][klass][index]
    tokens = [rng.choice(DETERMINERS[plural])]
    if rng.random() < ADJECTIVE_SHARE:
        tokens.append(words["adjectives"][klass][rng.choice(noun_adjectives[klass][index])])
    tokens.append(noun + "s" if plural else noun)
    return tokens, plural


def sentence(rng, lexicon_, topic):
    words, prepositions, noun_adjectives = lexicon_
    subject_class = topic if rng.random() < TOPIC_SHARE else rng.randrange(CLASSES)
    subject, plural = noun_phrase(rng, words, noun_adjectives, subject_class)
    verb_index = rng.randrange(VERBS)
    verb = words["verbs"][subject_class][verb_index]
    object_class = (subject_class + OBJECT_STEP * (verb_index + 1)) % CLASSES
    object_, _ = noun_phrase(rng, words, noun_adjectives, object_class)
    tokens = subject + [verb if plural else verb + "s"] + object_
    if rng.random() < PHRASE_SHARE:
        tokens.append(prepositions[object_class % PREPOSITIONS])
        tokens += noun_phrase(rng, words, noun_adjectives, subject_class)[0]
    return tokens + ["."]


def lines(count, seed, lexicon_):
    rng = random.Random(seed)
    for _ in range(count):
        topic = rng.randrange(CLASSES)
        yield " ".join(" ".join(sentence(rng, lexicon_, topic)) for _ in range(rng.randint(3, 6)))


def vocabulary(lexicon_):
    words, prepositions, _ = lexicon_
    found = []
    for kind in ("nouns", "verbs"):
        found += [form for group in words[kind] for root in group for form in (root, root + "s")]
    found += [root for group in words["adjectives"] for root in group] + prepositions
    found += sorted(set(DETERMINERS[False] + DETERMINERS[True])) + ["."]
    return list(SPECIAL_TOKENS) + found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    lexicon_ = lexicon()
    for name, count, seed in (("train.txt", TRAIN_LINES, TRAIN_SEED), ("heldout.txt", HELDOUT_LINES, HELDOUT_SEED)):
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as handle:
            handle.writelines(line + "\n" for line in lines(count, seed, lexicon_))
    tokens = vocabulary(lexicon_)
    assert len(set(tokens)) == len(tokens), "a word form is listed twice"
    with open(os.path.join(args.out, "vocab.txt"), "w", encoding="utf-8") as handle:
        handle.writelines(token + "\n" for token in tokens)
    print(f"{args.out}: {TRAIN_LINES} + {HELDOUT_LINES} lines, {len(tokens)} tokens in vocab.txt")


if __name__ == "__main__":
    main()
