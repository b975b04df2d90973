"""Learning rates: MoXing's piecewise epoch strings and the global-step clock.

Two things live here.

1. ``PiecewiseEpochSchedule``, MoXing's ``"5:0.1->0.4,10:0.4=>0.8,15:0.8,20:0.08"``.
   Each comma-separated piece ``end_epoch:value`` covers the epochs from the
   previous piece's end (0 for the first) up to ``end_epoch``, half-open:

   - ``a``      holds the value a;
   - ``a->b``   ramps linearly:      lr(e) = a + (b - a) * f;
   - ``a=>b``   ramps exponentially: lr(e) = a * (b / a) ** f;

   with f = (e - start) / (end - start) in [0, 1). Past the last end epoch the
   last piece's final value holds. Epochs are fractional:
   e = step / steps_per_epoch, steps_per_epoch = num_samples / global_batch_size.

2. ``GlobalStepLearningRate``, the zero-argument callable that a Keras 3
   optimizer created inside ``moxlite.run`` receives as its learning rate
   (Keras calls ``learning_rate()`` when the value is callable but not a
   ``LearningRateSchedule``). It reads the run's exact global step instead of
   ``optimizer.iterations``, because the global step counts every micro-batch of
   every worker exactly, while a Keras ``iterations`` variable loses increments
   under parameter-server training. What the schedule sees:

   - a Keras ``LearningRateSchedule`` sees the number of applied updates,
     ``global_step // steps_per_update``; ``steps_per_update`` is 1 unless
     ``batch_gradients`` wrappers above the optimizer are applying or reading
     it (``micro_steps_per_update``: the product of their ``num_batches``), so
     with num_batches=N the schedule advances once per N micro-batches, exactly
     as the optimizer's own ``iterations`` does;
   - a MoXing epoch string sees epochs = global_step * global_batch_size /
     num_samples, which counts samples and so is exact with or without
     accumulation.

3. ``StepFunctionLearningRate``: what MoXing scripts hand ``get_optimizer_fn`` as a
   learning rate besides numbers: a function of the global step (``lambda step: ...``),
   or the ``functools.partial`` of a TF1 decay function still missing its
   ``global_step`` (``partial(tf.compat.v1.train.exponential_decay, learning_rate=0.1,
   decay_steps=100, decay_rate=0.9)``), called at every update with the run's global
   step, as TF1's ``global_step`` was. A learning-rate *tensor* computed from the step
   inside ``optimizer_fn`` is followed by ``step_trace``.

Outside a run there is no global step: Keras schedules and floats behave as in
plain Keras (schedules key on ``iterations``), and epoch strings are an error.
"""

import contextlib
import functools
import inspect

import keras
import tensorflow as tf

from moxlite import context, errors, ranges
from moxlite.optimizers import learning_rates, step_trace
from moxlite.optimizers import recipe_tables
from moxlite.optimizers.learning_rates import parse_piecewise, piecewise_value  # noqa: F401  (re-exported)

@keras.saving.register_keras_serializable(package="moxlite")
class PiecewiseEpochSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """MoXing's piecewise epoch string as a Keras schedule of the step.

    ``schedule(step)`` evaluates the string at epoch = step / steps_per_epoch.
    """

    def __init__(self, spec, steps_per_epoch):
        self.spec = spec
        self.steps_per_epoch = float(steps_per_epoch)
        self.pieces = parse_piecewise(spec)

    def __call__(self, step):
        epoch = tf.cast(step, tf.float32) / self.steps_per_epoch
        # Past the last piece the final value holds; otherwise pick the piece
        # whose half-open [start, end) contains the epoch.
        value = tf.constant(self.pieces[-1][3], tf.float32)
        for start, end, first, last, kind in reversed(self.pieces):
            fraction = (epoch - start) / (end - start)
            if kind == "linear":
                piece_value = first + (last - first) * fraction
            elif kind == "exponential":
                piece_value = first * tf.pow(last / first, fraction)
            else:
                piece_value = tf.constant(first, tf.float32)
            value = tf.where(epoch < end, piece_value, value)
        return value

    def get_config(self):
        return {"spec": self.spec, "steps_per_epoch": self.steps_per_epoch}


def steps_per_epoch_of(run_context, spec):
    """num_samples / global_batch_size of the run, or an error saying what is missing."""
    if run_context is None:
        raise errors.OptimizerError(
            f"learning_rate: the epoch string {spec!r} needs the run's num_samples and "
            "global_batch_size; build the optimizer inside moxlite.run (pass "
            "get_optimizer_fn(...) as optimizer_fn), or give a float or a Keras schedule")
    if not run_context.num_samples:
        raise errors.OptimizerError(
            f"learning_rate: the epoch string {spec!r} needs the number of training samples, "
            "which this run does not know (input_fn's dataset has no known length); set it: "
            "moxlite.set_flag('num_samples', N) or --num_samples=N (recipes: input.num_samples), "
            "or use a float or a Keras schedule keyed on steps")
    if not run_context.global_batch_size:
        raise errors.OptimizerError(
            f"learning_rate: the epoch string {spec!r} needs global_batch_size, which is "
            f"{run_context.global_batch_size!r} in this run; set batch_size")
    if run_context.num_samples_inferred:
        from moxlite.logs import get_logger

        get_logger().info(
            "learning_rate %r: an epoch is %d samples, the length of input_fn's TRAIN dataset (repeats "
            "included); if an epoch is fewer, set num_samples: moxlite.set_flag('num_samples', N), "
            "--num_samples=N or the recipe's input.num_samples", spec, run_context.num_samples)
    return run_context.num_samples / run_context.global_batch_size


# Micro-steps per applied update, for the optimizer being applied or read right now.
# Process-wide, not thread-local: MirroredStrategy applies in one thread per replica.
_micro_steps_per_update = [1]


@contextlib.contextmanager
def micro_steps_per_update(num_batches):
    """While inside, each update takes ``num_batches`` times more micro-steps.

    Entered by a ``batch_gradients`` wrapper around the calls that apply or
    read its inner optimizer (and by a loop that applies that optimizer for
    it); nested wrappers multiply. Python state, read when a step is traced.
    """
    outer = _micro_steps_per_update[0]
    _micro_steps_per_update[0] = outer * num_batches
    try:
        yield
    finally:
        _micro_steps_per_update[0] = outer


@keras.saving.register_keras_serializable(package="moxlite")
class GlobalStepLearningRate:
    """A zero-argument learning rate that reads the run's global step.

    schedule: a Keras ``LearningRateSchedule``.
    global_step: the run's int64 global-step variable.
    counts: "updates" (the schedule sees global_step // steps_per_update) or
        "micro_steps" (it sees global_step itself; used by epoch strings,
        whose steps_per_epoch is already in micro-steps).

    How many micro-steps make one update is not stored here: the
    ``batch_gradients`` wrappers above the optimizer say so while they apply or
    read it (``micro_steps_per_update``), so building a wrapper changes nothing
    in the optimizer it wraps and a factory may be called any number of times.
    """

    COUNTS = ("updates", "micro_steps")

    def __init__(self, schedule, global_step, counts="updates"):
        if counts not in self.COUNTS:
            raise errors.OptimizerError(f"GlobalStepLearningRate: counts={counts!r}; use one of {self.COUNTS}")
        self.schedule = schedule
        self.global_step = global_step
        self.counts = counts

    def step_seen_by_schedule(self):
        step = tf.convert_to_tensor(self.global_step)
        steps_per_update = _micro_steps_per_update[0]
        if self.counts == "updates" and steps_per_update > 1:
            step = step // steps_per_update
        return step

    def __call__(self):
        return tf.cast(self.schedule(self.step_seen_by_schedule()), tf.float32)

    def get_config(self):
        return {"schedule": keras.saving.serialize_keras_object(self.schedule), "counts": self.counts}

    @classmethod
    def from_config(cls, config):
        schedule = keras.saving.deserialize_keras_object(config["schedule"])
        run_context = context.current()
        if run_context is None:
            # No global step outside a run: plain Keras behaviour.
            return schedule
        return cls(schedule, run_context.global_step, config.get("counts", "updates"))


def step_parameter(function):
    """How ``function`` takes the step: "global_step" (by that keyword), "positional", or None
    (it takes no argument; Keras calls it as it is). ValueError for any other signature."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return "positional"   # a builtin without a signature: assume f(step)
    required = [p for p in parameters if p.default is inspect.Parameter.empty
                and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    if any(p.name == "global_step" for p in required) and len(required) == 1:
        return "global_step"
    if not required:
        return None
    if len(required) == 1 and required[0].kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                   inspect.Parameter.POSITIONAL_OR_KEYWORD):
        return "positional"
    raise ValueError(f"it needs {', '.join(p.name for p in required)}")


def value_of_step_function(function, step, how):
    """``function`` at ``step``; a TF1 decay function's eager result (a partial) is called too."""
    value = function(global_step=step) if how == "global_step" else function(step)
    while isinstance(value, functools.partial):   # TF1 decay functions return partial(schedule, step) eagerly
        value = value()
    return value


@keras.saving.register_keras_serializable(package="moxlite")
class StepFunctionLearningRate:
    """A zero-argument learning rate: ``function`` of the run's global step, called at every update.

    function: takes the step positionally, or as ``global_step=`` (a partial of a TF1 decay
    function). It sees the global step itself, every micro-batch counted, as a TF1 script's
    ``global_step`` did.
    """

    def __init__(self, function, global_step):
        self.function = function
        self.global_step = global_step
        self._how = step_parameter(function)

    def __call__(self):
        step = tf.convert_to_tensor(self.global_step)
        return tf.cast(value_of_step_function(self.function, step, self._how), tf.float32)

    def get_config(self):
        return {"value_at_global_step": float(self())}


def _is_step_function(learning_rate):
    return callable(learning_rate) and not isinstance(
        learning_rate, (keras.optimizers.schedules.LearningRateSchedule, GlobalStepLearningRate, tf.Variable,
                        StepFunctionLearningRate)) and not hasattr(learning_rate, "__tf_tensor__")


def _check_step_function(learning_rate):
    try:
        how = step_parameter(learning_rate)
    except ValueError as error:
        raise errors.OptimizerTypeError(
            f"learning_rate={errors.describe(learning_rate)}: {error}; give a function of the global step "
            "(one argument, or global_step=), such as functools.partial(tf.compat.v1.train."
            "exponential_decay, learning_rate=0.1, decay_steps=100, decay_rate=0.9)") from None
    if how is None:
        recipe_tables.check_first_values("learning_rate", lambda step: learning_rate(), LEARNING_RATE_VALUES)
    else:
        recipe_tables.check_first_values(
            "learning_rate", lambda step: value_of_step_function(learning_rate, tf.constant(step, tf.int64), how),
            LEARNING_RATE_VALUES)
    return learning_rate


def _check_tensor(learning_rate):
    if learning_rate.shape.rank not in (0, None) or not (learning_rate.dtype.is_floating
                                                         or learning_rate.dtype.is_integer):
        raise errors.OptimizerTypeError(
            f"learning_rate={errors.describe(learning_rate)} is not a scalar number; give a scalar tensor "
            "of the global step, a float or a function of the step")
    if isinstance(learning_rate, tf.Variable) or tf.is_symbolic_tensor(learning_rate):
        return learning_rate   # read at every update / traced: the run's first steps will tell
    value = float(learning_rate)
    if not LEARNING_RATE_VALUES.check(value):
        raise errors.OptimizerError(f"learning_rate={value!r} must be a finite number >= 0")
    return learning_rate


# A schedule's learning rates: finite, and not negative (a warm-up may start at 0).
LEARNING_RATE_VALUES = ranges.number(minimum=0)


def check_learning_rate(learning_rate):
    """Reject learning rates that cannot work, with a message that says why.

    Accepts a positive number, a Keras ``LearningRateSchedule`` whose first values
    (recipe_tables.FIRST_STEPS) are finite and not negative, a MoXing epoch string
    (parsed here so that a typo fails before the run starts), a scalar tensor or
    variable (a tensor of the global step, as TF1 scripts compute it), or a
    function of the global step (``StepFunctionLearningRate``) whose first values
    are finite and not negative.
    """
    if isinstance(learning_rate, (GlobalStepLearningRate, StepFunctionLearningRate)):   # bound to a run's step
        return learning_rate
    if isinstance(learning_rate, (tf.Tensor, tf.Variable)):
        return _check_tensor(learning_rate)
    if _is_step_function(learning_rate):
        return _check_step_function(learning_rate)
    if isinstance(learning_rate, keras.optimizers.schedules.LearningRateSchedule):
        recipe_tables.check_first_values("learning_rate", learning_rate, LEARNING_RATE_VALUES)
        return learning_rate
    return learning_rates.check_number_or_string(learning_rate)


def resolve_learning_rate(learning_rate):
    """What the Keras optimizer receives, given the run in progress (if any).

    A float stays a float (a Keras variable, settable). Inside a run, a Keras
    schedule becomes a ``GlobalStepLearningRate`` counting applied updates and
    an epoch string becomes one counting micro-steps. Outside a run a Keras
    schedule is passed as is and an epoch string is an error.
    """
    learning_rate = check_learning_rate(learning_rate)
    run_context = context.current()
    if isinstance(learning_rate, (GlobalStepLearningRate, StepFunctionLearningRate)):   # already bound
        return learning_rate
    if isinstance(learning_rate, float):
        return learning_rate
    if isinstance(learning_rate, tf.Variable):
        return learning_rate.read_value
    if isinstance(learning_rate, tf.Tensor):
        # Its value now; a tensor that optimizer_fn computed from the step is then made to
        # follow the step by step_trace (tf1_adapter.call_optimizer_fn).
        return step_trace.TracedValue(float(learning_rate))
    if _is_step_function(learning_rate):
        schedule = _tf1_decay_schedule(learning_rate)
        if schedule is not None and run_context is not None:   # re-bound to the run's step
            return GlobalStepLearningRate(schedule, run_context.global_step, counts="micro_steps")
        if step_parameter(learning_rate) is None:
            return learning_rate
        if run_context is None:
            raise errors.OptimizerError(
                f"learning_rate={errors.describe(learning_rate)} is a function of the global step, which "
                "exists only inside moxlite.run; pass get_optimizer_fn(...) as optimizer_fn")
        return StepFunctionLearningRate(learning_rate, run_context.global_step)
    if isinstance(learning_rate, str):
        schedule = PiecewiseEpochSchedule(learning_rate, steps_per_epoch_of(run_context, learning_rate))
        return GlobalStepLearningRate(schedule, run_context.global_step, counts="micro_steps")
    if run_context is None:
        return learning_rate
    # A schedule that counts samples (learning_rate_scheduler.piecewise_lr) says so in ``counts``.
    counts = getattr(learning_rate, "counts", "updates")
    return GlobalStepLearningRate(learning_rate, run_context.global_step, counts=counts)


def _tf1_decay_schedule(learning_rate):
    """The schedule of a TF1 decay function's eager result ``partial(schedule, step_variable)``."""
    if (isinstance(learning_rate, functools.partial) and not learning_rate.keywords and len(learning_rate.args) == 1
            and isinstance(learning_rate.args[0], tf.Variable) and learning_rate.args[0].dtype.is_integer):
        return learning_rate.func
    return None


def current_learning_rate(optimizer):
    """The learning rate the optimizer (or wrapper stack) applies now, as a float32 scalar tensor."""
    value = optimizer.learning_rate
    if isinstance(value, keras.Variable):
        value = value.value
    return tf.cast(tf.convert_to_tensor(value), tf.float32)
