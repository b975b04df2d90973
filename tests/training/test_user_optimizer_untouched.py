"""After run() returns or raises, the user's optimizer objects are as they were built.

The run reads the user's stack into its own pipeline and applies through it; it may switch a
Keras optimizer's all-reduce off (gradients already reduced) or its update loop to XLA per
device, but only for the call or the trace that needs it. The reference is the optimizer's
own surface before the run: its class, the functions held on the instance, and every method
the run could replace still being the class's own.
"""

import inspect

import numpy as np
import pytest

import moxlite as mox
from moxlite.optimizers import pipeline
from moxlite.training.trainers import nonfinite
from tests import runlib
from tests.training.test_xla import BATCH, _rows, tiny_model_fn

REPLACEABLE = ("_all_reduce_sum_gradients", "_distributed_tf_update_step", "apply", "apply_gradients")


def _surface(optimizer):
    """Per member of the stack: its class, the names of the functions held on the instance,
    the names of attributes that mention moxlite, and the replaceable methods not the class's."""
    rows = []
    links, base = pipeline.links_of(optimizer)
    for member in links + [base]:
        own = vars(member)
        replaced = [name for name in REPLACEABLE if hasattr(type(member), name)
                    and (name in own or getattr(getattr(member, name), "__func__", None)
                         is not inspect.getattr_static(type(member), name))]
        rows.append((type(member), sorted(name for name, value in own.items() if inspect.isroutine(value)),
                     sorted(name for name in own if "moxlite" in name), replaced))
    return rows


def _stack():
    """lars(batch_gradients(momentum)): links above a plain Keras optimizer, the objects kept."""
    base = mox.get_optimizer_fn("momentum", 0.1, momentum=0.9)()
    return mox.get_optimizer_wrapper_fn("lars", mox.get_optimizer_wrapper_fn("batch_gradients", lambda: base,
                                                                             num_batches=2))()


def _run(log_dir, images, labels, made, num_gpus=1, jit_compile=False):
    """A 4-step run whose optimizer_fn builds ``_stack()`` (in the strategy's scope, as a user's
    factory does) and appends (the stack, its surface when built) to ``made``."""

    def optimizer_fn():
        optimizer = _stack()
        made.append((optimizer, _surface(optimizer)))
        return optimizer

    mox.set_flag("num_gpus", num_gpus)
    runlib.train(log_dir, runlib.input_fn_for(images, labels), tiny_model_fn, optimizer_fn, steps=4,
                 batch_size=BATCH // num_gpus, log_every_n_steps=2, save_summary_steps=0,
                 jit_compile=jit_compile)


@pytest.mark.parametrize("num_gpus, jit_compile", [(1, False), (2, True)])
def test_the_users_stack_is_as_it_was_after_a_run(tmp_path, num_gpus, jit_compile):
    images, labels = _rows()
    made = []
    _run(tmp_path, images, labels, made, num_gpus, jit_compile)
    [(optimizer, built)] = made
    assert all(not replaced for _, _, _, replaced in built)
    assert _surface(optimizer) == built


def test_the_users_optimizer_is_as_it_was_after_a_run_that_raised(tmp_path):
    images, labels = _rows()
    images = images.copy()
    images[BATCH + 1, 0] = np.nan   # the second step's loss is NaN: the run stops with an error
    made = []
    with pytest.raises(nonfinite.NonFiniteError):
        _run(tmp_path, images, labels, made)
    [(optimizer, built)] = made
    assert _surface(optimizer) == built
