"""The context-free baselines of a masked-LM recipe, on the masks its run trains and evaluates on.

A model that ignores the context can at best predict each masked token from the frequencies
of the tokens it is asked for. This tool reads the recipe's own data set (``input`` section,
with ``--set`` overrides as ``moxlite-run`` takes them), collects the target ids of one epoch
of training masks and of the held-out masks (the ones the run's [RESULT] accuracy is measured
on: the same seed, so the same masks), and prints:

- ``most_frequent_accuracy``: held-out accuracy of always predicting the token most frequent
  among the training targets (this is also the argmax of the unigram distribution);
- ``sampling_accuracy``: held-out accuracy expected when the prediction is drawn from the
  training unigram p, ``mean over held-out targets of p(y)`` (= sum_y q(y) p(y), q the held-out's
  frequencies; with q = p it is sum p^2);
- ``train_sum_p_squared`` and ``train_most_frequent_share``: the same two accuracies on the
  training targets themselves (sum p^2, max p);
- ``oracle_most_frequent_accuracy``: the share of the held-out's own most frequent token (the
  best a constant prediction could do, chosen in hindsight);
- ``train_entropy``: the entropy of the training unigram (nats): the training loss of a model
  that has learned only the frequencies;
- ``heldout_cross_entropy``: ``-mean log p(y)`` over the held-out targets (nats), p smoothed by
  adding ``--alpha`` to every vocabulary entry's count so unseen tokens have a finite cost: the
  held-out loss of the same model; ``heldout_unseen_share`` is the share of held-out targets
  never seen among the training targets.

A model learns context when its held-out accuracy is well above the first and its held-out
loss well below the last.

    python tools/mlm_baselines.py recipes/bert_tiny_mlm_lamb.yaml
    python tools/mlm_baselines.py recipes/grammar_mlm_lamb.yaml [--set input.text.seq_length=32 ...]
"""

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def unigram_baselines(train_ids, heldout_ids, vocab_size, alpha=0.5):
    """The context-free figures (see the module's docstring) of training and held-out target ids (1-D int arrays)."""
    train_ids = np.asarray(train_ids, np.int64).reshape(-1)
    heldout_ids = np.asarray(heldout_ids, np.int64).reshape(-1)
    counts = np.bincount(train_ids, minlength=vocab_size).astype(np.float64)
    p_raw = counts / counts.sum()
    smoothed = (counts + alpha) / (counts.sum() + alpha * vocab_size)
    nonzero = p_raw[p_raw > 0]
    most_frequent = int(np.argmax(counts))
    heldout_counts = np.bincount(heldout_ids, minlength=vocab_size)
    return {
        "train_targets": int(train_ids.size),
        "heldout_targets": int(heldout_ids.size),
        "most_frequent_token": most_frequent,
        "most_frequent_accuracy": float(np.mean(heldout_ids == most_frequent)),
        "sampling_accuracy": float(np.mean(p_raw[heldout_ids])),
        "train_sum_p_squared": float(np.sum(p_raw ** 2)),
        "train_most_frequent_share": float(p_raw[most_frequent]),
        "oracle_most_frequent_accuracy": float(heldout_counts.max() / heldout_ids.size),
        "train_entropy": float(-np.sum(nonzero * np.log(nonzero))),
        "heldout_cross_entropy": float(-np.mean(np.log(smoothed[heldout_ids]))),
        "heldout_unseen_share": float(np.mean(counts[heldout_ids] == 0)),
    }


def masked_targets(dataset, limit=None):
    """The ids at the weighted masked positions of a Dataset of single examples (at most ``limit`` examples)."""
    if limit is not None:
        dataset = dataset.take(limit)
    found = []
    for batch in dataset.batch(1024).as_numpy_iterator():
        weights = batch["masked_lm_weights"] > 0
        found.append(batch["masked_lm_ids"][weights])
    return np.concatenate(found) if found else np.zeros([0], np.int64)


def recipe_targets(recipe, overrides=(), train_epochs=1):
    """(training targets of ``train_epochs`` epochs of masks, held-out targets, vocab_size, tokens) of ``recipe``."""
    from moxlite.contract import ModeKeys
    from moxlite.recipes import builders, loader

    loaded = loader.load([recipe], list(overrides))
    input_fn, facts = builders._build_input(loaded)
    if not facts.get("num_samples"):
        raise SystemExit(f"{recipe}: the data set's epoch length is unknown; set input.<name>.num_samples")
    train = masked_targets(input_fn(ModeKeys.TRAIN), limit=facts["num_samples"] * train_epochs)
    heldout = masked_targets(input_fn(ModeKeys.EVAL))
    return train, heldout, facts["vocab_size"], facts["text"].tokens


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe")
    parser.add_argument("--set", action="append", default=[], help="a recipe override, as moxlite-run --set")
    parser.add_argument("--train-epochs", type=int, default=1, help="epochs of training masks counted")
    parser.add_argument("--alpha", type=float, default=0.5, help="added to each count for the cross-entropy")
    args = parser.parse_args(argv)
    train, heldout, vocab_size, tokens = recipe_targets(args.recipe, args.set, args.train_epochs)
    figures = unigram_baselines(train, heldout, vocab_size, args.alpha)
    token = figures["most_frequent_token"]
    if tokens:
        figures["most_frequent_token"] = f"{token} ({tokens[token]!r})"
    print(f"{args.recipe}: vocabulary {vocab_size}, alpha {args.alpha}")
    for name, value in figures.items():
        print(f"  {name:32s} {value:.4f}" if isinstance(value, float) else f"  {name:32s} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
