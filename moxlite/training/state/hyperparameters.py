"""Hyperparameters come from ``optimizer_fn`` now; a checkpoint restores only state.

A Keras optimizer keeps its learning rate in a variable, which a checkpoint
saves next to the slots, so resuming a run with a new learning rate (the usual
"continue at lr/10") would silently step with the old one. A resumed run
restores state (slots, accumulators, step counters, wrapper and loss-scale
state) and keeps the hyperparameters ``optimizer_fn`` gave this time.
Momentum, LARS's and batch_gradients' settings are plain Python values, so
they already come from ``optimizer_fn``.

An optimizer with other hyperparameters held in variables lists them in a
``hyperparameter_variables()`` method; they are kept the same way.
"""

import contextlib

import keras
import numpy as np
import tensorflow as tf

from moxlite import compat
from moxlite.optimizers import pipeline
from moxlite.training.reporting import get_logger


def hyperparameter_variables(optimizer):
    """[(label, variable)] of the hyperparameters held in variables across the stack."""
    found = []
    for member in pipeline.members_of(optimizer):
        declared = getattr(member, "hyperparameter_variables", None)
        if callable(declared):
            found.extend((f"{type(member).__name__}.{getattr(v, 'name', 'variable')}", v) for v in declared())
            continue
        rate = compat.learning_rate_attribute(member)
        if isinstance(rate, (keras.Variable, tf.Variable)):
            found.append((f"{type(member).__name__}.learning_rate", rate))
    return found


@contextlib.contextmanager
def kept_through_restore(optimizers):
    """Within the body, restore a checkpoint; after it, the hyperparameters are this run's again.

    Each value the checkpoint changed is logged, so a resume that changes the learning rate
    says so.
    """
    pairs = [pair for optimizer in optimizers for pair in hyperparameter_variables(optimizer)]
    given = [np.array(variable.numpy()) for _, variable in pairs]
    yield
    for (label, variable), value in zip(pairs, given):
        restored = np.array(variable.numpy())
        if not np.array_equal(restored, value):
            get_logger().info("Resuming with %s=%s from optimizer_fn (the checkpoint had %s)",
                              label, value, restored)
            variable.assign(value)
