"""The errors ``mox.file`` raises: one line each, naming the path, the cause and the fix.

They are moxlite user-input errors (a path, a bucket, an endpoint or a key to fix:
``moxlite-run`` prints them on one line and exits 2) and also the built-in ``OSError`` a
Python caller would expect, so ``except FileNotFoundError`` keeps working in ported scripts.
"""

from moxlite.errors import UserInputError


class ObjectStorageError(UserInputError):
    """A ``mox.file`` operation failed; the message says where and what to change."""


class MissingPathError(ObjectStorageError, FileNotFoundError):
    """The file, folder or bucket does not exist."""


class StorageAccessError(ObjectStorageError, PermissionError):
    """The server refused the credentials or the request."""


class StorageUnreachableError(ObjectStorageError, ConnectionError):
    """No answer from the object-storage endpoint within the configured time."""


class PathExistsError(ObjectStorageError, FileExistsError):
    """The target exists and the operation must not replace it."""
