"""Ctrl-C and SIGTERM during training: save where the run is, then stop as asked.

Cloud preemption sends SIGTERM; a user presses Ctrl-C. So that neither loses the
steps since the last timed checkpoint, while a run trains both signals
only set a flag; the controller stops at the next traced-call boundary, the run
saves a checkpoint at that step, logs where, and then the signal is raised
again with the handler that was there before: ``KeyboardInterrupt`` for
SIGINT, and for SIGTERM whatever the program had (``moxlite-run`` exits 143;
Python's default ends the process). The next run in the same log_dir resumes
from that checkpoint.

Signal handlers can only be installed from the main thread; elsewhere the
signals keep their usual effect.
"""

import contextlib
import signal
import threading

HANDLED = (signal.SIGINT, signal.SIGTERM)


class Interrupts:
    """The signal received during training (``signum``), if any."""

    def __init__(self):
        self.signum = None
        self._previous = {}

    def requested(self):
        return self.signum is not None

    def _record(self, signum, _frame):
        self.signum = signum

    def install(self):
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in HANDLED:
            self._previous[signum] = signal.signal(signum, self._record)

    def restore(self):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}

    def reraise(self):
        """Deliver the recorded signal again, to the handler that was there before."""
        if self.signum is not None:
            signal.raise_signal(self.signum)
            if self.signum == signal.SIGINT:   # a program that ignores SIGINT: still stop run()
                raise KeyboardInterrupt


@contextlib.contextmanager
def deferred():
    """Within the body, SIGINT/SIGTERM are recorded instead of acting."""
    interrupts = Interrupts()
    interrupts.install()
    try:
        yield interrupts
    finally:
        interrupts.restore()


def name_of(signum):
    return signal.Signals(signum).name
