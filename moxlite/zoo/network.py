"""``get_model_fn``: a zoo network as ``logits, endpoints = network_fn(images)``.

The network is the Keras Applications feature extractor of the name (see
``catalog``) with a ``Dense`` classifier named ``logits`` on top: the same
computation as that application built with ``include_top=True`` (global
average pooling, or VGG's fc1/fc2 on the flattened map, then the classifier),
so its weights load into ours layer by layer (its classifier is named
``predictions``, ours ``logits``). ``network_fn`` builds the Keras model
on every call; inside ``moxlite.run`` the model template hands every later
call the variables of the first, so variables are created once however often
``model_fn`` runs (every trace, every replica, every mode).

- weight_decay: slim's L2 regulariser, ``weight_decay * sum(w**2) / 2`` for
  every convolution, depthwise and dense kernel (not biases nor batch-norm
  parameters), added to ``REGULARIZATION_LOSSES`` of the current ``model_fn``
  call (``mox.get_collection``), in the network's compute dtype.
- data_format: images are NHWC whatever it says; 'NCHW' was a GPU layout
  choice inside MoXing, and TensorFlow's CPU kernels do not support it.
- batch_norm_fused: accepted; TensorFlow picks fused kernels itself.
- dtypes: images in float16 under a float32 policy compute in float16, with
  variables in float16, or in float32 inside ``mox.var_scope(force_dtype=tf.float32)``;
  otherwise the current Keras dtype policy (``use_fp16`` sets mixed_float16) decides.
- weights: a local Keras weights file of the feature extractor (what
  ``keras.applications.<Network>(include_top=False, ...).save_weights`` writes,
  or Keras's downloadable "notop" file copied here by hand). Nothing is
  downloaded: moxlite never fetches weights, so it runs where there is no network.
  It is loaded when the network is built eagerly (run's first call), so a
  checkpoint restored afterwards (log_dir, checkpoint_path) wins.
"""

import keras
import tensorflow as tf

from moxlite import compat, dtype_scope, errors, graph_collections
from moxlite.contract import ModeKeys
from moxlite.zoo import catalog

REGULARIZATION_LOSSES = tf.compat.v1.GraphKeys.REGULARIZATION_LOSSES
_KERNELS = ("kernel", "depthwise_kernel", "pointwise_kernel")


def _check(name, value, check, expected):
    if not check(value):
        raise errors.ArgumentError(f"get_model_fn: {name}={errors.describe(value)} must be {expected}")


def get_model_fn(name, run_mode, num_classes, weight_decay=0.0, data_format="NHWC", batch_norm_fused=False,
                 batch_renorm=False, image_height=None, image_width=None, preprocess_fn=None, weights=None):
    """MoXing's ``mox.get_model_fn``: a function ``images -> (logits, endpoints)``.

    endpoints: ``pre_logits`` (the pooled features), ``logits`` and ``predictions`` (softmax).
    image_height/image_width: when given, images are resized to this size first.
    preprocess_fn: applied to the images before the network (default: none; the
        normalisation belongs to ``get_data_augmentation_fn``).
    """
    found = catalog.entry(name)
    _check("num_classes", num_classes, lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
           "a positive integer")
    _check("weight_decay", weight_decay, lambda v: isinstance(v, (int, float)) and v >= 0, "a number >= 0")
    _check("data_format", data_format, lambda v: v in ("NHWC", "NCHW"), "'NHWC' or 'NCHW'")
    if batch_renorm:
        raise errors.ArgumentError("get_model_fn: batch_renorm=True is not supported by the Keras Applications "
                                   "networks moxlite maps to; leave it False")
    if weights is not None and not tf.io.gfile.exists(weights):
        raise errors.ArgumentError(
            f"get_model_fn: weights={weights!r} does not exist; give a local Keras weights file of "
            f"keras.applications.{found.keras_name}(include_top=False) (nothing can be downloaded)")
    training = run_mode == ModeKeys.TRAIN

    def network_fn(images):
        images = tf.convert_to_tensor(images)
        if images.shape.rank != 4 or images.shape[1] is None or images.shape[2] is None:
            raise errors.ArgumentError(
                f"{name}: images of shape {images.shape} must be a batch [N, height, width, channels] of "
                "known height and width; resize them in the augmentation_fn or pass image_height/image_width")
        if image_height or image_width:
            size = [image_height or images.shape[1], image_width or images.shape[2]]
            images = tf.cast(tf.image.resize(images, size), images.dtype)
        if preprocess_fn is not None:
            images = compat.converted_user_function(preprocess_fn)(images)
        policy = _policy_for(images.dtype)
        model = _build(found, num_classes, tuple(images.shape[1:]), policy,
                       weights if tf.executing_eagerly() else None, name)
        outputs = model(images, training=training)
        if weight_decay:
            # Summed in float32, handed over in the compute dtype, as MoXing's cast variables gave
            # them: the script adds them to a loss of that dtype.
            for variable in _kernels(model):
                value = tf.cast(variable.value, tf.float32)
                term = tf.cast(weight_decay * tf.nn.l2_loss(value), policy.compute_dtype)
                graph_collections.add_to_collection(REGULARIZATION_LOSSES, term)
        endpoints = dict(outputs)
        endpoints["predictions"] = tf.nn.softmax(outputs["logits"])
        return outputs["logits"], endpoints

    return network_fn


def _policy_for(images_dtype):
    """The dtype policy the network is built with (see the module docstring)."""
    policy = keras.config.dtype_policy()
    if images_dtype in (tf.float16, tf.bfloat16) and tf.as_dtype(policy.compute_dtype) != images_dtype:
        variables = dtype_scope.forced_variable_dtype() or images_dtype
        return dtype_scope.policy_for(images_dtype, variables)
    return policy


def _build(found, num_classes, input_shape, policy, weights, name):
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        constructor = getattr(keras.applications, found.keras_name)
        try:
            backbone = constructor(include_top=False, weights=weights, input_shape=input_shape,
                                   pooling=None if found.flatten_top else "avg", **found.kwargs)
        except ValueError as error:
            raise errors.ArgumentError(f"{name}: keras.applications.{found.keras_name} rejects images of "
                                       f"shape {list(input_shape)}: {error}") from None
        features = backbone.output
        if found.flatten_top:
            features = keras.layers.Flatten(name="flatten")(features)
            features = keras.layers.Dense(4096, activation="relu", name="fc1")(features)
            features = keras.layers.Dense(4096, activation="relu", name="fc2")(features)
        logits = keras.layers.Dense(num_classes, name=catalog.DEFAULT_LOGITS_PATTERN)(features)
        return keras.Model(backbone.input, {"pre_logits": features, "logits": logits}, name=name)
    finally:
        keras.config.set_dtype_policy(previous)


def _kernels(model):
    """The convolution, depthwise and dense kernels of the model's layers, in layer order."""
    found = []
    for layer in model.layers:
        for attribute in _KERNELS:
            variable = getattr(layer, attribute, None)
            if isinstance(variable, keras.Variable):
                found.append(variable)
    return found
