"""The errors ``mox.file`` raises: one line each, naming the path, the cause and the fix.

Each error is three things at once, so that every ``except`` a script may hold keeps working:

- a moxlite user-input error (``moxlite-run`` prints it on one line and exits 2);
- the exception class MoXing's file API documents (``MoxFileNotExistsException``,
  ``MoxFileRespException``, ``MoxFileReadException``, ``MoxFileNameDuplicateException``),
  so a ported ``except mox.file.MoxFileNotExistsException`` catches it;
- the built-in ``OSError`` subclass Python itself raises for the same mistake
  (``FileNotFoundError``, ``IsADirectoryError``, ``NotADirectoryError``, ``FileExistsError``,
  ``PermissionError``, ``ConnectionError``).
"""

from moxlite.errors import UserInputError


class _MoxFileBaseRespException(Exception):
    """MoXing's base of the errors that carry the server's answer, as ``resp``.

    moxlite's ``resp`` is a ``Response`` (``status``, ``reason``, ``code``) when an HTTP
    answer came back, else None; MoXing's was the OBS SDK's response object.
    """

    def __init__(self, *args, resp=None):
        super().__init__(*args)
        self.resp = resp


class MoxFileNotExistsException(Exception):
    """MoXing's name for "the file or object does not exist" (``mox.file.stat`` on a missing path)."""


class MoxFileNameDuplicateException(Exception):
    """MoXing's name for a download whose object names clash on a local disk (``a`` and ``a/b``)."""


class MoxFileRespException(_MoxFileBaseRespException):
    """MoXing's name for a request object storage answered with an HTTP status of 300 or more."""


class MoxFileReadException(_MoxFileBaseRespException):
    """MoXing's name for a read that broke off after the server had answered 200 OK."""


class Response:
    """What the server answered: HTTP ``status``, its ``reason`` and the S3 error ``code``."""

    def __init__(self, status, reason="", code=""):
        self.status = status
        self.reason = reason
        self.code = code

    def __repr__(self):
        return f"Response(status={self.status!r}, reason={self.reason!r}, code={self.code!r})"


class ObjectStorageError(UserInputError):
    """A ``mox.file`` operation failed; the message says where and what to change."""

    def __init__(self, *args, resp=None):
        super().__init__(*args)
        self.resp = resp


class MissingPathError(ObjectStorageError, MoxFileNotExistsException, MoxFileRespException, FileNotFoundError):
    """The file, folder or bucket does not exist (on object storage: the server answered 404)."""


class StorageAccessError(ObjectStorageError, MoxFileRespException, PermissionError):
    """The server refused the credentials or the request (HTTP 403)."""


class StorageUnreachableError(ObjectStorageError, ConnectionError):
    """No answer from the object-storage endpoint within the configured time."""


class StorageReadError(ObjectStorageError, MoxFileReadException, ConnectionError):
    """An open object's bytes stopped coming (the connection broke after 200 OK)."""


class PathExistsError(ObjectStorageError, FileExistsError):
    """The target exists and the operation must not replace it."""


class IsAFolderError(ObjectStorageError, IsADirectoryError):
    """A file was expected and the path is a folder."""


class NotAFolderError(ObjectStorageError, NotADirectoryError):
    """A folder was expected and the path is a file."""


class NameClashError(ObjectStorageError, MoxFileNameDuplicateException, FileExistsError):
    """Object names that a local disk cannot hold side by side (a file ``a`` and a folder ``a/``)."""
