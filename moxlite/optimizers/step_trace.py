"""What ``optimizer_fn`` computes from the global step, evaluated again at every update.

In TF1 a MoXing script's learning rate was a graph tensor of the global step
(``lr = tf.cond(step > warmup, ...)``, ``tf.compat.v1.train.exponential_decay(...)``,
arithmetic), which the session evaluated at every step. In TF2 ``optimizer_fn``
runs eagerly once, and the same code gives the value at the step it ran at.

So when ``optimizer_fn`` reads the global step, moxlite calls it a second time
inside ``tf.compat.v1.wrap_function``, with TF1's global-step getters returning
the function's int64 input. The places where moxlite takes hyperparameters in
(``tf1_adapter.as_keras_optimizer`` and ``get_optimizer_fn``'s factory, called
as *sites*) record, on that second call, the graph tensors they were given and
build nothing; on the first (eager) call they register the optimizer they built,
in the same order. Every recorded tensor that depends on the step input is
pruned into one function of the step, and the eager optimizer's attribute
(``learning_rate``, ``momentum``, ...) becomes a ``TracedValue``: that function
called on moxlite's global step wherever the optimizer reads it, inside the
traced update, so at every update.

A wrapper factory (``get_optimizer_wrapper_fn``) reaches its inner sites while
tracing and returns a stand-in too, so stacks (lars, batch_gradients, thor) are
traced through; the wrappers themselves take numbers.

What cannot be traced (a Python number read from the step, ``int(step)``,
``step.numpy()``, a Keras optimizer built inside ``optimizer_fn`` from an eager
tensor) stays what the eager call gave; one start-up line says it is constant
and why. Each ``run`` traces its own ``optimizer_fn`` with its own global step.
"""

import contextlib
import threading

import keras
import tensorflow as tf

from moxlite import compat, logs

_local = threading.local()


class StandIn:
    """What a site returns while ``optimizer_fn`` is traced: no optimizer is built then."""

    def __repr__(self):
        return "<optimizer not built: optimizer_fn traced as a function of the global step>"


STAND_IN = StandIn()


class TracedValue:
    """A hyperparameter that may be computed from the global step, as a function of it.

    Made with the value ``optimizer_fn`` gave (``value_now``), which it returns until
    ``follow`` hands it the traced computation. Calling it (Keras calls a callable learning
    rate), converting it to a tensor (``ops.cast``, ``tf.convert_to_tensor``) or to a float
    then evaluates that computation on the run's global step as it is at that moment.
    A learning rate is given to the optimizer as one from the start (Keras untracks the
    variable a later callable replaces, which a checkpoint refuses).
    """

    def __init__(self, value_now, label="learning_rate"):
        self._now = value_now
        self._function = None
        self._index = None
        self.global_step = None
        self.label = label

    def follow(self, function, index, global_step, label):
        """From now on, the ``index``-th output of ``function(global_step)``."""
        self._function, self._index, self.global_step, self.label = function, index, global_step, label
        return self

    @property
    def follows_the_step(self):
        return self._function is not None

    def __call__(self):
        if self._function is None:
            return tf.constant(self._now, tf.float32)
        return self._function(tf.convert_to_tensor(self.global_step))[self._index]

    def __tf_tensor__(self, dtype=None, name=None):
        value = self()
        return value if dtype is None else tf.cast(value, dtype, name=name)

    def __float__(self):
        return float(self())

    def __repr__(self):
        if self._function is None:
            return repr(self._now)
        return f"<{self.label}: traced from optimizer_fn as a function of the global step>"

    def get_config(self):
        # Keras configs hold numbers: the value now, as TF1's graph would have printed it.
        return {"value_at_global_step": float(self)}


def tracing():
    """True while ``optimizer_fn`` is being traced as a function of the step."""
    return getattr(_local, "recorded", None) is not None


def site(values, build):
    """Where moxlite takes an optimizer's hyperparameters in: ``values`` {attribute: value given}.

    While tracing, ``values`` are recorded and ``STAND_IN`` returned (nothing is built). Otherwise
    ``build()`` makes the optimizer, which is registered when a call is watched.
    """
    recorded = getattr(_local, "recorded", None)
    if recorded is not None:
        recorded.append(dict(values))
        return STAND_IN
    optimizer = build()
    registered = getattr(_local, "registered", None)
    if registered is not None:
        registered.append(optimizer)
    return optimizer


@contextlib.contextmanager
def watched():
    """Within the body, sites register what they build; yields that list of optimizers, in order."""
    previous = getattr(_local, "registered", None)
    _local.registered = []
    try:
        yield _local.registered
    finally:
        _local.registered = previous


@contextlib.contextmanager
def _recording():
    previous = getattr(_local, "recorded", None)
    _local.recorded = []
    try:
        yield _local.recorded
    finally:
        _local.recorded = previous


def _no_outputs(result):
    del result   # the stand-ins; the recorded tensors are fetched by pruning
    return []


def _depends_on(tensor, source):
    """Whether graph ``tensor`` is computed from ``source`` (a placeholder of the same graph)."""
    seen, pending = set(), [tensor.op]
    while pending:
        op = pending.pop()
        if op is source.op:
            return True
        if op in seen:
            continue
        seen.add(op)
        pending.extend(t.op for t in op.inputs)
        pending.extend(op.control_inputs)
    return False


def _label(optimizer, key):
    return f"{type(optimizer).__name__}.{key}"


def _follow(optimizer, key, function, index, global_step):
    """The optimizer's ``key`` made to follow the step; False where it cannot."""
    label = _label(optimizer, key)
    if key == "learning_rate":
        held = compat.learning_rate_attribute(optimizer)
        if isinstance(held, TracedValue):
            held.follow(function, index, global_step, label)
        elif callable(held) and not isinstance(held, (tf.Variable, keras.Variable)):
            # A callable the eager call gave (a TF1 decay function's partial, which a tf.cond
            # returned from the branch it took): replaced; Keras's setter untracks no variable.
            optimizer.learning_rate = TracedValue(None, label).follow(function, index, global_step, label)
        else:
            return False   # a variable: replacing it would untrack it, which checkpoints refuse
        return True
    setattr(optimizer, key, TracedValue(float(getattr(optimizer, key)), label).follow(
        function, index, global_step, label))
    return True


def follow_the_step(call, registered, global_step):
    """Make the registered optimizers' step-dependent hyperparameters follow ``global_step``.

    call(step): calls ``optimizer_fn`` the way the eager call did, with TF1's global step being
    ``step`` (and translates its result, so that the sites are reached in the same order).
    registered: what the eager call's sites registered (``watched``).
    Returns the labels of the hyperparameters that now follow the step.
    """
    try:
        with _recording() as recorded:
            wrapped = tf.compat.v1.wrap_function(lambda step: _no_outputs(call(step)),
                                                 [tf.TensorSpec([], tf.int64, name="global_step")])
    except Exception as error:   # noqa: BLE001  (any failure: the eager values stand, and we say so)
        _say_constant(f"tracing it as a function of the step failed ({type(error).__name__}: "
                      f"{str(error).splitlines()[0] if str(error) else ''})", global_step)
        return []
    if len(recorded) != len(registered):
        _say_constant(f"called again it built {len(recorded)} optimizers, not {len(registered)}", global_step)
        return []
    step_input = wrapped.inputs[0]
    patches = []
    for optimizer, traced in zip(registered, recorded):
        for key, value in traced.items():
            if not isinstance(value, tf.Tensor) or value.graph is not wrapped.graph:
                continue   # not computed in the trace (a number, a schedule made before the run)
            if _depends_on(value, step_input):
                patches.append((optimizer, key, value))
    if not patches:
        return []
    function = wrapped.prune(feeds=[step_input], fetches=[value for _, _, value in patches])
    labels, kept = [], []
    for index, (optimizer, key, _) in enumerate(patches):
        (labels if _follow(optimizer, key, function, index, global_step) else kept).append(_label(optimizer, key))
    if kept:
        _say_constant(f"{', '.join(kept)} was given as a number, which cannot be made to follow it", global_step)
    if not labels:
        return []
    logs.get_logger().info("%s: computed from the global step in optimizer_fn, evaluated at every update",
                           ", ".join(labels))
    return labels


def _say_constant(why, global_step):
    logs.get_logger().info(
        "optimizer_fn reads the global step, but %s: the numbers and tensors it computed from the step "
        "keep their values of global step %d, constant for the whole run (a TF1 decay function's result "
        "given as it is still follows the step); compute them with tensor operations on "
        "tf.compat.v1.train.get_or_create_global_step() (arithmetic, tf.cond, tf.where, the "
        "tf.compat.v1.train decay functions) or give get_optimizer_fn a function of the step",
        why, int(global_step.numpy()))
