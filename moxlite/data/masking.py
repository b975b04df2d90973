"""Masked-LM examples inside tf.data: which tokens are predicted, and what the model sees there.

The rule is Google BERT's ``create_pretraining_data.py``:

- the number predicted in a sequence is ``min(max_predictions, max(1, round(n * mask_rate)))``,
  ``n`` its tokens other than [PAD] (rounding half to even, as Python's ``round``), and
  never more than the tokens that may be masked;
- the positions are drawn uniformly among the tokens that are not [CLS], [SEP] or [PAD];
- at each one the input becomes [MASK] with probability 0.8, a token drawn uniformly
  from the whole vocabulary with probability 0.1, and stays as it was otherwise;
- ``masked_lm_positions`` lists the positions in increasing order, ``masked_lm_ids``
  the original tokens there and ``masked_lm_weights`` 1.0, each padded with 0 to
  ``max_predictions``.

The random numbers come from stateless generators keyed by a seed and the
example's index, so an example is masked the same way on every run, on every
worker and whatever tf.data's parallelism. ``draw`` makes them and
``apply_masking`` applies the rule to them; the tests give the same numbers to a
NumPy re-implementation.
"""

import tensorflow as tf

MASK_SHARE = 0.8      # of the predicted positions: input replaced by [MASK]
RANDOM_SHARE = 0.1    # replaced by a random token; the remaining 0.1 keep their token
# Sorting key of the positions that may not be chosen (the scores drawn are in [0, 1)).
NEVER = 2.0


def draw(seed, length, vocab_size):
    """(scores, choices, random_tokens) for one sequence of ``length``: float32 [L], float32 [L], int32 [L].

    ``seed`` is an int64 [2] tensor (the data set's seed and the example's index).
    """
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 3)
    scores = tf.random.stateless_uniform([length], seed=seeds[0])
    choices = tf.random.stateless_uniform([length], seed=seeds[1])
    random_tokens = tf.random.stateless_uniform([length], seed=seeds[2], minval=0, maxval=vocab_size,
                                                dtype=tf.int32)
    return scores, choices, random_tokens


def apply_masking(input_ids, scores, choices, random_tokens, *, unmaskable_ids, pad_id, mask_id, mask_rate,
                  max_predictions):
    """The masked-LM features of one sequence ``input_ids`` (int32 [L]) given its random numbers.

    Returns {input_ids, masked_lm_positions, masked_lm_ids, masked_lm_weights}: int32 [L],
    int32 [P], int32 [P], float32 [P] with P = ``max_predictions``.
    """
    input_ids = tf.convert_to_tensor(input_ids, tf.int32)
    maskable = tf.reduce_all(tf.not_equal(input_ids[:, None], tf.constant(unmaskable_ids, tf.int32)[None, :]), -1)
    tokens = tf.reduce_sum(tf.cast(tf.not_equal(input_ids, pad_id), tf.float32))
    wanted = tf.maximum(1, tf.cast(tf.round(tokens * mask_rate), tf.int32))
    count = tf.minimum(tf.minimum(wanted, max_predictions), tf.reduce_sum(tf.cast(maskable, tf.int32)))
    order = tf.argsort(tf.where(maskable, scores, NEVER), stable=True)
    positions = tf.sort(order[:count])
    original = tf.gather(input_ids, positions)
    choice = tf.gather(choices, positions)
    replaced = tf.where(choice < MASK_SHARE, mask_id,
                        tf.where(choice < MASK_SHARE + RANDOM_SHARE, tf.gather(random_tokens, positions), original))
    masked = tf.tensor_scatter_nd_update(input_ids, positions[:, None], replaced)
    padding = [[0, max_predictions - count]]
    return {
        "input_ids": masked,
        "masked_lm_positions": tf.ensure_shape(tf.pad(positions, padding), [max_predictions]),
        "masked_lm_ids": tf.ensure_shape(tf.pad(original, padding), [max_predictions]),
        "masked_lm_weights": tf.ensure_shape(tf.pad(tf.ones([count], tf.float32), padding), [max_predictions]),
    }


def masker(*, seed, vocab_size, unmaskable_ids, pad_id, mask_id, mask_rate, max_predictions):
    """``mask(index, input_ids) -> features``: one sequence masked with the numbers of (seed, index).

    The features add ``input_mask`` (1 where the token is not [PAD]) and ``segment_ids`` (0).
    """

    def mask(index, input_ids):
        length = tf.shape(input_ids)[0]
        scores, choices, random_tokens = draw(tf.stack([tf.cast(seed, tf.int64), tf.cast(index, tf.int64)]),
                                              length, vocab_size)
        features = apply_masking(input_ids, scores, choices, random_tokens, unmaskable_ids=unmaskable_ids,
                                 pad_id=pad_id, mask_id=mask_id, mask_rate=mask_rate,
                                 max_predictions=max_predictions)
        features["input_mask"] = tf.cast(tf.not_equal(input_ids, pad_id), tf.int32)
        features["segment_ids"] = tf.zeros_like(input_ids)
        return features

    return mask
