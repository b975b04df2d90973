"""moxlite's one logging channel: the ``moxlite`` logger.

Training lines, checkpoint notes, cluster and server messages and MoXing's
warnings all go through it (modules ask ``get_logger()`` when they log, not at
import). Unless the application configured that logger itself, it prints
``LEVEL:moxlite:message`` lines to stdout and does not propagate, so an
application's root handlers do not print them twice. No TensorFlow here: the
cluster code logs before TensorFlow is imported.
"""

import logging
import sys

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
    """The ``moxlite`` logger, with its stdout handler unless the application gave it one."""
    logger = logging.getLogger(LOGGER_NAME)
    if not logger.handlers:
        handler = _StdoutHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger
