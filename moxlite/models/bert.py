"""BERT pre-training as a MoXing ``model_fn``: a keras-hub encoder, a masked-LM head, and the losses.

    model_fn = moxlite.models.bert.bert_model_fn("tiny", vocabulary_size=1000)
    model_fn = moxlite.models.bert.bert_model_fn(backbone=my_backbone)   # built before run, see strategy_scope

The encoder is keras-hub's ``BertBackbone``: the maintained Keras 3 implementation of the
published architecture, built from a configuration without downloading anything, and a
preset a user already has (``from_preset``) gives the same object. The masked-LM head is
BERT's (Devlin et al. 2018), tied to the token embedding; it is our own small layer rather
than keras-hub's ``MaskedLMHead`` for THOR's sake (see ``tied_masked_lm_head``). keras-hub is
imported only when a BERT model is built.

model_fn reads the pre-training batch of moxlite's text data sets (and of the TFRecord
schema BERT's scripts write): ``input_ids``, ``input_mask``, ``segment_ids`` [B, L],
``masked_lm_positions``, ``masked_lm_ids``, ``masked_lm_weights`` [B, P], and
``next_sentence_labels`` [B, 1] when the data has it. Its loss is MindSpore's
``BertPretrainingLoss`` (and the original BERT's):

    masked_lm_loss = sum(w * CE(logits at the positions, ids)) / (sum(w) + 1e-5)
    next_sentence_loss = mean CE(Dense(2) on the pooled output, labels)   (when labels are given)
    loss = masked_lm_loss + next_sentence_loss [+ weight_decay * sum of squared kernels]

The sums are over one replica's batch, as in both scripts. ``masked_lm_accuracy`` is the
weighted share of masked positions predicted right.
"""

import dataclasses

import tensorflow as tf

from moxlite import errors
from moxlite.contract import ExportSpec, ModeKeys, ModelSpec
from moxlite.declarations import defaults
from moxlite.models import options as model_options

MODEL_NAMES = {"bert_tiny": "tiny", "bert_base": "base", "bert_large": "large"}
# The encoder sizes of the BERT paper (base, large) and a tiny one for tests and the bundled recipe,
# as moxlite.models.options declares them (one declaration); vocabulary_size None: the data set's.
SIZES = {size: defaults(model_options.OPTIONS[name]) for name, size in MODEL_NAMES.items()}
FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights")
NEXT_SENTENCE = "next_sentence_labels"


def bert_backbone(vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim, max_sequence_length,
                  dropout=0.1):
    """A randomly initialised keras-hub ``BertBackbone`` of these sizes (no download)."""
    import keras_hub

    return keras_hub.models.BertBackbone(
        vocabulary_size=vocabulary_size, num_layers=num_layers, num_heads=num_heads, hidden_dim=hidden_dim,
        intermediate_dim=intermediate_dim, dropout=dropout, max_sequence_length=max_sequence_length)


@dataclasses.dataclass
class BertPretrainingNetwork:
    """The encoder and its pre-training heads; the heads are made on the first batch, in the caller's scope."""

    backbone: object
    masked_lm_head: object = None
    next_sentence_head: object = None

    def build_heads(self, next_sentence):
        import keras

        if self.masked_lm_head is None:
            self.masked_lm_head = tied_masked_lm_head(self.backbone.token_embedding)
        if next_sentence and self.next_sentence_head is None:
            self.next_sentence_head = keras.layers.Dense(2, name="next_sentence_head")

    def keras_layers(self):
        """The Keras parts made so far: the encoder, then the heads."""
        return [layer for layer in (self.backbone, self.masked_lm_head, self.next_sentence_head) if layer is not None]

    @property
    def trainable_weights(self):
        """Every part's trainable weights, the tied token embedding once."""
        found, seen = [], set()
        for layer in self.keras_layers():
            for weight in layer.trainable_weights:
                if id(weight) not in seen:
                    seen.add(id(weight))
                    found.append(weight)
        return found


def tied_masked_lm_head(token_embedding):
    """BERT's masked-LM head: at the masked positions, Dense(hidden, gelu), LayerNorm, then the logits
    against the token embedding's table (tied) plus a bias over the vocabulary.

    keras-hub's MaskedLMHead computes the same logits through the embedding layer's reverse call;
    THOR records every call of a layer it preconditions, and would take that second call of the
    Embedding for one with a vocabulary-wide output. Here, as in MindSpore's BERT, the table is
    multiplied directly, so THOR sees it once, as the Embedding it is (its gradient, both uses
    summed, preconditioned by the Embedding rule). The multiplication is a small layer of its own
    that declares the kind ``EmbeddingOutput`` (``moxlite.training.capture.layer_statistics``), so
    its read of the table counts as the table's own and does not make the lookup unseen.
    """
    import keras

    class TiedOutputProjection(keras.layers.Layer):
        """logits = inputs . table^T, the table closed over (not a weight of this layer); the head adds
        its bias."""

        moxlite_layer_kind = "EmbeddingOutput"

        def moxlite_tied_table(self):
            return token_embedding.embeddings

        def call(self, inputs):
            table = keras.ops.cast(token_embedding.embeddings, inputs.dtype)
            return keras.ops.matmul(inputs, keras.ops.transpose(table))

    class TiedMaskedLMHead(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            width = token_embedding.output_dim
            initializer = keras.initializers.TruncatedNormal(stddev=0.02)   # BERT's initializer range
            self.intermediate_dense = keras.layers.Dense(width, activation="gelu", kernel_initializer=initializer,
                                                         name="intermediate_dense")
            self.intermediate_layer_norm = keras.layers.LayerNormalization(epsilon=1e-12,
                                                                           name="intermediate_layer_norm")
            self.output_projection = TiedOutputProjection(name="output_projection")

        def build(self, input_shape):
            width = token_embedding.output_dim
            self.intermediate_dense.build((None, None, width))
            self.intermediate_layer_norm.build((None, None, width))
            self.output_bias = self.add_weight(shape=(token_embedding.input_dim,), initializer="zeros",
                                               name="output_bias")

        def call(self, inputs, mask_positions):
            gathered = keras.ops.take_along_axis(inputs, keras.ops.expand_dims(mask_positions, -1), axis=1)
            hidden = self.intermediate_layer_norm(self.intermediate_dense(gathered))
            return self.output_projection(hidden) + keras.ops.cast(self.output_bias, hidden.dtype)

    return TiedMaskedLMHead(name="masked_lm_head")


def masked_lm_loss_and_accuracy(logits, ids, weights):
    """(weighted mean cross-entropy, weighted accuracy) over the masked positions; logits [B, P, V]."""
    ids = tf.cast(ids, tf.int32)
    weights = tf.cast(weights, tf.float32)
    cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=ids, logits=logits)
    loss = tf.reduce_sum(weights * cross_entropy) / (tf.reduce_sum(weights) + 1e-5)
    correct = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), ids), tf.float32)
    accuracy = tf.math.divide_no_nan(tf.reduce_sum(weights * correct), tf.reduce_sum(weights))
    return loss, accuracy


def bert_model_fn(size="tiny", backbone=None, weight_decay=0.0, **options):
    """model_fn(inputs, mode) of BERT pre-training (masked LM, plus next sentence when labelled).

    size: 'tiny', 'base' or 'large' (SIZES), each entry overridable through ``options``
        (num_layers, num_heads, hidden_dim, intermediate_dim, max_sequence_length, dropout,
        vocabulary_size); ignored when ``backbone`` is given.
    backbone: a keras-hub ``BertBackbone`` built by the caller (a constructor or ``from_preset``).
        Built before ``run`` on several replicas, it must be built inside
        ``moxlite.strategy_scope()``.
    weight_decay: L2 on the kernels, added to the loss (as the built-in classifiers do); THOR,
        Lamb and AdamW apply their own decoupled decay instead.
    """
    if backbone is None:
        config = sized_config(size, options)
    elif options:
        raise errors.ArgumentError(f"bert_model_fn: {sorted(options)[0]}=... with a given backbone; "
                                   f"the backbone's own sizes apply, drop the option")
    network = BertPretrainingNetwork(backbone) if backbone is not None else None

    def model_fn(inputs, mode):
        nonlocal network
        features = _checked_features(inputs)
        length = features["input_ids"].shape[1]
        if network is None:
            network = BertPretrainingNetwork(bert_backbone(**config))
        limit = network.backbone.max_sequence_length
        if length is not None and length > limit:
            raise errors.ArgumentError(
                f"the data's sequences have {length} tokens, more than the model's max_sequence_length={limit}; "
                f"raise the model's max_sequence_length or shorten the data's sequence_length")
        network.build_heads(NEXT_SENTENCE in features)
        training = mode == ModeKeys.TRAIN
        encoded = network.backbone({"token_ids": features["input_ids"], "segment_ids": features["segment_ids"],
                                    "padding_mask": features["input_mask"]}, training=training)
        logits = tf.cast(network.masked_lm_head(encoded["sequence_output"],
                                                mask_positions=features["masked_lm_positions"],
                                                training=training), tf.float32)
        predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
        export_spec = ExportSpec(
            inputs_dict={key: features[key] for key in ("input_ids", "input_mask", "segment_ids",
                                                        "masked_lm_positions")},
            outputs_dict={"masked_lm_predictions": predictions})
        output_info = {"masked_lm_predictions": predictions}
        mlm_loss, mlm_accuracy = masked_lm_loss_and_accuracy(logits, features["masked_lm_ids"],
                                                             features["masked_lm_weights"])
        log_info = {"masked_lm_loss": mlm_loss, "masked_lm_accuracy": mlm_accuracy}
        loss = mlm_loss
        if NEXT_SENTENCE in features and network.next_sentence_head is not None:
            labels = tf.reshape(tf.cast(features[NEXT_SENTENCE], tf.int32), [-1])
            nsp_logits = tf.cast(network.next_sentence_head(encoded["pooled_output"]), tf.float32)
            nsp_loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                                     logits=nsp_logits))
            nsp_correct = tf.equal(tf.argmax(nsp_logits, axis=-1, output_type=tf.int32), labels)
            log_info["next_sentence_loss"] = nsp_loss
            log_info["next_sentence_accuracy"] = tf.reduce_mean(tf.cast(nsp_correct, tf.float32))
            loss = loss + nsp_loss
        if weight_decay:
            kernels = [w for w in network.trainable_weights if w.path.endswith("kernel")]
            loss += weight_decay * tf.add_n([tf.reduce_sum(tf.square(tf.cast(w.value, tf.float32))) for w in kernels])
        log_info = {"loss": loss, **log_info}
        return ModelSpec(loss=loss, log_info=log_info, output_info=output_info, export_spec=export_spec)

    model_fn.network = lambda: network
    return model_fn


def sized_config(size, options):
    """The backbone arguments of ``size`` with ``options`` applied; an ArgumentError naming a bad one."""
    if size not in SIZES:
        raise errors.ArgumentError(f"bert size {size!r} is not known; choose one of {', '.join(SIZES)}")
    unknown = sorted(set(options) - set(SIZES[size]))
    if unknown:
        raise errors.ArgumentError(f"bert_{size}: unknown option {unknown[0]!r}; accepted: {', '.join(SIZES[size])}")
    config = {**SIZES[size], **{key: value for key, value in options.items() if value is not None}}
    if config["vocabulary_size"] is None:
        raise errors.ArgumentError(
            f"bert_{size}: vocabulary_size is not known; give the model's vocabulary_size (in a recipe, "
            f"model.bert_{size}.vocabulary_size) or use a data set that has a vocabulary")
    if config["hidden_dim"] % config["num_heads"]:
        raise errors.ArgumentError(f"bert_{size}: num_heads={config['num_heads']} does not divide "
                                   f"hidden_dim={config['hidden_dim']}; choose heads that divide it")
    return config


def _checked_features(inputs):
    if not isinstance(inputs, dict):
        raise errors.ModelFnError(
            f"BERT's model_fn takes a dict of features ({', '.join(FEATURES)}), got {errors.describe(inputs)}; "
            f"use a text, bert_tfrecord or bert_synthetic data set, or an input_fn that yields such dicts")
    missing = [key for key in FEATURES if key not in inputs]
    if missing:
        raise errors.ModelFnError(f"BERT's model_fn needs the feature {missing[0]!r}; the batch has "
                                  f"{', '.join(sorted(inputs))}")
    return inputs
