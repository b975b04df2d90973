"""moxlite.process_exit: a process that ran ``run`` ends without the collector walking TensorFlow again.

The CPU it saves is a property of a whole process (measured in the module's docstring and
the commit that added it); here, in process: ``run`` registers the exit handler once, and
the handler finalizes the garbage of its moment before it freezes what is alive.
"""

import atexit
import gc

import moxlite as mox
from moxlite import process_exit
from tests import runlib


def test_run_registers_the_exit_handler_once_per_process(tmp_path, monkeypatch):
    registered = []
    register = atexit.register

    def recording(function, *args, **kwargs):   # every handler still registered; ours counted
        registered.append(function)
        return register(function, *args, **kwargs)

    monkeypatch.setattr(process_exit, "_registered", False)
    monkeypatch.setattr(atexit, "register", recording)
    images, labels = runlib.mnist_rows(32)
    for name in ("first", "second"):
        mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=runlib.softmax_model_fn,
                optimizer_fn=mox.get_optimizer_fn("sgd", 0.1), run_mode=mox.ModeKeys.TRAIN, batch_size=16,
                log_dir=str(tmp_path / name), max_number_of_steps=1)
    assert [f for f in registered if f is process_exit.freeze_survivors] == [process_exit.freeze_survivors]
    assert process_exit.registered()


class _Cycle:
    """An object in a reference cycle whose finalizer records that it ran."""

    finalized = []

    def __init__(self, name):
        self.name = name
        self.itself = self

    def __del__(self):
        _Cycle.finalized.append(self.name)


def test_the_handler_finalizes_the_garbage_of_its_moment_and_freezes_the_living():
    gc.disable()   # no automatic collection between the set-up and the handler
    try:
        _Cycle("garbage")   # unreachable at once; only a collection can finalize it
        alive = _Cycle("alive")
        frozen_before = gc.get_freeze_count()
        process_exit.freeze_survivors()
        assert _Cycle.finalized == ["garbage"]
        assert gc.get_freeze_count() > frozen_before
        del alive
        gc.collect()   # a frozen cycle is exempt from collections: still not finalized
        assert _Cycle.finalized == ["garbage"]
    finally:
        gc.unfreeze()
        gc.enable()
        gc.collect()
        _Cycle.finalized.clear()
