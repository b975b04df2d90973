"""The optimizer stack as an explicit gradient pipeline.

A stack such as ``batch_gradients(lars(momentum))`` is the pipeline

    gradient -> batch_gradients -> lars -> momentum

read outermost first: each link transforms the gradient it receives and hands the result to
``rest``, the remainder of the pipeline, which it does not know (Optax's ``chain``; a link
that applies only on some steps, like accumulation, calls ``rest`` inside its condition, as
Optax's ``MultiSteps`` wraps its inner transformation). The last stage applies the gradient
with the plain Keras optimizer at the bottom (``base``).

What a step hands to the links
------------------------------
The train step computes once per step what links read and hands it to ``apply_step`` with
the gradients, in one ``StepInputs``. A link declares the fields it reads in ``READS``; the
pipeline hands the value to each link that reads something (``Link.receive``, in replica
context, before the gradients are applied), with ``micro_batches`` set to how many steps
make one update of that link: the product of ``apply_every`` of the links above it. What
``receive`` returns comes back to the same link's apply of that step as ``received=``.

What a link says about itself (the pipeline never looks at a link's class)
-------------------------------------------------------------------------
- ``is_link``: True; what tells a link from the plain Keras optimizer at the bottom.
- ``READS``: the ``StepInputs`` fields it reads.
- ``apply_every``: how many steps of the links above make one step of the links below
  (``batch_gradients``: its ``num_batches``; 1 otherwise).
- ``accumulates_micro_batches``: it sums micro-batches across steps (``batch_gradients``
  with ``num_batches`` > 1), state a loop that accumulates inside one step cannot share.
- ``clipped_after``: gradient clipping applies to what this link hands down. The run's
  clipping link goes directly below the lowest such link, else at the top: below loss scaling
  (unscaled gradients) and the non-finite guard, below the lowest ``batch_gradients``
  (the accumulated mean, once per update) and below ``thor`` (the preconditioned gradient,
  MindSpore's order).
- ``handles_overflow``: an overflowing gradient is expected and skipped here (loss scaling).

Built once
----------
``Pipeline(optimizer, clip=..., guard=...)`` reads the chain of links from the outermost
optimizer down (``links_of``, the one walk of a stack) and places the run's clipping link by
the rule above, in its own list: the optimizer objects, their ``inner_optimizer`` attributes
and what a checkpoint saves stay as the user built them. The run builds one per stack and
passes it to its step (an accumulating loop asks it for the pipeline of what applies, once:
``applying``); nothing is cached on, or patched into, the user's optimizers, which are as
they were after the run. Nothing edits a pipeline afterwards.
"""

import contextlib
import dataclasses
import threading
from typing import Any, Optional, Tuple

import keras
import tensorflow as tf

from moxlite import compat
from moxlite.optimizers import schedules


@dataclasses.dataclass(frozen=True)
class StepInputs:
    """What one step hands to the links that read it (see the module docstring).

    layer_records: this replica's per-layer records of the step (``LayerRecord``: layer,
        kernel, inputs, output gradients with the loss scale and the replica division
        taken out, batch size), for a link that preconditions (thor).
    checked_gradients: this step's gradients, whose finiteness decides whether its records
        count (an overflow step's records are dropped).
    micro_batches: how many steps' records make one update of the receiving link (set by
        the pipeline from ``apply_every`` of the links above it).
    record_sums: the sum over an update's micro-batches of the receiving link's
        ``summarise`` vectors, from a loop that accumulates inside one step (then
        ``layer_records`` is empty).
    loss_scale: the factor the step multiplied its loss by (1.0 without loss scaling).
    """

    layer_records: Tuple[Any, ...] = ()
    checked_gradients: Tuple[Any, ...] = ()
    micro_batches: int = 1
    record_sums: Optional[Any] = None
    loss_scale: Any = 1.0


FIELDS = frozenset(field.name for field in dataclasses.fields(StepInputs))


@dataclasses.dataclass(frozen=True)
class Accumulation:
    """num_batches micro-batch gradients, averaged, make one update by ``apply_optimizer``.

    What a stack answers (``Link.accumulation``) to a loop that accumulates micro-batches
    inside one step (the asynchronous loop; see ``moxlite.optimizers.accumulation``).
    """

    num_batches: int
    apply_optimizer: Any

    def counting_updates(self):
        """The scope to apply ``apply_optimizer`` in: its schedule counts one update per num_batches."""
        return schedules.micro_steps_per_update(self.num_batches)


class Link:
    """What every link of a pipeline answers about itself (see the module docstring).

    A link implements ``_apply_in_cross_replica_context(distribution, grads, variables,
    reduced, rest)``: transform ``grads`` and call ``rest(distribution, grads, variables,
    reduced)`` (or not, on a step it does not apply). ``reduced`` says whether the gradients
    are already the cross-replica sum; a link that needs the total reduces with
    ``sum_across_replicas`` and hands ``reduced=True`` down. A link that ``READS`` something
    takes one more argument, ``received=``: what its ``receive`` returned for this step (THOR's
    summed factors), so a step's records reach its apply as an argument, not as state.
    """

    is_link = True   # what ``links_of`` asks: a link answers for itself
    READS = frozenset()
    apply_every = 1
    accumulates_micro_batches = False
    clipped_after = False
    handles_overflow = False

    def receive(self, inputs):
        """Replica context, before the step's gradients are applied: this step's ``StepInputs``.
        Returns what this step's apply needs of them (None: nothing), which the pipeline hands
        to the link's ``_apply_in_cross_replica_context`` as its ``received`` argument."""
        return None

    def summarise(self, inputs):
        """Replica context, no cross-replica call: one micro-batch's ``StepInputs`` as one float32
        vector that adds up over micro-batches (None: nothing to sum)."""
        return None

    def layer_statistics_request(self):
        """What per-layer records the step must take for this link (None: none)."""
        return None

    def see_layers(self, records):
        """Replica context, in a trace that never runs, before the step is first traced: the
        per-layer records of a forward pass (``TrainStep.see_layers``), so that a link that
        keeps state per layer can know its layers before ``create_layer_state``."""

    def create_layer_state(self):
        """Eagerly, in the strategy's scope, after ``see_layers``: create the per-layer state,
        so that tracing the step creates no variable (see ``SyncTrainer.create_layer_state``)."""

    def accumulation(self, inner):
        """How a loop that accumulates inside one step applies this stack, given ``inner``, what
        the stack below this link answered (``accumulation.accumulation_of`` asks from the
        bottom up): (1, itself) unless this link accumulates (``batch_gradients``) or holds
        state the rest must share (loss scaling)."""
        return Accumulation(1, self)


def members_of(optimizer):
    """Every optimizer of ``optimizer``'s stack, outermost first: each holds the next as its
    ``inner_optimizer`` (moxlite's links, and Keras's ``LossScaleOptimizer``, the one Keras
    wrapper a user may put around a stack); the plain Keras optimizer at the bottom last.

    The one walk down a stack: everything else that needs the stack's members asks here
    (``links_of``, the checkpoint set-up, the hyperparameters a resume keeps, XLA's updates).
    """
    members = []
    while optimizer is not None and all(optimizer is not member for member in members):
        members.append(optimizer)
        optimizer = getattr(optimizer, "inner_optimizer", None)
    return members


def is_link(member):
    """A link says so itself (``Link.is_link``); a Keras optimizer does not."""
    return getattr(member, "is_link", False) is True


def looked_through(optimizer):
    """The stack inside a Keras ``LossScaleOptimizer`` (a wrapper that is not a link, which the
    user may put around a moxlite stack), else ``optimizer``."""
    members = members_of(optimizer)
    return next(member for index, member in enumerate(members)
                if is_link(member) or index == len(members) - 1)


def links_of(optimizer):
    """(the links of ``optimizer``'s stack, outermost first; the optimizer at the bottom)."""
    links = []
    for member in members_of(optimizer):
        if not is_link(member):
            return links, member
        links.append(member)
    return links, None


def layer_preconditioners(optimizer):
    """The links of ``optimizer``'s stack that precondition from per-layer records (THOR),
    outermost first."""
    return _reading_layer_records(links_of(optimizer)[0])


def _reading_layer_records(links):
    return [link for link in links if "layer_records" in link.READS]


def handles_overflow(optimizer):
    """True when ``optimizer``'s stack skips overflowing steps itself: a link says it
    ``handles_overflow`` (loss scaling), or a Keras ``LossScaleOptimizer`` is on top."""
    links, _ = links_of(optimizer)
    return any(link.handles_overflow for link in links) or looked_through(optimizer) is not optimizer


class Pipeline:
    """The links of one optimizer stack in order, and how one step goes through them.

    optimizer: the outermost optimizer (what is built, checkpointed and scheduled).
    guard: a link placed on top unless a link already ``handles_overflow``; the run's
        non-finite guard (an apply-if-finite link, which loss scaling holds too).
    clip: a link placed directly below the lowest link that says ``clipped_after`` (at the
        top without one); the run's gradient clipping.
    """

    def __init__(self, optimizer, clip=None, guard=None):
        self.optimizer = optimizer
        self.clip = clip
        self.guard = guard
        links, self.base = links_of(optimizer)
        # Loss scaling (a link's, or a Keras LossScaleOptimizer's on top) skips non-finite steps itself.
        self.handles_overflow = handles_overflow(optimizer)
        if guard is not None and not self.handles_overflow:
            links.insert(0, guard)
        if clip is not None:
            lowest = max((index for index, link in enumerate(links) if link.clipped_after), default=-1)
            links.insert(lowest + 1, clip)
        self.links = tuple(links)
        # A Keras LossScaleOptimizer (or a plain optimizer) on top applies the step itself; the
        # links inside it still receive the step's inputs.
        self._receivers = self.links or links_of(looked_through(optimizer))[0]

    def applying(self, accumulation):
        """The pipeline of what applies an update accumulated inside one step
        (``accumulation.apply_optimizer``), under this pipeline's clipping and guard links."""
        return Pipeline(accumulation.apply_optimizer, clip=self.clip, guard=self.guard)

    # What the step must compute.

    def reads(self):
        """Every ``StepInputs`` field some link reads."""
        return frozenset().union(*(link.READS for link in self._receivers))

    def layer_preconditioners(self):
        """The links that precondition from per-layer records (THOR), outermost first."""
        return _reading_layer_records(self._receivers)

    def layer_statistics_request(self):
        """The request of the first link that reads per-layer records (None: none does)."""
        links = self.layer_preconditioners()
        return links[0].layer_statistics_request() if links else None

    def see_layers(self, records):
        """Replica context: hand a forward pass's per-layer records to the links that read them."""
        for link in self._receivers:
            if "layer_records" in link.READS:
                link.see_layers(records)

    def create_layer_state(self):
        """Eagerly: let the links that read per-layer records create their per-layer state."""
        for link in self._receivers:
            if "layer_records" in link.READS:
                link.create_layer_state()

    def loss_scale(self):
        """The factor the stack's loss scaling multiplies a loss by (1.0 without one)."""
        return self.optimizer.scale_loss(tf.constant(1.0))

    # One step.

    def _per_link(self, inputs):
        """(index in ``_receivers``, link, its inputs) for every link that reads something,
        ``micro_batches`` set."""
        micro_batches = inputs.micro_batches
        for index, link in enumerate(self._receivers):
            if link.READS:
                yield index, link, dataclasses.replace(inputs, micro_batches=micro_batches)
            micro_batches *= link.apply_every

    def receive(self, inputs):
        """Replica context: hand ``inputs`` to the links that read them. Returns, per link of
        ``_receivers``, what it returned for this step's apply (``Link.receive``; mostly None)."""
        received = [None] * len(self._receivers)
        for index, link, own in self._per_link(inputs):
            received[index] = link.receive(own)
        return tuple(received)

    def summarise(self, inputs):
        """Replica context: the first reading link's ``summarise`` vector (None: none)."""
        for _, link, own in self._per_link(inputs):
            summary = link.summarise(own)
            if summary is not None:
                return summary
        return None

    def apply_step(self, grads_and_vars, inputs=None):
        """Hand ``inputs`` to the links, then apply the gradients that exist through the pipeline,
        each reading link given what its ``receive`` returned (``received``)."""
        received = self.receive(inputs) if inputs is not None else _handed_over(self._receivers)
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        if not self.links:
            # A Keras LossScaleOptimizer on top applies the step itself, and the stack inside it
            # applies through a pipeline of its own (``OptimizerWrapper.apply``), which takes
            # what its links returned for this call from here.
            with _handing_over(self._receivers, received):
                self.optimizer.apply_gradients(pairs)
            return
        if not pairs:
            return
        grads, variables = [dense(g) for g, _ in pairs], [v for _, v in pairs]
        if not self.optimizer.built:
            self.optimizer.build(variables)
        replica_context = tf.distribute.get_replica_context()
        if replica_context is None:
            self.apply_in_cross_replica_context(tf.distribute.get_strategy(), grads, variables, received)
        else:
            replica_context.merge_call(self.apply_in_cross_replica_context, args=(grads, variables, received))

    def apply_in_cross_replica_context(self, distribution, grads, variables, received=()):
        """``received``: per link, what its ``receive`` returned for this step (aligned with
        ``links``, which are the receivers when there are links; empty: nothing)."""
        received = tuple(received) or (None,) * len(self.links)
        self._rest_from(0, received)(distribution, list(grads), list(variables), False)

    def _rest_from(self, index, received):
        """The pipeline from link ``index`` down, as a function of (distribution, grads, variables, reduced)."""
        if index == len(self.links):
            return self._apply_to_base
        link = self.links[index]
        extra = {"received": received[index]} if link.READS else {}

        def rest(distribution, grads, variables, reduced):
            link._apply_in_cross_replica_context(
                distribution, list(grads), list(variables), reduced, self._rest_from(index + 1, received), **extra)
        return rest

    def _apply_to_base(self, distribution, grads, variables, reduced):
        if not reduced:
            grads = sum_across_replicas(distribution, grads, variables)
        apply_to_keras_optimizer(distribution, self.base, grads, variables)


# What the links inside a Keras LossScaleOptimizer returned from ``receive``, for the one
# apply that wrapper makes (``Pipeline.apply_step``, ``_handing_over``): id(link) -> [value,
# callers inside]. Only there does a step's ``received`` cross a Keras object, which passes
# no argument of ours; it lasts the call (several replica threads may be inside at once).
_handed = {}
_handed_lock = threading.Lock()


@contextlib.contextmanager
def _handing_over(links, received):
    entries = [(id(link), value) for link, value in zip(links, received) if value is not None]
    with _handed_lock:
        for key, value in entries:
            _handed.setdefault(key, [value, 0])[1] += 1
    try:
        yield
    finally:
        with _handed_lock:
            for key, _ in entries:
                _handed[key][1] -= 1
                if not _handed[key][1]:
                    del _handed[key]


def _handed_over(links):
    """Per link, what an enclosing ``_handing_over`` holds for it (None outside one)."""
    with _handed_lock:
        return tuple(_handed.get(id(link), [None])[0] for link in links)


# The cross-replica arithmetic every link shares.

def sum_across_replicas(distribution, grads, variables):
    """All-reduce (SUM) per-replica gradients onto the variables' devices, in one call.

    Must run in cross-replica context. Returns values that hold, on each
    replica, the sum over replicas. With one replica this is the identity.
    """
    destinations = [v.value if isinstance(v, keras.Variable) else v for v in variables]
    return distribution.extended.batch_reduce_to(
        tf.distribute.ReduceOp.SUM, list(zip(grads, destinations)))


def dense(gradient):
    """Gradients as dense tensors: links accumulate and take norms of them."""
    if isinstance(gradient, tf.IndexedSlices):
        return tf.convert_to_tensor(gradient)
    return gradient


def apply_to_keras_optimizer(distribution, optimizer, grads, variables):
    """Apply already-reduced per-replica gradients with a plain Keras optimizer.

    Keras's TensorFlow optimizer sums the gradients across replicas inside ``apply``
    (``_all_reduce_sum_gradients``), and has no public switch to take reduced ones. So for
    this call only (in cross-replica context: the replicas' ``apply`` all run inside it) its
    all-reduce hands the gradients back unchanged instead of summing identical copies again,
    and the optimizer is as the user built it again afterwards.
    """
    with compat.gradients_already_reduced(optimizer):
        distribution.extended.call_for_each_replica(optimizer.apply, args=(list(grads), list(variables)))
