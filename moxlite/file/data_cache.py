"""``data_url`` on object storage: a local copy of the input files, made once per process.

TensorFlow 2.21 cannot open ``s3://`` files (no filesystem plugin), so MoXing's data
helpers read a local copy instead. Each (folder, pattern) is copied once into
``MOXLITE_CACHE_DIR`` (default: the temp folder) and reused for the rest of the process.
Every worker copies the whole folder and shards it as usual.
"""

import hashlib
import os
import shutil
import tempfile
import threading

from moxlite.file import operations, transfer
from moxlite.file.errors import MissingPathError
from moxlite.file.storage import is_remote

_copies = {}
_lock = threading.Lock()


def _cache_folder(url, pattern):
    digest = hashlib.sha1(f"{url}\0{pattern}".encode()).hexdigest()[:12]
    parent = os.environ.get("MOXLITE_CACHE_DIR") or tempfile.gettempdir()
    return os.path.join(parent, f"moxlite-data-{os.getpid()}-{digest}")


def local_copy(url, pattern=None):
    """A local folder holding the files of the remote folder ``url`` (those matching ``pattern``, a
    glob relative to it, when given). Local paths come back unchanged."""
    if not is_remote(url):
        return url
    key = (url.rstrip("/"), pattern)
    with _lock:
        if key in _copies and os.path.isdir(_copies[key]):
            return _copies[key]
        local = _cache_folder(*key)
        shutil.rmtree(local, ignore_errors=True)
        if pattern:
            base = key[0]
            names = [found[len(base) + 1:] for found in operations.glob(f"{base}/{pattern}")]
            if not names:
                raise MissingPathError(f"data {url!r}: no file matches {pattern!r} on object storage")
            transfer.copy_files(base, local, names)
        else:
            if not operations.is_directory(url):
                raise MissingPathError(f"data {url!r}: no such folder on object storage")
            transfer.copy_parallel(url, local)
        _copies[key] = local
        return local
