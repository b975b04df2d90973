"""moxlite's one logging channel: the ``moxlite`` logger.

Training lines, checkpoint notes, cluster and server messages and MoXing's
warnings all go through it (modules ask ``get_logger()`` when they log, not at
import). Unless the application configured that logger itself, it prints
``LEVEL:moxlite:message`` lines to stdout and does not propagate, so an
application's root handlers do not print them twice. No TensorFlow here: the
cluster code logs before TensorFlow is imported.

It also keeps TensorFlow's C++ start-up log off ``moxlite-run``'s first screen
(``quiet_tensorflow_startup``).
"""

import contextlib
import logging
import os
import re
import sys
import tempfile

LOGGER_NAME = "moxlite"


class _StdoutHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stdout`` is at the time of the record (redirections included)."""

    @property
    def stream(self):
        return sys.stdout

    @stream.setter
    def stream(self, value):
        pass


def get_logger():
    """The ``moxlite`` logger, with its stdout handler unless the application gave it one.

    Its level is INFO unless the application set one, also when the application
    added its own handler: that handler receives the training lines.
    """
    logger = logging.getLogger(LOGGER_NAME)
    if not logger.handlers:
        handler = _StdoutHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    return logger


# TensorFlow's C++ log level, as ``moxlite-run`` sets it when the user has not: only
# FATAL lines. At the default (0), importing TensorFlow prints about ten lines, twice
# (libtensorflow_framework and the profiler plugin each hold a copy of absl's logging):
# oneDNN is on, no CUDA driver, the CPU features, then cuInit's failure on a machine
# without a GPU.
QUIET_TF_CPP_MIN_LOG_LEVEL = "3"

# absl's line prefix (severity letter, date, time, thread, file:line) and the banner it
# writes once before absl::InitializeLog. Lines like these, written while TensorFlow's
# shared libraries load, do not honour TF_CPP_MIN_LOG_LEVEL (their logging is not
# initialised yet), so they are filtered here by the same rule.
_ABSL_LINE = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^\]]+\] ")
_ABSL_BANNER = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
_SEVERITY = {"I": 0, "W": 1, "E": 2, "F": 3}


def quiet_tensorflow_startup(environ=None):
    """Set ``TF_CPP_MIN_LOG_LEVEL`` to QUIET_TF_CPP_MIN_LOG_LEVEL unless the user set it.

    Must run before TensorFlow is imported (it reads the variable once). Returns the
    level in force. ``TF_ENABLE_ONEDNN_OPTS`` is left alone: it changes numerics.
    """
    environ = os.environ if environ is None else environ
    return environ.setdefault("TF_CPP_MIN_LOG_LEVEL", QUIET_TF_CPP_MIN_LOG_LEVEL)


def keep_stderr_line(line, min_level):
    """Whether a line written to stderr while TensorFlow loads is shown at ``min_level``."""
    if min_level <= 0:
        return True
    if line.rstrip("\n") == _ABSL_BANNER:
        return False
    match = _ABSL_LINE.match(line)
    return match is None or _SEVERITY[match.group(1)] >= min_level


@contextlib.contextmanager
def tensorflow_load_filtered():
    """Hold back absl's pre-initialisation lines below TF_CPP_MIN_LOG_LEVEL while the block runs.

    The block's writes to file descriptor 2 go to a temporary file; at the end every
    other line (Python warnings, tracebacks, errors at or above the level) is written
    to stderr in order. A no-op once TensorFlow is imported, or when the level is 0
    or unreadable.
    """
    try:
        min_level = int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))
    except ValueError:
        min_level = 0
    if "tensorflow" in sys.modules or min_level <= 0:
        yield
        return
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:   # no file descriptor 2 (a daemon): nothing to filter
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            text = held.read().decode("utf-8", "replace")
            kept = "".join(line for line in text.splitlines(keepends=True) if keep_stderr_line(line, min_level))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()
