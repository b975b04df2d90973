"""THOR's per-layer Kronecker factors: which layers qualify, and their statistics.

For a layer whose kernel acts as a matrix W [d_in, d_out] on rows a [M, d_in]
giving pre-activation rows s [M, d_out], THOR's Fisher block is A (x) G with

    A = a^T a / M        G = ds^T ds / M

where ds is the gradient of the loss *summed* over the batch with respect to s
(docs/guide/optimizers-and-thor.md, "THOR's formulas"). Per kind:

- Dense: a = inputs reshaped [M, d_in] (M = all leading axes).
- Conv2D (channels_last, groups 1): a = the input's patches (im2col with
  ``tf.image.extract_patches``, ordered like ``kernel.reshape(kh*kw*c_in, c_out)``),
  M = N * H_out * W_out; MindSpore also divides the damping and the update by
  H_out * W_out (``spatial``).
- EinsumDense whose equation is a dense map of trailing axes ("abc,cde->abde":
  the kernel's first axes are the input's last ones, its other axes the
  output's last ones): the same as Dense on the flattened axes.
- Embedding: A is diagonal, the token counts; G as above on the output rows.
- LayerNormalization: no factors; MindSpore's diagonal rule on the gradient
  needs only the batch size (rows).

Which rows, and the scale of ds (``statistics``):

- ``mindspore``: MindSpore's formula. Every row counts (M = all of them), and ds is the
  output gradient times the replica's batch size (the loss a mean over the batch).
- ``kfac``: K-FAC "expand" for layers shared over a sequence (Eschenhagen et al. 2023): each
  row the loss reaches (its output gradient is not all zero) is one example, weighted 1; rows
  the loss does not reach (the unmasked tokens after the last attention of a masked LM, a
  padded position) count in neither factor. ds is the output gradient times the number of loss
  terms, so that each row's ds is one term's gradient: the loss being a mean over its terms
  (a masked LM's masked tokens, a classifier's samples), that number is taken as the fewest rows
  any recorded layer of the step reaches (the layer nearest the loss sees one row per term).
  M = the rows reached.

This module computes each replica's *sums* (a^T a, ds^T ds, M) in float32;
the wrapper all-reduces them, divides by M and inverts. With a block size,
only the diagonal blocks of a^T a and ds^T ds are formed (block b is
a_b^T a_b, a_b the rows' columns of that block): all a blocked inverse needs,
at a fraction of the FLOPs and of the bytes all-reduced. They come as
``pieces``: the whole blocks [n, side, side], then the remainder block
[rest, rest] if the side does not divide the factor's.
"""

import dataclasses
import math
from typing import Optional, Tuple

import tensorflow as tf


@dataclasses.dataclass
class Call:
    """The tensors of one recorded layer call that the factor sums need."""

    inputs: tf.Tensor
    output_gradients: tf.Tensor
    batch_size: tf.Tensor


@dataclasses.dataclass
class Geometry:
    """What THOR needs to know about one preconditioned layer (static, from its first record)."""

    kind: str
    d_in: int          # A's side (Embedding: the vocabulary size, A diagonal)
    d_out: int         # G's side
    kernel_shape: Tuple[int, ...]
    spatial: int = 1   # Conv2D: H_out * W_out
    conv: Optional[dict] = None

    def describe(self):
        if self.kind == "LayerNormalization":
            return "diagonal rule"
        a = f"A diag {self.d_in}" if self.kind == "Embedding" else f"A {self.d_in}x{self.d_in}"
        return f"{a}, G {self.d_out}x{self.d_out}"


def _dense_einsum_split(equation, kernel_rank):
    """How many leading kernel axes are contracted, if ``equation`` is a dense map of trailing axes."""
    equation = equation.replace(" ", "")
    if "->" not in equation or equation.count(",") != 1:
        return None
    operands, output = equation.split("->")
    lhs, rhs = operands.split(",")
    if lhs.startswith("...") != output.startswith("..."):
        return None
    lhs, output = lhs.replace("...", ""), output.replace("...", "")
    if "." in rhs or len(rhs) != kernel_rank:
        return None
    contracted = [c for c in rhs if c in lhs and c not in output]
    produced = [c for c in rhs if c in output and c not in lhs]
    if rhs != "".join(contracted + produced) or not contracted or not produced:
        return None
    batch_in = lhs[:len(lhs) - len(contracted)]
    batch_out = output[:len(output) - len(produced)]
    if lhs[len(batch_in):] != "".join(contracted) or output[len(batch_out):] != "".join(produced):
        return None
    if batch_in != batch_out:
        return None
    return len(contracted)


def geometry_of(record):
    """The Geometry of a LayerRecord, or (None, reason) when THOR does not precondition it."""
    layer, kind = record.layer, record.kind
    shape = tuple(int(d) for d in record.kernel.shape)
    if kind == "LayerNormalization":
        return Geometry(kind, 0, 0, shape), None
    if kind == "Dense":
        if len(shape) != 2:
            return None, "kernel is not 2-D"
        return Geometry(kind, shape[0], shape[1], shape), None
    if kind == "Embedding":
        return Geometry(kind, shape[0], shape[1], shape), None
    if kind == "EinsumDense":
        split = _dense_einsum_split(layer.equation, len(shape))
        if split is None:
            return None, f"equation {layer.equation!r} is not a dense map of trailing axes"
        return Geometry(kind, math.prod(shape[:split]), math.prod(shape[split:]), shape), None
    if kind == "Conv2D":
        if layer.data_format != "channels_last":
            return None, "data_format is not channels_last"
        if getattr(layer, "groups", 1) != 1:
            return None, "grouped convolution"
        if layer.padding not in ("same", "valid"):
            return None, f"padding {layer.padding!r}"
        out_shape = record.probe.shape
        if out_shape.rank != 4 or out_shape[1] is None or out_shape[2] is None:
            return None, "output height/width not known when traced"
        kh, kw, c_in, c_out = shape
        conv = {"sizes": [1, kh, kw, 1], "strides": [1, *layer.strides, 1],
                "rates": [1, *layer.dilation_rate, 1], "padding": layer.padding.upper()}
        return Geometry(kind, kh * kw * c_in, c_out, shape, spatial=int(out_shape[1] * out_shape[2]),
                        conv=conv), None
    return None, f"layer kind {kind}"


def im2col(inputs, conv):
    """Conv2D input patches as rows [N*H_out*W_out, kh*kw*c_in], ordered like the reshaped kernel."""
    patches = tf.image.extract_patches(inputs, sizes=conv["sizes"], strides=conv["strides"],
                                       rates=conv["rates"], padding=conv["padding"])
    return tf.reshape(patches, [-1, patches.shape[-1]])


def piece_shapes(size, layout):
    """Shapes of the diagonal blocks of a [size, size] factor split as ``layout`` (blocks, side):
    the whole blocks [n, side, side], then the remainder [rest, rest] (each only if non-empty)."""
    side = layout[1]
    whole, rest = divmod(size, side) if side else (0, 0)
    return ([(whole, side, side)] if whole else []) + ([(rest, rest)] if rest else [])


def block_grams(rows, layout):
    """The diagonal blocks of ``rows^T rows`` (rows [M, size]) as ``piece_shapes`` lists them."""
    size, side = rows.shape[-1], layout[1]
    whole, rest = divmod(size, side)
    pieces = []
    if whole == 1:
        head = rows[:, :side] if rest else rows
        pieces.append(tf.matmul(head, head, transpose_a=True)[tf.newaxis])
    elif whole:
        head = tf.transpose(tf.reshape(rows[:, :whole * side], [-1, whole, side]), [1, 0, 2])
        pieces.append(tf.matmul(head, head, transpose_a=True))
    if rest:
        tail = rows[:, whole * side:]
        pieces.append(tf.matmul(tail, tail, transpose_a=True))
    return pieces


def padded_blocks(pieces, layout):
    """``block_grams``'s pieces as one [blocks, side, side] tensor, the remainder block zero-padded."""
    blocks, side = layout
    parts = []
    for piece in pieces:
        if piece.shape.rank == 3:
            parts.append(piece)
        else:
            padding = side - piece.shape[0]
            parts.append(tf.pad(piece, [[0, padding], [0, padding]])[tf.newaxis])
    return parts[0] if len(parts) == 1 else tf.concat(parts, 0)


def reached_rows(output_gradients, width):
    """1.0 for each row of ``output_gradients`` [..., width] that the loss reaches (not all zero), else 0.0."""
    rows = tf.reshape(tf.cast(output_gradients, tf.float32), [-1, width])
    return tf.cast(tf.reduce_any(tf.not_equal(rows, 0.0), axis=-1), tf.float32)


def loss_terms(calls):
    """``kfac``: the number of terms the replica's loss averages over, from the step's recorded
    calls (``Call``s with their output widths): the fewest rows any of them reaches, at least 1."""
    counts = [tf.reduce_sum(reached_rows(call.output_gradients, width)) for call, width in calls]
    counts = [tf.where(count > 0, count, tf.float32.max) for count in counts]
    fewest = tf.reduce_min(tf.stack(counts)) if counts else tf.constant(1.0)
    return tf.where(fewest < tf.float32.max, tf.maximum(fewest, 1.0), 1.0)


def local_sums(geometry, record, scale, a_layout, g_layout, reached_only=False):
    """This replica's (A pieces, G pieces, rows) for one recorded call (a ``Call``), in float32.

    The pieces are the diagonal blocks of the factor sums for the block layouts
    (``piece_shapes``); Embedding's A is one piece, the vector of token counts.
    scale: what the output gradients are multiplied by so that each row of ds is one
    example's gradient (``mindspore``: the replica's batch; ``kfac``: its loss terms; 1 for a
    summed loss). reached_only: count only the rows the loss reaches (``kfac``).
    """
    if geometry.kind == "LayerNormalization":
        return [], [], tf.cast(tf.shape(record.inputs)[0], tf.float32)
    ds = tf.reshape(record.output_gradients * scale, [-1, geometry.d_out])
    g_pieces = block_grams(ds, g_layout)
    weights = reached_rows(ds, geometry.d_out) if reached_only else None
    rows = tf.reduce_sum(weights) if reached_only else tf.cast(tf.shape(ds)[0], tf.float32)
    inputs = record.inputs
    if geometry.kind == "Embedding":
        ids = tf.reshape(tf.cast(inputs, tf.int32), [-1])
        ones = tf.ones_like(ids, tf.float32) if weights is None else weights
        counts = tf.math.unsorted_segment_sum(ones, ids, geometry.d_in)
        return [counts], g_pieces, rows
    if geometry.kind == "Conv2D":
        rows_in = im2col(tf.cast(inputs, tf.float32), geometry.conv)
    else:
        rows_in = tf.reshape(tf.cast(inputs, tf.float32), [-1, geometry.d_in])
    if weights is not None:
        rows_in = rows_in * weights[:, None]
    return block_grams(rows_in, a_layout), g_pieces, rows

