"""From ``input_fn`` to per-replica batches.

``input_fn(mode)`` returns a ``tf.data.Dataset`` (the TF2 form), the tensors
of an iterator's ``get_next()`` (MoXing's TF1 form: the iterator's data set, see
``iterator_input``), or arrays / tensors whose first dimension indexes samples.
With ``auto_batch=True`` the dataset yields single samples and moxlite batches
them per replica; with ``auto_batch=False`` it yields ready per-replica batches, and
tensors or arrays are one batch as they are (``one_batch``).
Without ``batch_size`` (MoXing's Getting Started) there is nothing to batch by:
the elements are the batches, whatever ``auto_batch`` says, and their size is
read from the first one. Each input pipeline (one per worker) reads its own
shard through ``tf.distribute.InputContext``.
"""

import numpy as np
import tensorflow as tf

from moxlite import compat, errors
from moxlite.contract import ModeKeys
from moxlite.data import feature_dataset
from moxlite.training.input import iterator_input
from moxlite.training.calling import call_with_accepted_kwargs


def call_input_fn(input_fn, mode, batch_size=None, auto_batch=True):
    """Call input_fn(mode) and return a tf.data.Dataset of its elements.

    An input_fn that declares ``batch_size`` (or ``**kwargs``) receives the per-replica batch
    size, which it needs with ``auto_batch=False``. Features returned from a MoXing data set's
    ``dataset.get(keys)`` become that data set's Dataset, batched here when ``auto_batch=False``
    (or, without ``batch_size``, by the data set's own ``batch_size``). Tensors an iterator's
    ``get_next()`` gave become the rest of that iterator (``iterator_input``).
    """
    with compat.iterator_reads() as reads:
        try:
            produced = call_with_accepted_kwargs(input_fn, mode, batch_size=batch_size)
        except feature_dataset.NeedsTracing as misuse:   # tensor work on dataset.get's features: per sample
            source = misuse.column.dataset
            return feature_dataset.traced_dataset(
                lambda: call_with_accepted_kwargs(input_fn, mode, batch_size=batch_size), source,
                batch_size, batch=_batches_here(source, batch_size, auto_batch),
                drop_remainder=(mode == ModeKeys.TRAIN))
    if isinstance(produced, tf.data.Dataset):
        return produced
    if feature_dataset.is_columns(produced):
        return _columns(produced, mode, batch_size, auto_batch)
    if produced is None:
        raise errors.ArgumentTypeError(
            f"input_fn returned None in mode {mode}; it must return a tf.data.Dataset "
            f"(or arrays whose first dimension indexes samples)")
    read_on = iterator_input.read_on(produced, reads, mode)
    if read_on is not None:
        return read_on
    if not auto_batch:
        return one_batch(produced, mode)
    if batch_size is None:
        raise errors.ArgumentError(
            f"input_fn returned {errors.describe(produced)} in mode {mode}: samples, and run() has no "
            f"batch_size to batch them by; pass batch_size=... (per replica), or return a tf.data.Dataset "
            f"of ready batches")
    structure = _as_structure(produced)
    try:
        return tf.data.Dataset.from_tensor_slices(structure)
    except (TypeError, ValueError):
        raise errors.ArgumentTypeError(
            f"input_fn returned {errors.describe(produced)} in mode {mode}: {_why_not_samples(structure)}; "
            f"return a tf.data.Dataset, or arrays whose first dimension indexes the samples, one per input "
            f"(e.g. (images, labels) with images.shape[0] == labels.shape[0])") from None


def _why_not_samples(structure):
    """What keeps ``structure`` (input_fn's arrays) from being cut into samples, in the user's terms."""
    try:
        leaves = tf.nest.flatten(structure)
    except (TypeError, ValueError):
        return "it is not a structure of arrays"
    lengths = []
    for index, leaf in enumerate(leaves):
        try:
            shape = np.shape(leaf)
        except (TypeError, ValueError):
            shape = None
        if shape is None or isinstance(leaf, (str, bytes)) and not shape:
            return f"its input {index} ({errors.describe(leaf, 30)}) is not an array"
        if not shape:
            many = " (each item of a list or tuple is a separate input)" if len(leaves) > 1 else ""
            return f"its input {index} ({errors.describe(leaf, 30)}) is a scalar, with no samples to cut{many}"
        lengths.append(shape[0])
    if len(set(lengths)) > 1:
        return f"its inputs hold different numbers of samples ({', '.join(map(str, lengths))})"
    return "its inputs cannot be made into tensors"


def one_batch(produced, mode):
    """``auto_batch=False``'s tensors or arrays: one batch as they are (MoXing's meaning), not
    cut into samples. As a TF1 graph evaluated them at every step, TRAIN reads that batch at
    every step; EVAL and PREDICT read it once (evaluating it again gives the same values)."""
    try:
        batch = tf.data.Dataset.from_tensors(_as_structure(produced))
    except (TypeError, ValueError) as error:
        raise errors.ArgumentTypeError(
            f"input_fn returned {errors.describe(produced)} in mode {mode}; with auto_batch=False it must "
            f"return a tf.data.Dataset of batches or the tensors of one batch ({error})") from None
    return batch.repeat() if mode == ModeKeys.TRAIN else batch


def _columns(produced, mode, batch_size, auto_batch):
    source = (produced if isinstance(produced, feature_dataset.FeatureColumn) else produced[0]).dataset
    return feature_dataset.columns_dataset(
        produced, batch_size, batch=_batches_here(source, batch_size, auto_batch),
        drop_remainder=(mode == ModeKeys.TRAIN))


def _batches_here(source, batch_size, auto_batch):
    """Whether a MoXing data set's features are batched here: with ``auto_batch=False``, or,
    without run's batch_size, by the data set's own ``batch_size``."""
    return not auto_batch or (batch_size is None and source.batch_size is not None)


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


def make_dataset_fn(input_fn, mode, batch_size, auto_batch, skip_steps=0, read_already=None):
    """A ``dataset_fn(input_context)`` for ``distribute_datasets_from_function``.

    Training batches drop the remainder so every replica steps with a full
    batch; evaluation and prediction keep it so every sample is seen once.
    ``batch_size`` None: the elements are the batches. ``skip_steps`` global
    steps of data are skipped: how a resumed run under a multi-device strategy
    (whose iterators TF cannot checkpoint) reads on from where the interrupted
    run stopped. ``read_already()``: input_fn's dataset of this mode if one was
    read and not used yet (else None), so that input_fn runs once per mode and
    a generator or iterator behind it is read once, as in MoXing.
    """

    def dataset_fn(input_context=None):
        dataset = read_already() if read_already is not None else None
        if dataset is None:
            dataset = call_input_fn(input_fn, mode, batch_size, auto_batch)
        if input_context is not None and input_context.num_input_pipelines > 1:
            dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        if auto_batch and batch_size is not None:
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


def leading_batch_size(element, mode):
    """The per-replica batch size of a run without ``batch_size``: the first batch's size.

    Every component must have a first (batch) dimension, and all must agree on it;
    otherwise moxlite cannot tell the batch structure and stops.
    """
    sizes = set()
    for component in tf.nest.flatten(element):
        shape = tf.TensorShape(getattr(component, "shape", None))
        if shape.rank is None or shape.rank == 0 or shape[0] is None:
            raise errors.ArgumentError(
                f"run() has no batch_size and input_fn's {mode} element holds a component of shape {shape}, "
                f"which has no batch dimension; pass batch_size=... (per replica) so that moxlite batches "
                f"the samples, or return ready batches")
        sizes.add(int(shape[0]))
    if len(sizes) != 1:
        raise errors.ArgumentError(
            f"run() has no batch_size and the components of input_fn's first {mode} batch have different "
            f"first dimensions {sorted(sizes)}; pass batch_size=... or return components of one batch size")
    return sizes.pop()


def batch_size_of(element):
    """The number of samples in a batch (its first flat tensor's leading dimension)."""
    first = tf.nest.flatten(element)[0]
    return tf.shape(first, out_type=tf.int64)[0]
