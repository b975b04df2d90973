"""Moving bytes between local disk and object storage: ``copy``, ``copy_parallel``, ``rename``.

Any direction works: local -> local, local <-> s3, s3 -> s3 (server-side copy). Folder
markers (``key/`` objects) are never copied as files.
"""

import concurrent.futures
import os
import shutil

from moxlite.file.errors import ObjectStorageError
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


def copy(src_url, dst_url):
    """Copy the file ``src_url`` to ``dst_url`` (a file path, not a folder), in any direction."""
    source, target = locate(src_url), locate(dst_url)
    with translate_errors("copy", source, target):
        filesystem = source.filesystem
        if filesystem.isdir(source.path):
            raise ObjectStorageError(
                f"mox.file.copy({src_url!r}, {dst_url!r}): the source is a folder; use "
                f"mox.file.copy_parallel for a tree")
        if not filesystem.exists(source.path):
            raise FileNotFoundError(source.path)
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


def copy_parallel(src_url, dst_url, file_list=None, threads=DEFAULT_THREADS):
    """Copy the folder tree ``src_url`` into ``dst_url`` on ``threads`` concurrent workers.

    ``file_list`` (paths relative to ``src_url``) limits the copy to those files. A file as
    source is copied as with ``copy``. Returns the number of files copied.
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
        if not target.remote:
            os.makedirs(target.path, exist_ok=True)
            for folder, _, _ in os.walk(source.path) if not source.remote else ():
                os.makedirs(os.path.join(target.path, os.path.relpath(folder, source.path)), exist_ok=True)
        copy_files(src_url, dst_url, relative, threads)
    return len(relative)


def copy_files(src_url, dst_url, relative_paths, threads=DEFAULT_THREADS):
    """Copy ``relative_paths`` from folder ``src_url`` to folder ``dst_url`` concurrently.

    The first failure is raised after every started copy has finished.
    """
    pairs = [(locate(join(src_url, name)), locate(join(dst_url, name))) for name in relative_paths]
    if not pairs:
        return
    with concurrent.futures.ThreadPoolExecutor(max(1, min(threads, len(pairs)))) as pool:
        futures = [pool.submit(_copy_file, source, target) for source, target in pairs]
        errors = [future.exception() for future in futures]
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
