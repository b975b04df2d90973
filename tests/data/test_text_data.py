"""The masked-LM data sets against independent references (tests/textlib.py) on fixed text.

WordPiece ids, packing and masking (positions, ids, weights, the 80/10/10 rule) are
compared with a plain-Python / NumPy re-implementation of Google BERT's rules; BERT's
TFRecord schema round-trips through write_bert_tfrecord and a reader; bad input is one
DataOptionError naming the option.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from moxlite.contract import ModeKeys
from moxlite.data import masking, text_checks, text_datasets, wordpiece
from moxlite.data.sources import DataOptionError
from tests import textlib

TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "Naïve readers say: it's unaffable, or is it?",
    "",
    "Dogs jumped; foxes ran quickly (again) -- zebras were unknowable.",
    "Python's docstrings describe the standard library's functions.",
]
# A small vocabulary: whole words, a few continuation pieces, punctuation; 'zebras' splits into [UNK].
VOCABULARY = textlib.SPECIAL + [
    ".", ",", ":", ";", "?", "'", "(", ")", "-", "the", "quick", "brown", "fox", "jump", "##s", "##ed", "over",
    "lazy", "dog", "naive", "reader", "say", "it", "un", "##aff", "##able", "or", "is", "ran", "##ly", "again",
    "were", "know", "python", "doc", "##string", "describe", "standard", "library", "function", "es", "##es", "s",
]


@pytest.fixture
def corpus(tmp_path):
    text_path, vocab_path = tmp_path / "corpus.txt", tmp_path / "vocab.txt"
    text_path.write_text("\n".join(TEXT * 4) + "\n", encoding="utf-8")
    wordpiece.write_vocabulary(str(vocab_path), VOCABULARY)
    return str(text_path), str(vocab_path)


def test_wordpiece_ids_match_berts_rules_on_fixed_text():
    tokenizer = wordpiece.WordPiece(VOCABULARY)
    ragged = tokenizer.tokenize(tf.constant(TEXT))
    for line, ids in zip(TEXT, ragged.to_list()):
        assert ids == textlib.wordpiece_ids(line, VOCABULARY), line
    unk = VOCABULARY.index("[UNK]")
    assert unk in ragged.to_list()[3] and unk not in ragged.to_list()[0]   # 'zebras' has no pieces; the fox has


def reconstruct(example):
    """The sequence before masking: the masked input with the original ids put back."""
    ids = example["input_ids"].copy()
    real = example["masked_lm_weights"] > 0
    ids[example["masked_lm_positions"][real]] = example["masked_lm_ids"][real]
    return ids


def test_text_lines_are_packed_into_cls_sep_sequences_as_the_reference(corpus):
    text_path, vocab_path = corpus
    examples = list(text_datasets.text_mlm_dataset([text_path], vocab_path, seq_length=16, max_predictions=3)
                    .as_numpy_iterator())
    expected = textlib.pack(TEXT * 4, VOCABULARY, 16)
    assert len(examples) == len(expected) > 5
    np.testing.assert_array_equal(np.stack([reconstruct(e) for e in examples]), expected)
    for example in examples:
        assert example["input_ids"].dtype == np.int32 and example["masked_lm_weights"].dtype == np.float32
        np.testing.assert_array_equal(example["input_mask"], np.ones(16, np.int32))
        np.testing.assert_array_equal(example["segment_ids"], np.zeros(16, np.int32))


def sequences_with_padding(count, length, vocab_size, seed=3):
    """Random token sequences [CLS] ... [SEP] [PAD]...: padding of 0 to length // 2 tokens."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(count):
        real = int(rng.integers(length // 2, length + 1))
        body = rng.integers(len(textlib.SPECIAL), vocab_size, real - 2)
        rows.append(np.concatenate([[2], body, [3], np.zeros(length - real, np.int64)]))
    return np.stack(rows).astype(np.int32)


def test_masking_matches_the_numpy_reference_and_the_80_10_10_rule():
    length, vocab_size, seed, max_predictions = 40, 50, 7, 5
    sequences = sequences_with_padding(400, length, vocab_size)
    ids = {token: index for index, token in enumerate(textlib.SPECIAL)}
    dataset = text_datasets.masked_examples(tf.data.Dataset.from_tensor_slices(sequences), seed=seed,
                                            vocab_size=vocab_size, ids=ids, mask_rate=0.15,
                                            max_predictions=max_predictions)
    kinds = []
    for index, example in enumerate(dataset.as_numpy_iterator()):
        scores, choices, random_tokens = (t.numpy() for t in masking.draw(tf.constant([seed, index], tf.int64),
                                                                          length, vocab_size))
        want_ids, positions, lm_ids, weights, example_kinds = textlib.mask(
            sequences[index], scores, choices, random_tokens, pad=0, cls=2, sep=3, mask_id=4, mask_rate=0.15,
            max_predictions=max_predictions)
        np.testing.assert_array_equal(example["input_ids"], want_ids)
        np.testing.assert_array_equal(example["masked_lm_positions"], positions)
        np.testing.assert_array_equal(example["masked_lm_ids"], lm_ids)
        np.testing.assert_array_equal(example["masked_lm_weights"], weights)
        np.testing.assert_array_equal(example["input_mask"], (sequences[index] != 0).astype(np.int32))
        chosen = positions[weights > 0]
        assert not np.isin(sequences[index][chosen], [0, 2, 3]).any()   # never [PAD], [CLS], [SEP]
        kinds += example_kinds
    total = len(kinds)
    assert total > 1500
    for kind, share in (("mask", 0.8), ("random", 0.1), ("keep", 0.1)):
        spread = 4 * np.sqrt(total * share * (1 - share))   # 4 binomial standard deviations
        assert abs(kinds.count(kind) - total * share) < spread, (kind, kinds.count(kind), total)


def test_masks_are_fixed_by_the_seed_and_change_with_it(corpus):
    text_path, vocab_path = corpus

    def positions(seed):
        dataset = text_datasets.text_mlm_dataset([text_path], vocab_path, seq_length=16, max_predictions=3, seed=seed)
        return np.stack([e["masked_lm_positions"] for e in dataset.as_numpy_iterator()])

    np.testing.assert_array_equal(positions(1), positions(1))
    assert not np.array_equal(positions(1), positions(2))


def test_shards_of_the_examples_are_disjoint_and_complete(corpus):
    """run() shards input_fn's data set by element (dataset.shard): each worker's examples are masked as
    in one process, and together they are all of them."""
    text_path, vocab_path = corpus
    data = text_datasets.text_mlm_dataset([text_path], vocab_path, seq_length=12, max_predictions=2, seed=5)
    whole = [e["input_ids"].tolist() for e in data.as_numpy_iterator()]
    shards = [[e["input_ids"].tolist() for e in data.shard(2, index).as_numpy_iterator()] for index in (0, 1)]
    assert shards[0] == whole[0::2] and shards[1] == whole[1::2]


def test_a_learned_vocabulary_is_cached_by_corpus_and_settings(tmp_path, monkeypatch):
    text_path = tmp_path / "corpus.txt"
    text_path.write_text("\n".join(TEXT * 20) + "\n", encoding="utf-8")
    cache = tmp_path / "cache"
    tokens, path = wordpiece.cached_vocabulary([str(text_path)], 120, cache_dir=str(cache))
    assert tokens[:5] == textlib.SPECIAL and os.path.dirname(path) == str(cache) and os.path.exists(path)
    ids = wordpiece.WordPiece(tokens).tokenize(tf.constant(TEXT[:1])).to_list()[0]
    assert ids == textlib.wordpiece_ids(TEXT[0], tokens) and tokens.index("[UNK]") not in ids

    def learn_again(*args, **kwargs):
        raise AssertionError("learned again")

    monkeypatch.setattr(wordpiece, "learn_vocabulary", learn_again)
    assert wordpiece.cached_vocabulary([str(text_path)], 120, cache_dir=str(cache)) == (tokens, path)
    with pytest.raises(AssertionError, match="learned again"):   # another setting is another vocabulary
        wordpiece.cached_vocabulary([str(text_path)], 121, cache_dir=str(cache))
    text_path.write_text("Other text entirely.\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="learned again"):   # and so is another corpus
        wordpiece.cached_vocabulary([str(text_path)], 120, cache_dir=str(cache))


def bert_examples(count, seq_length, max_predictions, next_sentence, seed=0):
    rng = np.random.default_rng(seed)
    examples = []
    for _ in range(count):
        example = {
            "input_ids": rng.integers(0, 30522, seq_length), "input_mask": rng.integers(0, 2, seq_length),
            "segment_ids": rng.integers(0, 2, seq_length),
            "masked_lm_positions": rng.integers(0, seq_length, max_predictions),
            "masked_lm_ids": rng.integers(0, 30522, max_predictions),
            "masked_lm_weights": rng.integers(0, 2, max_predictions).astype(np.float32),
        }
        if next_sentence:
            example["next_sentence_labels"] = rng.integers(0, 2, 1)
        examples.append(example)
    return examples


@pytest.mark.parametrize("next_sentence", [True, False])
def test_bert_tfrecords_round_trip_in_googles_schema(tmp_path, next_sentence):
    path = str(tmp_path / "pretrain.tfrecord")
    examples = bert_examples(6, 12, 3, next_sentence)
    text_datasets.write_bert_tfrecord(path, examples)
    # The file holds what create_pretraining_data.py writes: int64 lists, and floats for the weights.
    first = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(path))).numpy()).features.feature
    assert first["masked_lm_weights"].WhichOneof("kind") == "float_list"
    assert all(first[name].WhichOneof("kind") == "int64_list" for name in text_datasets.INT_FEATURES)
    read = list(text_datasets.bert_tfrecord_dataset(path).as_numpy_iterator())
    assert len(read) == len(examples)
    for got, want in zip(read, examples):
        assert set(got) == set(want)
        for name, value in want.items():
            assert got[name].dtype == (np.float32 if name == "masked_lm_weights" else np.int32)
            np.testing.assert_array_equal(got[name], value)


def test_bert_tfrecords_of_another_schema_are_one_line_naming_the_feature(tmp_path):
    path = str(tmp_path / "other.tfrecord")
    examples = bert_examples(2, 8, 2, True)
    for example in examples:
        del example["masked_lm_weights"]
    with pytest.raises(DataOptionError, match="has no 'masked_lm_weights'"):
        text_datasets.write_bert_tfrecord(path, examples)
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(tf.train.Example(features=tf.train.Features(feature={
            "input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=[1, 2]))})).SerializeToString())
    with pytest.raises(DataOptionError, match=r"files: record 0 of .* lacks BERT's 'input_mask'"):
        text_datasets.bert_tfrecord_dataset(path)
    good = str(tmp_path / "good.tfrecord")
    text_datasets.write_bert_tfrecord(good, bert_examples(2, 8, 2, True))
    with pytest.raises(DataOptionError, match="seq_length: 16, but the records of .* hold 8; set seq_length: 8"):
        text_datasets.bert_tfrecord_dataset(good, seq_length=16)


def test_bert_synthetic_tokens_and_masks(tmp_path):
    data = text_datasets.bert_synthetic(vocab_size=40, seq_length=10, max_predictions=2, num_samples=8,
                                        eval_samples=4, next_sentence=True, seed=3)
    train = list(data.input_fn(ModeKeys.TRAIN).take(8).as_numpy_iterator())
    again = list(data.input_fn(ModeKeys.TRAIN).take(8).as_numpy_iterator())
    assert all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(train, again))
    held_out = list(data.input_fn(ModeKeys.EVAL).as_numpy_iterator())
    assert len(held_out) == 4 and data.num_samples == 8 and data.text.vocab_size == data.num_classes == 40
    for example in train + held_out:
        original = reconstruct(example)
        assert original[0] == 2 and original[-1] == 3 and (original[1:-1] >= 5).all() and (original < 40).all()
        assert example["next_sentence_labels"].shape == (1,) and example["next_sentence_labels"][0] in (0, 1)
        assert example["masked_lm_weights"].sum() == 2   # round(10 * 0.15) = 2 predictions


# ----------------------------------------------------------------- bad input: one line naming the option

def test_bad_text_input_names_the_option_and_the_fix(tmp_path, corpus):
    text_path, vocab_path = corpus
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(DataOptionError, match=r"files: '.*empty.txt' is empty \(or only blank lines\)"):
        text_datasets.text_mlm_dataset([str(empty)], vocab_path)
    no_mask = tmp_path / "no_mask.txt"
    wordpiece.write_vocabulary(str(no_mask), [t for t in VOCABULARY if t != "[MASK]"])
    with pytest.raises(DataOptionError, match=r"vocabulary: '.*no_mask.txt' has no \[MASK\] token; masked-LM"):
        text_datasets.text_mlm_dataset([text_path], str(no_mask))
    cases = [
        (dict(mask_rate=0.0), "mask_rate: 0.0 must be a number in (0, 1)"),
        (dict(mask_rate=1.0), "mask_rate: 1.0 must be a number in (0, 1)"),
        (dict(seq_length=16, max_predictions=15), "max_predictions: 15 is more than the 14 tokens a sequence of "
                                                  "seq_length 16 holds between [CLS] and [SEP]; use at most 14"),
        (dict(seq_length=2), "seq_length: 2 must be an integer >= 3"),
    ]
    for options, message in cases:
        with pytest.raises(DataOptionError) as raised:
            text_datasets.text_mlm_dataset([text_path], vocab_path, **options)
        assert str(raised.value).startswith(message) and "\n" not in str(raised.value)


def test_a_sequence_longer_than_the_models_is_refused():
    text_checks.check_sequence_length(512, 512)
    with pytest.raises(DataOptionError, match="seq_length: 513 is longer than the model's max_sequence_length 512 "
                                              r"\(its position embeddings\); use seq_length <= 512"):
        text_checks.check_sequence_length(513, 512)


def test_a_vocabulary_or_a_text_pattern_naming_a_directory_is_one_line_with_the_fix(tmp_path):
    """Both say 'is a directory' and what to give instead: the file in it, or a glob of the files."""
    with pytest.raises(DataOptionError) as raised:
        text_checks.read_vocabulary_file(str(tmp_path))
    assert str(raised.value) == (f"vocabulary: {str(tmp_path)!r} is a directory; give the vocabulary file in it, "
                                 f"e.g. {str(tmp_path) + '/vocab.txt'!r}")
    with pytest.raises(DataOptionError) as raised:
        text_checks.text_files(str(tmp_path), "train_files")
    assert str(raised.value) == (f"train_files: {str(tmp_path)!r} is a directory; give glob patterns of the text "
                                 f"files in it, e.g. {os.path.join(str(tmp_path), '*.txt')!r}")
