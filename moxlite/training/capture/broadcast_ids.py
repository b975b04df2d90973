"""Per-sample statistics for an Embedding whose ids broadcast over the batch.

Position embeddings are often looked up with ids of shape [1, N] (keras-hub's ViT:
``position_embedding(position_ids)``) and added to the [B, N, D] patch or token embeddings.
The lookup's output is then [1, N, D], and the gradient at that output is the sum over the
batch of the per-sample gradients, so THOR's rows would be N sums where the same ids tiled to
[B, N] give B·N per-sample rows: G = Σ_b ds_b·Σ_b ds_bᵀ / N instead of Σ_b ds_b·ds_bᵀ / (B·N),
and A would count each position once instead of B times.

The per-sample gradient does exist in the step's graph: it is the gradient at the output of
the add that broadcasts the lookup over the batch. ``follow`` finds that add (through a cast
or an identity) after model_fn's forward pass and takes its output as the record's probe
(the step's tape differentiates the loss with respect to it, as for any probe) and the ids
broadcast to its batch as the record's inputs: the statistics are those of the tiled ids, on
every replica. A lookup whose output goes anywhere else (two uses, a multiply, a branch) is
recorded unseen with the reason, so its table gets the plain gradient and a start-up line,
never silently wrong factors.
"""

import tensorflow as tf

# Ops a lookup's output may pass through before the add without changing its per-sample rows.
_PASS_THROUGH = ("Cast", "Identity")
_ADDS = ("AddV2", "Add")


def leading_one(ids):
    """True for ids with a batch axis of static size 1 (rank 2 or more): ids that may broadcast."""
    shape = tf.TensorShape(getattr(ids, "shape", None))
    return shape.rank is not None and shape.rank >= 2 and shape[0] == 1


def _broadcasting_add(outputs):
    """The tensor where ``outputs`` [1, ...] is added to a batch, or (None, what it went into)."""
    tensor = outputs
    while True:
        consumers = tensor.consumers()
        if len(consumers) != 1:
            return None, f"{len(consumers)} uses of the looked-up rows"
        operation = consumers[0]
        if operation.type not in _PASS_THROUGH:
            break
        tensor = operation.outputs[0]
    added = operation.outputs[0]
    if (operation.type not in _ADDS or added.shape.rank != outputs.shape.rank
            or not added.shape[1:].is_compatible_with(outputs.shape[1:])):
        return None, f"an op {operation.type}"
    return added, None


def follow(record, outputs):
    """Give ``record`` (a lookup with ids [1, ...] whose probed output is ``outputs``) the rows
    of the ids tiled over the batch its output is added to. Returns None, or why it cannot be
    followed (the caller records the call unseen with that reason)."""
    added, went_into = _broadcasting_add(outputs)
    if added is None:
        return (f"its ids have a leading axis of 1 and its output goes into {went_into}, not one add "
                f"over the batch, so its per-sample rows are unknown; tile the ids to the batch")
    if added.shape[0] == 1:
        return None                  # no batch to broadcast over: the rows are already per sample
    ids = tf.convert_to_tensor(record.inputs)
    record.inputs = tf.broadcast_to(ids, tf.concat([tf.shape(added)[:1], tf.shape(ids)[1:]], 0))
    record.probe = added
    return None
