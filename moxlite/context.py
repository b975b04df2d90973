"""What a running ``moxlite.run`` tells the pieces it calls.

Optimizer factories, schedules and wrappers are built by user code inside
``run`` (``optimizer_fn()`` is called there). They need a few facts that only
the runner knows: the exact global step, the global batch, the number of
training samples, the replica count and whether replicas are synchronous.
The runner publishes them here for the duration of the run; outside a run,
``current()`` returns None and factories fall back to plain Keras behaviour.
"""

import contextlib
import dataclasses
import threading
from typing import Any, Optional

_local = threading.local()


@dataclasses.dataclass
class RunContext:
    """Facts about the current run.

    global_step: an int64 ``tf.Variable`` that counts every step of every
        worker exactly (micro-batches included); schedules read it.
    global_batch_size: samples consumed by one global step, over all replicas.
    num_samples: training samples in one epoch, or None when unknown.
    num_samples_inferred: True when num_samples is the length of input_fn's dataset (repeats
        included) rather than the ``num_samples`` flag, which always wins.
    num_replicas: replicas in sync within one step.
    num_workers: worker processes.
    sync_replicas: False under parameter-server (asynchronous) training.
    strategy: the ``tf.distribute.Strategy`` in use.
    """

    global_step: Any
    global_batch_size: int
    num_samples: Optional[int] = None
    num_samples_inferred: bool = False
    num_replicas: int = 1
    num_workers: int = 1
    sync_replicas: bool = True
    strategy: Any = None


def current() -> Optional[RunContext]:
    """The context of the run in progress in this thread, or None."""
    return getattr(_local, "context", None)


@contextlib.contextmanager
def activate(context: RunContext):
    """Publish ``context`` while the body runs."""
    previous = current()
    _local.context = context
    try:
        yield context
    finally:
        _local.context = previous


_start_listeners = []


@contextlib.contextmanager
def on_training_started(listener):
    """Call ``listener()`` once, when a ``run`` in the body has restored its state and is about to train.

    The recipe CLI records ``log_dir/recipe.yaml`` this way, so that a run that
    fails its checks (a checkpoint of another network, a bad argument) leaves
    the record of the run whose checkpoints are there untouched.
    """
    called = []

    def once():
        if not called:
            called.append(True)
            listener()

    _start_listeners.append(once)
    try:
        yield
    finally:
        _start_listeners.remove(once)


def training_started():
    """Told by ``run`` once its checks and its restore have passed, before the first step."""
    for listener in list(_start_listeners):
        listener()


_evaluation_listeners = []


@contextlib.contextmanager
def on_final_evaluation(listener):
    """Call ``listener(metrics)`` when a TRAIN ``run`` in the body has evaluated its last step
    on the whole EVAL input (inter_mode=EVAL): ``metrics`` as a run_mode=EVAL run returns them, ``global_step`` and
    ``num_samples`` included. The recipe CLI then reports it instead of evaluating again."""
    _evaluation_listeners.append(listener)
    try:
        yield
    finally:
        _evaluation_listeners.remove(listener)


def final_evaluation(metrics):
    """Told by a TRAIN ``run`` that evaluated its last step."""
    for listener in list(_evaluation_listeners):
        listener(metrics)
