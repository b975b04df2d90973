"""``mox.File``: an open file on local disk or object storage, in every mode MoXing documents.

Usable wherever Python wants a file: ``with``, iteration, ``pandas.read_csv`` /
``DataFrame.to_csv``, ``logging.StreamHandler``. The modes are Python's ``open`` modes:
``r``, ``w``, ``a``, ``r+``, ``w+``, ``a+``, each also with ``b`` (MoXing writes ``br``,
``bw+``...; the letters may come in any order). Locally they are ``open``'s own.

On object storage an object cannot be changed in place, so:

- ``r`` / ``rb`` streams the object from the server (nothing is downloaded ahead).
- Every other mode works on a local spool file opened with the same mode, so it behaves
  exactly as ``open`` would: ``w``/``w+`` start empty, ``a``/``a+``/``r+`` start from a
  copy of the object (``r+`` needs it to exist; ``a``/``a+`` write at the end).
  ``flush()`` and ``close()`` upload the whole spool, so what was flushed is on object
  storage, as MoXing promised. ``r+`` uploads only once something was written.
"""

import io
import os
import tempfile

from moxlite.file.errors import IsAFolderError, ObjectStorageError
from moxlite.file.storage import locate, translate_errors

# Bytes fetched per request when streaming an object (s3fs's default, 50 MiB, would fetch a
# typical CSV or log whole before the first line is read).
READ_BLOCK_BYTES = 8 * 1024 * 1024

DOCUMENTED_MODES = ("r", "w", "a", "r+", "w+", "a+", "br", "bw", "ba", "br+", "bw+", "ba+")


def normalize_mode(name, mode):
    """``(kind, binary)`` for a documented mode: kind is one of r, w, a, r+, w+, a+."""
    letters = mode.replace("t", "") if isinstance(mode, str) else ""
    kinds = [letter for letter in letters if letter in "rwa"]
    rest = set(letters) - set("rwa+b")
    if (len(kinds) != 1 or rest or letters.count("+") > 1 or letters.count("b") > 1
            or ("b" in letters and "t" in mode)):
        raise ObjectStorageError(
            f"mox.File({name!r}, mode={mode!r}): mode must be one of 'r', 'w', 'a', 'r+', 'w+', 'a+' "
            f"(with 'b' for bytes, e.g. 'rb+')")
    return kinds[0] + ("+" if "+" in letters else ""), "b" in letters


class File:
    """``File(name, mode='r')``: a file object for a local or ``s3://`` / ``obs://`` path."""

    def __init__(self, name, mode="r", encoding="utf-8", newline=None):
        self.name = os.fspath(name) if isinstance(name, os.PathLike) else name
        self.mode = mode
        self._spool_path = None
        self._dirty = False
        self._stream = None
        kind, binary = normalize_mode(self.name, mode)
        self._kind = kind
        location = self._location = locate(self.name)
        python_mode = kind[0] + ("b" if binary else "") + kind[1:]
        text_options = {} if binary else dict(encoding=encoding, newline=newline)
        with translate_errors("File", location):
            if not location.remote:
                if kind[0] != "r":
                    os.makedirs(os.path.dirname(location.path), exist_ok=True)
                self._stream = open(location.path, python_mode, **text_options)
            elif kind == "r":
                self._refuse_folder(location)
                raw = location.filesystem.open(location.path, "rb", block_size=READ_BLOCK_BYTES)
                self._stream = raw if binary else io.TextIOWrapper(raw, **text_options)
            else:
                self._stream = self._open_spool(kind, python_mode, text_options)

    @staticmethod
    def _refuse_folder(location):
        """A folder cannot be opened; a missing object is FileNotFoundError (one HEAD request)."""
        if location.filesystem.info(location.path)["type"] == "directory":
            raise IsAFolderError(f"mox.File({location.url!r}): is a folder, not a file")

    def _open_spool(self, kind, python_mode, text_options):
        location = self._location
        filesystem = location.filesystem
        try:
            self._refuse_folder(location)
            existing = True
        except FileNotFoundError:
            existing = False
        if kind == "r+" and not existing:
            raise FileNotFoundError(location.path)
        handle, self._spool_path = tempfile.mkstemp(prefix="moxlite-file-")
        os.close(handle)
        if existing and kind[0] != "w":
            filesystem.get_file(location.path, self._spool_path)
        # r+ leaves the object alone until a write; w, w+, a, a+ make it as open() makes a file.
        self._dirty = kind != "r+"
        return open(self._spool_path, python_mode, **text_options)

    # The file protocol: everything not defined here is the underlying stream's.
    def __getattr__(self, name):
        if name == "_stream":
            raise AttributeError(name)
        return getattr(self._stream, name)

    def __iter__(self):
        if not self._streams_remotely():
            return iter(self._stream)
        return self._remote_lines()

    def _streams_remotely(self):
        return self._location.remote and self._spool_path is None

    def _remote_lines(self):
        while True:
            line = self.readline()
            if not line:
                return
            yield line

    def _reading(self, method, *args):
        if not self._streams_remotely():
            return getattr(self._stream, method)(*args)
        with translate_errors(f"File.{method}", self._location, reading=True):
            return getattr(self._stream, method)(*args)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
        return False

    @property
    def closed(self):
        return self._stream.closed

    def write(self, data):
        """Write ``data`` (for ``a`` and ``a+``: at the end, as ``open`` does)."""
        self._dirty = True
        return self._stream.write(data)

    def writelines(self, lines):
        self._dirty = True
        return self._stream.writelines(lines)

    def truncate(self, size=None):
        self._dirty = True
        return self._stream.truncate(size)

    def read(self, *size):
        """Read ``size`` bytes or characters (all by default); a broken connection is ``StorageReadError``."""
        return self._reading("read", *size)

    def readline(self, *size):
        return self._reading("readline", *size)

    def readlines(self, *hint):
        return self._reading("readlines", *hint)

    def size(self):
        """The file's size in bytes now, unflushed writes included."""
        if self._spool_path is not None or not self._location.remote:
            if self._stream.writable():
                self._stream.flush()
            return os.fstat(self._stream.fileno()).st_size
        with translate_errors("File.size", self._location):
            return int(self._location.filesystem.info(self._location.path)["size"])

    def flush(self):
        """Flush, and on object storage upload everything written so far."""
        if self._stream.closed:
            return
        self._stream.flush()
        if self._spool_path is not None and self._dirty:
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
                os.remove(self._spool_path)
                self._spool_path = None

    def __del__(self):
        try:
            stream = self.__dict__.get("_stream")
            if stream is not None and not stream.closed and self._spool_path is None:
                stream.close()
        except Exception:  # interpreter shutdown: nothing sensible left to do
            pass

    def __repr__(self):
        return f"<mox.File {self.name!r} mode={self.mode!r}>"
