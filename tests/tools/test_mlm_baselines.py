"""tools/mlm_baselines.py's arithmetic (no TensorFlow) against a case worked by hand."""

import math
import os
import sys

import pytest

from tests import ROOT
sys.path.insert(0, os.path.join(ROOT, "tools"))
import mlm_baselines  # noqa: E402


def test_unigram_baselines_equal_the_hand_worked_figures():
    # Training targets: token 0 three times, token 1 once (p = 3/4, 1/4, 0, 0); held-out: 0, 1, 2, 0.
    figures = mlm_baselines.unigram_baselines([0, 0, 0, 1], [0, 1, 2, 0], vocab_size=4, alpha=0.5)
    assert figures["train_targets"] == 4 and figures["heldout_targets"] == 4
    assert figures["most_frequent_token"] == 0
    assert figures["most_frequent_accuracy"] == pytest.approx(2 / 4)             # held-out 0, _, _, 0
    assert figures["sampling_accuracy"] == pytest.approx((3 / 4 + 1 / 4 + 0 + 3 / 4) / 4)
    assert figures["train_sum_p_squared"] == pytest.approx((3 / 4) ** 2 + (1 / 4) ** 2)
    assert figures["train_most_frequent_share"] == pytest.approx(3 / 4)
    assert figures["oracle_most_frequent_accuracy"] == pytest.approx(2 / 4)
    assert figures["train_entropy"] == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    # Smoothed counts 3.5, 1.5, 0.5, 0.5 over a total of 6.
    assert figures["heldout_cross_entropy"] == pytest.approx(
        -(2 * math.log(3.5 / 6) + math.log(1.5 / 6) + math.log(0.5 / 6)) / 4)
    assert figures["heldout_unseen_share"] == pytest.approx(1 / 4)


def test_the_oracle_constant_can_beat_the_training_argmax():
    # Token 1 is the most frequent training target, token 2 the held-out's.
    figures = mlm_baselines.unigram_baselines([1, 1, 2], [2, 2, 1], vocab_size=3, alpha=1.0)
    assert figures["most_frequent_accuracy"] == pytest.approx(1 / 3)
    assert figures["oracle_most_frequent_accuracy"] == pytest.approx(2 / 3)
    assert figures["heldout_cross_entropy"] == pytest.approx(-(2 * math.log(2 / 6) + math.log(3 / 6)) / 3)
