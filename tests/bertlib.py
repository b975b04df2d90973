"""Shared pieces for the BERT tests: pre-training batches of random tokens and a very small encoder.

The batches follow the data interface of moxlite's text data sets (moxlite.models.bert's
FEATURES): every sample has the same number of masked positions, all of weight 1 unless a
test says otherwise, so a replica's weighted mean equals the global batch's.
"""

import keras
import numpy as np
import tensorflow as tf

VOCABULARY = 40
LENGTH = 8
PREDICTIONS = 3
# A 1-layer encoder of width 16: a few thousand parameters, no dropout (replicas and resumes must agree).
SIZES = dict(vocabulary_size=VOCABULARY, num_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=32,
             max_sequence_length=LENGTH, dropout=0.0)


def pretraining_arrays(count, seed=0, next_sentence=True, weights=None):
    """``count`` samples of the pre-training interface as numpy arrays (the first 5 ids are 'special')."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(LENGTH // 2, LENGTH + 1, count)
    mask = (np.arange(LENGTH)[None, :] < lengths[:, None]).astype(np.int32)
    arrays = {
        "input_ids": (rng.integers(5, VOCABULARY, (count, LENGTH)) * mask).astype(np.int32),
        "input_mask": mask,
        "segment_ids": (np.arange(LENGTH)[None, :] >= lengths[:, None] // 2).astype(np.int32) * mask,
        "masked_lm_positions": np.stack([rng.choice(n, PREDICTIONS, replace=False) for n in lengths]).astype(np.int32),
        "masked_lm_ids": rng.integers(5, VOCABULARY, (count, PREDICTIONS)).astype(np.int32),
        "masked_lm_weights": np.ones((count, PREDICTIONS), np.float32) if weights is None else weights,
    }
    if next_sentence:
        arrays["next_sentence_labels"] = rng.integers(0, 2, (count, 1)).astype(np.int32)
    return arrays


def input_fn_for(arrays):
    """An input_fn over the samples, repeated for training (auto_batch batches them)."""
    import moxlite as mox

    def input_fn(mode):
        dataset = tf.data.Dataset.from_tensor_slices(arrays)
        return dataset.repeat() if mode == mox.ModeKeys.TRAIN else dataset

    return input_fn


def tiny_backbone(seed=0, **overrides):
    """The test encoder, its initial weights fixed by ``seed``."""
    from moxlite.models import bert

    keras.utils.set_random_seed(seed)
    return bert.bert_backbone(**{**SIZES, **overrides})


def weights_of(model_fn):
    """The trained values of every weight of the model_fn's network (backbone and heads), by path."""
    network = model_fn.network()
    return {weight.path: np.array(weight.numpy()) for weight in network.trainable_weights}
