"""Real models nobody here wrote, at tiny sizes, as model_fn's in the styles users write them.

The models: keras.applications' MobileNetV2 (alpha 0.35), EfficientNetB0 and ConvNeXtTiny
(weights=None, 32x32 images, 10 classes), keras-hub's DistilBERT, GPT-2 and ViT built from
their backbone constructors (1 layer, width 16, vocabulary 100, 8 tokens), and a masked LSTM
(Embedding(mask_zero=True) + LSTM). Each is built from its public constructor and given the
head its task needs (a Dense on the first token or class token; GPT-2's logits through its
own reversed token embedding, as keras-hub's CausalLM does).

The styles (``STYLES``): the model built before run() and closed over, named directly in
model_fn (``named``), reached through a dict (``dict``) or behind a helper function
(``helper``); or built inside model_fn (``inside``). A :class:`Cell` holds the model_fn of one
model in one style and the Keras model object it computes with, so that a test can evaluate
the trained model with Keras alone (the independent reference) and compare weights.

Determinism: dropout is off (the keras-hub backbones take ``dropout=0``; EfficientNetB0's
Dropout layers get rate 0, which Keras's Dropout treats as the identity), so two runs differ
only by float32 rounding. The BatchNorm models' training data repeat each pair of samples
(``PAIRED``): a 2-replica run then sees on each replica the very batch statistics that one
device sees on the whole batch (the mean and the biased variance of [a, b, a, b] are those of
[a, b]), so 2 replicas can equal 1 exactly, BatchNorm included.

``python -m tests.realmodels CELLS_JSON`` evaluates cells in a fresh process (EVAL from
each cell's log_dir) and prints one JSON line per cell: the fresh-process check.
"""

import dataclasses
import json
import sys

import keras
import numpy as np
import tensorflow as tf

import moxlite as mox

MODELS = ("mobilenet_v2", "efficientnet_b0", "convnext_tiny", "distilbert", "gpt2", "vit", "masked_lstm")
STYLES = ("named", "dict", "helper", "inside")
IMAGE_SHAPE = (32, 32, 3)
NUM_CLASSES = 10
VOCABULARY = 100
SEQUENCE = 8
WIDTH = 16
BATCH_NORM_MODELS = ("mobilenet_v2", "efficientnet_b0")
PAIRED = BATCH_NORM_MODELS


# ---- the networks ------------------------------------------------------------------------------

def _without_dropout(model):
    """``model`` with every Dropout's rate set to 0 (Keras's Dropout is then the identity)."""
    for layer in model._flatten_layers():
        if isinstance(layer, keras.layers.Dropout):
            layer.rate = 0.0
    return model


def _mobilenet_v2():
    return keras.applications.MobileNetV2(input_shape=IMAGE_SHAPE, alpha=0.35, weights=None,
                                          classes=NUM_CLASSES, classifier_activation=None)


def _efficientnet_b0():
    return _without_dropout(keras.applications.EfficientNetB0(
        input_shape=IMAGE_SHAPE, weights=None, classes=NUM_CLASSES, classifier_activation=None))


def _convnext_tiny():
    return keras.applications.ConvNeXtTiny(input_shape=IMAGE_SHAPE, weights=None, classes=NUM_CLASSES,
                                           classifier_activation=None)


def _text_inputs():
    return {"token_ids": keras.Input((SEQUENCE,), dtype="int32", name="token_ids"),
            "padding_mask": keras.Input((SEQUENCE,), dtype="int32", name="padding_mask")}


def _distilbert():
    import keras_hub

    backbone = keras_hub.models.DistilBertBackbone(
        vocabulary_size=VOCABULARY, num_layers=1, num_heads=2, hidden_dim=WIDTH, intermediate_dim=2 * WIDTH,
        dropout=0.0, max_sequence_length=SEQUENCE)
    inputs = _text_inputs()
    first_token = backbone(inputs)[:, 0, :]
    return keras.Model(inputs, keras.layers.Dense(2, name="classifier")(first_token))


def _gpt2():
    import keras_hub

    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=VOCABULARY, num_layers=1, num_heads=2, hidden_dim=WIDTH, intermediate_dim=2 * WIDTH,
        dropout=0.0, max_sequence_length=SEQUENCE)
    inputs = _text_inputs()
    return keras.Model(inputs, backbone.token_embedding(backbone(inputs), reverse=True))


def _vit():
    import keras_hub

    backbone = keras_hub.models.ViTBackbone(image_shape=IMAGE_SHAPE, patch_size=8, num_layers=1, num_heads=2,
                                            hidden_dim=WIDTH, mlp_dim=2 * WIDTH)
    images = keras.Input(IMAGE_SHAPE, name="images")
    class_token = backbone(images)[:, 0, :]
    return keras.Model(images, keras.layers.Dense(NUM_CLASSES, name="classifier")(class_token))


def _masked_lstm():
    ids = keras.Input((SEQUENCE,), dtype="int32", name="ids")
    embedded = keras.layers.Embedding(VOCABULARY, WIDTH, mask_zero=True, name="embedding")(ids)
    hidden = keras.layers.LSTM(WIDTH, name="lstm")(embedded)
    return keras.Model(ids, keras.layers.Dense(2, name="classifier")(hidden))


BUILDERS = {"mobilenet_v2": _mobilenet_v2, "efficientnet_b0": _efficientnet_b0, "convnext_tiny": _convnext_tiny,
            "distilbert": _distilbert, "gpt2": _gpt2, "vit": _vit, "masked_lstm": _masked_lstm}


def build(model):
    """A fresh Keras model for ``model`` (one of MODELS), weights from Keras's global seed."""
    return BUILDERS[model]()


# ---- data --------------------------------------------------------------------------------------

def arrays(model, count, seed):
    """(features, labels) numpy arrays of ``count`` samples for ``model``'s task, fixed by ``seed``.

    For the PAIRED models the samples come in repeated pairs (a, b, a, b, c, d, c, d, ...).
    """
    rng = np.random.default_rng(seed)
    distinct = count // 2 if model in PAIRED else count
    if model in ("mobilenet_v2", "efficientnet_b0", "convnext_tiny", "vit"):
        scale = 255.0 if model == "efficientnet_b0" else 1.0   # EfficientNet rescales 0..255 itself
        features = (rng.uniform(size=(distinct,) + IMAGE_SHAPE) * scale).astype(np.float32)
        labels = rng.integers(0, NUM_CLASSES, distinct).astype(np.int32)
    elif model == "masked_lstm":
        lengths = rng.integers(2, SEQUENCE + 1, distinct)
        ids = rng.integers(1, VOCABULARY, (distinct, SEQUENCE))
        features = np.where(np.arange(SEQUENCE)[None] < lengths[:, None], ids, 0).astype(np.int32)
        labels = rng.integers(0, 2, distinct).astype(np.int32)
    else:
        lengths = rng.integers(3, SEQUENCE + 1, distinct) if model == "distilbert" else np.full(distinct, SEQUENCE)
        mask = (np.arange(SEQUENCE)[None] < lengths[:, None]).astype(np.int32)
        ids = (rng.integers(1, VOCABULARY, (distinct, SEQUENCE)) * mask).astype(np.int32)
        features = {"token_ids": ids, "padding_mask": mask}
        if model == "gpt2":   # next-token labels
            labels = np.roll(ids, -1, axis=1).astype(np.int32)
        else:
            labels = rng.integers(0, 2, distinct).astype(np.int32)
    if model in PAIRED:
        order = np.arange(distinct).reshape(-1, 2).repeat(2, axis=0).reshape(-1)
        features, labels = _take(features, order), labels[order]
    return features, labels


def _take(features, index):
    if isinstance(features, dict):
        return {key: value[index] for key, value in features.items()}
    return features[index]


def input_fn_for(model, train_count=16, eval_count=8, seed=0):
    """An input_fn of single samples: TRAIN repeats ``train_count`` in order, EVAL/PREDICT ``eval_count``."""
    train = arrays(model, train_count, seed)
    evaluation = arrays(model, eval_count, seed + 1000)

    def input_fn(mode):
        data = train if mode == mox.ModeKeys.TRAIN else evaluation
        dataset = tf.data.Dataset.from_tensor_slices(data)
        return dataset.repeat() if mode == mox.ModeKeys.TRAIN else dataset

    return input_fn


def eval_arrays(model, eval_count=8, seed=0):
    return arrays(model, eval_count, seed + 1000)


# ---- losses ------------------------------------------------------------------------------------

def loss_of(logits, labels):
    """Mean sparse cross-entropy from logits (GPT-2: over every position)."""
    return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))


def numpy_loss(logits, labels):
    """The same mean cross-entropy in float64 numpy: the independent evaluation's loss."""
    logits = np.asarray(logits, np.float64).reshape(-1, np.shape(logits)[-1])
    labels = np.asarray(labels).reshape(-1)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float(-log_probabilities[np.arange(len(labels)), labels].mean())


# ---- the model_fn's ----------------------------------------------------------------------------

@dataclasses.dataclass
class Cell:
    """One model in one style: its model_fn, and the Keras model it computes with.

    ``network()`` is the closed-over model, or for ``inside`` the model the first (eager)
    model_fn call built: its variables are the ones moxlite recorded and every later call
    reuses, so it holds the trained values. (A later call's model was built in a trace.)
    """
    model: str
    style: str
    model_fn: object
    holder: dict

    def network(self):
        return self.holder["net"]


def _spec(features, labels, logits):
    loss = loss_of(logits, labels)
    inputs = features if isinstance(features, dict) else {"inputs": features}
    return mox.ModelSpec(loss=loss, log_info={"loss": loss}, output_info={"logits": logits},
                         export_spec=mox.ExportSpec(inputs_dict=inputs, outputs_dict={"logits": logits}))


def cell(model, style, seed=0):
    """The model_fn of ``model`` in ``style``; a closed-over model is built now from ``seed``
    (on several replicas, call this inside ``mox.strategy_scope()``)."""
    if style not in STYLES:
        raise ValueError(f"style={style!r}: one of {STYLES}")
    holder = {}
    if style == "inside":
        def model_fn(inputs, mode):
            features, labels = inputs
            keras.utils.set_random_seed(seed)   # the first (variable-creating) call is reproducible
            net = build(model)
            holder.setdefault("net", net)   # the first call's: eager, it made the variables
            return _spec(features, labels, net(features, training=mode == mox.ModeKeys.TRAIN))
        return Cell(model, style, model_fn, holder)

    keras.utils.set_random_seed(seed)
    net = build(model)
    holder["net"] = net
    if style == "named":
        def model_fn(inputs, mode):
            features, labels = inputs
            return _spec(features, labels, net(features, training=mode == mox.ModeKeys.TRAIN))
    elif style == "dict":
        models = {"net": net}

        def model_fn(inputs, mode):
            features, labels = inputs
            return _spec(features, labels, models["net"](features, training=mode == mox.ModeKeys.TRAIN))
    else:
        def forward(features, training):
            return net(features, training=training)

        def model_fn(inputs, mode):
            features, labels = inputs
            return _spec(features, labels, forward(features, mode == mox.ModeKeys.TRAIN))
    return Cell(model, style, model_fn, holder)


def weights_of(network):
    """Every weight of ``network`` (trainable and not, BatchNorm statistics included), in Keras's order."""
    return [np.array(weight.numpy()) for weight in network.weights]


def independent_loss(network, model, eval_count=8, seed=0):
    """The eval set's mean loss computed by Keras alone (inference mode) and numpy."""
    features, labels = eval_arrays(model, eval_count, seed)
    return numpy_loss(network(features, training=False), labels)


# ---- the fresh-process evaluation ---------------------------------------------------------------

def _evaluate_in_this_process(cells):
    for one in cells:
        mox.set_flag("amp_level", one.get("amp_level", "O0"))
        built = cell(one["model"], one["style"], seed=one.get("seed", 0) + 17)   # other initial weights
        metrics = mox.run(input_fn=input_fn_for(one["model"]), model_fn=built.model_fn,
                          run_mode=mox.ModeKeys.EVAL, batch_size=4, checkpoint_path=one["log_dir"])
        print("RESULT " + json.dumps({"log_dir": one["log_dir"], "loss": float(metrics["loss"])}), flush=True)


if __name__ == "__main__":
    _evaluate_in_this_process(json.loads(sys.argv[1]))
