"""EVAL and PREDICT passes over a whole input.

EVAL averages every ``log_info`` value over all evaluated samples (each batch
weighted by its size, so a short last batch counts for what it holds) and
prints MoXing's ``[VALIDATION METRICS]`` line. PREDICT hands ``output_info``
as numpy to ``output_fn`` every ``output_every_n_steps`` batches.
"""

import numpy as np
import tensorflow as tf

from moxlite import errors
from moxlite.training import reporting
from moxlite.training.trainers.steps import EvalStep, PredictStep


class EvalPass:
    """Evaluates ``template`` in EVAL mode over a fresh pass of the input each call.

    Each call makes the input anew from ``dataset_fn`` (input_fn), not only a new iterator:
    an input read through an iterator's ``get_next()`` can be read once (``iterator_input``).
    """

    def __init__(self, strategy, dataset_fn, template, batches_per_call=1, mode="EVAL"):
        self.strategy = strategy
        self._mode = mode
        self._dataset_fn = dataset_fn
        self._step = EvalStep(template)
        self._batches_per_call = batches_per_call
        self._chunk = tf.function(self._batches)

    def _batches(self, iterator, num_batches, keys):
        sums = {key: tf.zeros([], tf.float32) for key in keys}
        count = tf.zeros([], tf.float32)
        done = tf.constant(0, tf.int64)
        for _ in tf.range(num_batches):
            optional = iterator.get_next_as_optional()
            if not optional.has_value():
                break
            batch_sums, batch_count = self.strategy.run(self._step, args=(optional.get_value(),))
            reduce = lambda v: self.strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)  # noqa: E731
            sums = {key: sums[key] + reduce(batch_sums[key]) for key in keys}
            count += reduce(batch_count)
            done += 1
        return done, sums, count

    def evaluate(self, keys, max_batches=0, label="EVAL"):
        """Means of log_info ``keys`` over the input (or its first ``max_batches`` batches)."""
        iterator = iter(self.strategy.distribute_datasets_from_function(self._dataset_fn))
        totals = {key: 0.0 for key in keys}
        samples = 0.0
        batches = 0
        progress = reporting.Progress(label)
        while not max_batches or batches < max_batches:
            chunk = self._batches_per_call if not max_batches else min(self._batches_per_call, max_batches - batches)
            done, sums, count = self._chunk(iterator, tf.constant(chunk, tf.int64), tuple(keys))
            done = int(done)
            for key in keys:
                totals[key] += float(sums[key])
            samples += float(count)
            batches += done
            progress.update(batches, samples)
            if done < chunk:
                break
        if samples == 0:
            raise errors.ArgumentError(
                f"input_fn returned no samples in mode {self._mode}; the evaluation would average "
                f"nothing: check input_fn's {self._mode} dataset (its files, filters, take/skip)")
        return {key: totals[key] / samples for key in keys}, int(samples)


class EvaluationSchedule:
    """An evaluation of the EVAL input at given global steps, each step at most once: what the
    controller runs at checkpoints and at the end of training (inter_mode=EVAL) and once in
    run_mode=EVAL. It computes; the controller logs and writes the summaries."""

    def __init__(self, evaluator, keys, max_batches=0):
        self.evaluator = evaluator
        self.keys = list(keys)
        self.max_batches = max_batches
        self.results = {}   # global step -> (means, samples)

    def at(self, step):
        """(means of ``keys``, samples evaluated) at global ``step``; None if already done there."""
        if step in self.results:
            return None
        self.results[step] = self.evaluator.evaluate(self.keys, self.max_batches)
        return self.results[step]


def predict(strategy, dataset_fn, template, output_fn, output_every_n_steps=0, max_batches=0):
    """Run PREDICT over the input; call ``output_fn`` with lists of per-step, per-replica dicts.

    Returns the outputs not yet handed to ``output_fn`` (all of them when there is none).
    """
    dataset = strategy.distribute_datasets_from_function(dataset_fn)
    step = PredictStep(template)

    one_batch = tf.function(lambda inputs: strategy.run(step, args=(inputs,)))
    pending, kept = [], []
    batches = 0
    progress = reporting.Progress("PREDICT")
    for inputs in dataset:
        if max_batches and batches >= max_batches:
            break
        outputs = one_batch(inputs)
        batches += 1
        for replica_outputs in _per_replica(strategy, outputs):
            pending.append({k: np.asarray(v) for k, v in replica_outputs.items()})
        progress.update(batches, batches)
        if output_fn is not None and output_every_n_steps and batches % output_every_n_steps == 0:
            output_fn(pending)
            pending = []
    if output_fn is not None and pending:
        output_fn(pending)
        pending = []
    kept.extend(pending)
    return kept, batches


def _per_replica(strategy, outputs):
    if strategy.num_replicas_in_sync == 1:
        return [outputs]
    local = {k: strategy.experimental_local_results(v) for k, v in outputs.items()}
    count = len(next(iter(local.values())))
    return [{k: local[k][i] for k in local} for i in range(count)]

