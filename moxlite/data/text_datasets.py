"""Masked-LM data sets: ``text`` (files of text lines), ``bert_tfrecord`` (BERT's TFRecord schema), ``bert_synthetic``.

Every element is one example, a dict of tensors (``run(auto_batch=True)`` batches them):
``input_ids``, ``input_mask``, ``segment_ids`` int32 [L]; ``masked_lm_positions``,
``masked_lm_ids`` int32 [P]; ``masked_lm_weights`` float32 [P] (1.0 for a prediction,
0.0 for padding); ``next_sentence_labels`` int32 [1] only where the data has it
(``bert_tfrecord`` files that hold it, ``bert_synthetic`` with ``next_sentence``).

``text``: the lines of the files are tokenized with WordPiece (``moxlite.data.wordpiece``)
and packed, in file order, into sequences ``[CLS] <seq_length - 2 tokens> [SEP]``; the
tokens left at the end, too few for a sequence, are dropped. Sequences are then masked
(``moxlite.data.masking``) with stateless random numbers of (seed, index): the held-out
split is masked the same way every time, the training split anew each epoch (after
its shuffle), deterministically. All of this runs inside tf.data.

``bert_tfrecord``: the records Google BERT's ``create_pretraining_data.py`` writes (and
MindSpore's ``run_pretrain.py`` reads): int64 features ``input_ids``, ``input_mask``,
``segment_ids`` [seq_length], ``masked_lm_positions``, ``masked_lm_ids``
[max_predictions], ``next_sentence_labels`` [1] and float ``masked_lm_weights``
[max_predictions]; the integers are cast to int32 as run_pretraining.py does.
``write_bert_tfrecord`` writes them.
"""

import dataclasses
import os
from typing import Optional

import numpy as np
import tensorflow as tf

from moxlite.contract import ModeKeys
from moxlite.data import masking, sources, text_checks, wordpiece
from moxlite.data.sources import DataOptionError
from moxlite.data.text_checks import CLS, MASK, PAD, SEP, SPECIAL_TOKENS

INT_FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids")
SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids")
PREDICTION_FEATURES = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")
NEXT_SENTENCE = "next_sentence_labels"
BERT_FEATURES = SEQUENCE_FEATURES + PREDICTION_FEATURES + (NEXT_SENTENCE,)
LINES_PER_BATCH = 256            # lines tokenized together
EVAL_SEED_OFFSET = 1_000_003     # the held-out split's masks use another stream than training's


@dataclasses.dataclass
class TextFacts:
    """What a masked-LM data set tells the model: vocabulary size, sequence and prediction lengths."""

    vocab_size: int
    seq_length: int
    max_predictions: int
    next_sentence: bool = False
    tokens: Optional[list] = None    # the vocabulary, where it is known (text)


# ----------------------------------------------------------------- packing and masking

def pack_sequences(lines, tokenizer, seq_length, cls_id, sep_id):
    """Sequences ``[CLS] t_1 ... t_{seq_length-2} [SEP]`` (int32 [seq_length]) of the token stream of ``lines``.

    ``lines`` is a Dataset of strings; ``tokenizer(lines [N]) -> ragged int32 [N, None]``.
    Lines follow each other in order with nothing between them; the last tokens, fewer
    than a sequence holds, are dropped.
    """
    body = seq_length - 2
    chunks = lines.batch(LINES_PER_BATCH).map(lambda batch: tokenizer(batch).flat_values)

    def cut(left, tokens):
        stream = tf.concat([left, tokens], 0)
        full = tf.shape(stream)[0] // body
        return stream[full * body:], tf.reshape(stream[:full * body], [full, body])

    sequences = chunks.scan(tf.zeros([0], tf.int32), cut).unbatch()
    ends_cls, ends_sep = tf.constant([cls_id], tf.int32), tf.constant([sep_id], tf.int32)
    return sequences.map(lambda tokens: tf.ensure_shape(tf.concat([ends_cls, tokens, ends_sep], 0), [seq_length]))


def masked_examples(sequences, *, seed, vocab_size, ids, mask_rate, max_predictions):
    """``sequences`` (int32 [L]) masked, example i with the random numbers of (seed, i)."""
    mask = masking.masker(seed=seed, vocab_size=vocab_size, unmaskable_ids=[ids[PAD], ids[CLS], ids[SEP]],
                          pad_id=ids[PAD], mask_id=ids[MASK], mask_rate=mask_rate, max_predictions=max_predictions)
    return sequences.enumerate().map(mask, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _lines(files):
    """The non-empty lines of ``files`` (object-storage files through a local copy)."""
    return tf.data.TextLineDataset(local_paths(files)).filter(lambda line: tf.strings.length(
        tf.strings.strip(line)) > 0)


def local_paths(files):
    """``files`` with each object-storage path replaced by its local copy (moxlite.file.data_cache)."""
    from moxlite.file import data_cache

    paths = []
    for path in files:
        if "://" in path:
            folder, name = path.rsplit("/", 1)
            path = os.path.join(data_cache.local_copy(folder, name), name)
        paths.append(path)
    return paths


def count(dataset):
    """The number of elements of a finite ``dataset`` (one pass)."""
    return int(dataset.reduce(tf.constant(0, tf.int64), lambda total, _: total + 1).numpy())


# ----------------------------------------------------------------- the text data set

def _bundled(patterns, bundled_path):
    return list(patterns) if patterns else [bundled_path]


def text_vocabulary(files, vocabulary=None, vocab_size=6000, lowercase=True, cache_dir=None):
    """The ``wordpiece.WordPiece`` of ``vocabulary`` (a file), else of one learned from ``files`` and cached."""
    return wordpiece.WordPiece(wordpiece.vocabulary_tokens(vocabulary, files, vocab_size, lowercase, cache_dir),
                               lowercase)


def text_mlm_dataset(files, vocabulary=None, seq_length=128, mask_rate=0.15, max_predictions=20, vocab_size=6000,
                     lowercase=True, cache_dir=None, seed=0, shuffle_buffer=0, epochs=1):
    """Masked-LM examples from the text lines of ``files`` (glob patterns, local or obs://).

    vocabulary: a vocabulary file (BERT's vocab.txt), or None to learn about ``vocab_size``
        tokens from ``files`` (cached, see ``moxlite.data.wordpiece``).
    shuffle_buffer: sequences shuffled (seeded) before masking; 0 keeps file order.
    epochs: passes over the files (None: forever); each pass masks anew.
    Returns a Dataset of single examples (see the module's docstring).
    """
    text_checks.check_masking(seq_length, mask_rate, max_predictions)
    paths = text_checks.text_files(files, "files")
    vocab = text_vocabulary(paths, vocabulary, vocab_size, lowercase, cache_dir)
    sequences = pack_sequences(_lines(paths), vocab.tokenize, seq_length, vocab.ids[CLS], vocab.ids[SEP])
    if shuffle_buffer:
        sequences = sequences.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    return masked_examples(sequences.repeat(epochs), seed=seed, vocab_size=vocab.vocab_size, ids=vocab.ids,
                           mask_rate=mask_rate, max_predictions=max_predictions)


@dataclasses.dataclass
class MaskedLMData:
    """A masked-LM data set for ``run``: input_fn(mode) and the facts (as ``datasets.DataSet``, with text ones)."""

    input_fn: object
    num_samples: Optional[int]
    num_eval_samples: Optional[int]
    text: TextFacts
    image_shape: Optional[tuple] = None

    @property
    def num_classes(self):
        """Classes of the masked-LM head: the vocabulary's tokens."""
        return self.text.vocab_size


def _input_fn(train, held_out, epochs, shuffle_buffer, seed, mask):
    """input_fn(mode): TRAIN shuffles, repeats and masks anew each epoch; other modes mask the held-out split once."""

    def input_fn(mode):
        if mode == ModeKeys.TRAIN:
            sequences = train()
            if shuffle_buffer:
                sequences = sequences.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
            return mask(sequences.repeat(epochs), seed)
        return mask(held_out(), seed + EVAL_SEED_OFFSET)

    return input_fn


def text(train_files=(), eval_files=(), vocabulary=None, vocab_size=6000, lowercase=True, seq_length=128,
         mask_rate=0.15, max_predictions=20, cache_dir=None, num_samples=None, epochs=None, shuffle_buffer=10000,
         seed=0):
    """The ``text`` data set of recipes: empty file lists (and vocabulary) mean the bundled corpus's."""
    text_checks.check_masking(seq_length, mask_rate, max_predictions)
    bundled = not train_files
    if train_files and not eval_files:
        raise DataOptionError("eval_files", text_checks.EVAL_FILES_MISSING)
    train_paths = text_checks.text_files(_bundled(train_files, wordpiece.BUNDLED_TRAIN), "train_files")
    eval_paths = text_checks.text_files(_bundled(eval_files, wordpiece.BUNDLED_HELD_OUT), "eval_files")
    if vocabulary is None and bundled and vocab_size == wordpiece.BUNDLED_VOCAB_SIZE and lowercase:
        vocabulary = wordpiece.BUNDLED_VOCABULARY   # learned from the bundled corpus with these settings
    vocab = text_vocabulary(train_paths, vocabulary, vocab_size, lowercase, cache_dir)

    def sequences(paths):
        return lambda: pack_sequences(_lines(paths), vocab.tokenize, seq_length, vocab.ids[CLS], vocab.ids[SEP])

    def mask(dataset, mask_seed):
        return masked_examples(dataset, seed=mask_seed, vocab_size=vocab.vocab_size, ids=vocab.ids,
                               mask_rate=mask_rate, max_predictions=max_predictions)

    if num_samples is None:
        num_samples = count(sequences(train_paths)())
        if not num_samples:
            raise DataOptionError("seq_length", f"{seq_length}: the training files hold fewer tokens than one "
                                                f"sequence of {seq_length}; use a shorter seq_length or more text")
    return MaskedLMData(_input_fn(sequences(train_paths), sequences(eval_paths), epochs, shuffle_buffer, seed, mask),
                        num_samples=num_samples, num_eval_samples=None,
                        text=TextFacts(vocab.vocab_size, seq_length, max_predictions, tokens=vocab.tokens))


# ----------------------------------------------------------------- BERT's TFRecord schema

def bert_features(seq_length, max_predictions, next_sentence=True):
    """The parsing spec of BERT's pre-training records (Google's run_pretraining.py name_to_features)."""
    features = {name: tf.io.FixedLenFeature([seq_length], tf.int64) for name in SEQUENCE_FEATURES}
    features["masked_lm_positions"] = tf.io.FixedLenFeature([max_predictions], tf.int64)
    features["masked_lm_ids"] = tf.io.FixedLenFeature([max_predictions], tf.int64)
    features["masked_lm_weights"] = tf.io.FixedLenFeature([max_predictions], tf.float32)
    if next_sentence:
        features[NEXT_SENTENCE] = tf.io.FixedLenFeature([1], tf.int64)
    return features


def write_bert_tfrecord(path, examples):
    """Write ``examples`` (dicts of 1-D integer / float arrays, BERT's feature names) as BERT's TFRecords.

    Integer features are written as int64 lists and ``masked_lm_weights`` as a float list, as
    ``create_pretraining_data.py`` writes them; ``next_sentence_labels`` is written when present.
    """
    with tf.io.TFRecordWriter(path) as writer:
        for example in examples:
            feature = {}
            for name in BERT_FEATURES:
                if name not in example:
                    if name == NEXT_SENTENCE:
                        continue
                    raise DataOptionError("examples", f"an example has no {name!r}; give {', '.join(BERT_FEATURES[:-1])}")
                values = np.asarray(example[name]).reshape(-1)
                if name == "masked_lm_weights":
                    feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values.astype(np.float32)))
                else:
                    feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values.astype(np.int64)))
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


def probe_bert_schema(paths, option):
    """(seq_length, max_predictions, has next_sentence_labels) from the first records of ``paths``.

    Every record read must hold the BERT features with consistent lengths (DataOptionError naming ``option``).
    """
    from moxlite.data import probe

    fail = lambda message: DataOptionError(option, message)   # noqa: E731
    found = None
    for path, index, record in probe.first_records(paths, fail):
        example = probe.parse_example(path, index, record, fail)
        kinds = probe.feature_kinds(example)
        wanted = {name: "float" if name == "masked_lm_weights" else "int64" for name in BERT_FEATURES[:-1]}
        wrong = [name for name, kind in wanted.items() if kinds.get(name) != kind]
        if wrong:
            listed = ", ".join(f"{k!r} ({v})" for k, v in sorted(kinds.items())) or "none"
            raise fail(f"record {index} of {path!r} lacks BERT's {', '.join(repr(w) for w in wrong)}; its features "
                       f"are {listed}; expected the records of create_pretraining_data.py (int64 "
                       f"{', '.join(INT_FEATURES)}, {NEXT_SENTENCE}; float masked_lm_weights)")
        lengths = {name: len(getattr(example.features.feature[name], f"{wanted[name]}_list").value)
                   for name in wanted}
        shape = (lengths["input_ids"], lengths["masked_lm_ids"], kinds.get(NEXT_SENTENCE) == "int64")
        uneven = [name for name in wanted if lengths[name] != (shape[0] if name in SEQUENCE_FEATURES else shape[1])]
        if uneven:
            raise fail(f"record {index} of {path!r}: {uneven[0]!r} holds {lengths[uneven[0]]} values, but "
                       f"input_ids {shape[0]} and masked_lm_ids {shape[1]}; the record is not BERT's schema")
        if found is not None and shape != found:
            raise fail(f"record {index} of {path!r} has seq_length {shape[0]} and max_predictions {shape[1]}, "
                       f"the first record {found[0]} and {found[1]}; give files written with one setting")
        found = shape
    return found


def _parse_bert(seq_length, max_predictions, next_sentence):
    features = bert_features(seq_length, max_predictions, next_sentence)

    def parse(record):
        example = tf.io.parse_single_example(record, features)
        return {name: tf.cast(value, tf.int32) if value.dtype == tf.int64 else value for name, value in example.items()}

    return parse


def bert_tfrecord_dataset(files, seq_length=None, max_predictions=None, option="files"):
    """BERT's pre-training records in ``files`` (glob patterns), one example a element (module docstring).

    seq_length / max_predictions: None reads them from the first record; given, they must agree with it.
    """
    paths = sources.tfrecord_files([files] if isinstance(files, str) else list(files), option)
    return _bert_records(paths, seq_length, max_predictions, option)[0]


def _bert_records(paths, seq_length, max_predictions, option):
    found_length, found_predictions, next_sentence = probe_bert_schema(paths, option)
    for name, given, found in (("seq_length", seq_length, found_length),
                               ("max_predictions", max_predictions, found_predictions)):
        if given is not None and given != found:
            raise DataOptionError(name, f"{given}, but the records of {paths[0]!r} hold {found}; set {name}: "
                                        f"{found} (or null to read it from the files)")
    dataset = tf.data.TFRecordDataset(paths).map(_parse_bert(found_length, found_predictions, next_sentence),
                                                 num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset, TextFacts(0, found_length, found_predictions, next_sentence)


def bert_tfrecord(train_files=(), eval_files=(), vocab_size=30522, seq_length=None, max_predictions=None,
                  num_samples=None, epochs=None, shuffle_buffer=10000, seed=0):
    """The ``bert_tfrecord`` data set of recipes: the records are used as written (their masks are fixed)."""
    train_paths = sources.tfrecord_files(list(train_files), "train_files")
    eval_paths = sources.tfrecord_files(list(eval_files), "eval_files")
    train, facts = _bert_records(train_paths, seq_length, max_predictions, "train_files")
    held_out, eval_facts = _bert_records(eval_paths, facts.seq_length, facts.max_predictions, "eval_files")
    if eval_facts.next_sentence != facts.next_sentence:
        raise DataOptionError("eval_files", f"the records of {eval_paths[0]!r} {'have' if eval_facts.next_sentence else 'lack'} "
                                            f"{NEXT_SENTENCE} and the training records do not; give files of one kind")

    def input_fn(mode):
        if mode == ModeKeys.TRAIN:
            dataset = train
            if shuffle_buffer:
                dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
            return dataset.repeat(epochs)
        return held_out

    facts.vocab_size = vocab_size
    return MaskedLMData(input_fn, num_samples=num_samples, num_eval_samples=None, text=facts)


# ----------------------------------------------------------------- synthetic tokens

def bert_synthetic_sequences(vocab_size, seq_length, start, count_, seed):
    """``count_`` sequences [CLS] random tokens [SEP], numbered from ``start``: tokens uniform in
    [len(SPECIAL_TOKENS), vocab_size) by a stateless generator of (seed, number)."""
    cls_id, sep_id = SPECIAL_TOKENS.index(CLS), SPECIAL_TOKENS.index(SEP)

    def sequence(number):
        body = tf.random.stateless_uniform([seq_length - 2], seed=tf.stack([tf.cast(seed, tf.int64), number]),
                                           minval=len(SPECIAL_TOKENS), maxval=vocab_size, dtype=tf.int32)
        return tf.concat([[cls_id], body, [sep_id]], 0)

    return tf.data.Dataset.range(start, start + count_).map(sequence)


def bert_synthetic(vocab_size=30522, seq_length=128, mask_rate=0.15, max_predictions=20, num_samples=1024,
                   eval_samples=256, next_sentence=False, epochs=None, shuffle_buffer=10000, seed=0):
    """The ``bert_synthetic`` data set: random token sequences of a vocabulary of ``vocab_size``.

    Ids 0-4 are [PAD], [UNK], [CLS], [SEP], [MASK]; ``next_sentence`` adds a random 0/1
    ``next_sentence_labels`` [1] (for models with BERT's next-sentence head).
    """
    text_checks.check_masking(seq_length, mask_rate, max_predictions)
    text_checks.check_synthetic(vocab_size, num_samples, eval_samples)
    ids = {token: index for index, token in enumerate(SPECIAL_TOKENS)}

    def mask(dataset, mask_seed):
        examples = masked_examples(dataset, seed=mask_seed, vocab_size=vocab_size, ids=ids, mask_rate=mask_rate,
                                   max_predictions=max_predictions)
        if not next_sentence:
            return examples

        def add_label(index, features):
            label = tf.random.stateless_uniform([1], seed=tf.stack([tf.cast(mask_seed + 1, tf.int64), index]),
                                                maxval=2, dtype=tf.int32)
            return dict(features, **{NEXT_SENTENCE: label})

        return examples.enumerate().map(add_label)

    return MaskedLMData(
        _input_fn(lambda: bert_synthetic_sequences(vocab_size, seq_length, 0, num_samples, seed),
                  lambda: bert_synthetic_sequences(vocab_size, seq_length, num_samples, eval_samples, seed),
                  epochs, shuffle_buffer, seed, mask),
        num_samples=num_samples, num_eval_samples=eval_samples,
        text=TextFacts(vocab_size, seq_length, max_predictions, next_sentence))


BUILDERS = {"text": text, "bert_tfrecord": bert_tfrecord, "bert_synthetic": bert_synthetic}
