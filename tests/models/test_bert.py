"""BERT pre-training's model_fn (moxlite.models.bert) against numpy, and its bad settings.

The reference takes the network's own masked-LM and next-sentence logits and computes
MindSpore's BertPretrainingLoss in numpy: the weighted mean cross-entropy over the masked
positions (sum(w * CE) / (sum(w) + 1e-5)) plus the mean next-sentence cross-entropy, and
the weighted share of masked positions predicted right.
"""

import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite.models import bert
from tests import bertlib


def numpy_cross_entropy(logits, labels):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return -np.take_along_axis(log_probabilities, labels[..., None], axis=-1)[..., 0]


def test_the_loss_and_accuracy_equal_bert_pretraining_loss_in_numpy():
    weights = np.array([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0.5, 1, 0]], np.float32)
    arrays = bertlib.pretraining_arrays(4, seed=3, weights=weights)
    model_fn = bert.bert_model_fn(backbone=bertlib.tiny_backbone(), weight_decay=0.0)
    features = {key: tf.constant(value) for key, value in arrays.items()}
    spec = model_fn(features, mox.ModeKeys.EVAL)
    network = model_fn.network()
    encoded = network.backbone({"token_ids": features["input_ids"], "segment_ids": features["segment_ids"],
                                "padding_mask": features["input_mask"]})
    mlm_logits = network.masked_lm_head(encoded["sequence_output"],
                                        mask_positions=features["masked_lm_positions"]).numpy().astype(np.float64)
    nsp_logits = network.next_sentence_head(encoded["pooled_output"]).numpy().astype(np.float64)
    mlm = (weights * numpy_cross_entropy(mlm_logits, arrays["masked_lm_ids"])).sum() / (weights.sum() + 1e-5)
    nsp = numpy_cross_entropy(nsp_logits, arrays["next_sentence_labels"][:, 0]).mean()
    right = (mlm_logits.argmax(-1) == arrays["masked_lm_ids"]).astype(np.float64)
    np.testing.assert_allclose(float(spec.log_info["masked_lm_loss"]), mlm, rtol=1e-5)
    np.testing.assert_allclose(float(spec.log_info["next_sentence_loss"]), nsp, rtol=1e-5)
    np.testing.assert_allclose(float(spec.loss), mlm + nsp, rtol=1e-5)
    np.testing.assert_allclose(float(spec.log_info["masked_lm_accuracy"]), (weights * right).sum() / weights.sum(),
                               atol=1e-6)


def test_without_next_sentence_labels_the_loss_is_the_masked_lm_loss_and_no_head_is_made():
    arrays = bertlib.pretraining_arrays(2, next_sentence=False)
    model_fn = bert.bert_model_fn(backbone=bertlib.tiny_backbone())
    spec = model_fn({key: tf.constant(value) for key, value in arrays.items()}, mox.ModeKeys.TRAIN)
    assert model_fn.network().next_sentence_head is None
    assert "next_sentence_loss" not in spec.log_info
    assert float(spec.loss) == float(spec.log_info["masked_lm_loss"])


def test_the_masked_lm_head_is_tied_to_the_token_embedding():
    """logits = LayerNorm(Dense_gelu(h at the positions)) . E^T + b, with E the encoder's token table."""
    arrays = bertlib.pretraining_arrays(2)
    model_fn = bert.bert_model_fn(backbone=bertlib.tiny_backbone())
    features = {key: tf.constant(value) for key, value in arrays.items()}
    model_fn(features, mox.ModeKeys.TRAIN)
    network = model_fn.network()
    head = network.masked_lm_head
    sequence = network.backbone({"token_ids": features["input_ids"], "segment_ids": features["segment_ids"],
                                 "padding_mask": features["input_mask"]})["sequence_output"].numpy()
    gathered = np.take_along_axis(sequence, arrays["masked_lm_positions"][..., None], axis=1)
    hidden = head.intermediate_layer_norm(head.intermediate_dense(gathered)).numpy()
    table = network.backbone.token_embedding.embeddings.numpy()
    expected = hidden @ table.T + head.output_bias.numpy()
    np.testing.assert_allclose(head(sequence, mask_positions=arrays["masked_lm_positions"]).numpy(), expected,
                               atol=1e-5)
    vocabulary_wide = [w for w in network.trainable_weights
                       if len(w.shape) == 2 and bertlib.VOCABULARY in tuple(w.shape)]
    assert [w.path for w in vocabulary_wide] == ["token_embedding/embeddings"]   # no untied output matrix


def test_sequences_longer_than_the_model_are_one_line_naming_max_sequence_length():
    arrays = bertlib.pretraining_arrays(2)
    model_fn = bert.bert_model_fn(backbone=bertlib.tiny_backbone(max_sequence_length=bertlib.LENGTH // 2))
    with pytest.raises(mox.errors.ArgumentError, match=r"sequences have 8 tokens, more than the model's "
                                                       r"max_sequence_length=4; raise the model's"):
        model_fn({key: tf.constant(value) for key, value in arrays.items()}, mox.ModeKeys.TRAIN)


def test_a_batch_without_the_pretraining_features_is_one_line_naming_the_missing_one():
    arrays = bertlib.pretraining_arrays(2)
    del arrays["masked_lm_weights"]
    model_fn = bert.bert_model_fn(backbone=bertlib.tiny_backbone())
    with pytest.raises(mox.errors.ModelFnError, match="needs the feature 'masked_lm_weights'"):
        model_fn({key: tf.constant(value) for key, value in arrays.items()}, mox.ModeKeys.TRAIN)


@pytest.mark.parametrize("name, options, expected", [
    ("bert_tiny", {}, "vocabulary_size is not known; give the model's vocabulary_size"),
    ("bert_tiny", {"vocabulary_size": 50, "num_heads": 3}, "bert_tiny: num_heads=3 does not divide hidden_dim 64"),
    ("bert_base", {"hidden_size": 768}, "bert_base: unknown option 'hidden_size' (did you mean 'hidden_dim'?)"),
    ("bert_huge", {}, "model 'bert_huge' is not a built-in BERT; choose one of bert_tiny, bert_base, bert_large"),
])
def test_bad_built_in_bert_settings_are_one_line_before_anything_is_built(name, options, expected):
    from moxlite import models

    with pytest.raises(mox.errors.ArgumentError) as raised:
        models.build_bert_model_fn(name, **options)
    assert expected in str(raised.value)


def test_the_sizes_are_the_papers():
    assert {size: (c["num_layers"], c["hidden_dim"], c["num_heads"], c["intermediate_dim"])
            for size, c in bert.SIZES.items()} == {"tiny": (2, 64, 2, 256), "base": (12, 768, 12, 3072),
                                                   "large": (24, 1024, 16, 4096)}
