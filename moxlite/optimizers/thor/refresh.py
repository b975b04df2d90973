"""Which layers THOR inverts at a refresh: every one (MindSpore), or the THOR paper's trace rule.

A refresh (one applied update out of ``frequency``) always rebuilds every
layer's factors from that update's batch, all-reduced in one fused reduction;
this module only decides which of the rebuilt factors are inverted again.

- ``fixed``: every layer, at every refresh (MindSpore's open code).
- ``trace``: the rule of Chen et al. (THOR, AAAI 2021): a layer is inverted only
  when its factors have changed enough since its last inversion, measured by their
  traces, and the interval between its inversions grows over training. The paper
  publishes no thresholds; moxlite's are measured (tools/bench_thor.py). Per layer:

      change = max(|tr A - tr A_0| / tr A_0, |tr G - tr G_0| / tr G_0)

  with A_0, G_0 the factors at its last inversion. The layer is inverted when it has
  waited at least ``gap`` refreshes since that inversion and change >= threshold;
  after each inversion ``gap`` is multiplied by ``growth`` (it starts at 1: with
  growth 1 every refresh checks). A layer never inverted yet (or whose reference
  trace is 0) always inverts, and so does every layer on a forced refresh (a resumed
  run whose stored inverses do not fit). With threshold 0 and growth 1 the rule
  inverts every layer at every refresh: the fixed rule.

LayerNormalization has no factors (MindSpore's diagonal rule reads only the
batch size), so the rule does not apply to it: its state is updated at every refresh.

The per-layer state (reference traces, refreshes waited, gap, inversions done) is
optimizer state: saved with the checkpoint, so a resumed run decides as the
uninterrupted one. It is created only with ``refresh='trace'`` (a fixed run's
checkpoint is unchanged).
"""

import keras
import tensorflow as tf


STATE_KEYS = ("a_trace_at_inversion", "g_trace_at_inversion", "refreshes_waited", "gap", "inversions")


def relative_change(trace, reference):
    """|trace - reference| / reference; infinite where the reference is 0 (never inverted)."""
    return tf.where(reference > 0.0, tf.abs(trace - reference) / tf.maximum(reference, 1e-30),
                    tf.constant(float("inf")))


def should_invert(a_trace, g_trace, state, threshold, forced=False):
    """Whether a layer inverts at this refresh (a boolean tensor), from its state's tensors.

    state: a mapping with the STATE_KEYS' current values (tensors or variables).
    """
    change = tf.maximum(relative_change(a_trace, _value(state["a_trace_at_inversion"])),
                        relative_change(g_trace, _value(state["g_trace_at_inversion"])))
    waited = _value(state["refreshes_waited"]) + 1.0
    due = tf.logical_and(waited >= _value(state["gap"]), change >= threshold)
    return tf.logical_or(tf.logical_or(due, tf.math.is_inf(change)), forced)


def updated_state(a_trace, g_trace, state, invert, growth):
    """The state's new values after a refresh that inverted (``invert``) or kept the layer's inverses."""
    a_reference, g_reference = _value(state["a_trace_at_inversion"]), _value(state["g_trace_at_inversion"])
    waited, gap = _value(state["refreshes_waited"]), _value(state["gap"])
    return {
        "a_trace_at_inversion": tf.where(invert, a_trace, a_reference),
        "g_trace_at_inversion": tf.where(invert, g_trace, g_reference),
        "refreshes_waited": tf.where(invert, 0.0, waited + 1.0),
        "gap": tf.where(invert, gap * growth, gap),
        "inversions": _value(state["inversions"]) + tf.cast(invert, tf.int64),
    }


def _value(tensor):
    """A Keras variable's value (as thor reads its state), or the tensor itself."""
    return tensor.value if isinstance(tensor, keras.Variable) else tf.convert_to_tensor(tensor)


class TraceRefresh:
    """The trace rule's parameters, and the per-layer state it keeps in the optimizer."""

    def __init__(self, threshold, growth):
        self.threshold = float(threshold)
        self.growth = float(growth)

    @staticmethod
    def slot_variables(variable):
        """The per-layer state, made with ``variable(suffix, shape, initializer, dtype)``."""
        return {
            "a_trace_at_inversion": variable("a_trace_at_inversion", (), "zeros", "float32"),
            "g_trace_at_inversion": variable("g_trace_at_inversion", (), "zeros", "float32"),
            "refreshes_waited": variable("refreshes_waited", (), "zeros", "float32"),
            "gap": variable("gap", (), "ones", "float32"),
            "inversions": variable("inversions", (), "zeros", "int64"),
        }

    def decide(self, a_trace, g_trace, state, forced):
        """(invert: a boolean tensor, and a function that records the decision in ``state``'s variables)."""
        invert = should_invert(a_trace, g_trace, state, self.threshold, forced)

        def record(have):
            new = updated_state(a_trace, g_trace, state, invert, self.growth)
            for key, value in new.items():
                state[key].assign(tf.where(have, value, _value(state[key])))
        return invert, record
