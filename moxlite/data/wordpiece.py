"""WordPiece vocabularies and tokenization, with tensorflow-text.

Tokenization is tensorflow-text's ``BertTokenizer``: BERT's basic tokenizer
(lower-casing with accents stripped when ``lowercase``, splitting on white space,
punctuation and CJK characters) and then greedy longest-match-first WordPiece with
the ``##`` continuation prefix, so a BERT ``vocab.txt`` tokenizes text as Google's
``create_pretraining_data.py`` does. keras-hub's ``WordPieceTokenizer`` and
``compute_word_piece_vocabulary`` wrap the same tensorflow-text ops; they are not
used here because importing keras-hub costs seconds more than tensorflow-text, and
its default splitting is not BERT's basic tokenizer.

A vocabulary comes from a file (one token per line, id = line number) or is learned
from the training files with tensorflow-text's BERT vocabulary learner
(``bert_vocab_from_dataset``) and cached: the cache file's name is a digest of the
corpus bytes and of the settings, so a changed corpus or setting learns again and
an unchanged one reads the file. The cache folder is ``cache_dir``, else
``$MOXLITE_CACHE_DIR/vocabularies``, else ``~/.cache/moxlite/vocabularies``.
"""

import hashlib
import os

import tensorflow as tf

from moxlite import logs
from moxlite.data import text_checks
from moxlite.data.text_checks import SPECIAL_TOKENS

CORPUS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "text_corpus")
BUNDLED_TRAIN = os.path.join(CORPUS_DIR, "train.txt")
BUNDLED_HELD_OUT = os.path.join(CORPUS_DIR, "heldout.txt")
BUNDLED_VOCABULARY = os.path.join(CORPUS_DIR, "vocab.txt")
BUNDLED_VOCAB_SIZE = 6000   # the vocab_size bundled vocab.txt was learned with (tools/make_text_corpus.py)
# Changing how vocabularies are learned changes this, so that older cache files are not read.
LEARNER_VERSION = "bert_vocab_from_dataset/lower_thresh=3"
LEARN_BATCH = 1024   # lines per batch fed to the learner
# The learner's settings: a word counts from 3 occurrences (its default, 10, stops a corpus of a
# megabyte at about 2,600 tokens whatever vocab_size asks; 3 gives 5,735 of 6,000 on the bundled one).
LEARN_PARAMS = {"lower_thresh": 3}


def write_vocabulary(path, tokens):
    """Write ``tokens`` one per line (BERT's vocab.txt layout)."""
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        handle.write("".join(token + "\n" for token in tokens))


def learn_vocabulary(files, vocab_size, lowercase=True):
    """A WordPiece vocabulary of about ``vocab_size`` tokens learned from the lines of ``files``.

    BERT's special tokens come first ([PAD] is id 0); the learner is tensorflow-text's
    ``bert_vocab_from_dataset`` with BERT's basic tokenizer as ``tokenize`` uses it.
    """
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset as bert_vocab

    lines = tf.data.TextLineDataset(list(files)).filter(lambda line: tf.strings.length(line) > 0)
    tokens = bert_vocab.bert_vocab_from_dataset(
        lines.batch(LEARN_BATCH), vocab_size=int(vocab_size), reserved_tokens=list(SPECIAL_TOKENS),
        bert_tokenizer_params={"lower_case": bool(lowercase)}, learn_params=dict(LEARN_PARAMS))
    text_checks.check_vocabulary(tokens, "vocab_size", "the learned vocabulary")
    return tokens


def default_cache_dir():
    """Where learned vocabularies are kept when no cache_dir is given."""
    root = os.environ.get("MOXLITE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "moxlite")
    return os.path.join(root, "vocabularies")


def corpus_digest(files, vocab_size, lowercase):
    """The hex digest naming a learned vocabulary: the corpus bytes, in order, and the settings."""
    digest = hashlib.sha256(f"{LEARNER_VERSION}\0{int(vocab_size)}\0{bool(lowercase)}\0".encode())
    for path in files:
        with tf.io.gfile.GFile(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def cached_vocabulary(files, vocab_size, lowercase=True, cache_dir=None):
    """(tokens, path of the cache file): the vocabulary learned from ``files``, learned once per corpus."""
    folder = cache_dir or default_cache_dir()
    path = os.path.join(folder, f"vocab-{corpus_digest(files, vocab_size, lowercase)[:20]}.txt")
    if os.path.exists(path):
        return text_checks.read_vocabulary_file(path, "cache_dir"), path
    logs.get_logger().info("Learning a WordPiece vocabulary of about %d tokens from %d file(s); cached in %s",
                           vocab_size, len(files), path)
    tokens = learn_vocabulary(files, vocab_size, lowercase)
    os.makedirs(folder, exist_ok=True)
    partial = f"{path}.{os.getpid()}.partial"
    write_vocabulary(partial, tokens)
    os.replace(partial, path)   # a reader never sees half a file
    return tokens, path


class WordPiece:
    """A vocabulary and its tokenizer: ``tokenize(lines)`` gives the int32 ids of each line (ragged).

    ``ids`` maps BERT's special tokens to their ids; ``vocab_size`` is the number of tokens.
    """

    def __init__(self, tokens, lowercase=True):
        import tensorflow_text

        text_checks.check_vocabulary(list(tokens))
        self.tokens = list(tokens)
        self.vocab_size = len(self.tokens)
        self.lowercase = bool(lowercase)
        self.ids = {token: self.tokens.index(token) for token in SPECIAL_TOKENS}
        table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(self.tokens), tf.range(self.vocab_size, dtype=tf.int64)),
            default_value=self.ids[text_checks.UNK])
        self._tokenizer = tensorflow_text.BertTokenizer(table, token_out_type=tf.int32,
                                                        unknown_token=text_checks.UNK, lower_case=self.lowercase)

    def tokenize(self, lines):
        """int32 ids of each of the string tensor ``lines`` [N]: a RaggedTensor [N, None]."""
        return self._tokenizer.tokenize(lines).merge_dims(-2, -1)

    def special_ids(self):
        """The ids never masked: [PAD], [CLS], [SEP] (and [UNK], [MASK], which carry no word to predict)."""
        return sorted(self.ids.values())


def vocabulary_tokens(vocabulary, files, vocab_size, lowercase=True, cache_dir=None):
    """The tokens of ``vocabulary`` (a file), or of one learned from ``files`` and cached when it is None."""
    if vocabulary:
        return text_checks.read_vocabulary_file(vocabulary)
    tokens, _ = cached_vocabulary(files, vocab_size, lowercase, cache_dir)
    return tokens
