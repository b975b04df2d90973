"""Independent references for the text data sets' tests: BERT's tokenization and masking in plain Python / NumPy.

Written from the published rules (Google BERT's tokenization.py and
create_pretraining_data.py), not from moxlite's code: the tests compare moxlite's
tf.data pipeline with these on fixed text.
"""

import unicodedata

import numpy as np

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def is_punctuation(character):
    """BERT's rule: ASCII non-alphanumeric printable symbols, and Unicode category P*."""
    code = ord(character)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(character).startswith("P")


def basic_tokens(text, lowercase=True):
    """BERT's basic tokenizer: lower-case and strip accents, split on white space and punctuation."""
    if lowercase:
        text = "".join(c for c in unicodedata.normalize("NFD", text.lower()) if unicodedata.category(c) != "Mn")
    words = []
    for word in text.split():
        current = ""
        for character in word:
            if is_punctuation(character):
                if current:
                    words.append(current)
                words.append(character)
                current = ""
            else:
                current += character
        if current:
            words.append(current)
    return words


def wordpiece_ids(text, vocabulary, lowercase=True, max_chars=100):
    """Greedy longest-match-first WordPiece ids of ``text`` (a word that cannot be split is [UNK])."""
    index = {token: i for i, token in enumerate(vocabulary)}
    ids = []
    for word in basic_tokens(text, lowercase):
        if len(word) > max_chars:
            ids.append(index["[UNK]"])
            continue
        pieces, start = [], 0
        while start < len(word):
            end, found = len(word), None
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in index:
                    found = index[piece]
                    break
                end -= 1
            if found is None:
                pieces = [index["[UNK]"]]
                break
            pieces.append(found)
            start = end
        ids.extend(pieces)
    return ids


def pack(lines, vocabulary, seq_length, lowercase=True):
    """[CLS] + seq_length - 2 tokens + [SEP] sequences of the token stream of ``lines`` (the rest dropped)."""
    stream = [i for line in lines if line.strip() for i in wordpiece_ids(line, vocabulary, lowercase)]
    body = seq_length - 2
    cls, sep = vocabulary.index("[CLS]"), vocabulary.index("[SEP]")
    return np.array([[cls] + stream[k * body:(k + 1) * body] + [sep] for k in range(len(stream) // body)],
                     dtype=np.int32).reshape(-1, seq_length)


def mask(input_ids, scores, choices, random_tokens, *, pad, cls, sep, mask_id, mask_rate, max_predictions):
    """BERT's masking of one sequence given its random numbers: (input_ids, positions, ids, weights, kinds).

    ``kinds`` names what happened at each predicted position: 'mask', 'random' or 'keep'.
    """
    input_ids = np.asarray(input_ids)
    maskable = [i for i, token in enumerate(input_ids) if token not in (pad, cls, sep)]
    tokens = int(np.sum(input_ids != pad))
    count = min(max_predictions, max(1, int(round(tokens * mask_rate))), len(maskable))
    chosen = sorted(sorted(maskable, key=lambda i: (scores[i], i))[:count])
    out = input_ids.copy()
    kinds = []
    for position in chosen:
        if choices[position] < 0.8:
            out[position], kind = mask_id, "mask"
        elif choices[position] < 0.9:
            out[position], kind = random_tokens[position], "random"
        else:
            kind = "keep"
        kinds.append(kind)
    padding = max_predictions - count
    positions = np.array(chosen + [0] * padding, np.int32)
    ids = np.array([input_ids[p] for p in chosen] + [0] * padding, np.int32)
    weights = np.array([1.0] * count + [0.0] * padding, np.float32)
    return out, positions, ids, weights, kinds
