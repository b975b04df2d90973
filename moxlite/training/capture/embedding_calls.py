"""The embedding calls of a transformer that THOR's recorder must tell apart (BERT's, keras-hub's).

THOR's Embedding rule (docs/guide/optimizers-and-thor.md) holds for a lookup: each output
row is one table row, so A is diagonal, the counts of the ids looked up, and G is the output
gradients' second moment. Two calls in keras-hub's models are not plain
``keras.layers.Embedding`` lookups:

- **A reverse call** of a ``ReversibleEmbedding`` (``layer(x, reverse=True)``, the masked-LM
  head's output projection tied to the token table) is a matmul with the table's transpose. Its
  gradient reaches the table too, with a curvature the lookup's factors do not describe, so the
  recorder marks the call unseen: the whole table gets the plain gradient and is named, with
  this reason, at start-up (``is_reverse_call``, ``ties_weights``). An untied layer's reverse call
  uses a variable of its own and is not recorded (that variable gets the plain gradient).
- **keras-hub's ``PositionEmbedding``** is a lookup of the position ids 0..L-1 (or the
  ``positions`` it is given) broadcast over the batch: output[n, t] = table[t]. It is recorded
  as an Embedding whose ids are those positions (``position_ids``), so the same rule applies:
  A = the positions' counts (N for each of the first L positions), G over all N*L rows.
"""

import sys

import tensorflow as tf

# keras-hub's layer class (imported only if the user's program has imported keras-hub).
_POSITION_EMBEDDING = ("keras_hub.src.layers.modeling.position_embedding", "PositionEmbedding")
# The table variable's attribute on that layer.
POSITION_TABLE = "position_embeddings"

REVERSE_REASON = ("also called with reverse=True (a tied output projection), whose gradient the "
                  "lookup's factors do not describe")


def is_reverse_call(args, kwargs):
    """True for a ``ReversibleEmbedding`` call with its ``reverse`` flag set (not a lookup)."""
    reverse = kwargs.get("reverse", args[0] if args else False)
    return isinstance(reverse, bool) and reverse


def ties_weights(layer):
    """True if a reverse call of ``layer`` multiplies by the lookup table itself (``tie_weights``,
    keras-hub's default); an untied one has a ``reverse_embeddings`` variable of its own, and its
    reverse calls leave the table's statistics alone."""
    return bool(getattr(layer, "tie_weights", True))


def is_position_embedding(layer):
    """True for keras-hub's ``PositionEmbedding`` (and subclasses)."""
    module = sys.modules.get(_POSITION_EMBEDDING[0])
    cls = getattr(module, _POSITION_EMBEDDING[1], None) if module is not None else None
    return cls is not None and isinstance(layer, cls)


def position_ids(inputs, args, kwargs):
    """The table rows a ``PositionEmbedding`` call reads, one per output row: [batch..., L] int32.

    Mirrors its ``call(inputs, start_index=0, positions=None)``: the rows ``start_index`` ..
    ``start_index + L - 1``, or the given ``positions`` (unbatched ones broadcast), L being the
    second-to-last axis of ``inputs``.
    """
    names = ("start_index", "positions")
    given = dict(zip(names, args))
    given.update({name: kwargs[name] for name in names if name in kwargs})
    rows_shape = tf.shape(inputs)[:-1]
    positions = given.get("positions")
    if positions is not None:
        positions = tf.convert_to_tensor(positions)
        if positions.shape.rank == 1:
            positions = positions[tf.newaxis]
        return tf.broadcast_to(tf.cast(positions, tf.int32), rows_shape)
    start = tf.cast(given.get("start_index", 0), tf.int32)
    return tf.broadcast_to(start + tf.range(rows_shape[-1], dtype=tf.int32), rows_shape)
