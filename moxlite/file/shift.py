"""``mox.file.shift('os', 'mox')``: Python's own file calls accept ``s3://`` and ``obs://`` paths.

MoXing's file guide tells a script to call this first, so that ``open``, ``os.listdir``,
``shutil.copytree``... work on object-storage paths. Each call in the guide's table of
equivalents is replaced by a function that sends a remote path to its ``mox.file``
counterpart and everything else (local paths, file descriptors, ``Path`` objects) to
Python's original, unchanged. ``shift('mox', 'os')`` puts the originals back.

Only the module attributes are replaced: a name bound earlier with ``from os import
listdir`` keeps Python's own function.
"""

import builtins
import functools
import glob
import os
import shutil
import stat as stat_module
import threading

from moxlite.file import file_object, operations, transfer
from moxlite.file.errors import ObjectStorageError, PathExistsError
from moxlite.file.storage import is_remote

_originals = {}
_lock = threading.Lock()


def _open(file, mode="r", buffering=-1, encoding=None, errors=None, newline=None, closefd=True, opener=None):
    return file_object.File(file, mode, encoding=encoding or "utf-8", newline=newline)


def _makedirs(name, mode=0o777, exist_ok=False):
    if not exist_ok and operations.exists(name):
        raise PathExistsError(f"os.makedirs({name!r}): already exists; pass exist_ok=True")
    operations.make_dirs(name)


def _stat(path, *args, **kwargs):
    """``os.stat`` of an object: an ``os.stat_result`` with its type, size and modification time."""
    found = operations.stat(path)
    kind = stat_module.S_IFDIR | 0o755 if found.is_directory else stat_module.S_IFREG | 0o644
    seconds = found.mtime_nsec / 1e9
    return os.stat_result((kind, 0, 0, 1, 0, 0, found.length, seconds, seconds, seconds))


def _rmtree(path, *args, **kwargs):
    operations.remove(path, recursive=True)


# (owner, attribute, the mox.file function for remote paths, how many leading arguments are paths)
_TABLE = (
    (builtins, "open", _open, 1),
    (glob, "glob", lambda pathname, **kwargs: operations.glob(pathname), 1),
    (os, "listdir", lambda path: operations.list_directory(path, recursive=False), 1),
    (os, "makedirs", _makedirs, 1),
    (os, "mkdir", lambda path, mode=0o777, **kwargs: operations.mk_dir(path), 1),
    (os.path, "exists", operations.exists, 1),
    (os.path, "getsize", operations.get_size, 1),
    (os.path, "isdir", operations.is_directory, 1),
    (os, "remove", lambda path, **kwargs: operations.remove(path, recursive=False), 1),
    (os, "rename", lambda src, dst, **kwargs: transfer.rename(src, dst), 2),
    (os, "scandir", operations.scan_dir, 1),
    (os, "stat", _stat, 1),
    (os, "walk", operations.walk, 1),
    (shutil, "copyfile", lambda src, dst, **kwargs: (transfer.copy(src, dst), dst)[1], 2),
    (shutil, "copytree", lambda src, dst, **kwargs: (transfer.copy_parallel(src, dst), dst)[1], 2),
    (shutil, "rmtree", _rmtree, 1),
)


def _routed(original, remote, path_arguments):
    @functools.wraps(original)
    def call(*args, **kwargs):
        if any(is_remote(value) for value in args[:path_arguments]):
            return remote(*args, **kwargs)
        return original(*args, **kwargs)

    call.__moxlite_original__ = original
    return call


def shift(src, dst):
    """``shift('os', 'mox')`` routes object-storage paths of Python's file calls to ``mox.file``;
    ``shift('mox', 'os')`` restores Python's own calls. Calling either twice changes nothing."""
    direction = (src, dst)
    if direction not in (("os", "mox"), ("mox", "os")):
        raise ObjectStorageError(
            f"mox.file.shift({src!r}, {dst!r}): give shift('os', 'mox') to let Python's file calls take "
            f"s3:// paths, or shift('mox', 'os') to undo it")
    with _lock:
        if direction == ("os", "mox"):
            for owner, name, remote, path_arguments in _TABLE:
                if (owner, name) not in _originals:
                    _originals[(owner, name)] = getattr(owner, name)
                    setattr(owner, name, _routed(_originals[(owner, name)], remote, path_arguments))
        else:
            for (owner, name), original in list(_originals.items()):
                setattr(owner, name, original)
                del _originals[(owner, name)]


def is_shifted():
    """True while ``shift('os', 'mox')`` is in force."""
    return bool(_originals)
