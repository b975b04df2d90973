"""MoXing's named-feature data sets on tf.data, and what ``dataset.get(keys)`` hands to ``run``.

A MoXing data set produced named features (``'image'``, ``'label'``, or the
ones a subclass adds) and ``dataset.get(['image', 'label'])`` returned TF1
tensors that ``input_fn`` returned to the runner. TF2 has no such tensors
outside a graph, so here ``get`` returns ``FeatureColumns``: a tuple of
placeholders naming the data set and the feature. ``input_fn`` returns them
as MoXing scripts do, and the runner turns them into the ``tf.data.Dataset``
of those features (``columns_dataset``). A per-sample function can be applied
to a placeholder with ``feature.map(fn)``; the augmentation functions of
``get_data_augmentation_fn`` do that themselves, so MoXing's
``image = augmentation_fn(image)`` in ``input_fn`` works unchanged. Other
tensor work on a placeholder gets an error saying to move it into
``augmentation_fn``, ``_build_features`` or ``model_fn``.

Tensor work on the features inside ``input_fn`` (``band_1 + band_2``,
``tf.stack``, ``tf.image.random_flip_left_right``, ``label -= offset``, as
MoXing scripts wrote it) cannot run on a placeholder. When it is tried, the
placeholder raises ``NeedsTracing``; the runner then calls ``input_fn`` again,
once, inside a ``tf.data`` map over the data set's samples, where ``get``
returns that sample's tensors (``traced_dataset``). ``input_fn``'s own code
then runs per sample, as MoXing's graph did.

Every data set yields single samples; batching is the runner's: by
``run(batch_size=...)`` with ``auto_batch=True``, and also by it with
``auto_batch=False`` (the data set's own ``batch_size``, when given, must agree).
Sharding across workers is the runner's too (``inputs.make_dataset_fn``).
"""

import collections
import threading

import tensorflow as tf

from moxlite import compat, errors


_local = threading.local()


class NeedsTracing(errors.ArgumentError):
    """Tensor work was tried on a ``get`` placeholder: input_fn must run per sample (``traced_dataset``).

    Outside the runner it reads as the error it is (the message says what to do).
    """

    def __init__(self, column):
        super().__init__(
            f"dataset.get(...)[{column.key!r}] is a placeholder for a tf.data feature, not a tensor: "
            f"return input_fn's features to moxlite.run, which runs input_fn's tensor code once per "
            f"sample; outside run, use dataset.as_dataset([...]) for a tf.data.Dataset")
        self.column = column


def element_seed():
    """The int64 seed of the element being built (inside ``_build_features``), or None.

    Random augmentation derives stateless-op seeds from it (see ``augmentation``), which
    keeps the input iterator checkpointable: TF cannot save an iterator whose map uses
    stateful random ops.
    """
    return getattr(_local, "seed", None)


def positive_int_or_none(owner, name, value, hint=""):
    """``value`` if it is None or an integer >= 1; otherwise an ArgumentError naming owner, name and value.

    ``hint`` ends the message (what the number means, what None does).
    """
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise errors.ArgumentError(f"{owner}: {name}={errors.describe(value)} must be a positive integer{hint}")
    return value


def decoded_image(data, channels, image_size=None, augmentation_fn=None):
    """The image in the encoded bytes ``data`` (JPEG, PNG, BMP or GIF's first frame), as the image data sets give it:
    ``channels`` channels, resized to ``image_size`` (nearest neighbour) when given, then ``augmentation_fn`` applied."""
    image = tf.io.decode_image(data, channels=channels, expand_animations=False)
    image.set_shape([None, None, channels])
    if image_size is not None:
        image = tf.image.resize(image, image_size, method="nearest")
    if augmentation_fn is not None:
        image = compat.converted_user_function(augmentation_fn)(image)
    return image


class FeatureDataset:
    """Named features built by ``_build_features``; the base of MoXing's data-set classes.

    Subclasses give ``_records()`` (a Dataset of raw elements, already
    shuffled and repeated) and ``_parse(*element)`` (a tuple handed to
    ``_build_features``). ``_build_features(*parsed)`` calls
    ``self._add_feature(name, tensor)`` once per feature.
    """

    def __init__(self, batch_size=None, num_parallel=None):
        self.batch_size = positive_int_or_none(type(self).__name__, "batch_size", batch_size)
        self.num_parallel = num_parallel or tf.data.AUTOTUNE
        self._pending = None

    # --------------------------------------------------------------- the subclass protocol

    def _records(self):
        raise NotImplementedError(f"{type(self).__name__} must override _records(self)")

    def _parse(self, *element):
        raise NotImplementedError(f"{type(self).__name__} must override _parse(self, *element)")

    def _build_features(self, *parsed):
        raise NotImplementedError(f"{type(self).__name__} must override _build_features(self, *parsed)")

    def _add_feature(self, name, value):
        """Declare feature ``name``; only valid while ``_build_features`` runs."""
        if self._pending is None:
            raise errors.ArgumentError(
                f"{type(self).__name__}._add_feature({name!r}) was called outside _build_features; "
                "add features only from _build_features(self, *parsed)")
        if name in self._pending:
            raise errors.ArgumentError(f"{type(self).__name__}: feature {name!r} was added twice")
        self._pending[name] = value

    # --------------------------------------------------------------- reading

    def _features_of(self, seed, element, transforms=None):
        self._pending = collections.OrderedDict()
        _local.seed = seed
        try:
            # _parse and _build_features may be a user subclass's, and the transforms user functions.
            parse = compat.converted_user_function(self._parse)
            parsed = parse(*element) if isinstance(element, tuple) else parse(element)
            compat.converted_user_function(self._build_features)(*parsed)
            if not self._pending:
                raise errors.ArgumentError(
                    f"{type(self).__name__}._build_features added no feature; call "
                    "self._add_feature(name, tensor) for each one")
            features = dict(self._pending)
            for key, functions in (transforms or {}).items():
                if key in features:
                    for function in functions:
                        features[key] = compat.converted_user_function(function)(features[key])
            return features
        finally:
            self._pending = None
            _local.seed = None

    @property
    def feature_names(self):
        """The names ``_build_features`` adds, in order (traced once, no data read)."""
        spec = self.as_dataset().element_spec
        return list(spec)

    def as_dataset(self, keys=None, transforms=None):
        """A Dataset of single samples: a dict of every feature, or a tuple of ``keys``' features.

        transforms: {feature name: [per-sample functions]} applied after ``_build_features``.
        """
        # Every element carries a seed from a seeded random stream, so random augmentation can use
        # stateless ops: the pipeline stays deterministic and its iterator can be checkpointed.
        seeds = tf.data.Dataset.random(seed=getattr(self, "seed", None) or 0)
        dataset = tf.data.Dataset.zip((seeds, self._records())).map(
            lambda seed, element: self._features_of(seed, element, transforms),
            num_parallel_calls=self.num_parallel, deterministic=True)
        if keys is None:
            return dataset
        keys = list(keys)
        unknown = [k for k in keys if k not in dataset.element_spec]
        if unknown:
            raise errors.ArgumentError(
                f"{type(self).__name__}.get: unknown feature(s) {unknown}; this data set has "
                f"{list(dataset.element_spec)}")
        return dataset.map(lambda features: tuple(features[k] for k in keys))

    def get(self, keys):
        """MoXing's ``dataset.get(['image', 'label'])``: placeholders ``input_fn`` returns to ``run``.

        While the runner traces input_fn per sample (``traced_dataset``), the sample's tensors instead.
        """
        traced = getattr(_local, "sample", None)
        if traced is not None:
            names = [keys] if isinstance(keys, str) else list(keys)
            unknown = [k for k in names if k not in traced]
            if unknown:
                raise errors.ArgumentError(
                    f"{type(self).__name__}.get: unknown feature(s) {unknown}; this data set has {list(traced)}")
            values = [traced[k] for k in names]
            return values[0] if isinstance(keys, str) else tuple(values)
        if isinstance(keys, str):
            return FeatureColumns(self, [keys])[0]
        return FeatureColumns(self, list(keys))


class FeatureColumn:
    """One feature of a ``FeatureDataset``, as ``get`` returns it: not a tensor, a name for one."""

    def __init__(self, dataset, key, keys, transforms=()):
        self.dataset = dataset
        self.key = key
        self.keys = keys
        self.transforms = tuple(transforms)

    def map(self, function):
        """This feature passed through ``function`` (per sample), still a placeholder.

        What MoXing scripts wrote as ``image = augmentation_fn(image)`` in input_fn: the
        functions ``get_data_augmentation_fn`` returns accept a placeholder and call this.
        """
        return FeatureColumn(self.dataset, self.key, self.keys, self.transforms + (function,))

    def _misuse(self, *args, **kwargs):
        raise NeedsTracing(self)

    __array__ = __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _misuse
    __truediv__ = __rtruediv__ = __getitem__ = __float__ = __int__ = _misuse
    __floordiv__ = __rfloordiv__ = __neg__ = __pow__ = __mod__ = __matmul__ = __rmatmul__ = _misuse
    __lt__ = __le__ = __gt__ = __ge__ = __and__ = __or__ = __invert__ = __bool__ = _misuse

    def __getattr__(self, name):
        # Tensor methods (``image.set_shape``, ``label.dtype`` ...): only a real sample has them.
        if name.startswith("_"):
            raise AttributeError(name)
        raise NeedsTracing(self)

    def __tf_tensor__(self, dtype=None, name=None):
        self._misuse()

    def __repr__(self):
        return f"<feature {self.key!r} of {type(self.dataset).__name__}>"


class FeatureColumns(tuple):
    """The tuple ``get(keys)`` returns: unpacks like MoXing's tensors (``images, labels = ...``)."""

    def __new__(cls, dataset, keys):
        return super().__new__(cls, [FeatureColumn(dataset, key, keys) for key in keys])


def is_columns(produced):
    """True when input_fn returned features of a ``FeatureDataset`` (from ``get``)."""
    if isinstance(produced, FeatureColumn):
        return True
    return (isinstance(produced, (tuple, list)) and len(produced) > 0
            and all(isinstance(item, FeatureColumn) for item in produced))


def columns_dataset(produced, batch_size=None, batch=False, drop_remainder=False):
    """The Dataset that input_fn's returned columns stand for; batched by ``batch_size`` when ``batch``.

    A single column gives a Dataset of that feature alone; a tuple gives tuples in its order.
    The data set's own ``batch_size``, when given, must equal run's per-device ``batch_size``.
    """
    single = isinstance(produced, FeatureColumn)
    columns = [produced] if single else list(produced)
    datasets = {id(column.dataset) for column in columns}
    if len(datasets) != 1:
        raise errors.ArgumentError(
            "input_fn returned features of several data sets; return features of one data set "
            "(one dataset.get([...]) call), or zip them yourself into a tf.data.Dataset")
    source = columns[0].dataset
    if source.batch_size is not None and batch_size is not None and source.batch_size != batch_size:
        raise errors.ArgumentError(
            f"{type(source).__name__}(batch_size={source.batch_size}) disagrees with run's per-device "
            f"batch_size={batch_size}; pass the same value to both (or leave the data set's out)")
    transforms = {}
    for column in columns:
        if column.transforms:
            if transforms.get(column.key, column.transforms) != column.transforms:
                raise errors.ArgumentError(
                    f"input_fn returned feature {column.key!r} twice with different functions applied; "
                    "return each feature once")
            transforms[column.key] = column.transforms
    dataset = source.as_dataset([column.key for column in columns], transforms)
    if single:
        dataset = dataset.map(lambda *features: features[0])
    if batch:
        dataset = dataset.batch(batch_size or source.batch_size, drop_remainder=drop_remainder)
    return dataset


def traced_dataset(call_input_fn, source, batch_size=None, batch=False, drop_remainder=False):
    """The Dataset that ``call_input_fn()`` describes when run once per sample of ``source``.

    ``call_input_fn`` is input_fn bound to its mode; inside the map, every ``get`` returns the
    current sample's features (of ``source``'s feature set), so input_fn's tensor code (arithmetic,
    ``tf.stack``, random flips, ``tf.numpy_function``) runs per sample as in MoXing's graph. The
    sample's seed is the element seed, so moxlite's augmentation stays stateless; TF's own random
    ops (``tf.image.random_*``) are stateful, and a resumed run restores the input position but not
    their random state (the iterator is saved ignoring external state).
    """
    seeds = tf.data.Dataset.random(seed=(getattr(source, "seed", None) or 0) + 1)

    def per_sample(seed, features):
        _local.sample, _local.seed = features, seed
        try:
            produced = call_input_fn()
        finally:
            _local.sample = _local.seed = None
        if is_columns(produced):
            raise errors.ArgumentError("input_fn returned dataset.get(...) placeholders while moxlite traced it "
                                       "per sample; return the tensors computed from them")
        return tuple(produced) if isinstance(produced, list) else produced

    dataset = tf.data.Dataset.zip((seeds, source.as_dataset())).map(
        per_sample, num_parallel_calls=source.num_parallel, deterministic=True)
    options = tf.data.Options()
    options.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    dataset = dataset.with_options(options)
    if source.batch_size is not None and batch_size is not None and source.batch_size != batch_size:
        raise errors.ArgumentError(
            f"{type(source).__name__}(batch_size={source.batch_size}) disagrees with run's per-device "
            f"batch_size={batch_size}; pass the same value to both (or leave the data set's out)")
    if batch:
        dataset = dataset.batch(batch_size or source.batch_size, drop_remainder=drop_remainder)
    return dataset
