"""Accept the ``tf.compat.v1.train`` optimizers that MoXing scripts return from ``optimizer_fn``.

MoXing's own example is ``optimizer_fn=lambda: tf.train.MomentumOptimizer(0.01, 0.9)``.
``as_keras_optimizer`` recognises such an instance (GradientDescent, Momentum,
Adam, RMSProp, Adagrad, Adadelta, Ftrl; exactly those classes, not
subclasses, whose overridden methods would be lost) and returns the
``moxlite.optimizers.tf1`` optimizer with the same hyperparameters and TF1's
update formula, which moxlite's loop, wrappers and strategies then drive like
any Keras 3 optimizer.

The learning rate follows moxlite's global step. A TF1 decay function
(``tf.compat.v1.train.piecewise_constant(global_step, ...)``,
``exponential_decay``...) returns, in eager mode, a ``functools.partial`` of a
schedule and the step variable it was given; the schedule is re-bound to the
run's global step, whichever step variable the script made. While
``optimizer_fn`` runs, ``tf.compat.v1.train.get_or_create_global_step()`` and
``get_global_step()`` return the run's global step, so a learning rate
written as a lambda over that step follows it too. The schedule sees the
global step itself (every micro-batch under ``batch_gradients``), which is
what the script's ``global_step`` names in moxlite.

A rate (or momentum, or any hyperparameter) that ``optimizer_fn`` computes as a
tensor of the global step (arithmetic, ``tf.cond``, ``tf.where``) follows the
step too: ``call_optimizer_fn`` hands such an ``optimizer_fn`` to
``step_trace``, which traces it as a function of the step.
"""

import contextlib
import functools
import threading

import tensorflow as tf

from moxlite import compat, context, errors, logs
from moxlite.optimizers import schedules, step_trace, tf1

# TF1 class name -> the moxlite class with its formulas (compat reads the TF1 object's settings).
_TRANSLATIONS = {
    "GradientDescentOptimizer": tf1.TF1GradientDescent,
    "MomentumOptimizer": tf1.TF1Momentum,
    "AdamOptimizer": tf1.TF1Adam,
    "RMSPropOptimizer": tf1.TF1RMSProp,
    "AdagradOptimizer": tf1.TF1Adagrad,
    "AdadeltaOptimizer": tf1.TF1Adadelta,
    "FtrlOptimizer": tf1.TF1Ftrl,
}

SUPPORTED = tuple(f"tf.compat.v1.train.{name}" for name in _TRANSLATIONS)


def is_tf1_optimizer(obj):
    """True for an instance of any ``tf.compat.v1.train.Optimizer``."""
    return isinstance(obj, tf.compat.v1.train.Optimizer)


def _refuse(optimizer, why):
    return errors.OptimizerTypeError(
        f"optimizer_fn returned tf.compat.v1.train.{type(optimizer).__name__}, {why}; return one of "
        f"{', '.join(name.rsplit('.', 1)[1] for name in SUPPORTED)} from tf.compat.v1.train, "
        "or a Keras optimizer (e.g. moxlite.get_optimizer_fn('momentum', 0.1, momentum=0.9))")


def _hyperparameter(optimizer, key, value):
    """A hyperparameter as a Python number; TF1 tensors are read, variables and callables refused."""
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, tf.Variable) or callable(value):
        raise _refuse(optimizer, f"whose {key} is a {type(value).__name__}, which moxlite would read "
                                 "only once; give a number (only the learning rate may change over time)")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise _refuse(optimizer, f"whose {key}={errors.describe(value)} is not a number") from None


def _step_schedule(learning_rate):
    """The schedule of a TF1 decay function's eager result ``partial(schedule, step)``, else None."""
    if not isinstance(learning_rate, functools.partial) or learning_rate.keywords or len(learning_rate.args) != 1:
        return None
    (step,) = learning_rate.args
    if isinstance(step, tf.Variable) and step.dtype.is_integer:
        return learning_rate.func
    return None


def _learning_rate(optimizer, value):
    """What the Keras optimizer receives: a float, or a callable read at every step."""
    if isinstance(value, bool):
        raise _refuse(optimizer, f"whose learning_rate={value!r} is not a number")
    if isinstance(value, (int, float)):
        return float(value)
    schedule = _step_schedule(value)
    run_context = context.current()
    if schedule is not None and run_context is not None:
        logs.get_logger().info("learning rate: %s of the global step, bound to moxlite's global step",
                               type(schedule).__name__)
        return schedules.GlobalStepLearningRate(schedule, run_context.global_step, counts="micro_steps")
    if isinstance(value, tf.Variable):
        return value.read_value
    if isinstance(value, tf.Tensor):   # its value now, until step_trace finds it computed from the step
        return step_trace.TracedValue(_float_or_refuse(optimizer, value))
    if callable(value):
        return value
    return _float_or_refuse(optimizer, value)


def _float_or_refuse(optimizer, value):
    try:
        return float(value)
    except (TypeError, ValueError):
        raise _refuse(optimizer, f"whose learning_rate={errors.describe(value)} is neither a number, "
                                 "a tensor nor a function of the global step") from None


def as_keras_optimizer(optimizer):
    """``optimizer`` itself, or the TF1-formula Keras optimizer standing for a TF1 one."""
    if not is_tf1_optimizer(optimizer):
        return optimizer
    if step_trace.tracing():   # graph tensors of the traced step: recorded, nothing built
        raw_learning_rate, raw = compat.tf1_optimizer_settings(optimizer)
        return step_trace.site({"learning_rate": raw_learning_rate, **raw}, build=None)
    translation = _TRANSLATIONS.get(type(optimizer).__name__)
    if translation is None or type(optimizer) is not getattr(tf.compat.v1.train, type(optimizer).__name__, None):
        raise _refuse(optimizer, "which moxlite cannot translate")
    cls = translation
    try:
        raw_learning_rate, raw = compat.tf1_optimizer_settings(optimizer)
    except compat.CompatibilityError as error:
        raise _refuse(optimizer, f"whose attributes this TensorFlow version renamed ({error})") from None
    hyperparameters = {key: _hyperparameter(optimizer, key, value) for key, value in raw.items()}
    return step_trace.site({"learning_rate": raw_learning_rate, **raw},
                           lambda: cls(learning_rate=_learning_rate(optimizer, raw_learning_rate), **hyperparameters))


# TF1's decay functions, which in eager mode return a callable where a TF1 graph gave a tensor.
TF1_DECAY_FUNCTIONS = ("exponential_decay", "inverse_time_decay", "natural_exp_decay", "polynomial_decay",
                       "cosine_decay", "cosine_decay_restarts", "linear_cosine_decay",
                       "noisy_linear_cosine_decay", "piecewise_constant")


def _valued_now(decay_function):
    """``decay_function`` giving its value as a tensor eagerly too, as in a TF1 graph.

    Eagerly TF2 returns ``functools.partial(schedule, step)``, on which a script's
    arithmetic (``2.0 * exponential_decay(...)``) or ``tf.where`` fails; the tensor is
    the value at the step now, and the traced call makes it follow the step.
    """

    @functools.wraps(decay_function)
    def valued(*args, **kwargs):
        value = decay_function(*args, **kwargs)
        return value() if tf.executing_eagerly() and callable(value) else value

    return valued


# The steps that TF1's getters return on this thread: one (step, reads) entry per open
# run_global_step_as_tf1_global_step, innermost last. Thread-local, because runs on two threads
# (two runs in one process) must each see their own step.
_overrides = threading.local()
_install_lock = threading.Lock()
_installed = False


def _active_override():
    entries = getattr(_overrides, "entries", None)
    return entries[-1] if entries else None


def _install_dispatchers():
    """Replace TF1's global-step getters and decay functions, once per process, by functions that
    behave as TF1's own unless run_global_step_as_tf1_global_step is open on the calling thread.

    Installed once and never taken back: saving and restoring the module's attributes around
    each run would leak the patch when two runs on two threads overlap (the later one would
    restore what the earlier one had patched in).
    """
    global _installed
    with _install_lock:
        if _installed:
            return
        train = tf.compat.v1.train
        for name in ("get_or_create_global_step", "get_global_step"):
            setattr(train, name, _getter_dispatcher(getattr(train, name)))
        for name in TF1_DECAY_FUNCTIONS:
            setattr(train, name, _decay_dispatcher(getattr(train, name)))
        _installed = True


def _getter_dispatcher(original):
    @functools.wraps(original)
    def getter(graph=None):
        entry = _active_override()
        if entry is None:
            return original(graph)
        step, reads = entry
        reads[:] = [True]
        return step

    return getter


def _decay_dispatcher(original):
    valued = _valued_now(original)

    @functools.wraps(original)
    def decay(*args, **kwargs):
        return (original if _active_override() is None else valued)(*args, **kwargs)

    return decay


@contextlib.contextmanager
def run_global_step_as_tf1_global_step(step=None):
    """Make TF1's global-step getters return ``step`` (default: the run's global step) in the body,
    on this thread, and TF1's decay functions return tensors eagerly as in a graph (``_valued_now``).

    Yields a list that holds True once a getter was called (optimizer_fn read the step).
    """
    reads = []
    run_context = context.current()
    if step is None and run_context is None:
        yield reads
        return
    step = run_context.global_step if step is None else step
    _install_dispatchers()
    entries = _overrides.__dict__.setdefault("entries", [])
    entries.append((step, reads))
    try:
        yield reads
    finally:
        entries.pop()


def call_optimizer_fn(factory):
    """Call an ``optimizer_fn`` inside a run and translate a TF1 optimizer it returns.

    When it read the global step, it is traced as a function of the step (``step_trace``), so
    that what it computed from the step follows the run's global step at every update.
    """
    with step_trace.watched() as registered, run_global_step_as_tf1_global_step() as reads:
        optimizer = as_keras_optimizer(factory())
    run_context = context.current()
    if reads and run_context is not None:
        step_trace.follow_the_step(_traced_call(factory), registered, run_context.global_step)
    return optimizer


def _traced_call(factory):
    def call(step):
        with run_global_step_as_tf1_global_step(step):
            return as_keras_optimizer(factory())

    return call
