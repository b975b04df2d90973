"""``thor``: MindSpore's THOR second-order preconditioning, on the layers model_fn already builds.

THOR (Chen et al., AAAI 2021; formulas in ``docs/guide/optimizers-and-thor.md``, "THOR's formulas")
preconditions each supported layer's kernel gradient with the inverses of its
Kronecker factors, ``dW = A^-1 . grad . G^-1`` (details per layer kind in
``factors``), and hands every other gradient (biases, BatchNorm, bare
``get_variable`` variables) through unchanged. Then weight decay is added to
the non-excluded variables and the inner optimizer (momentum, sgd, adam, or
another wrapper) applies the result.

Refreshes: on one applied update out of ``frequency`` (the first included),
the factors are rebuilt from that update's batch (all its micro-batches under
an outer ``batch_gradients``) and inverted; the other updates reuse the stored
inverses. Damping lambda goes to both factors as sqrt(lambda) (Conv2D:
sqrt(lambda / (H_out*W_out)), and its update is divided by H_out*W_out).
Two options past MindSpore's open code, both off by default: ``pi_damping``
splits lambda between the factors by K-FAC's pi (``thor_damping``), and
``refresh='trace'`` inverts at a refresh only the layers whose factor traces
moved (``thor_refresh``); the factors are still rebuilt and all-reduced at every refresh.

``statistics='kfac'`` replaces MindSpore's formula by K-FAC expand on the loss's own scale: only
the rows the loss reaches, ds scaled by the loss's terms, each factor damped relative to its own
tr/dim, LayerNorm left plain (``factors``, ``thor_damping.relative_dampings``). At a refresh
THOR stores per layer each factor's scale against its damping and the preconditioned/plain norm
ratio (``curvature_health``) and prints them on a log-spaced set of refreshes, with a warning when a
factor is below its damping on most layers (MindSpore's G on a transformer: the curvature is inert).

``graft`` (off by default) keeps THOR's direction and takes the step size from the plain gradient:
each preconditioned variable's update is rescaled to its gradient's Frobenius norm before weight
decay (``_grafted``); the health line's ratio stays THOR's own, before the rescaling.

How the statistics arrive (see ``wrapper``'s interface): the step records
each tracked layer's input and output gradient and hands them in
``StepInputs.layer_records`` (``READS``); the pipeline calls ``receive`` in
replica context before it applies the gradients, with ``micro_batches`` the
product of ``apply_every`` of the links above. On a
collecting update each replica computes its factor sums locally; then, in
cross-replica context, one all-reduce of all factors packed into one vector
sums them across replicas, so R replicas x B equal one replica x R*B. The
statistics of a step whose gradients or factors are not finite on some
replica (an fp16 overflow step, which the loss-scale optimizer skips) are
dropped. The refresh divides by the rows counted and inverts with
``thor_inverse.guarded_inverse`` (fallbacks counted and printed).

Where the summed factors wait for the refresh: when the step's statistics are
the whole update's batch, in the step's own tensors, inverted by the same
step's apply and assigned to the inverse variables. So under parameter
servers a refreshing worker's inverses come from its own batch, never pooled
with another worker's. Under a synchronous ``batch_gradients`` above, each
step is one micro-batch: the sums go to accumulator variables until the
update applies, then are cleared. The asynchronous loop's in-worker
accumulation sums ``summarise`` over its micro-batches in tensors and hands the
total over once (``StepInputs.record_sums``).

Order in a stack: thor preconditions the gradient it receives and hands the
result down, so ``lars(thor(...))`` preconditions the LARS-scaled gradient and
``thor(lars(...))`` hands the preconditioned gradient to LARS. The run's gradient
clipping sits below thor (``clipped_after``): it clips the preconditioned
gradient, as MindSpore does.

State (saved with the optimizer): per layer the factor accumulators and the
inverse blocks, and the wrapper's own applied-update counter (which decides
the refreshes; incremented on the tf.Variable, atomic on a parameter server)
and fallback counters. A damping schedule reads the run's global step in
applied updates, the clock of the learning-rate schedules. Per-layer variables are created
eagerly by ``create_layer_state``, before the step is first traced: the trainer first traces
model_fn's forward pass alone (in a function it never runs) to learn the layers, then calls it.
"""

import contextlib
import functools
import math
import re
import sys

import keras
import tensorflow as tf

from moxlite import compat, context, errors, logs, stable_names
from moxlite.optimizers import exclusion, schedules
from moxlite.optimizers import recipe_tables
from moxlite.optimizers.thor import damping as thor_damping
from moxlite.optimizers.thor import factors
from moxlite.optimizers.thor import inverse as thor_inverse
from moxlite.optimizers.thor import refresh as thor_refresh
from moxlite.optimizers import wrapper as wrapper_lib
from moxlite.optimizers.lars import variable_path


# The name scopes of THOR's own ops in a traced step: tools/profile_thor_step.py sums a profile's
# op times by them (factor sums and their all-reduce, the refresh's inverses, the preconditioning).
STATISTICS_SCOPE, REFRESH_SCOPE, PRECONDITION_SCOPE = "thor_statistics", "thor_refresh", "thor_precondition"


def _named(scope):
    """Build the decorated function's ops under the name scope ``scope`` (names only; no effect eagerly)."""
    def decorate(function):
        @functools.wraps(function)
        def named(*args, **kwargs):
            with tf.name_scope(scope):
                return function(*args, **kwargs)
        return named
    return decorate


# What the health line reads per layer at a refresh: each factor's scale (tr F / dim F) and the damping
# added to it, and the norm of the preconditioned kernel gradient over the gradient's.
HEALTH = ("a_scale", "a_damping", "g_scale", "g_damping", "ratio")
HEALTH_WARNING = ("a factor is below its damping on most layers: there the inverse is about I / damping, so "
                  "THOR scales the gradient instead of preconditioning it (first-order in disguise). Lower "
                  "the damping, or set statistics: kfac with graft: true (factors on the loss's scale, damping "
                  "relative to each factor, THOR's direction at the gradient's norm; without graft kfac trained "
                  "worse on the grammar masked LM, docs/guide/language-models.md), and compare with the inner "
                  "optimizer alone")

TRACKED_KINDS = ("Dense", "Conv2D", "Embedding", "EinsumDense", "LayerNormalization")
# The two kernels Keras gives a separable convolution: not recorded, so the start-up line gives their
# reason by name, as it does for a grouped Conv2D.
UNTRACKED_KERNELS = ("depthwise_kernel", "pointwise_kernel")


def _slot_in(slot_of_identity, variable):
    """The slot ``slot_of_identity`` keeps for any of ``variable``'s identities, or None."""
    for identity in _identities(variable):
        slot = slot_of_identity.get(identity)
        if slot is not None:
            return slot
    return None


def _identities(variable):
    """ids of a variable and of what it wraps (mirrored components, aggregating wrappers)."""
    variable = compat.backing_variable(variable)
    found = {id(variable)}
    for component in getattr(variable, "values", ()) or ():
        found.add(id(component))
    inner = compat.wrapped_variable(variable)
    if inner is not None:
        found.add(id(inner))
    return found


def _or_zero(tensor):
    return tf.zeros([]) if tensor is None else tensor


def _dense_with_static_shape(gradient, variable):
    """``gradient`` as a dense tensor with the static shape of ``variable``.

    A gradient's traced shape can be partly unknown ([None, 64] for a Dense kernel fed a
    sequence of unknown length: the tape builds it from the input's dynamic shape), and an
    Embedding's can be an IndexedSlices; the variable's shape is always known, and is the one
    the preconditioning reshapes to and from.
    """
    if isinstance(gradient, tf.IndexedSlices):
        gradient = tf.convert_to_tensor(gradient)
    return tf.reshape(gradient, tuple(int(d) for d in variable.shape))


def _frobenius(tensor):
    """The Frobenius norm of ``tensor``, computed on ``tensor / max |tensor|`` so that its squares neither
    overflow (a natural-gradient step can multiply a gradient by 1e10) nor underflow."""
    largest = tf.reduce_max(tf.abs(tensor))
    return largest * tf.norm(tf.math.divide_no_nan(tensor, largest))


def _on_refresh(refreshing, refresh, otherwise):
    """``tf.cond`` on a refresh decision; a decision known when traced (``THOR.assuming_refresh``)
    traces only its own side, so a plain update's program holds no inverse."""
    known = tf.get_static_value(refreshing)
    if known is not None:
        return refresh() if known else otherwise()
    return tf.cond(refreshing, refresh, otherwise)


class _Slot:
    """One preconditioned layer: its geometry, variables it covers, and (once built) its state."""

    def __init__(self, index, name, geometry, block_size):
        self.index = index
        self.name = name
        self.geometry = geometry
        self.identities = set()
        self.a_layout = thor_inverse.block_layout(geometry.d_in, block_size)
        self.g_layout = thor_inverse.block_layout(geometry.d_out, block_size)
        self.state = None

    @property
    def kind(self):
        return self.geometry.kind

    def pieces(self):
        """(state key, shapes of its pieces), in the order the all-reduced vector holds them: only
        the diagonal blocks of A and G are formed and reduced (``factors.piece_shapes``)."""
        if self.kind == "LayerNormalization":
            return [("rows", [()])]
        a_pieces = ([(self.geometry.d_in,)] if self.kind == "Embedding"
                    else factors.piece_shapes(self.geometry.d_in, self.a_layout))
        g_pieces = factors.piece_shapes(self.geometry.d_out, self.g_layout)
        return [("a_sum", a_pieces), ("g_sum", g_pieces), ("rows", [()])]

    def sum_keys(self):
        return ("a_sum", "g_sum", "rows")

    def accumulated(self, key, pieces):
        """The reduced ``pieces`` of state ``key`` in the shape of its accumulator."""
        if key == "rows" or (key == "a_sum" and self.kind == "Embedding"):
            return pieces[0]
        return factors.padded_blocks(pieces, self.a_layout if key == "a_sum" else self.g_layout)


@keras.saving.register_keras_serializable(package="moxlite")
class THOR(wrapper_lib.OptimizerWrapper):
    """Precondition Dense/Conv2D/Embedding/EinsumDense/LayerNorm gradients (module docstring)."""

    NAME = "thor"
    PARAMETERS = recipe_tables.THOR_PARAMETERS

    def __init__(self, inner_optimizer, name=None, **parameters):
        for key in ("weight_decay_exclude", "include", "exclude"):
            if isinstance(parameters.get(key), list):
                parameters[key] = tuple(parameters[key])
        super().__init__(inner_optimizer, name=name, **parameters)
        if self.statistics == "kfac" and self.pi_damping:
            raise errors.OptimizerError(
                "thor: pi_damping=True with statistics='kfac': kfac damps each factor by its own scale "
                "already; drop pi_damping, or use statistics='mindspore'")
        self._decay_skip = exclusion.compiled(self.weight_decay_exclude)
        self._include = re.compile("|".join(self.include)) if self.include else None
        self._exclude = re.compile("|".join(self.exclude)) if self.exclude else None
        self._slots = []             # in order of first appearance
        self._slot_of_identity = {}  # id of a covered variable (or its components) -> _Slot
        self._skipped = {}           # kernel path -> why it is not preconditioned
        self._announced = False
        self._accumulating = False   # statistics arrive as micro-batches (a batch_gradients above)
        self._summed_slots = []      # slots of _summed_records, for _take_record_sums
        run_context = context.current()
        self._global_step = run_context.global_step if run_context is not None else None
        self._forced_refresh = None  # an update that refreshes whatever its count (a resume's carried change)
        self._assumed_refresh = None  # while a step is traced under assuming_refresh: its constant decision
        # Which layers a refresh inverts (thor_refresh): None = every one, MindSpore's rule.
        self._trace_rule = (thor_refresh.TraceRefresh(self.trace_threshold, self.interval_growth)
                            if self.refresh == "trace" else None)

    # Own state.

    def _build_own_state(self, variables):
        self._updates = self.add_variable(shape=(), dtype="int64", aggregation="only_first_replica",
                                          name="thor_updates")
        self._retries = self.add_variable(shape=(), dtype="int64", aggregation="only_first_replica",
                                          name="thor_inversion_retries")
        self._kept = self.add_variable(shape=(), dtype="int64", aggregation="only_first_replica",
                                       name="thor_inversions_kept_previous")
        self._dropped = self.add_variable(shape=(), dtype="int64", aggregation="only_first_replica",
                                          name="thor_statistics_dropped")

    def _in_creation_order(self, slots):
        """``slots`` sorted by the index in the built variable list of the first variable each
        covers, then by path (the order their state is created in)."""
        first = {}   # identity -> the first index of a built variable it belongs to
        for index, variable in enumerate(compat.optimizer_built_variables(self)):
            for identity in _identities(variable):
                first.setdefault(identity, index)
        return sorted(slots, key=lambda slot: (min((first[i] for i in slot.identities if i in first),
                                                   default=float("inf")), slot.name))

    def _ensure_slot_state(self, slot):
        """Create ``slot``'s variables (once, outside any traced function)."""
        if slot.state is not None:
            return
        geometry = slot.geometry
        prefix = f"thor_{slot.index}_{re.sub('[^A-Za-z0-9_]', '_', slot.name)}"

        def variable(suffix, shape, initializer="zeros", dtype="float32"):
            return self.add_variable(shape=shape, initializer=initializer, dtype=dtype,
                                     aggregation="only_first_replica", name=f"{prefix}_{suffix}")

        def identity_blocks(layout):
            blocks, side = layout
            return lambda shape, dtype=None: tf.eye(side, batch_shape=[blocks], dtype=dtype or tf.float32)

        def blocks_shape(layout):
            return (layout[0], layout[1], layout[1])

        with tf.init_scope():
            state = {"rows": variable("rows", ())}
            if slot.kind == "LayerNormalization":
                state["batch"] = variable("batch", (), "ones")
            else:
                # Factor sums are kept as their diagonal blocks only (the last one zero-padded).
                state["g_sum"] = variable("g_sum", blocks_shape(slot.g_layout))
                if slot.kind == "Embedding":
                    state["a_sum"] = variable("a_sum", (geometry.d_in,))
                    state["a_inverse"] = variable("a_inverse", (geometry.d_in,), "ones")
                else:
                    state["a_sum"] = variable("a_sum", blocks_shape(slot.a_layout))
                    state["a_inverse"] = variable("a_inverse", blocks_shape(slot.a_layout),
                                                  identity_blocks(slot.a_layout))
                state["g_inverse"] = variable("g_inverse", blocks_shape(slot.g_layout),
                                              identity_blocks(slot.g_layout))
                if self._trace_rule is not None:
                    state.update(self._trace_rule.slot_variables(variable))
            # The last refresh's HEALTH values in this process: a reading, not state (not saved).
            state["health"] = tf.Variable(tf.zeros([len(HEALTH)]), trainable=False, name=f"{prefix}_health",
                                          synchronization=tf.VariableSynchronization.ON_WRITE,
                                          aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        slot.state = state

    # What it is as a link of a pipeline: it reads the step's per-layer records, and clipping
    # applies to the gradient it preconditions (MindSpore's order).

    READS = frozenset({"layer_records", "checked_gradients", "micro_batches", "record_sums"})
    clipped_after = True

    def receive(self, inputs):
        """Replica context: the step's records (or an in-step accumulation's summed ones).
        Returns what this step's apply inverts from (``received``, see ``_collect``), or None."""
        if inputs.record_sums is not None:
            return self._take_record_sums(inputs.record_sums)
        return self._take_records(inputs.layer_records, inputs.checked_gradients, inputs.micro_batches)

    def summarise(self, inputs):
        return self._summed_records(inputs.layer_records, inputs.checked_gradients)

    def see_layers(self, records):
        """Replica context: the slots of a forward pass's layers, in the order model_fn calls
        them (what the first step's records would create)."""
        for record in records:
            self._slot_for(record)

    def create_layer_state(self):
        """Eagerly: every slot's variables, in the order ``_collect`` creates them. An ``include``
        pattern that matched none of the layers seen is refused here, before the first step."""
        self._check_include()
        for slot in self._in_creation_order(self._slots):
            self._ensure_slot_state(slot)

    # What the step must record.

    def layer_statistics_request(self):
        return wrapper_lib.LayerStatisticsRequest(layer_types=TRACKED_KINDS, every_n_steps=self.frequency,
                                                  collecting=self._is_collecting)

    def _is_collecting(self):
        """This update rebuilds the factors (the first, then one every ``frequency``, and a forced one)."""
        if self._assumed_refresh is not None:
            return tf.constant(self._assumed_refresh)
        collecting = tf.equal(self._updates.value % self.frequency, 0)
        if self._forced_refresh is not None:
            collecting = tf.logical_or(collecting, tf.equal(self._updates.value, self._forced_refresh))
        return collecting

    @contextlib.contextmanager
    def assuming_refresh(self, refresh):
        """While a step is traced in it: this update refreshes (True) or not (False), a constant,
        so the trace holds one side of each of THOR's refresh conds. For a caller that traces a
        program per side and picks one by ``refreshes_now()``, read before the step (the update
        count moves only at the end of the apply, after every read of the decision)."""
        self._assumed_refresh = refresh
        try:
            yield
        finally:
            self._assumed_refresh = None

    def refreshes_now(self):
        """Whether the next applied update rebuilds the factors and inverses (a boolean tensor)."""
        return self._is_collecting()

    def refresh_at_next_update(self):
        """Make the next applied update rebuild the factors and inverses, whatever its count.

        For a resumed run whose stored inverses do not fit (a new ``block_size``): called after
        the restore and before the first step is traced. Returns that update's number.
        """
        self._forced_refresh = int(self._updates.numpy())
        return self._forced_refresh

    def _check_include(self):
        """Raise OptimizerError for the first ``include`` pattern that matches no recorded layer's
        name (a typo would otherwise precondition nothing, silently)."""
        seen = sorted({slot.name for slot in self._slots} | set(self._skipped))
        for pattern in self.include:
            if not any(re.search(pattern, name) for name in seen):
                raise errors.OptimizerError(
                    f"thor: include={list(self.include)!r}: {pattern!r} matches no layer of model_fn; "
                    f"use a part of one of these names: {', '.join(seen) or 'none (no layer THOR records)'}")

    def _chosen(self, path):
        """include/exclude, matched against the kernel's stable name (its checkpoint key, the same
        in every run and process), never against Keras's made-up layer names."""
        if self._exclude is not None and self._exclude.search(path):
            return False
        return self._include is None or bool(self._include.search(path))

    def _slot_for(self, record):
        """The slot of ``record``'s layer (created on first sight), or None: plain gradient."""
        for identity in _identities(record.kernel):
            if identity in self._slot_of_identity:
                return self._slot_of_identity[identity]
        path = getattr(record, "name", None) or variable_path(record.kernel)
        if path in self._skipped:
            return None
        unseen = getattr(record, "unseen", None)
        geometry, reason = (None, unseen) if unseen else factors.geometry_of(record)
        if geometry is not None and not self._chosen(path):
            geometry, reason = None, "excluded by include/exclude"
        if geometry is None:
            self._skipped[path] = f"{record.kind}: {reason}"
            return None
        slot = _Slot(len(self._slots), path, geometry, self.block_size)
        covered = [record.kernel]
        if record.kind == "LayerNormalization":
            covered = [v for v in (record.layer.gamma, record.layer.beta) if v is not None]
        for variable in covered:
            slot.identities |= _identities(variable)
        for identity in slot.identities:
            self._slot_of_identity[identity] = slot
        self._slots.append(slot)
        return slot

    def _grouped(self, statistics, gradients):
        """(slots with records this step, the tensors their factor sums need, as _local_sums takes them)."""
        by_slot = {}
        for record in statistics:
            slot = self._slot_for(record)
            if slot is not None:
                by_slot.setdefault(slot.index, (slot, []))[1].append(record)
        slots = [by_slot[index][0] for index in sorted(by_slot)]
        # Only tensors cross into cross-replica context (layers differ per replica).
        tensors = [[(record.inputs, _or_zero(record.output_gradients), record.batch_size)
                    for record in by_slot[slot.index][1]] for slot in slots]
        # Only finiteness is read from the gradients (on collecting updates): an IndexedSlices'
        # values suffice, densifying an embedding's gradient on every step would not.
        return slots, (tensors, [g.values if isinstance(g, tf.IndexedSlices) else g for g in gradients])

    @staticmethod
    def _in_cross_replica_context(function, args):
        replica_context = tf.distribute.get_replica_context()
        if replica_context is None:
            return function(tf.distribute.get_strategy(), args)
        return replica_context.merge_call(function, args=(args,))

    def _take_records(self, statistics, gradients=(), micro_batches=1):
        """Replica context: this replica's LayerRecords (loop side: moxlite.training.capture.layer_statistics).

        Under a ``batch_gradients`` above this wrapper (``micro_batches`` > 1) they are one
        micro-batch of several: the factor sums go to the accumulators. Otherwise they are the whole update's batch: the sums are
        kept in this step's tensors and inverted when the same step applies, so under
        parameter servers a refreshing worker's inverses come from its own batch only.
        Returns what ``_collect`` returns for that step's apply (None without records).
        """
        slots, tensors = self._grouped(statistics, gradients)
        if not slots:
            return None
        micro_batch = micro_batches > 1
        if micro_batch:
            self._accumulating = True

        def collect(distribution, tensors):
            packed = lambda: distribution.extended.call_for_each_replica(  # noqa: E731
                lambda tensors: self._local_sums(slots, tensors), args=(tensors,))
            return self._collect(distribution, slots, packed, micro_batch)
        return self._in_cross_replica_context(collect, tensors)

    def _summed_records(self, statistics, gradients=()):
        """Replica context, no cross-replica call: one micro-batch's factor sums as one vector.

        For a loop that accumulates micro-batches in tensors (the asynchronous loop under
        ``batch_gradients``): it adds these vectors over the micro-batches and hands the
        total over as ``StepInputs.record_sums`` before applying. Zeros unless collecting.
        """
        slots, tensors = self._grouped(statistics, gradients)
        if not slots:
            return None
        self._summed_slots = slots
        size = sum(self._packed_size(slot) for slot in slots) + 1
        return _on_refresh(self._is_collecting(), lambda: self._local_sums(slots, tensors), lambda: tf.zeros([size]))

    def _take_record_sums(self, sums):
        """Replica context: the total of ``_summed_records`` over this update's micro-batches."""
        slots = self._summed_slots
        if not slots:
            return None
        return self._in_cross_replica_context(
            lambda distribution, sums: self._collect(distribution, slots, lambda: sums, False), sums)

    @staticmethod
    def _packed_size(slot):
        return sum(math.prod(shape) for _, shapes in slot.pieces() for shape in shapes)

    @_named(STATISTICS_SCOPE)
    def _local_sums(self, slots, tensors):
        """Replica context: this replica's factor sums of every slot, packed into one vector,
        then 1 if this replica's gradients overflowed (the step will not apply), else 0."""
        tensors, gradients = tensors
        per_sample = self.loss_reduction == "mean"
        kfac = self.statistics == "kfac"
        terms = tf.constant(1.0)
        if kfac and per_sample:
            terms = factors.loss_terms(
                [(factors.Call(*call), slot.geometry.d_out)
                 for slot, calls in zip(slots, tensors) if slot.kind != "LayerNormalization" for call in calls])
        parts = []
        for slot, calls in zip(slots, tensors):
            sums = []
            for call in calls:
                call = factors.Call(*call)
                scale = terms if kfac else (call.batch_size if per_sample else 1.0)
                a, g, rows = factors.local_sums(slot.geometry, call, scale, slot.a_layout, slot.g_layout, kfac)
                sums.append([*a, *g, rows])
            parts.extend(tf.reshape(tf.add_n(list(column)), [-1]) for column in zip(*sums))
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in gradients]) if gradients else True
        parts.append(tf.where(finite, 0.0, 1.0)[None])
        return tf.concat(parts, 0)

    def _collect(self, distribution, slots, packed, micro_batch):
        """Cross-replica context, on a collecting update: one all-reduce of every slot's sums
        (``packed()``, per replica), added to the accumulators (``micro_batch``, returns None)
        or returned for this step's apply: (slots, collecting, summed factors), which the
        pipeline hands back to ``_apply_in_cross_replica_context`` as ``received``."""
        # Keras saves optimizer variables by position: create the state in the order of the
        # variables this optimizer was built with (sorted by checkpoint key in run), not in the
        # order model_fn called its layers, so a resume finds each layer's factors by name.
        for slot in self._in_creation_order(slots):
            self._ensure_slot_state(slot)
        collecting = self._is_collecting()

        @_named(STATISTICS_SCOPE)
        def reduced():
            destination = slots[0].state["rows"]
            total = distribution.extended.reduce_to(tf.distribute.ReduceOp.SUM, packed(),
                                                    destinations=destination.value)
            total = distribution.experimental_local_results(total)[0]
            finite = tf.logical_and(tf.reduce_all(tf.math.is_finite(total)), total[-1] == 0.0)
            self._dropped.assign_add(tf.where(finite, tf.constant(0, tf.int64), tf.constant(1, tf.int64)))
            return tf.where(finite, total, tf.zeros_like(total))

        if micro_batch:
            def reduce_and_add():
                for slot, sums in zip(slots, self._unpacked(slots, reduced())):
                    for key, part in sums.items():
                        if key in slot.state:
                            slot.state[key].assign_add(part)
            _on_refresh(collecting, reduce_and_add, lambda: None)
            return None
        size = sum(self._packed_size(slot) for slot in slots) + 1
        total = _on_refresh(collecting, reduced, lambda: tf.zeros([size]))
        return slots, collecting, total

    @staticmethod
    def _unpacked(slots, total):
        """Per slot, {"a_sum", "g_sum", "rows"} tensors cut from a packed vector (the factor
        sums as their diagonal blocks, in the shape of the slot's accumulators)."""
        out, offset = [], 0
        for slot in slots:
            sums = {}
            for key, shapes in slot.pieces():
                pieces = []
                for shape in shapes:
                    size = math.prod(shape)
                    pieces.append(tf.reshape(total[offset:offset + size], shape))
                    offset += size
                sums[key] = slot.accumulated(key, pieces)
            out.append(sums)
        return out

    # The update.

    def _damping(self):
        damping = self.damping
        if callable(damping):   # a schedule: the user's own function is converted as in a converted caller
            damping = compat.converted_user_function(damping)(self._schedule_step())
        return tf.maximum(tf.cast(damping, tf.float32), 0.0)

    def _schedule_step(self):
        """The step a damping schedule sees: inside a run, the one the learning-rate schedule
        sees (the run's exact global step in applied updates; Keras's ``iterations`` loses
        increments under parameter servers); outside a run, ``iterations`` as in plain Keras."""
        if self._global_step is None:
            return self.iterations
        return schedules.GlobalStepLearningRate(None, self._global_step).step_seen_by_schedule()

    def _refresh_from_accumulators(self):
        """Cross-replica context: a refresh from the micro-batch accumulators, then cleared."""
        slots = [slot for slot in self._slots if slot.state is not None]
        sums = [{key: slot.state[key].value for key in slot.sum_keys() if key in slot.state}
                for slot in slots]
        self._refresh(slots, sums)
        for slot in slots:
            for key in slot.sum_keys():
                if key in slot.state:
                    slot.state[key].assign(tf.zeros_like(slot.state[key].value))

    @_named(REFRESH_SCOPE)
    def _refresh(self, slots, sums):
        """Cross-replica context: each slot's factors from its sums, their guarded inverses."""
        damping = self._damping()
        retries = tf.constant(0, tf.int64)
        kept = tf.constant(0, tf.int64)
        for slot, sums in zip(slots, sums):
            state = slot.state
            rows = sums["rows"]
            have = rows > 0
            safe_rows = tf.maximum(rows, 1.0)
            if slot.kind == "LayerNormalization":
                state["batch"].assign(tf.where(have, rows, state["batch"].value))
                continue
            a = sums["a_sum"] / safe_rows
            g = sums["g_sum"] / safe_rows
            if self.statistics == "kfac":
                dampings = thor_damping.relative_dampings(tf.sqrt(damping), a, g, slot.geometry)
            else:
                dampings = thor_damping.factor_dampings(tf.sqrt(damping / slot.geometry.spatial), a, g,
                                                        slot.geometry, self.pi_damping)
            if self._trace_rule is None:
                a_inverse, g_inverse, a_level, g_level = self._inverses(slot, a, g, *dampings)
            else:
                invert, record = self._trace_rule.decide(
                    thor_damping.trace_of(a, diagonal=slot.kind == "Embedding"), thor_damping.trace_of(g),
                    state, self._forced_now())
                a_inverse, g_inverse, a_level, g_level = tf.cond(
                    invert, functools.partial(self._inverses, slot, a, g, dampings[0], dampings[1]),
                    functools.partial(self._kept_inverses, slot))
                record(have)
            scales = thor_damping.factor_scales(a, g, slot.geometry)
            state["health"].assign(tf.where(have, tf.stack([scales[0], dampings[0], scales[1], dampings[1], 0.0]),
                                            state["health"]))
            state["a_inverse"].assign(tf.where(have, a_inverse, state["a_inverse"].value))
            state["g_inverse"].assign(tf.where(have, g_inverse, state["g_inverse"].value))
            for level in (a_level, g_level):
                level = tf.cast(tf.where(have, level, 0), tf.int64)
                retries += tf.cast(level >= 1, tf.int64)
                kept += tf.cast(level >= 2, tf.int64)
        self._retries.assign_add(retries)
        self._kept.assign_add(kept)

        def report():
            tf.print("thor: refresh at update", self._updates.value, ":", retries,
                     "factor inversions needed a retry (float64 or more damping),", kept,
                     "kept the previous inverse", output_stream=sys.stderr)
        # Compiled by XLA the line is left out (tf.print has no XLA kernel); the counts stay in
        # the variables (``fallback_counts``) and the checkpoint.
        if not compat.inside_xla():
            tf.cond(retries > 0, report, lambda: None)

    def _health_after_refresh(self, ratios):
        """On a refresh: store each layer's norm ratio beside its scales, and print the health line
        (``health_lines``) at refreshes 1, 2, 3, 5, 9, 17, ... of the run (log-spaced: a few lines in
        a long run), the per-layer table with the first. Not under XLA (tf.print has no kernel):
        ``curvature_health`` reads the same values."""
        slots = self._health_slots()
        if not slots:
            return

        def store():
            for index, slot in enumerate(slots):
                health = slot.state["health"]
                health.assign(tf.tensor_scatter_nd_update(health, [[len(HEALTH) - 1]], ratios[index][None]))
            if compat.inside_xla():
                return
            refresh = self._updates.value // self.frequency
            shown = tf.equal(tf.bitwise.bitwise_and(refresh, refresh - 1), 0)
            tf.cond(shown, lambda: self._print_health(slots, refresh == 0), lambda: None)
        _on_refresh(self._is_collecting(), store, lambda: None)

    def _print_health(self, slots, first):
        values = tf.stack([slot.state["health"].value() for slot in slots])
        a_below = tf.reduce_sum(tf.cast(values[:, 0] < values[:, 1], tf.int32))
        g_below = tf.reduce_sum(tf.cast(values[:, 2] < values[:, 3], tf.int32))
        ratios = tf.sort(values[:, 4])
        count = len(slots)

        def table():
            for slot, row in zip(slots, tf.unstack(values)):
                tf.print("thor:   ", slot.name, ": tr A/d", row[0], "damping", row[1], "| tr G/d", row[2], "damping",
                         row[3], "| update/gradient", row[4], output_stream=sys.stderr)
        tf.print(tf.strings.format(
            "thor: curvature at update {}: G below its damping on {} of {} layers, A on {}; update/gradient norm "
            "ratio median {} range {} - {}", (self._updates.value, g_below, count, a_below, ratios[count // 2],
                                              ratios[0], ratios[-1])), output_stream=sys.stderr)
        tf.cond(first, table, lambda: None)

        def warn():
            tf.print(tf.strings.format("thor: warning: " + HEALTH_WARNING + " (G on {} of {} layers, A on {})", (g_below, count, a_below)),
                     output_stream=sys.stderr)
        tf.cond(tf.logical_or(2 * g_below > count, 2 * a_below > count), warn, lambda: None)

    def curvature_health(self):
        """{layer: {a_scale, a_damping, g_scale, g_damping, ratio}} at the last refresh of this process
        (zeros before one): each factor's tr/dim against the damping added to it, and the
        preconditioned kernel gradient's norm over the gradient's."""
        return {slot.name: dict(zip(HEALTH, (float(v) for v in slot.state["health"].numpy())))
                for slot in self._health_slots()}

    def _inverses(self, slot, a, g, a_damping, g_damping):
        """The guarded inverses of one layer's damped factors, and the guard's levels (thor_inverse)."""
        state = slot.state
        if slot.kind == "Embedding":
            previous = state["a_inverse"].value
            a_inverse = 1.0 / (a + a_damping)
            a_ok = tf.reduce_all(tf.math.is_finite(a_inverse))
            a_inverse = tf.where(a_ok, a_inverse, previous)
            a_level = tf.where(a_ok, 0, 2)
        else:
            a_inverse, a_level = thor_inverse.guarded_inverse(
                thor_inverse.identity_padded(a, slot.geometry.d_in), a_damping, state["a_inverse"].value)
        g_inverse, g_level = thor_inverse.guarded_inverse(
            thor_inverse.identity_padded(g, slot.geometry.d_out), g_damping, state["g_inverse"].value)
        return a_inverse, g_inverse, a_level, g_level

    @staticmethod
    def _kept_inverses(slot):
        """A layer the trace rule does not invert: its stored inverses, guard level 0."""
        return slot.state["a_inverse"].value, slot.state["g_inverse"].value, tf.constant(0), tf.constant(0)

    def _forced_now(self):
        """This update is a forced refresh (``refresh_at_next_update``): every layer inverts."""
        if self._forced_refresh is None:
            return tf.constant(False)
        return tf.equal(self._updates.value, self._forced_refresh)

    @_named(PRECONDITION_SCOPE)
    def _precondition(self, grads, variables):
        """Replica context: each gradient preconditioned (or not), then weight decay."""
        damping_sqrt = tf.sqrt(self._damping())
        out, ratios = [], {}
        for gradient, variable in zip(grads, variables):
            slot = self._slot_covering(variable)
            if slot is not None and slot.state is not None:
                gradient = _dense_with_static_shape(gradient, variable)
                plain = tf.cast(gradient, tf.float32)
                preconditioned = self._preconditioned(slot, plain, damping_sqrt)
                if slot.kind != "LayerNormalization":
                    ratios[slot.index] = (preconditioned, plain)   # THOR's own, before any grafting
                gradient = tf.cast(self._grafted(preconditioned, plain), gradient.dtype)
            if self.weight_decay and not exclusion.matches(self._decay_skip, variable):
                weight = tf.convert_to_tensor(variable)
                gradient = gradient + tf.cast(self.weight_decay, gradient.dtype) * tf.cast(weight, gradient.dtype)
            out.append(gradient)
        return out, self._norm_ratios(ratios)

    def _grafted(self, preconditioned, plain):
        """``graft``: ``preconditioned`` rescaled to the Frobenius norm of ``plain``,
        ``P · ||g|| / ||P||`` (SGD grafting, as distributed Shampoo's: THOR's direction, the step size
        of the gradient the inner optimizer would have seen); a zero ``P`` stays zero. Without
        ``graft``, ``preconditioned`` itself."""
        if not self.graft or preconditioned is plain:
            return preconditioned
        return preconditioned * tf.math.divide_no_nan(_frobenius(plain), _frobenius(preconditioned))

    def _health_slots(self):
        return [slot for slot in self._slots if slot.state is not None and slot.kind != "LayerNormalization"]

    def _norm_ratios(self, pairs):
        """On a refresh, ||preconditioned|| / ||gradient|| of each health slot's kernel (0 where its
        kernel had no gradient this step); zeros, and no work, on other updates."""
        slots = self._health_slots()
        if not slots:
            return tf.zeros([0])

        def ratios():
            values = []
            for slot in slots:
                if slot.index not in pairs:
                    values.append(tf.constant(0.0))
                    continue
                preconditioned, plain = pairs[slot.index]
                norm = tf.norm(plain)
                values.append(tf.where(norm > 0, tf.norm(preconditioned) / tf.maximum(norm, 1e-30), 0.0))
            return tf.stack(values)
        return _on_refresh(self._is_collecting(), ratios, lambda: tf.zeros([len(slots)]))

    def _slot_covering(self, variable):
        return _slot_in(self._slot_of_identity, variable)

    def _preconditioned(self, slot, gradient, damping_sqrt):
        state, geometry = slot.state, slot.geometry
        if slot.kind == "LayerNormalization":
            if self.statistics == "kfac":   # no Kronecker block: the plain gradient
                return gradient
            return gradient / (tf.square(gradient) / state["batch"].value + damping_sqrt)
        matrix = tf.reshape(gradient, [geometry.d_in, geometry.d_out])
        if slot.kind == "Embedding":
            matrix = matrix * state["a_inverse"].value[:, None]
        else:
            matrix = thor_inverse.apply_left(state["a_inverse"].value, matrix)
        matrix = thor_inverse.apply_right(state["g_inverse"].value, matrix)
        if geometry.spatial != 1:
            matrix = matrix / geometry.spatial
        return tf.reshape(matrix, geometry.kernel_shape)

    def _apply_in_cross_replica_context(self, distribution, grads, variables, reduced, rest, received=None):
        """``received``: what ``receive`` returned for this step (the pipeline's argument)."""
        if not reduced:
            grads = wrapper_lib.sum_across_replicas(distribution, grads, variables)
        grads, variables = list(grads), list(variables)
        self._announce(variables)
        if received is not None:
            # This step's own batch, collected when its statistics arrived (same decision).
            slots, collecting, total = received
            _on_refresh(collecting, lambda: self._refresh(slots, self._unpacked(slots, total)), lambda: None)
        elif self._accumulating and any(slot.state is not None for slot in self._slots):
            _on_refresh(self._is_collecting(), self._refresh_from_accumulators, lambda: None)
        preconditioned, ratios = distribution.extended.call_for_each_replica(
            self._precondition, args=(grads, variables))
        self._health_after_refresh(distribution.experimental_local_results(ratios)[0])
        rest(distribution, preconditioned, variables, True)
        # On the tf.Variable itself: a Keras variable's assign_add reads, then writes, and loses
        # increments when parameter-server workers apply concurrently.
        compat.backing_variable(self._updates).assign_add(tf.constant(1, tf.int64))

    def _announce(self, variables):
        """One start-up line: what is preconditioned (factor shapes) and what gets the plain gradient."""
        if self._announced:
            return
        self._announced = True
        chosen = [f"{slot.name} ({slot.kind}: {slot.geometry.describe()}{self._blocks_note(slot)})"
                  for slot in self._slots]
        plain = [stable_names.stable_name(v, default=variable_path(v)) for v in variables
                 if self._slot_covering(v) is None]
        logger = logs.get_logger()
        if not self._slots:
            logger.warning("thor: no layer statistics reached the optimizer; every variable gets the plain "
                           "gradient (THOR needs Dense/Conv2D/Embedding/EinsumDense/LayerNormalization layers "
                           "called in model_fn, or a Keras model closed over)")
        logger.info("thor: preconditioning %d layer(s): %s", len(chosen), "; ".join(chosen) or "none")
        skipped = [f"{path} ({why})" for path, why in self._skipped.items()]
        skipped += [f"{name} (SeparableConv2D: separable convolution)" for name in plain
                    if name.rsplit("/", 1)[-1] in UNTRACKED_KERNELS]
        logger.info("thor: plain gradient for %d variable(s) (biases, normalization, other layers, bare "
                    "get_variable variables): %s%s", len(plain), ", ".join(plain) or "none",
                    f"; layers not preconditioned: {'; '.join(skipped)}" if skipped else "")

    @staticmethod
    def _blocks_note(slot):
        split = [f"{name} in {blocks} blocks of {side}" for name, (blocks, side) in
                 (("A", slot.a_layout), ("G", slot.g_layout)) if blocks > 1 and slot.kind != "Embedding"]
        return f"; {', '.join(split)}" if split else ""

    def preconditioned_layers(self):
        """The kernel paths of the layers preconditioned so far (known once the first step is traced)."""
        return [slot.name for slot in self._slots]

    def inversion_counts(self):
        """refresh='trace': {layer: how many times its factors were inverted}; None under refresh='fixed'."""
        if self._trace_rule is None:
            return None
        return {slot.name: int(slot.state["inversions"].numpy()) for slot in self._slots
                if slot.state is not None and "inversions" in slot.state}

    def fallback_counts(self):
        """(inversions retried, inversions that kept the previous inverse, statistics dropped as non-finite)."""
        return int(self._retries.numpy()), int(self._kept.numpy()), int(self._dropped.numpy())

    def get_config(self):
        config = super().get_config()
        for key in ("weight_decay_exclude", "include", "exclude"):
            config[key] = list(config[key])
        if isinstance(self.damping, keras.optimizers.schedules.LearningRateSchedule):
            config["damping"] = keras.saving.serialize_keras_object(self.damping)
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        if isinstance(config.get("damping"), dict):
            config["damping"] = keras.saving.deserialize_keras_object(config["damping"], custom_objects=custom_objects)
        return super().from_config(config, custom_objects=custom_objects)
