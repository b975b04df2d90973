"""``mox.file``'s queries and single-path edits, one function per MoXing name.

Each behaves like the Python call MoXing's documentation names as its equivalent
(``os.listdir``, ``os.makedirs``, ``shutil.rmtree``, ``glob.glob``...) on local paths, and the
same on ``s3://`` / ``obs://`` paths, where folders are key prefixes (an empty ``key/``
object marks a folder made by ``make_dirs`` / ``mk_dir``).
"""

import collections
import glob as _glob
import os
import shutil

from fsspec.asyn import sync

from moxlite.file.errors import ObjectStorageError, PathExistsError
from moxlite.file.storage import locate, translate_errors

FileStat = collections.namedtuple("FileStat", "length mtime_nsec is_directory")
FileStat.__doc__ = "``mox.file.stat``'s answer, with ``tf.io.gfile.stat``'s field names."


class DirEntry:
    """One entry of ``scan_dir``: ``name``, ``path``, ``is_dir()``, ``is_file()``, ``stat()``."""

    def __init__(self, name, path, is_directory, length, mtime_nsec):
        self.name = name
        self.path = path
        self._stat = FileStat(length, mtime_nsec, is_directory)

    def is_dir(self):
        return self._stat.is_directory

    def is_file(self):
        return not self._stat.is_directory

    def stat(self):
        return self._stat

    def __repr__(self):
        return f"<DirEntry {self.name!r}{'/' if self.is_dir() else ''}>"


def _put_object(location, key_suffix, body):
    """Write one object directly (s3fs strips the trailing '/' a folder marker needs)."""
    filesystem = location.filesystem
    bucket, _, key = location.path.partition("/")
    sync(filesystem.loop, filesystem._call_s3, "put_object", Bucket=bucket, Key=key + key_suffix, Body=body)


def read(path, binary=False):
    """The content of the file at ``path``: str (UTF-8), or bytes with ``binary=True``."""
    location = locate(path)
    with translate_errors("read", location):
        with location.filesystem.open(location.path, "rb") as stream:
            data = stream.read()
    return data if binary else data.decode("utf-8")


def write(path, content, binary=False):
    """Replace the file at ``path`` with ``content`` (str or bytes); parent folders are made."""
    location = locate(path)
    data = content if isinstance(content, (bytes, bytearray)) else str(content).encode("utf-8")
    with translate_errors("write", location):
        if not location.remote:
            os.makedirs(os.path.dirname(location.path), exist_ok=True)
        location.filesystem.pipe_file(location.path, bytes(data))


def append(path, content, binary=False):
    """Add ``content`` at the end of the file at ``path`` (made if missing).

    Objects in S3 cannot grow: on object storage the whole object is rewritten.
    """
    location = locate(path)
    data = content if isinstance(content, (bytes, bytearray)) else str(content).encode("utf-8")
    with translate_errors("append", location):
        if not location.remote:
            os.makedirs(os.path.dirname(location.path), exist_ok=True)
            with open(location.path, "ab") as stream:
                stream.write(data)
            return
        filesystem = location.filesystem
        existing = filesystem.cat_file(location.path) if filesystem.isfile(location.path) else b""
        filesystem.pipe_file(location.path, existing + bytes(data))


def exists(path):
    """True if ``path`` is a file or a folder (or a bucket)."""
    location = locate(path)
    with translate_errors("exists", location):
        if location.remote:
            _raise_if_bucket_unusable(location)
        return location.filesystem.exists(location.path)


def _raise_if_bucket_unusable(location):
    """s3fs answers "no" to exists() on a refused credential or a dead endpoint: ask plainly."""
    filesystem = location.filesystem
    bucket = location.bucket
    try:
        sync(filesystem.loop, filesystem._call_s3, "head_bucket", Bucket=bucket)
    except FileNotFoundError:
        pass  # a missing bucket: exists() says False, as os.path.exists would


def is_directory(path):
    """True if ``path`` is a folder (a prefix with objects under it, on object storage)."""
    location = locate(path)
    with translate_errors("is_directory", location):
        return location.filesystem.isdir(location.path)


def _mtime_nsec(location, info):
    if not location.remote:
        return os.stat(info["name"]).st_mtime_ns
    modified = info.get("LastModified")
    return int(modified.timestamp() * 1e9) if modified is not None else 0


def stat(path):
    """``FileStat(length, mtime_nsec, is_directory)`` of ``path``."""
    location = locate(path)
    with translate_errors("stat", location):
        info = location.filesystem.info(location.path)
        is_dir = info["type"] == "directory"
        return FileStat(0 if is_dir else int(info["size"]), _mtime_nsec(location, info), is_dir)


def get_size(path, recursive=False):
    """Bytes in the file at ``path``; for a folder, of the files in it (the whole tree if recursive)."""
    location = locate(path)
    with translate_errors("get_size", location):
        filesystem = location.filesystem
        info = filesystem.info(location.path)
        if info["type"] != "directory":
            return int(info["size"])
        if recursive:
            return int(sum(size for size in filesystem.du(location.path, total=False).values()))
        return int(sum(entry["size"] for entry in filesystem.ls(location.path, detail=True)
                       if entry["type"] != "directory"))


def _require_directory(location, operation):
    filesystem = location.filesystem
    if not filesystem.isdir(location.path):
        if filesystem.exists(location.path):
            raise ObjectStorageError(f"mox.file.{operation}({location.url!r}): is a file, not a folder")
        raise FileNotFoundError(location.path)


def _relative(location, filesystem_path):
    base = location.path.rstrip("/")
    return filesystem_path[len(base):].strip("/")


def list_directory(path, recursive=False):
    """Names in the folder ``path`` (``os.listdir``); with ``recursive``, every relative path under it."""
    location = locate(path)
    with translate_errors("list_directory", location):
        _require_directory(location, "list_directory")
        filesystem = location.filesystem
        if recursive:
            found = filesystem.find(location.path, withdirs=True)
        else:
            found = filesystem.ls(location.path, detail=False)
        names = {_relative(location, item) for item in found}
        names.discard("")
        return sorted(names)


def glob(pattern):
    """Paths matching ``pattern`` (``glob.glob``; ``s3://`` in, ``s3://`` out)."""
    location = locate(pattern)
    if not location.remote:
        return _glob.glob(pattern)
    with translate_errors("glob", location):
        return [location.url_of(item) for item in location.filesystem.glob(location.path)]


def walk(top, topdown=True, onerror=None):
    """``os.walk`` over a local or object-storage tree: ``(folder, subfolders, files)`` triples."""
    location = locate(top)
    if not location.remote:
        yield from os.walk(top, topdown=topdown, onerror=onerror)
        return
    with translate_errors("walk", location):
        if not location.filesystem.isdir(location.path):
            return
        triples = list(location.filesystem.walk(location.path, topdown=topdown))
    for folder, folders, files in triples:
        relative = _relative(location, folder)
        url = location.url.rstrip("/") + ("/" + relative if relative else "")
        yield url, sorted(folders), sorted(name for name in files if name)


def scan_dir(path):
    """``os.scandir``: the entries of folder ``path`` with their type and size."""
    location = locate(path)
    with translate_errors("scan_dir", location):
        _require_directory(location, "scan_dir")
        entries = location.filesystem.ls(location.path, detail=True)
        found = []
        for info in entries:
            name = _relative(location, info["name"])
            if not name:
                continue
            is_dir = info["type"] == "directory"
            found.append(DirEntry(name, location.child(name).url, is_dir,
                                  0 if is_dir else int(info["size"]),
                                  0 if is_dir and location.remote else _mtime_nsec(location, info)))
    return iter(sorted(found, key=lambda entry: entry.name))


def make_dirs(path):
    """``os.makedirs(path, exist_ok=True)``; on object storage, a folder marker object."""
    location = locate(path)
    with translate_errors("make_dirs", location):
        if not location.remote:
            os.makedirs(location.path, exist_ok=True)
            return
        if "/" not in location.path:  # a bucket: it must exist already
            if not location.filesystem.exists(location.path):
                raise FileNotFoundError(location.path)
            return
        if not location.filesystem.isdir(location.path):
            _put_object(location, "/", b"")


def mk_dir(path):
    """``os.mkdir``: make one folder; an existing one is an error."""
    location = locate(path)
    with translate_errors("mk_dir", location):
        if not location.remote:
            os.mkdir(location.path)
            return
        if location.filesystem.exists(location.path):
            raise PathExistsError(f"mox.file.mk_dir({location.url!r}): already exists")
        make_dirs(path)


def remove(path, recursive=False):
    """Remove the file ``path``; a folder needs ``recursive=True`` (``shutil.rmtree``)."""
    location = locate(path)
    with translate_errors("remove", location):
        filesystem = location.filesystem
        is_dir = filesystem.isdir(location.path)
        if is_dir and not recursive:
            raise ObjectStorageError(
                f"mox.file.remove({location.url!r}): is a folder; pass recursive=True to remove the tree")
        if not is_dir and not filesystem.exists(location.path):
            raise FileNotFoundError(location.path)
        if not location.remote:
            if is_dir:
                shutil.rmtree(location.path)
            else:
                os.remove(location.path)
            return
        filesystem.rm(location.path, recursive=is_dir)
