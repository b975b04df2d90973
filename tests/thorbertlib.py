"""A tiny keras-hub BERT for the THOR tests, and THOR's update on it in numpy.

The reference records each tracked layer's input and pre-activation output gradient with
its own tf.GradientTape path (instance ``call`` / ``activation`` wrappers written here,
not moxlite's recorder), then applies thor.md's formulas in float64 numpy: A = a^T a / M,
G = ds^T ds / M with ds the per-sample output gradients, damping sqrt(lambda) on both,
full inverses (every side is below the default 128-block), dW = A^-1 grad G^-1;
Embedding A = the ids' counts / M; LayerNorm g / (g^2 / N + sqrt(lambda)); then momentum.
"""

import keras
import numpy as np
import tensorflow as tf

import moxlite as mox

VOCABULARY = 50
LENGTH = 8
HIDDEN = 32
HEADS = 2
INTERMEDIATE = 64
MAX_LENGTH = 16


def backbone(num_layers=1, dtype=None):
    import keras_hub

    return keras_hub.models.BertBackbone(vocabulary_size=VOCABULARY, num_layers=num_layers, num_heads=HEADS,
                                         hidden_dim=HIDDEN, intermediate_dim=INTERMEDIATE,
                                         max_sequence_length=MAX_LENGTH, dropout=0.0, dtype=dtype)


def classifier(seed=0):
    """backbone -> pooled output -> Dense(2) "head", as one functional model (seeded)."""
    keras.utils.set_random_seed(seed)
    bert = backbone()
    head = keras.layers.Dense(2, name="head", kernel_initializer=keras.initializers.GlorotUniform(seed=seed))
    return keras.Model(bert.inputs, head(bert.get_layer("pooled_dense").output)), bert


def data(rows, seed=0, length=LENGTH):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, VOCABULARY, (rows, length)).astype(np.int32)
    segments = np.broadcast_to((np.arange(length) >= length // 2).astype(np.int32), (rows, length)).copy()
    labels = rng.integers(0, 2, rows).astype(np.int32)
    return tokens, segments, labels


def input_fn_for(tokens, segments, labels):
    def input_fn(mode):
        return tf.data.Dataset.from_tensor_slices(((tokens, segments), labels)).repeat()
    return input_fn


def features(tokens, segments):
    return {"token_ids": tokens, "segment_ids": segments, "padding_mask": tf.ones_like(tokens)}


def loss_of(logits, labels):
    return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))


def closed_over_model_fn(model):
    def model_fn(inputs, mode):
        (tokens, segments), labels = inputs
        loss = loss_of(model(features(tokens, segments)), labels)
        return mox.ModelSpec(loss=loss, log_info={"loss": loss})
    return model_fn


def thor_optimizer_fn(lr, momentum, **thor):
    def optimizer_fn():
        inner = mox.get_optimizer_fn("momentum", learning_rate=lr, momentum=momentum)()
        return mox.get_optimizer_wrapper_fn("thor", inner, **thor)()
    return optimizer_fn


def masked_lm_model_fn(inputs, mode):
    """A BERT built inside model_fn (seeded: the same start in every run), with keras-hub's
    masked-LM head tied to the token table; the sequence length is unknown when traced."""
    import keras_hub

    (tokens, segments), _ = inputs
    keras.utils.set_random_seed(1)
    bert = backbone()
    head = keras_hub.layers.MaskedLMHead(token_embedding=bert.token_embedding, name="mlm")
    positions = tf.tile(tf.constant([[1, 5]]), [tf.shape(tokens)[0], 1])
    logits = head(bert(features(tokens, segments))["sequence_output"], positions)
    loss = loss_of(logits, tf.gather(tokens, positions, batch_dims=1))
    return mox.ModelSpec(loss=loss, log_info={"loss": loss})


def unknown_length_input_fn(tokens, segments, labels):
    def input_fn(mode):
        dataset = tf.data.Dataset.from_tensor_slices(((tokens, segments), labels))
        keep = lambda row: tf.boolean_mask(row, tf.ones_like(row, tf.bool))  # noqa: E731  (shape [None])
        return dataset.map(lambda pair, label: ((keep(pair[0]), keep(pair[1])), label)).repeat()
    return input_fn


MASKED_LM_THOR = dict(damping=0.05, frequency=2)   # refreshes at updates 0 and 2, stale between


def train_masked_lm(log_dir, steps, batch, rows=24):
    """thor(momentum 0.9, lr 0.05) on masked_lm_model_fn over ``rows`` rows of unknown length."""
    tokens, segments, labels = data(rows)
    return mox.run(input_fn=unknown_length_input_fn(tokens, segments, labels), model_fn=masked_lm_model_fn,
                   optimizer_fn=thor_optimizer_fn(0.05, 0.9, **MASKED_LM_THOR), run_mode=mox.ModeKeys.TRAIN,
                   batch_size=batch, log_dir=log_dir, max_number_of_steps=steps)


# ---- the independent recording path -------------------------------------------------------------

def tracked_layers(bert, head):
    """(kind, layer, table/kernel variable) of every layer THOR preconditions, in the model's order."""
    layer = bert.transformer_layers[0]
    attention = layer._self_attention_layer
    return [("Embedding", bert.token_embedding, bert.token_embedding.embeddings),
            ("Position", bert.position_embedding, bert.position_embedding.position_embeddings),
            ("Embedding", bert.segment_embedding, bert.segment_embedding.embeddings),
            ("LayerNorm", bert.embeddings_layer_norm, None),
            *[("Dense", dense, dense.kernel) for dense in (attention._query_dense, attention._key_dense,
                                                           attention._value_dense, attention._output_dense)],
            ("LayerNorm", layer._self_attention_layer_norm, None),
            ("Dense", layer._feedforward_intermediate_dense, layer._feedforward_intermediate_dense.kernel),
            ("Dense", layer._feedforward_output_dense, layer._feedforward_output_dense.kernel),
            ("LayerNorm", layer._feedforward_layer_norm, None),
            ("Dense", bert.pooled_dense, bert.pooled_dense.kernel),
            ("Dense", head, head.kernel)]


class _Recording:
    """While active, each tracked layer's input (or ids) is kept and a zero probe, watched by
    ``tape``, is added to its pre-activation output (lookups: to the output)."""

    def __init__(self, tape, layers):
        self.tape, self.layers, self.inputs, self.probes = tape, layers, {}, {}
        self.activations = {}

    def _probe(self, key, x):
        probe = tf.zeros_like(x)
        self.tape.watch(probe)
        self.probes[key] = probe
        return x + probe

    def __enter__(self):
        for key, (kind, layer, _) in enumerate(self.layers):
            if kind == "LayerNorm":
                continue
            original_call = layer.call

            def call(inputs, *args, _key=key, _kind=kind, _call=original_call, **kwargs):
                outputs = _call(inputs, *args, **kwargs)
                if _kind == "Position":
                    self.inputs[_key] = np.broadcast_to(np.arange(inputs.shape[1]), inputs.shape[:2])
                    return self._probe(_key, outputs)
                self.inputs[_key] = inputs
                return self._probe(_key, outputs) if _kind == "Embedding" else outputs
            object.__setattr__(layer, "call", call)
            if kind == "Dense":
                activation = self.activations[key] = layer.activation
                object.__setattr__(layer, "activation",
                                   lambda x, _key=key, _act=activation: _act(self._probe(_key, x)))
        return self

    def __exit__(self, *exc):
        for key, (kind, layer, _) in enumerate(self.layers):
            layer.__dict__.pop("call", None)
            if key in self.activations:
                object.__setattr__(layer, "activation", self.activations[key])


def gradients_and_records(model, layers, tokens, segments, labels):
    """{variable path: gradient}, {layer index: (inputs or ids, output gradient)} at the model's weights."""
    with tf.GradientTape() as tape:
        with _Recording(tape, layers) as recording:
            loss = loss_of(model(features(tf.constant(tokens), tf.constant(segments))), tf.constant(labels))
    keys = sorted(recording.probes)
    grads = tape.gradient(loss, model.trainable_variables + [recording.probes[k] for k in keys])
    variables = {v.path: np.asarray(tf.convert_to_tensor(g), np.float64)
                 for v, g in zip(model.trainable_variables, grads)}
    records = {k: (np.asarray(recording.inputs[k]), np.asarray(g, np.float64))
               for k, g in zip(keys, grads[len(model.trainable_variables):])}
    return variables, records


# ---- THOR in numpy ------------------------------------------------------------------------------

def _inverses(kind, kernel_shape, inputs, output_gradients, batch, damping_sqrt):
    """(A inverse, G inverse) of one layer; a lookup's A inverse is the vector of its diagonal."""
    ds = output_gradients * batch                       # per-sample gradients: the loss is a mean
    if kind in ("Embedding", "Position"):
        ds = ds.reshape(-1, kernel_shape[1])
        counts = np.bincount(inputs.reshape(-1), minlength=kernel_shape[0]) / len(ds)
        return 1.0 / (counts + damping_sqrt), np.linalg.inv(ds.T @ ds / len(ds) + damping_sqrt * np.eye(len(ds.T)))
    # A dense map of trailing axes: the kernel's leading axes are the input's last ones
    # (the attention output's kernel [heads, head_dim, hidden] takes [.., heads, head_dim]).
    split = max(k for k in range(1, len(kernel_shape)) if tuple(inputs.shape[-k:]) == tuple(kernel_shape[:k]))
    d_in, d_out = int(np.prod(kernel_shape[:split])), int(np.prod(kernel_shape[split:]))
    a = inputs.reshape(-1, d_in).astype(np.float64)
    s = ds.reshape(-1, d_out)
    return (np.linalg.inv(a.T @ a / len(a) + damping_sqrt * np.eye(d_in)),
            np.linalg.inv(s.T @ s / len(s) + damping_sqrt * np.eye(d_out)))


def numpy_thor(model, bert, head, steps_data, lr, momentum, damping, frequency, preconditioned):
    """Weights {path: array} after len(steps_data) THOR(momentum) steps from the model's weights.

    steps_data: [(tokens, segments, labels)] per step; preconditioned(path) -> bool chooses
    the layers (the others get the plain gradient, as include/exclude make them)."""
    layers = tracked_layers(bert, head)
    weights = {v.path: np.asarray(v.numpy(), np.float64) for v in model.trainable_variables}
    velocity = {path: np.zeros_like(w) for path, w in weights.items()}
    damping_sqrt = np.sqrt(damping)
    inverses = {}
    for step, (tokens, segments, labels) in enumerate(steps_data):
        for v in model.trainable_variables:
            v.assign(weights[v.path].astype(np.float32))
        grads, records = gradients_and_records(model, layers, tokens, segments, labels)
        batch = len(labels)
        if step % frequency == 0:
            for key, (kind, layer, kernel) in enumerate(layers):
                if kind != "LayerNorm":
                    inverses[key] = _inverses(kind, tuple(kernel.shape), *records[key], batch, damping_sqrt)
        for key, (kind, layer, kernel) in enumerate(layers):
            if kind == "LayerNorm":
                for variable in (layer.gamma, layer.beta):
                    if preconditioned(layer.gamma.path):
                        g = grads[variable.path]
                        grads[variable.path] = g / (g ** 2 / batch + damping_sqrt)
                continue
            if not preconditioned(kernel.path):
                continue
            a_inverse, g_inverse = inverses[key]
            shape = kernel.shape
            g = grads[kernel.path]
            if kind in ("Embedding", "Position"):
                g = a_inverse[:, None] * g @ g_inverse
            else:
                g = (a_inverse @ g.reshape(len(a_inverse), -1) @ g_inverse).reshape(shape)
            grads[kernel.path] = g
        for path in weights:
            velocity[path] = momentum * velocity[path] - lr * grads[path]
            weights[path] = weights[path] + velocity[path]
    return weights
