"""The checks of the text data sets that need no TensorFlow: options, vocabularies, text files.

The recipe loader runs them before TensorFlow is imported, and the Python API
(``moxlite.data.text``) runs the same ones, so a bad setting is one line naming
the option and the fix, before anything is read or written:

- ``check_masking(seq_length, mask_rate, max_predictions)``: mask_rate in (0, 1),
  max_predictions in [1, seq_length - 2] (the tokens between [CLS] and [SEP]);
- ``check_sequence_length(seq_length, model_max)``: the data's sequences fit the
  model's position embeddings (the model's config gives ``model_max``);
- ``check_vocabulary(tokens, option)``: BERT's special tokens are all there;
- ``text_files(patterns, option)``: the patterns match files, none of them empty.

Errors are ``sources.DataOptionError``, whose ``option`` a recipe maps to its line.
"""

from moxlite.data import sources
from moxlite.data.sources import DataOptionError

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
EVAL_FILES_MISSING = ("is empty while train_files are given; give the held-out text files (masked-LM accuracy is "
                      "measured on them), or leave both empty for the bundled corpus")
# The smallest sequence holds [CLS], one token and [SEP].
MIN_SEQ_LENGTH = 3
# Bytes read from the start of a text file to tell it holds text (the whole file is read later, by tf.data).
TEXT_PROBE_BYTES = 1 << 16


def check_masking(seq_length, mask_rate, max_predictions):
    """seq_length >= 3, 0 < mask_rate < 1, 1 <= max_predictions <= seq_length - 2 (DataOptionError)."""
    if not _is_int(seq_length) or seq_length < MIN_SEQ_LENGTH:
        raise DataOptionError("seq_length", f"{seq_length!r} must be an integer >= {MIN_SEQ_LENGTH} ([CLS], a token "
                                            f"and [SEP]), e.g. 128")
    if isinstance(mask_rate, bool) or not isinstance(mask_rate, (int, float)) or not 0 < mask_rate < 1:
        raise DataOptionError("mask_rate", f"{mask_rate!r} must be a number in (0, 1): the share of tokens masked, "
                                           f"BERT's is 0.15")
    if not _is_int(max_predictions) or max_predictions < 1:
        raise DataOptionError("max_predictions", f"{max_predictions!r} must be a positive integer, e.g. 20 for "
                                                 f"seq_length 128 (BERT's)")
    if max_predictions > seq_length - 2:
        raise DataOptionError("max_predictions", f"{max_predictions} is more than the {seq_length - 2} tokens a "
                                                 f"sequence of seq_length {seq_length} holds between [CLS] and [SEP]; "
                                                 f"use at most {seq_length - 2}, e.g. "
                                                 f"{max(1, round(seq_length * 0.15))}")


def check_sequence_length(seq_length, model_max, option="seq_length", model_option="max_sequence_length"):
    """The data's ``seq_length`` is at most the model's ``model_max`` positions (DataOptionError naming ``option``)."""
    if model_max is not None and seq_length > model_max:
        raise DataOptionError(option, f"{seq_length} is longer than the model's {model_option} {model_max} (its "
                                      f"position embeddings); use seq_length <= {model_max}, or a model with "
                                      f"{model_option} >= {seq_length}")


def check_synthetic(vocab_size, num_samples, eval_samples):
    """vocab_size leaves tokens past the special ones; the sample counts are positive (DataOptionError)."""
    if not _is_int(vocab_size) or vocab_size <= len(SPECIAL_TOKENS):
        raise DataOptionError("vocab_size", f"{vocab_size!r} must be an integer > {len(SPECIAL_TOKENS)} (ids 0-4 are "
                                            f"{', '.join(SPECIAL_TOKENS)}), e.g. 30522 as BERT's")
    for name, value in (("num_samples", num_samples), ("eval_samples", eval_samples)):
        if not _is_int(value) or value < 1:
            raise DataOptionError(name, f"{value!r} must be a positive integer")


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


# ----------------------------------------------------------------- vocabularies

def check_vocabulary(tokens, option="vocabulary", where="the vocabulary"):
    """``tokens`` (one per id) hold every special token once, and more than those (DataOptionError)."""
    missing = [token for token in SPECIAL_TOKENS if token not in tokens]
    if missing:
        raise DataOptionError(option, f"{where} has no {', '.join(missing)} token; masked-LM examples need "
                                      f"{', '.join(SPECIAL_TOKENS)}: add them (one per line), or use a BERT "
                                      f"vocab.txt, or set vocabulary: null to learn one from the corpus")
    duplicated = [token for token in SPECIAL_TOKENS if tokens.count(token) > 1]
    if duplicated:
        raise DataOptionError(option, f"{where} lists {', '.join(duplicated)} more than once; keep one line each")
    if len(tokens) <= len(SPECIAL_TOKENS):
        raise DataOptionError(option, f"{where} holds only its special tokens; add the word pieces, one per line")


def parse_vocabulary(text):
    """The tokens of a vocabulary file's text: one per line, id = line number from 0 (BERT's vocab.txt)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def read_vocabulary_file(path, option="vocabulary"):
    """The checked tokens of the vocabulary file ``path`` (local or object storage)."""
    from moxlite import file as mox_file

    if not mox_file.exists(path):
        raise DataOptionError(option, f"{path!r} does not exist; give a vocabulary file (one token per line, "
                                      f"BERT's vocab.txt), or null to learn one from the corpus")
    if mox_file.is_directory(path):
        raise DataOptionError(option, f"{path!r} is a directory; give the vocabulary file in it, e.g. "
                                      f"{path.rstrip('/') + '/vocab.txt'!r}")
    try:
        tokens = parse_vocabulary(mox_file.read(path, binary=True).decode("utf-8"))
    except UnicodeDecodeError:
        raise DataOptionError(option, f"{path!r} is not UTF-8 text; give a vocabulary file, one token per "
                                      f"line") from None
    if not any(token.strip() for token in tokens):
        raise DataOptionError(option, f"{path!r} is empty; give a vocabulary file, one token per line, or null to "
                                      f"learn one from the corpus")
    check_vocabulary(tokens, option, f"{path!r}")
    return tokens


# ----------------------------------------------------------------- text files

def text_file_problem(head):
    """None when ``head`` (a file's first bytes) starts a file of text lines; else what is wrong."""
    if not head.strip():
        return "is empty (or only blank lines); give files of text, one sentence or paragraph a line"
    if b"\0" in head:
        return "is not a text file (it holds NUL bytes); give UTF-8 text files, one sentence or paragraph a line"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as error:
        if error.start < len(head) - 4:   # a character cut at the end of the probe is fine
            return f"is not UTF-8 text (byte {error.start}); give UTF-8 text files"
    return None


def text_files(patterns, option):
    """The sorted files of text the glob ``patterns`` match (local or object storage); DataOptionError naming ``option`` otherwise."""
    if isinstance(patterns, str):
        patterns = [patterns]
    return sources.checked_files(patterns, option, "text files", "*.txt", TEXT_PROBE_BYTES, text_file_problem,
                                 remote=True)


def check_files(name, options):
    """The recipe checks of masked-LM data set ``name`` (text, bert_tfrecord, bert_synthetic) before TensorFlow."""
    if name == "bert_tfrecord":
        sources.tfrecord_files(options["train_files"], "train_files")
        sources.tfrecord_files(options["eval_files"], "eval_files")
        return
    check_masking(options["seq_length"], options["mask_rate"], options["max_predictions"])
    if name == "bert_synthetic":
        check_synthetic(options["vocab_size"], options["num_samples"], options["eval_samples"])
        return
    if options["train_files"] and not options["eval_files"]:
        raise DataOptionError("eval_files", EVAL_FILES_MISSING)
    if options["train_files"]:
        text_files(options["train_files"], "train_files")
        text_files(options["eval_files"], "eval_files")
    if options.get("vocabulary"):
        read_vocabulary_file(options["vocabulary"])
