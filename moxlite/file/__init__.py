"""``mox.file``: MoXing's file API on local paths and S3-compatible object storage (OBS, S3).

    import moxlite as mox
    mox.file.copy_parallel("s3://bucket/data", "/cache/data")
    with mox.file.File("s3://bucket/out/result.csv", "w") as f:
        f.write("id,label\n")

The endpoint and credentials come from ``S3_ENDPOINT`` and ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` (or ``set_auth``); see ``moxlite.file.storage``. Failures raise
``moxlite.file.errors.ObjectStorageError`` subclasses with a one-line message, which are
also MoXing's documented exception classes and Python's built-in ``OSError`` subclasses.
In ``atexit`` handlers every operation works (copies run in the calling thread where no
thread pool can start), and a failure that leaves the handler ends the process with status 1
(``moxlite.file.shutdown``). ``tools/conformance/file_api.py`` lists, row by row, how this module matches MoXing's file API.
"""

from moxlite.file.errors import (IsAFolderError, MissingPathError, MoxFileNameDuplicateException,
                                 MoxFileNotExistsException, MoxFileReadException, MoxFileRespException,
                                 NameClashError, NotAFolderError, ObjectStorageError, PathExistsError,
                                 StorageAccessError, StorageReadError, StorageUnreachableError)
from moxlite.file.file_object import File
from moxlite.file.operations import (DirEntry, FileStat, append, append_remote, exists, get_size, glob,
                                     is_directory, list_directory, make_dirs, mk_dir, read, remove, scan_dir,
                                     stat, walk, write)
from moxlite.file.shift import shift
from moxlite.file.storage import endpoint_url, is_remote, reset_auth, set_auth
from moxlite.file.sync import BackgroundSync, background_sync_copy
from moxlite.file.transfer import copy, copy_parallel, rename
from moxlite.file import shutdown as _shutdown

_shutdown.install()   # a mox.file failure in an atexit handler ends the process non-zero

__all__ = [
    "BackgroundSync", "DirEntry", "File", "FileStat", "IsAFolderError", "MissingPathError",
    "MoxFileNameDuplicateException", "MoxFileNotExistsException", "MoxFileReadException",
    "MoxFileRespException", "NameClashError", "NotAFolderError", "ObjectStorageError", "PathExistsError",
    "StorageAccessError", "StorageReadError", "StorageUnreachableError", "append", "append_remote",
    "background_sync_copy", "copy", "copy_parallel", "endpoint_url", "exists", "get_size", "glob",
    "is_directory", "is_remote", "list_directory", "make_dirs", "mk_dir", "read", "remove", "rename",
    "reset_auth", "scan_dir", "set_auth", "shift", "stat", "walk", "write",
]
