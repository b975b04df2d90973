"""Moving bytes between local disk and object storage: ``copy``, ``copy_parallel``, ``rename``.

Any direction works: local -> local, local <-> s3, s3 -> s3 (server-side copy). Folder
markers (``key/`` objects) are never copied as files. A download whose object names a local
disk cannot hold (an object ``a`` beside objects under ``a/``) is refused before any byte is
written, with MoXing's ``MoxFileNameDuplicateException`` (``NameClashError``).
"""

import os
import shutil

from moxlite.file.errors import IsAFolderError, NameClashError
from moxlite.file.shutdown import run_all
from moxlite.file.storage import join, locate, translate_errors

DEFAULT_THREADS = 8


def _copy_file(source, target):
    """Copy one file between any two locations (no error translation)."""
    if not target.remote:
        os.makedirs(os.path.dirname(target.path), exist_ok=True)
    if not source.remote and not target.remote:
        shutil.copyfile(source.path, target.path)
    elif not source.remote:
        target.filesystem.put_file(source.path, target.path)
    elif not target.remote:
        source.filesystem.get_file(source.path, target.path)
    elif source.filesystem is target.filesystem:
        source.filesystem.copy(source.path, target.path)
    else:
        target.filesystem.pipe_file(target.path, source.filesystem.cat_file(source.path))


def copy(src_url, dst_url, client_id=None):
    """Copy the file ``src_url`` to the file path ``dst_url``, in any direction (``shutil.copyfile``).

    As with ``shutil.copyfile``, the target is the new file's own path: an existing folder
    (or a path ending in '/') is ``IsADirectoryError``, and nothing is written.
    ``client_id`` (MoXing's choice of OBS client) is accepted; there is one S3 client here.
    """
    source, target = locate(src_url), locate(dst_url)
    with translate_errors("copy", source, target):
        filesystem = source.filesystem
        if filesystem.isdir(source.path) and not filesystem.isfile(source.path):
            raise IsAFolderError(
                f"mox.file.copy({src_url!r}, {dst_url!r}): the source is a folder; use "
                f"mox.file.copy_parallel for a tree")
        if not filesystem.exists(source.path):
            raise FileNotFoundError(source.path)
        if target.folder_form or target.filesystem.isdir(target.path):
            name = source.path.rstrip("/").rsplit("/", 1)[-1]
            raise IsAFolderError(
                f"mox.file.copy({src_url!r}, {dst_url!r}): the target is a folder; copy takes the new "
                f"file's path, e.g. {join(dst_url, name)!r}")
        _copy_file(source, target)


def tree_files(location):
    """Relative paths of every file under the folder ``location`` (markers excluded)."""
    filesystem = location.filesystem
    base = location.path.rstrip("/")
    found = filesystem.find(location.path, detail=True)
    relative = []
    for name, info in found.items():
        if info.get("type") == "directory" or name.endswith("/"):
            continue
        rest = name[len(base):].strip("/")
        if rest:
            relative.append(rest)
    return sorted(relative)


def name_clashes(relative_paths, target):
    """The first pair of names that cannot both exist under the local folder ``target``, or None.

    Object storage holds an object ``a`` beside objects ``a/b``; a disk cannot. An existing
    local file or folder in the way counts too.
    """
    names = set(relative_paths)
    for name in sorted(names):
        parts = name.split("/")
        for depth in range(1, len(parts)):
            ancestor = "/".join(parts[:depth])
            if ancestor in names:
                return ancestor, name
            if target is not None and os.path.isfile(os.path.join(target.path, ancestor)):
                return os.path.join(target.path, ancestor) + " (a local file)", name
        if target is not None and os.path.isdir(os.path.join(target.path, name)):
            return os.path.join(target.path, name) + " (a local folder)", name
    return None


def copy_parallel(src_url, dst_url, file_list=None, threads=DEFAULT_THREADS, is_processing=False,
                  use_queue=False):
    """Copy the folder tree ``src_url`` into ``dst_url`` on ``threads`` concurrent workers.

    ``file_list`` (paths relative to ``src_url``) limits the copy to those files. A file as
    source is copied as with ``copy``. Returns the number of files copied. The copies are
    I/O-bound, so they always run on threads: ``is_processing`` and ``use_queue`` are
    accepted and change nothing.
    """
    source, target = locate(src_url), locate(dst_url)
    with translate_errors("copy_parallel", source, target):
        filesystem = source.filesystem
        if not filesystem.isdir(source.path):
            if not filesystem.exists(source.path):
                raise FileNotFoundError(source.path)
            _copy_file(source, target)
            return 1
        relative = list(file_list) if file_list is not None else tree_files(source)
        clash = None if target.remote else name_clashes(relative, target)
        if clash is not None:
            raise NameClashError(
                f"mox.file.copy_parallel({src_url!r}, {dst_url!r}): {clash[0]!s} and {clash[1]!r} cannot both "
                f"exist on a local disk; rename one of them on object storage (nothing was copied)")
        if not target.remote:
            os.makedirs(target.path, exist_ok=True)
            for folder, _, _ in os.walk(source.path) if not source.remote else ():
                os.makedirs(os.path.join(target.path, os.path.relpath(folder, source.path)), exist_ok=True)
        copy_files(src_url, dst_url, relative, threads)
    return len(relative)


def copy_files(src_url, dst_url, relative_paths, threads=DEFAULT_THREADS):
    """Copy ``relative_paths`` from folder ``src_url`` to folder ``dst_url`` concurrently.

    The first failure is raised after every started copy has finished. At interpreter
    shutdown (an ``atexit`` handler), where no thread pool can start, the copies run in the
    calling thread (``shutdown.run_all``).
    """
    pairs = [(locate(join(src_url, name)), locate(join(dst_url, name))) for name in relative_paths]
    if not pairs:
        return
    errors = run_all(_copy_file, pairs, threads)
    first = next((error for error in errors if error is not None), None)
    if first is not None:
        raise first


def rename(src_url, dst_url):
    """Move a file or folder; across local and object storage it is a copy then a remove."""
    source, target = locate(src_url), locate(dst_url)
    with translate_errors("rename", source, target):
        filesystem = source.filesystem
        is_dir = filesystem.isdir(source.path)
        if not is_dir and not filesystem.exists(source.path):
            raise FileNotFoundError(source.path)
        if not source.remote and not target.remote:
            os.makedirs(os.path.dirname(target.path) or ".", exist_ok=True)
            shutil.move(source.path, target.path)
            return
        if is_dir:
            copy_parallel(src_url, dst_url)
        else:
            _copy_file(source, target)
        if source.remote:
            filesystem.rm(source.path, recursive=is_dir)
        elif is_dir:
            shutil.rmtree(source.path)
        else:
            os.remove(source.path)
