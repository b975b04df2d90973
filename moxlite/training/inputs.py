"""From ``input_fn`` to per-replica batches.

``input_fn(mode)`` returns a ``tf.data.Dataset`` (the TF2 form), or arrays /
tensors whose first dimension indexes samples. With ``auto_batch=True`` the
dataset yields single samples and moxlite batches them per replica; with
``auto_batch=False`` it yields ready per-replica batches. Each input pipeline
(one per worker) reads its own shard through ``tf.distribute.InputContext``.
"""

import numpy as np
import tensorflow as tf

from moxlite import errors
from moxlite.contract import ModeKeys
from moxlite.data import feature_dataset
from moxlite.training.calling import call_with_accepted_kwargs


def call_input_fn(input_fn, mode, batch_size=None, auto_batch=True):
    """Call input_fn(mode) and return a tf.data.Dataset of its elements.

    An input_fn that declares ``batch_size`` (or ``**kwargs``) receives the per-replica batch
    size, which it needs with ``auto_batch=False``. Features returned from a MoXing data set's
    ``dataset.get(keys)`` become that data set's Dataset, batched here when ``auto_batch=False``.
    """
    try:
        produced = call_with_accepted_kwargs(input_fn, mode, batch_size=batch_size)
    except feature_dataset.NeedsTracing as misuse:   # tensor work on dataset.get's features: per sample
        return feature_dataset.traced_dataset(
            lambda: call_with_accepted_kwargs(input_fn, mode, batch_size=batch_size), misuse.column.dataset,
            batch_size, batch=not auto_batch, drop_remainder=(mode == ModeKeys.TRAIN))
    if isinstance(produced, tf.data.Dataset):
        return produced
    if feature_dataset.is_columns(produced):
        return feature_dataset.columns_dataset(produced, batch_size, batch=not auto_batch,
                                               drop_remainder=(mode == ModeKeys.TRAIN))
    if produced is None:
        raise errors.ArgumentTypeError(
            f"input_fn returned None in mode {mode}; it must return a tf.data.Dataset "
            f"(or arrays whose first dimension indexes samples)")
    try:
        return tf.data.Dataset.from_tensor_slices(_as_structure(produced))
    except (TypeError, ValueError) as error:
        raise errors.ArgumentTypeError(
            f"input_fn returned {errors.describe(produced)} in mode {mode}; it must return a "
            f"tf.data.Dataset or arrays of equal length ({error})") from None


def _as_structure(produced):
    if isinstance(produced, list):
        return tuple(produced)
    if isinstance(produced, np.ndarray) or tf.is_tensor(produced):
        return (produced,)
    return produced


def as_model_inputs(element):
    """What model_fn receives: a list for tuple/single elements (MoXing's ``inputs[0]``), dicts as is."""
    if isinstance(element, dict):
        return element
    if isinstance(element, (tuple, list)):
        return list(element)
    return [element]


def make_dataset_fn(input_fn, mode, batch_size, auto_batch, skip_steps=0):
    """A ``dataset_fn(input_context)`` for ``distribute_datasets_from_function``.

    Training batches drop the remainder so every replica steps with a full
    batch; evaluation and prediction keep it so every sample is seen once.
    ``skip_steps`` global steps of data are skipped: how a resumed run under a
    multi-device strategy (whose iterators TF cannot checkpoint) reads on from
    where the interrupted run stopped.
    """

    def dataset_fn(input_context=None):
        dataset = call_input_fn(input_fn, mode, batch_size, auto_batch)
        if input_context is not None and input_context.num_input_pipelines > 1:
            dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        if auto_batch:
            dataset = dataset.batch(batch_size, drop_remainder=(mode == ModeKeys.TRAIN))
        if skip_steps:
            replicas_per_pipeline = 1
            if input_context is not None:
                replicas_per_pipeline = input_context.num_replicas_in_sync // input_context.num_input_pipelines
            dataset = dataset.skip(skip_steps * replicas_per_pipeline)
        return dataset.prefetch(tf.data.AUTOTUNE)

    return dataset_fn


def placeholder_batch(element_spec, batch_size):
    """Zeros shaped like one per-replica batch, for building variables without reading data.

    Returns None when a dimension other than the batch is unknown.
    """

    def zeros(spec):
        shape = spec.shape
        if shape.rank is None:
            return None
        dims = list(shape)
        if dims and dims[0] is None:
            dims[0] = batch_size
        if any(d is None for d in dims):
            return None
        if spec.dtype == tf.string:
            return tf.fill(dims, "")
        return tf.zeros(dims, spec.dtype)

    batch = tf.nest.map_structure(zeros, element_spec)
    if any(t is None for t in tf.nest.flatten(batch)):
        return None
    return batch


def batch_size_of(element):
    """The number of samples in a batch (its first flat tensor's leading dimension)."""
    first = tf.nest.flatten(element)[0]
    return tf.shape(first, out_type=tf.int64)[0]
