"""The masked-LM data sets in recipes and on the bundled corpus.

A recipe's input.text / bert_synthetic block reaches the builders with its options and
gives the model the text facts (vocab_size, seq_length, max_predictions); the bundled
corpus, its vocabulary and its held-out split tokenize with few unknown words; a bad
vocabulary in a recipe is one located line and nothing written; the masked-LM API is
reachable as moxlite.data.<name>.
"""

import numpy as np
import pytest
import tensorflow as tf

import moxlite.data
from moxlite import errors
from moxlite.contract import ModeKeys
from moxlite.data import text_datasets, wordpiece
from moxlite.recipes import builders, cli, loader
from tests import textlib
from tests.s3lib import s3  # noqa: F401  (the server fixture)


def masked_lm_model_fn(inputs, mode):
    """Named by the recipes below; they are only planned, never run."""
    raise AssertionError("not called")


def plan_input(tmp_path, block):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"run: {{steps: 5, log_dir: {tmp_path / 'logs'}}}\ninput: {block}\n"
                      f"model: {{name: 'tests.recipes.test_text_recipes:masked_lm_model_fn'}}\noptimizer: {{name: sgd}}\n")
    loaded = loader.load([str(recipe)])
    return builders._build_input(loaded)


def test_a_recipe_gives_the_model_its_text_facts_and_dict_examples(tmp_path):
    input_fn, facts = plan_input(tmp_path, "{name: bert_synthetic, bert_synthetic: {vocab_size: 64, seq_length: 12, "
                                           "max_predictions: 3, num_samples: 16, eval_samples: 8, seed: 4}}")
    text_facts = (facts["vocab_size"], facts["seq_length"], facts["max_predictions"], facts["num_samples"])
    assert text_facts == (64, 12, 3, 16)
    assert facts["next_sentence"] is False and facts["num_classes"] == 64
    example = next(iter(input_fn(ModeKeys.TRAIN)))
    want = next(iter(text_datasets.bert_synthetic(vocab_size=64, seq_length=12, max_predictions=3, num_samples=16,
                                                  eval_samples=8, seed=4, shuffle_buffer=10000)
                     .input_fn(ModeKeys.TRAIN)))
    assert sorted(example) == sorted(want) == sorted(text_datasets.SEQUENCE_FEATURES + text_datasets.PREDICTION_FEATURES)
    for name in example:
        np.testing.assert_array_equal(example[name].numpy(), want[name].numpy())


def test_the_bundled_corpus_tokenizes_with_its_vocabulary_and_holds_out_other_text():
    tokens = wordpiece.vocabulary_tokens(wordpiece.BUNDLED_VOCABULARY, [], 0)
    assert tokens[:5] == textlib.SPECIAL and len(tokens) > 5000
    with open(wordpiece.BUNDLED_TRAIN, encoding="utf-8") as handle:
        train = set(handle.read().splitlines()) - {""}
    with open(wordpiece.BUNDLED_HELD_OUT, encoding="utf-8") as handle:
        held_out = [line for line in handle.read().splitlines() if line]
    assert len(held_out) > 500 and not train & set(held_out)   # no held-out paragraph is in the training split
    ids = wordpiece.WordPiece(tokens).tokenize(tf.constant(held_out[:200])).flat_values.numpy()
    assert np.mean(ids == tokens.index("[UNK]")) < 0.01
    sample = held_out[:20]
    got = wordpiece.WordPiece(tokens).tokenize(tf.constant(sample)).to_list()
    assert got == [textlib.wordpiece_ids(line, tokens) for line in sample]


def test_the_text_data_set_reads_the_bundled_corpus_by_default():
    data = text_datasets.text(seq_length=128, max_predictions=20, num_samples=100)
    assert data.text.tokens == wordpiece.vocabulary_tokens(wordpiece.BUNDLED_VOCABULARY, [], 0)
    held_out = list(data.input_fn(ModeKeys.EVAL).as_numpy_iterator())
    assert 150 < len(held_out) < 400   # about 0.1 MB of text in sequences of 126 tokens
    assert all(e["masked_lm_weights"].sum() == 19 for e in held_out)   # round(128 * 0.15) = 19 of 20
    again = list(data.input_fn(ModeKeys.EVAL).take(3).as_numpy_iterator())
    assert all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(held_out, again))  # fixed masks


def test_a_vocabulary_without_mask_in_a_recipe_is_one_located_line_and_nothing_written(tmp_path, capsys):
    vocabulary = tmp_path / "vocab.txt"
    vocabulary.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\nend\n")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"run: {{steps: 5, log_dir: {tmp_path / 'logs'}}}\ninput:\n  name: text\n  text:\n"
                      f"    vocabulary: {vocabulary}\nmodel: {{name: 'tests.recipes.test_text_recipes:masked_lm_model_fn'}}\n"
                      f"optimizer: {{name: sgd}}\n")
    assert cli.main([str(recipe)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{recipe}:5: input.text.vocabulary: '{vocabulary}' has no [MASK] token" in err
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("name", ["text_mlm_dataset", "bert_tfrecord_dataset", "write_bert_tfrecord",
                                  "check_sequence_length", "check_masking"])
def test_the_masked_lm_api_is_reachable_from_moxlite_data(name):
    assert callable(getattr(moxlite.data, name))
    with pytest.raises(AttributeError, match="no attribute 'text_mlm'"):
        moxlite.data.text_mlm  # noqa: B018


def test_text_and_vocabulary_on_object_storage_give_the_local_examples(s3, tmp_path, monkeypatch):
    monkeypatch.setenv("MOXLITE_CACHE_DIR", str(tmp_path / "cache"))
    lines = ["The quick brown fox jumps over the lazy dog.", "Dogs ran; foxes jumped over them."] * 6
    vocabulary = textlib.SPECIAL + [".", ";", "the", "quick", "brown", "fox", "jump", "##s", "##ed", "over", "lazy",
                                    "dog", "ran", "them", "es"]
    local_text, local_vocab = tmp_path / "corpus.txt", tmp_path / "vocab.txt"
    local_text.write_text("\n".join(lines) + "\n")
    wordpiece.write_vocabulary(str(local_vocab), vocabulary)
    bucket = s3.new_bucket()
    s3.client().put_object(Bucket=bucket, Key="text/corpus.txt", Body=local_text.read_bytes())
    s3.client().put_object(Bucket=bucket, Key="text/vocab.txt", Body=local_vocab.read_bytes())

    def examples(files, vocab):
        return [e["input_ids"].tolist() for e in text_datasets.text_mlm_dataset(
            files, vocab, seq_length=10, max_predictions=2, vocab_size=40,
            cache_dir=str(tmp_path / "vocabularies")).as_numpy_iterator()]

    remote = examples([f"obs://{bucket}/text/corpus*.txt"], f"obs://{bucket}/text/vocab.txt")
    assert remote == examples([str(tmp_path / "corpus*.txt")], str(local_vocab)) and len(remote) > 5
    learned = examples([f"obs://{bucket}/text/corpus*.txt"], None)   # a vocabulary learned from obs:// text
    assert learned == examples([str(tmp_path / "corpus*.txt")], None) and len(learned) > 5


def test_a_bert_tfrecord_recipe_reads_the_schema_from_the_files(tmp_path):
    from tests.data.test_text_data import bert_examples

    train, held_out = bert_examples(4, 10, 2, True, seed=1), bert_examples(3, 10, 2, True, seed=2)
    text_datasets.write_bert_tfrecord(str(tmp_path / "train.tfrecord"), train)
    text_datasets.write_bert_tfrecord(str(tmp_path / "eval.tfrecord"), held_out)
    input_fn, facts = plan_input(tmp_path, f"{{name: bert_tfrecord, bert_tfrecord: {{train_files: ['{tmp_path}/train*'], "
                                           f"eval_files: ['{tmp_path}/eval*'], vocab_size: 30522}}}}")
    assert (facts["seq_length"], facts["max_predictions"], facts["next_sentence"], facts["vocab_size"]) == \
        (10, 2, True, 30522)
    read = list(input_fn(ModeKeys.EVAL).as_numpy_iterator())
    assert len(read) == 3
    for got, want in zip(read, held_out):
        for name, value in want.items():
            np.testing.assert_array_equal(got[name], value)
    no_labels = bert_examples(2, 10, 2, False)
    text_datasets.write_bert_tfrecord(str(tmp_path / "eval.tfrecord"), no_labels)
    with pytest.raises(errors.RecipeError, match="input.bert_tfrecord.eval_files: the records of .* lack next_sentence_labels and the training "
                                        "records have it"):
        plan_input(tmp_path, f"{{name: bert_tfrecord, bert_tfrecord: {{train_files: ['{tmp_path}/train*'], "
                             f"eval_files: ['{tmp_path}/eval*']}}}}")
