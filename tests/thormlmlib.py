"""THOR on issue 32's grammar masked LM, and the same THOR in numpy (the reference of
tests/optimizers/thor/test_grammar_reference.py).

The model is the one ``recipes/grammar_mlm_thor.yaml`` trains (keras-hub's BertBackbone, 2 layers,
128 wide, feed-forward 512, the grammar corpus's 689-word vocabulary, moxlite's masked-LM head tied
to the token table), built before ``run`` and closed over, so the reference can reach every layer.
The data are the recipe's own first examples (64 tokens, 10 masked predictions each: every
example carries the same weight, so a batch split over replicas sums to the whole batch's loss).

The reference records each tracked layer's input and pre-activation output gradient through
tests/thorbertlib.py's own probes (not moxlite's recorder) and applies thor.md's formulas in float64:
A = a^T a / M and G = ds^T ds / M (ds: the output gradient times the batch, the loss being a mean),
each damped by sqrt(lambda) and inverted by 128-blocks on the diagonal (the recipe's block_size);
Embedding A = the ids' counts / M (the tied table: its lookup's factors, applied to the gradient of
both uses); LayerNorm g / (g^2 / N + sqrt(lambda)); then + weight_decay * w outside the excluded
names, then Keras's momentum (v = mu v - lr g, w += v). Learning rate and damping follow MindSpore's
polynomial decay at the update's index; factors are rebuilt at updates 0, frequency, 2 frequency...
Variables with no gradient (the unused pooler) are left as they are.

``statistics="kfac"`` is THOR's K-FAC-expand mode, written from its definition: a row counts when
its output gradient is not all zero; the loss's terms N are the fewest rows any tracked layer
reaches (the head's masked positions); ds = the output gradient times N; A and G average over the
rows reached (Embedding: the reached ids' counts); each factor is damped by sqrt(lambda) times its
own trace / side (Embedding's A: its trace / the ids that occur); LayerNorm keeps the plain gradient.
``inner`` replaces the momentum by a Keras optimizer: ``"adamw"``, AdamW (decoupled decay on every
variable, then Adam's bias-corrected step); ``"lamb"``, Lamb (the same decoupled decay, then Adam's
step rescaled per variable by the trust ratio ||w|| / ||step||, w after the decay); both with no
weight decay of THOR's own. ``"adam"``: Adam, after THOR's own weight decay (+ weight_decay * w
outside the excluded names, as over momentum).
"""

import os
import re

import keras
import numpy as np
import tensorflow as tf

import moxlite as mox
from moxlite.models import bert
from tests import thorbertlib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPE = os.path.join(REPO, "recipes", "grammar_mlm_thor.yaml")
VOCABULARY = os.path.join(REPO, "moxlite", "data", "grammar_corpus", "vocab.txt")
SIZES = dict(num_layers=2, num_heads=2, hidden_dim=128, intermediate_dim=512, max_sequence_length=64)
# MindSpore's BERT THOR settings; the schedules run over the test's few updates so that every update
# sees a different learning rate and damping.
LEARNING_RATE = dict(initial_value=3.4e-3, end_value=3.244e-5, power=1.0)
DAMPING = dict(initial_value=5e-2, end_value=1e-6, power=1.0)
MOMENTUM = 0.9
BLOCK = 128
WEIGHT_DECAY = 5e-4
WEIGHT_DECAY_EXCLUDE = ["layernorm", "layer_norm", "bias"]


def examples(count):
    """The recipe's first ``count`` training examples (no shuffle), {feature: array [count, ...]}."""
    from moxlite.recipes import builders, loader

    plan = builders.build_plan(loader.load([RECIPE], ["input.shuffle_buffer=0"]))
    rows = list(plan.arguments()["input_fn"](mox.ModeKeys.TRAIN).take(count).as_numpy_iterator())
    return {key: np.stack([row[key] for row in rows]) for key in rows[0]}


def vocabulary_size():
    with open(VOCABULARY, encoding="utf-8") as lines:
        return sum(1 for _ in lines)


class Network:
    """The backbone and the tied masked-LM head, both built (seeded) before any run."""

    def __init__(self, sample, seed=0, start=None):
        keras.utils.set_random_seed(seed)
        self.backbone = bert.bert_backbone(vocabulary_size(), dropout=0.0, **SIZES)
        self.head = bert.tied_masked_lm_head(self.backbone.token_embedding)
        self.loss(sample)   # builds the head
        if start is not None:
            for variable in self.variables:
                variable.assign(start[variable.path])

    @property
    def variables(self):
        seen, found = set(), []
        for variable in self.backbone.trainable_variables + self.head.trainable_variables:
            if id(variable) not in seen:
                seen.add(id(variable))
                found.append(variable)
        return found

    def weights(self):
        return {variable.path: variable.numpy() for variable in self.variables}

    def loss(self, features):
        encoded = self.backbone({"token_ids": features["input_ids"], "segment_ids": features["segment_ids"],
                                 "padding_mask": features["input_mask"]})
        logits = self.head(encoded["sequence_output"], mask_positions=features["masked_lm_positions"])
        loss, _ = bert.masked_lm_loss_and_accuracy(tf.cast(logits, tf.float32), features["masked_lm_ids"],
                                                   features["masked_lm_weights"])
        return loss

    def model_fn(self, features, mode):
        loss = self.loss(features)
        return mox.ModelSpec(loss=loss, log_info={"loss": loss})

    def tracked_layers(self):
        """(kind, layer, kernel or table) of every layer THOR preconditions, for the probes."""
        backbone = self.backbone
        layers = [("Embedding", backbone.token_embedding, backbone.token_embedding.embeddings),
                  ("Position", backbone.position_embedding, backbone.position_embedding.position_embeddings),
                  ("Embedding", backbone.segment_embedding, backbone.segment_embedding.embeddings),
                  ("LayerNorm", backbone.embeddings_layer_norm, None)]
        for block in backbone.transformer_layers:
            attention = block._self_attention_layer
            layers += [("Dense", dense, dense.kernel) for dense in (attention._query_dense, attention._key_dense,
                                                                    attention._value_dense, attention._output_dense)]
            layers += [("LayerNorm", block._self_attention_layer_norm, None),
                       ("Dense", block._feedforward_intermediate_dense, block._feedforward_intermediate_dense.kernel),
                       ("Dense", block._feedforward_output_dense, block._feedforward_output_dense.kernel),
                       ("LayerNorm", block._feedforward_layer_norm, None)]
        return layers + [("Dense", self.head.intermediate_dense, self.head.intermediate_dense.kernel),
                         ("LayerNorm", self.head.intermediate_layer_norm, None)]


def input_fn_for(features):
    def input_fn(mode):
        return tf.data.Dataset.from_tensor_slices(features).repeat()
    return input_fn


ADAM = dict(beta_1=0.9, beta_2=0.999, epsilon=1e-7)
DECOUPLED_DECAY = 0.01
# The inner optimizers with a decoupled decay of their own: THOR adds none.
DECOUPLED = ("adamw", "lamb")
INNER = ("momentum",) + DECOUPLED + ("adam",)


def thor_optimizer_fn(total_steps, frequency, statistics="mindspore", inner="momentum", exclude=()):
    """MindSpore's BERT THOR stack, thor(momentum 0.9) with block 128 and THOR's weight decay, by the
    Python API; ``inner`` "adamw" or "lamb": thor over it, its decoupled decay 0.01 and none of THOR's;
    "adam": thor(adam) with THOR's weight decay. ``exclude``: kernels THOR leaves plain."""
    from moxlite.optimizers.thor import schedules

    assert inner in INNER, inner
    learning_rate = schedules.ThorPolynomialDecay(total_steps=total_steps, **LEARNING_RATE)
    damping = schedules.ThorPolynomialDecay(total_steps=total_steps, **DAMPING)
    thor = dict(damping=damping, frequency=frequency, block_size=BLOCK, statistics=statistics, exclude=list(exclude))
    if inner in DECOUPLED:
        return mox.get_optimizer_wrapper_fn(
            "thor", mox.get_optimizer_fn(inner, learning_rate, weight_decay=DECOUPLED_DECAY, **ADAM),
            weight_decay=0.0, **thor)
    if inner == "adam":
        optimizer_fn = mox.get_optimizer_fn("adam", learning_rate, **ADAM)
    else:
        optimizer_fn = mox.get_optimizer_fn("momentum", learning_rate, momentum=MOMENTUM)
    return mox.get_optimizer_wrapper_fn("thor", optimizer_fn, weight_decay=WEIGHT_DECAY,
                                        weight_decay_exclude=WEIGHT_DECAY_EXCLUDE, **thor)


def polynomial(values, step, total_steps):
    """MindSpore's polynomial decay at ``step`` (the update's index, from 0)."""
    remaining = max(0.0, 1.0 - step / total_steps)
    return (values["initial_value"] - values["end_value"]) * remaining ** values["power"] + values["end_value"]


def block_inverse(matrix, damping_sqrt, block=BLOCK):
    """The inverse of matrix + sqrt(lambda) I, kept to its diagonal blocks of ``block`` (a short
    last block: padding it with the identity inverts the same numbers)."""
    inverse = np.zeros_like(matrix)
    for start in range(0, len(matrix), block):
        part = slice(start, min(start + block, len(matrix)))
        inverse[part, part] = np.linalg.inv(matrix[part, part] + damping_sqrt * np.eye(part.stop - part.start))
    return inverse


def _gradients_and_records(network, layers, features):
    """{path: gradient or None}, {layer index: (inputs or ids, output gradient)} at the network's weights."""
    variables = network.variables
    with tf.GradientTape() as tape:
        with thorbertlib._Recording(tape, layers) as recording:
            loss = network.loss({key: tf.constant(value) for key, value in features.items()})
    keys = sorted(recording.probes)
    grads = tape.gradient(loss, variables + [recording.probes[k] for k in keys])
    by_path = {v.path: (None if g is None else np.asarray(tf.convert_to_tensor(g), np.float64))
               for v, g in zip(variables, grads)}
    records = {k: (np.asarray(recording.inputs[k]), np.asarray(g, np.float64))
               for k, g in zip(keys, grads[len(variables):])}
    return by_path, records


def _reached(output_gradients, width):
    """The rows [M] of an output gradient [..., width] that are not all zero."""
    return np.any(output_gradients.reshape(-1, width) != 0, axis=-1)


def _inverses(kind, kernel_shape, inputs, output_gradients, scale, damping_sqrt, statistics):
    """(A inverse, G inverse); ``scale``: the batch (mindspore) or the loss's terms (kfac)."""
    d_out = kernel_shape[-1] if kind in ("Embedding", "Position") else None
    if d_out is None:
        split = max(k for k in range(1, len(kernel_shape)) if tuple(inputs.shape[-k:]) == tuple(kernel_shape[:k]))
        d_in, d_out = int(np.prod(kernel_shape[:split])), int(np.prod(kernel_shape[split:]))
    ds = (output_gradients * scale).reshape(-1, d_out)
    rows = _reached(ds, d_out) if statistics == "kfac" else np.ones(len(ds), bool)
    ds = ds[rows]
    g = ds.T @ ds / len(ds)
    if kind in ("Embedding", "Position"):
        a = np.bincount(inputs.reshape(-1)[rows], minlength=kernel_shape[0]) / len(ds)
        a_damping = damping_sqrt * (a.sum() / max(1, np.count_nonzero(a)) if statistics == "kfac" else 1.0)
        a_inverse = 1.0 / (a + a_damping)
    else:
        rows_in = inputs.reshape(-1, d_in).astype(np.float64)[rows]
        a = rows_in.T @ rows_in / len(rows_in)
        a_inverse = block_inverse(a, damping_sqrt * (np.trace(a) / len(a) if statistics == "kfac" else 1.0))
    g_damping = damping_sqrt * (np.trace(g) / len(g) if statistics == "kfac" else 1.0)
    return a_inverse, block_inverse(g, g_damping)


def loss_terms(layers, records):
    """kfac: the fewest rows any tracked layer's output gradient reaches (the loss's terms)."""
    counts = []
    for key, (kind, layer, kernel) in enumerate(layers):
        if kind != "LayerNorm":
            count = _reached(records[key][1], kernel.shape[-1] if kind in ("Embedding", "Position")
                             else records[key][1].shape[-1]).sum()
            counts += [count] if count else []
    return min(counts)


# An entry of a preconditioned gradient below this fraction of its layer's largest is within about 10
# times the float32 error of the preconditioning (tests/optimizers/thor/test_grammar_reference.py: ~1e-4 of the
# largest): Adam's step there (about lr * its sign) is not determined by a float32 run.
ADAM_UNDETERMINED = 1e-3


def numpy_thor(network, batches, total_steps, frequency, precondition=True, statistics="mindspore",
               inner="momentum", undetermined=None, exclude=()):
    """{path: weights} after one update per batch from the network's weights (``precondition``
    False: the same stack with every gradient left plain, for what THOR changed). ``undetermined``:
    a dict to fill, inner adamw, lamb or adam, with {path: mask of the entries whose gradient (as
    the inner optimizer receives it) fell below ADAM_UNDETERMINED of the variable's largest at some
    update}. ``exclude``: kernel paths matching
    one of these expressions keep the plain gradient."""
    layers = [(kind, layer, kernel) for kind, layer, kernel in network.tracked_layers()
              if kernel is None or not any(re.search(pattern, kernel.path) for pattern in exclude)]
    weights = {v.path: np.asarray(v.numpy(), np.float64) for v in network.variables}
    velocity = {path: np.zeros_like(w) for path, w in weights.items()}
    second = {path: np.zeros_like(w) for path, w in weights.items()}
    excluded = re.compile("|".join(WEIGHT_DECAY_EXCLUDE))
    inverses, rows = {}, {}
    for step, features in enumerate(batches):
        damping_sqrt = np.sqrt(polynomial(DAMPING, step, total_steps))
        for v in network.variables:
            v.assign(weights[v.path].astype(np.float32))
        grads, records = _gradients_and_records(network, layers, features)
        batch = len(features["input_ids"])
        if step % frequency == 0:
            scale = loss_terms(layers, records) if statistics == "kfac" else batch
            for key, (kind, layer, kernel) in enumerate(layers):
                if kind == "LayerNorm":
                    rows[key] = batch
                else:
                    inverses[key] = _inverses(kind, tuple(kernel.shape), *records[key], scale, damping_sqrt,
                                              statistics)
        for key, (kind, layer, kernel) in enumerate(layers if precondition else ()):
            if kind == "LayerNorm" and statistics == "kfac":
                continue
            if kind == "LayerNorm":
                for variable in (layer.gamma, layer.beta):
                    g = grads[variable.path]
                    grads[variable.path] = g / (g ** 2 / rows[key] + damping_sqrt)
                continue
            a_inverse, g_inverse = inverses[key]
            g = grads[kernel.path]
            if kind in ("Embedding", "Position"):
                grads[kernel.path] = a_inverse[:, None] * g @ g_inverse
            else:
                grads[kernel.path] = (a_inverse @ g.reshape(len(a_inverse), -1) @ g_inverse).reshape(kernel.shape)
        learning_rate = polynomial(LEARNING_RATE, step, total_steps)
        for path, g in grads.items():
            if g is None:
                continue
            if inner not in DECOUPLED and not excluded.search(path):
                g = g + WEIGHT_DECAY * weights[path]
            if inner == "momentum":
                velocity[path] = MOMENTUM * velocity[path] - learning_rate * g
                weights[path] = weights[path] + velocity[path]
                continue
            if undetermined is not None:
                small = np.abs(g) < ADAM_UNDETERMINED * np.abs(g).max()
                undetermined[path] = undetermined.get(path, np.zeros(g.shape, bool)) | small
            if inner in DECOUPLED:
                weights[path] = weights[path] - learning_rate * DECOUPLED_DECAY * weights[path]
            velocity[path] = ADAM["beta_1"] * velocity[path] + (1 - ADAM["beta_1"]) * g
            second[path] = ADAM["beta_2"] * second[path] + (1 - ADAM["beta_2"]) * g ** 2
            first_correction = 1 - ADAM["beta_1"] ** (step + 1)
            second_correction = 1 - ADAM["beta_2"] ** (step + 1)
            if inner == "lamb":
                # Lamb: epsilon added to the bias-corrected second moment's root, then the trust ratio.
                root = np.sqrt(second[path] / second_correction)
                direction = (velocity[path] / first_correction) / (root + ADAM["epsilon"])
                weights[path] = weights[path] - learning_rate * _trust_ratio(weights[path], direction) * direction
                continue
            # Adam and AdamW: the second moment's correction folded into the learning rate, epsilon added
            # to the uncorrected root.
            alpha = learning_rate * np.sqrt(second_correction) / first_correction
            weights[path] = weights[path] - alpha * velocity[path] / (np.sqrt(second[path]) + ADAM["epsilon"])
    return weights


def _trust_ratio(weights, direction):
    """Lamb's per-variable ||w|| / ||direction||, 1 where either norm is 0."""
    w_norm, d_norm = np.linalg.norm(weights), np.linalg.norm(direction)
    return w_norm / d_norm if w_norm > 0 and d_norm > 0 else 1.0
