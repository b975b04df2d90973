"""The errors ``mox.file`` raises: one line each, naming the path, the cause and the fix.

They are moxlite errors (the CLI prints them on one line and exits non-zero) and also the
built-in ``OSError`` a Python caller would expect, so ``except FileNotFoundError`` keeps
working in ported scripts.
"""

from moxlite.errors import MoxliteError


class ObjectStorageError(MoxliteError):
    """A ``mox.file`` operation failed; the message says where and what to change."""

    exit_code = 2


class MissingPathError(ObjectStorageError, FileNotFoundError):
    """The file, folder or bucket does not exist."""


class StorageAccessError(ObjectStorageError, PermissionError):
    """The server refused the credentials or the request."""


class StorageUnreachableError(ObjectStorageError, ConnectionError):
    """No answer from the object-storage endpoint within the configured time."""


class PathExistsError(ObjectStorageError, FileExistsError):
    """The target exists and the operation must not replace it."""
