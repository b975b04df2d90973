"""``mox.file``'s queries and single-path edits, one function per MoXing name.

Each behaves like the Python call MoXing's documentation names as its equivalent
(``os.listdir``, ``os.makedirs``, ``shutil.rmtree``, ``glob.glob``...) on local paths, and the
same on ``s3://`` / ``obs://`` paths, where folders are key prefixes (an empty ``key/``
object marks a folder made by ``make_dirs`` / ``mk_dir``). Argument names are the
documentation's (``url``, ``src_url``, ``data``...), so keyword calls from MoXing scripts work.
"""

import collections
import glob as _glob
import os
import shutil

from fsspec.asyn import sync

from moxlite import logs
from moxlite.file.errors import IsAFolderError, NotAFolderError, ObjectStorageError, PathExistsError
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


def _as_bytes(data):
    return bytes(data) if isinstance(data, (bytes, bytearray, memoryview)) else str(data).encode("utf-8")


def read(url, client_id=None, binary=False):
    """The content of the file at ``url``: str (UTF-8), or bytes with ``binary=True``.

    ``client_id`` (MoXing's choice of OBS client) is accepted; there is one S3 client here.
    """
    location = locate(url)
    with translate_errors("read", location):
        try:
            data = location.filesystem.cat_file(location.path)
        except (FileNotFoundError, IsADirectoryError):
            if location.filesystem.isdir(location.path):
                raise IsAFolderError(f"mox.file.read({location.url!r}): is a folder, not a file") from None
            raise
    return data if binary else data.decode("utf-8")


def write(url, data, binary=False):
    """Replace the file at ``url`` with ``data`` (str or bytes), as ``open(url, 'w').write(data)``.

    Parent folders are made. str is written as UTF-8 in either mode.
    """
    location = locate(url)
    with translate_errors("write", location):
        if not location.remote:
            os.makedirs(os.path.dirname(location.path), exist_ok=True)
        location.filesystem.pipe_file(location.path, _as_bytes(data))


def append(url, data, binary=False):
    """Add ``data`` at the end of the file at ``url`` (made if missing), as ``open(url, 'a')``.

    Objects in S3 cannot grow: on object storage the whole object is rewritten.
    """
    location = locate(url)
    _append_bytes(location, "append", _as_bytes(data))


def _append_bytes(location, operation, data, *more_locations):
    with translate_errors(operation, location, *more_locations):
        if not location.remote:
            os.makedirs(os.path.dirname(location.path), exist_ok=True)
            with open(location.path, "ab") as stream:
                stream.write(data)
            return
        filesystem = location.filesystem
        existing = filesystem.cat_file(location.path) if filesystem.isfile(location.path) else b""
        filesystem.pipe_file(location.path, existing + data)


def append_remote(src_url, dst_url):
    """Add the content of the file ``src_url`` at the end of the file ``dst_url`` (made if missing).

    MoXing documents it for two object-storage paths; any two paths work here.
    """
    source, target = locate(src_url), locate(dst_url)
    with translate_errors("append_remote", source, target):
        data = source.filesystem.cat_file(source.path)
    _append_bytes(target, "append_remote", data, source)


def exists(url):
    """True if ``url`` is a file or a folder (or a bucket)."""
    location = locate(url)
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


def is_directory(url):
    """True if ``url`` is a folder (a prefix with objects under it, on object storage)."""
    location = locate(url)
    with translate_errors("is_directory", location):
        return location.filesystem.isdir(location.path)


def _mtime_nsec(location, info):
    if not location.remote:
        return os.stat(info["name"]).st_mtime_ns
    modified = info.get("LastModified")
    return int(modified.timestamp() * 1e9) if modified is not None else 0


def stat(src_url):
    """``FileStat(length, mtime_nsec, is_directory)`` of ``src_url`` (the documentation's name)."""
    location = locate(src_url)
    with translate_errors("stat", location):
        info = location.filesystem.info(location.path)
        is_dir = info["type"] == "directory"
        return FileStat(0 if is_dir else int(info["size"]), _mtime_nsec(location, info), is_dir)


def get_size(url, recursive=False):
    """Bytes in the file at ``url``; for a folder, of the files in it.

    As documented, a local folder always counts its whole tree; an object-storage folder
    counts the objects directly under it, or the whole tree with ``recursive=True``.
    """
    location = locate(url)
    with translate_errors("get_size", location):
        filesystem = location.filesystem
        info = filesystem.info(location.path)
        if info["type"] != "directory":
            return int(info["size"])
        if recursive or not location.remote:
            return int(sum(size for size in filesystem.du(location.path, total=False).values()))
        return int(sum(entry["size"] for entry in filesystem.ls(location.path, detail=True)
                       if entry["type"] != "directory"))


def _require_directory(location, operation):
    filesystem = location.filesystem
    if not filesystem.isdir(location.path):
        if filesystem.exists(location.path):
            raise NotAFolderError(f"mox.file.{operation}({location.url!r}): is a file, not a folder")
        raise FileNotFoundError(location.path)


def _relative(location, filesystem_path):
    base = location.path.rstrip("/")
    return filesystem_path[len(base):].strip("/")


def list_directory(url, recursive=False, remove_sep=True, skip_file=False, skip_dir=False):
    """Names in the folder ``url`` (``os.listdir``); with ``recursive``, every relative path under it.

    ``skip_file`` leaves files out, ``skip_dir`` leaves folders out. ``remove_sep=False``
    keeps the separator that ends a folder's name on object storage (``'sub/'``), on local
    paths too; the default, True, gives ``os.listdir``'s bare names.
    """
    location = locate(url)
    with translate_errors("list_directory", location):
        _require_directory(location, "list_directory")
        filesystem = location.filesystem
        if recursive:
            found = filesystem.find(location.path, withdirs=True, detail=True)
        else:
            found = {info["name"]: info for info in filesystem.ls(location.path, detail=True)}
        names = set()
        for item, info in found.items():
            name = _relative(location, item)
            is_dir = info["type"] == "directory" or item.endswith("/")
            if not name or (is_dir and skip_dir) or (not is_dir and skip_file):
                continue
            names.add(name + "/" if is_dir and not remove_sep else name)
        return sorted(names)


def glob(url):
    """Paths matching the pattern ``url`` (``glob.glob``; ``s3://`` in, ``s3://`` out)."""
    location = locate(url)
    if not location.remote:
        return _glob.glob(url)
    with translate_errors("glob", location):
        return [location.url_of(item) for item in location.filesystem.glob(location.path)]


def walk(url, topdown=True, onerror=None, followlinks=False):
    """``os.walk`` over a local or object-storage tree: ``(folder, subfolders, files)`` triples.

    As documented, ``topdown``, ``onerror`` and ``followlinks`` are ``os.walk``'s on local
    paths; on object storage only ``topdown`` orders the triples (there are no links, and a
    failure raises).
    """
    location = locate(url)
    if not location.remote:
        yield from os.walk(url, topdown=topdown, onerror=onerror, followlinks=followlinks)
        return
    with translate_errors("walk", location):
        if not location.filesystem.isdir(location.path):
            return
        triples = list(location.filesystem.walk(location.path, topdown=topdown))
    for folder, folders, files in triples:
        relative = _relative(location, folder)
        folder_url = location.url.rstrip("/") + ("/" + relative if relative else "")
        yield folder_url, sorted(folders), sorted(name for name in files if name)


def scan_dir(url):
    """``os.scandir``: the entries of folder ``url`` with their type and size."""
    location = locate(url)
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


def make_dirs(url):
    """``os.makedirs(url, exist_ok=True)``; on object storage, a folder marker object."""
    location = locate(url)
    with translate_errors("make_dirs", location):
        if not location.remote:
            os.makedirs(location.path, exist_ok=True)
            return
        if "/" not in location.path:  # a bucket: it must exist already
            if not location.filesystem.exists(location.path):
                raise FileNotFoundError(location.path)
            return
        if location.filesystem.isfile(location.path):
            raise PathExistsError(f"mox.file.make_dirs({location.url!r}): is a file, not a folder")
        if not location.filesystem.isdir(location.path):
            _put_object(location, "/", b"")


def mk_dir(url):
    """``os.mkdir``: make one folder. An existing path is ``FileExistsError``; a missing parent
    folder is ``FileNotFoundError`` (the ``OSError`` the documentation names), on both stores."""
    location = locate(url)
    with translate_errors("mk_dir", location):
        if not location.remote:
            os.mkdir(location.path)
            return
        filesystem = location.filesystem
        if filesystem.exists(location.path):
            raise PathExistsError(f"mox.file.mk_dir({location.url!r}): already exists")
        parent = location.path.rsplit("/", 1)[0] if "/" in location.path else location.path
        if not filesystem.isdir(parent):
            raise FileNotFoundError(parent)
        _put_object(location, "/", b"")


def _delete_prefix(location):
    """Delete every object under ``location``'s key + '/' (folder markers included), nothing else."""
    filesystem = location.filesystem
    bucket, _, key = location.path.partition("/")
    prefix = key.rstrip("/") + "/"
    token = None
    while True:
        page = sync(filesystem.loop, filesystem._call_s3, "list_objects_v2", Bucket=bucket, Prefix=prefix,
                    **({"ContinuationToken": token} if token else {}))
        keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
        if keys:
            sync(filesystem.loop, filesystem._call_s3, "delete_objects", Bucket=bucket,
                 Delete={"Objects": keys, "Quiet": True})
        token = page.get("NextContinuationToken")
        if not token:
            return


def remove(url, recursive=False):
    """Remove a file, or with ``recursive=True`` a folder tree, following MoXing's table of cases.

    ===========================  ===========================  ==================
    ``url``                      ``recursive=False``          ``recursive=True``
    ===========================  ===========================  ==================
    ``.../file``                 removes the file             removes the file
    ``.../file/``                does nothing                 does nothing
    ``.../folder``               does nothing                 removes the tree
    ``.../folder/``              does nothing                 removes the tree
    ===========================  ===========================  ==================

    The table holds on local paths too. A "does nothing" case logs one warning saying why
    (nothing is deleted). A missing path is ``FileNotFoundError``, as ``os.remove``. A bucket
    is never removed.
    """
    location = locate(url)
    with translate_errors("remove", location):
        filesystem = location.filesystem
        if location.remote and "/" not in location.path:
            raise ObjectStorageError(
                f"mox.file.remove({location.url!r}): is a bucket; mox.file does not delete buckets, "
                f"remove the folders in it instead")
        is_file = filesystem.isfile(location.path)
        is_dir = filesystem.isdir(location.path)
        if not is_file and not is_dir:
            raise FileNotFoundError(location.path)
        if is_file and not location.folder_form:
            if location.remote:
                filesystem.rm_file(location.path)
            else:
                os.remove(location.path)
            return
        if is_dir and recursive:
            if location.remote:
                _delete_prefix(location)
            else:
                shutil.rmtree(location.path)
            return
        why = ("names a file with a trailing '/'; drop the '/' to remove the file" if not is_dir
               else "is a folder; pass recursive=True to remove the tree")
        logs.get_logger().warning("mox.file.remove(%r): did nothing: the path %s", location.url, why)
