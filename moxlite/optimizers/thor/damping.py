"""How THOR splits its damping between a layer's two Kronecker factors.

Tikhonov damping lambda on the Fisher block A (x) G is approximated by damping
each factor: (A + a I) (x) (G + g I) with a * g = lambda (the cross terms are
dropped). MindSpore's THOR takes a = g = sqrt(lambda) (``even``). K-FAC's
factored Tikhonov damping (Martens & Grosse 2015, section 6.3) chooses the split
that minimises the cross terms' size under the trace norm:

    pi = sqrt((tr A / dim A) / (tr G / dim G)),  a = pi * sqrt(lambda),  g = sqrt(lambda) / pi

so a factor whose eigenvalues are large gets the larger share. Here ``lambda``
is the layer's own (Conv2D: lambda / (H_out * W_out), as MindSpore does).

Per kind:

- Dense, EinsumDense, Conv2D: traces of A and G from their diagonal blocks (the
  trace of a block-diagonal factor is the trace of the full one), dims d_in, d_out.
- Embedding: A is diagonal (token frequencies); its trace is their sum.
- LayerNormalization: no factors, MindSpore's diagonal rule g / (g^2/N + sqrt(lambda));
  pi does not apply and the damping stays sqrt(lambda).

A factor with a zero or non-finite trace (a layer that saw no rows, or only zero
inputs) gets pi = 1, the even split.
"""

import tensorflow as tf


def trace_of(factor, diagonal=False):
    """The trace of a factor kept as diagonal blocks [blocks, side, side] (zero padding adds 0), or of a
    diagonal factor kept as its vector."""
    return tf.reduce_sum(factor) if diagonal else tf.reduce_sum(tf.linalg.diag_part(factor))


def pi_correction(a_trace, a_size, g_trace, g_size):
    """K-FAC's trace-norm pi for factors of the given traces and sides; 1 where it is not defined."""
    ratio = (a_trace / float(a_size)) / (g_trace / float(g_size))
    pi = tf.sqrt(ratio)
    usable = tf.logical_and(tf.math.is_finite(pi), pi > 0.0)
    return tf.where(usable, pi, tf.ones_like(pi))


def factor_dampings(damping_sqrt, a, g, geometry, pi_damping):
    """(the damping added to A, the damping added to G) for one layer's undamped factors.

    damping_sqrt: sqrt of the layer's lambda (already divided by H_out*W_out for Conv2D).
    a, g: the factors as thor keeps them (blocks; Embedding's A as its diagonal vector).
    """
    if not pi_damping:
        return damping_sqrt, damping_sqrt
    pi = pi_correction(trace_of(a, diagonal=geometry.kind == "Embedding"), geometry.d_in,
                       trace_of(g), geometry.d_out)
    return damping_sqrt * pi, damping_sqrt / pi



def factor_scales(a, g, geometry):
    """(A's scale, G's scale): tr F / dim F, for an Embedding's A its mean over the ids that occur
    (``relative_dampings`` says why)."""
    if geometry.kind == "Embedding":
        present = tf.reduce_sum(tf.cast(a > 0, tf.float32))
        a_scale = trace_of(a, diagonal=True) / tf.maximum(present, 1.0)
    else:
        a_scale = trace_of(a) / float(geometry.d_in)
    return a_scale, trace_of(g) / float(geometry.d_out)


def relative_dampings(damping_sqrt, a, g, geometry):
    """``statistics: kfac``: (the damping added to A, to G), each sqrt(lambda) times its factor's own
    scale (``factor_scales``). The damped Kronecker product is then (A + sqrt(lambda) a I) (x) (G +
    sqrt(lambda) g I), a = tr A / dim A, g = tr G / dim G: lambda is a fraction of the curvature's
    scale, the same on a layer whose output gradients are 1e-6 as on one whose are 1, where an
    absolute lambda leaves the first with G^-1 = I / sqrt(lambda), a multiplier and no curvature.

    An Embedding's A (the ids' frequencies) is scaled by its mean over the ids that occur, not over
    the vocabulary: a table tied to an output projection gets a gradient on every row, and an id
    absent from the batch, whose A is 0, would otherwise be multiplied by vocabulary / sqrt(lambda)."""
    a_scale, g_scale = factor_scales(a, g, geometry)
    return damping_sqrt * a_scale, damping_sqrt * g_scale
