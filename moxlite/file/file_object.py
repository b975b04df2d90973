"""``mox.File``: an open file on local disk or object storage.

Usable wherever Python wants a file: ``with``, iteration, ``pandas.read_csv`` /
``DataFrame.to_csv``, ``logging.StreamHandler``. Reads stream from the object store. An S3
object cannot be written in place, so writes go to a local spool file and every ``flush()``
(and ``close()``) uploads the whole spool: what was flushed is on object storage, as MoXing
promised. Append mode starts the spool from the existing object.
"""

import io
import os
import tempfile

from moxlite.file.errors import ObjectStorageError
from moxlite.file.storage import locate, translate_errors

_MODES = ("r", "w", "a")


class File:
    """``File(path, mode='r')``: a file object for a local or ``s3://`` / ``obs://`` path."""

    def __init__(self, path, mode="r", encoding="utf-8", newline=None):
        self.name = os.fspath(path) if isinstance(path, os.PathLike) else path
        self.mode = mode
        self._location = locate(self.name)
        self._spool_path = None
        self._spool = None
        kind = mode.replace("b", "").replace("t", "")
        binary = "b" in mode
        if kind not in _MODES:
            raise ObjectStorageError(
                f"mox.File({self.name!r}, mode={mode!r}): mode must be one of 'r', 'w', 'a' "
                f"(with 'b' for bytes)")
        location = self._location
        with translate_errors("File", location):
            if not location.remote:
                if kind != "r":
                    os.makedirs(os.path.dirname(location.path), exist_ok=True)
                self._stream = open(location.path, mode, **({} if binary else dict(
                    encoding=encoding, newline=newline)))
            elif kind == "r":
                raw = location.filesystem.open(location.path, "rb")
                self._stream = raw if binary else io.TextIOWrapper(raw, encoding=encoding, newline=newline)
            else:
                self._stream = self._open_spool(kind, binary, encoding, newline)

    def _open_spool(self, kind, binary, encoding, newline):
        location = self._location
        handle, self._spool_path = tempfile.mkstemp(prefix="moxlite-file-")
        os.close(handle)
        if kind == "a" and location.filesystem.isfile(location.path):
            location.filesystem.get_file(location.path, self._spool_path)
        self._spool = open(self._spool_path, "ab")
        if binary:
            return self._spool
        return io.TextIOWrapper(self._spool, encoding=encoding, newline=newline, write_through=True)

    # The file protocol: everything not defined here is the underlying stream's.
    def __getattr__(self, name):
        if name == "_stream":
            raise AttributeError(name)
        return getattr(self._stream, name)

    def __iter__(self):
        return iter(self._stream)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
        return False

    @property
    def closed(self):
        return self._stream.closed

    def write(self, data):
        return self._stream.write(data)

    def read(self, *size):
        return self._stream.read(*size)

    def flush(self):
        """Flush, and on object storage upload everything written so far."""
        if self._stream.closed:
            return
        self._stream.flush()
        if self._spool is not None:
            self._spool.flush()
            with translate_errors("File.flush", self._location):
                self._location.filesystem.put_file(self._spool_path, self._location.path)

    def close(self):
        """Close (uploading the spool once more on object storage); a second call does nothing."""
        if self._stream.closed:
            return
        try:
            self.flush()
        finally:
            self._stream.close()
            if self._spool_path is not None:
                self._spool.close()
                os.remove(self._spool_path)
                self._spool_path = None

    def __del__(self):
        try:
            if not self._stream.closed and self._spool is None:
                self._stream.close()
        except Exception:  # interpreter shutdown: nothing sensible left to do
            pass

    def __repr__(self):
        return f"<mox.File {self.name!r} mode={self.mode!r}>"
