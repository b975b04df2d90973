"""``log_dir`` and ``checkpoint_path`` on object storage: train in a local cache, sync up (MoXing's way).

TensorFlow 2.21 has no ``s3://`` filesystem (``tf.io.gfile`` raises "File system scheme 's3'
not implemented"), and tensorflow-io, which had one, stops at TF 2.16. So ``run`` with an
``s3://`` / ``obs://`` ``log_dir``:

1. copies the existing remote ``log_dir`` (checkpoints, summaries, exports) into a fresh
   local folder, and a remote ``checkpoint_path`` (a folder or a checkpoint prefix) beside it;
2. runs on the local folders, while a ``BackgroundSync`` uploads new and changed files every
   ``MOXLITE_SYNC_SECONDS`` seconds (default 30), removing remotely the checkpoints that
   retention removed locally;
3. after the run, successful or not, syncs once more and deletes the local copy (kept when
   that last sync failed, and its path logged, so nothing is lost).

A resume is therefore a plain second ``run`` with the same remote ``log_dir``. Set
``MOXLITE_CACHE_DIR`` to choose where the local copies go (default: the temp folder).
"""

import inspect
import os
import shutil
import tempfile

from moxlite import logs
from moxlite.file import operations, transfer
from moxlite.file.errors import MissingPathError, ObjectStorageError
from moxlite.file.storage import is_remote
from moxlite.file.sync import BackgroundSync

DEFAULT_SYNC_SECONDS = 30.0


def needs_local_cache(arguments):
    """True when ``run``'s ``log_dir`` or ``checkpoint_path`` is on object storage."""
    return is_remote(arguments.get("log_dir")) or is_remote(arguments.get("checkpoint_path"))


def _sync_seconds():
    value = os.environ.get("MOXLITE_SYNC_SECONDS")
    try:
        return float(value) if value else DEFAULT_SYNC_SECONDS
    except ValueError:
        raise ObjectStorageError(
            f"MOXLITE_SYNC_SECONDS={value!r} is not a number; set it to the seconds between "
            f"uploads of log_dir, e.g. 30") from None


def remote_has_checkpoint(url):
    """True when the remote folder ``url`` holds a TF checkpoint index, or ``url`` is a checkpoint prefix."""
    return operations.exists(url.rstrip("/") + "/checkpoint") or bool(operations.glob(url.rstrip("/") + "*.index"))


def has_checkpoint(log_dir, checkpoint_path):
    """``checkpoints.has_checkpoint`` that also looks on object storage (for checks made before ``run``)."""
    from moxlite.training.state import checkpoints

    for path in (log_dir, checkpoint_path):
        if path and (remote_has_checkpoint(path) if is_remote(path) else checkpoints.has_checkpoint(path, None)):
            return True
    return False


def _require_bucket(argument, url):
    """Fail before training, not at the first upload, when the bucket is not there."""
    scheme, rest = url.split("://", 1)
    bucket = rest.strip("/").split("/", 1)[0]
    if not operations.exists(f"{scheme}://{bucket}"):
        raise MissingPathError(
            f"{argument}={url!r}: bucket {bucket!r} does not exist at the object-storage endpoint; "
            f"create it or fix the bucket name")


def _download_log_dir(remote, local):
    if not operations.exists(remote):
        return
    if not operations.is_directory(remote):
        raise ObjectStorageError(f"log_dir={remote!r} is an object, not a folder; give a folder URL")
    transfer.copy_parallel(remote, local)


def _download_checkpoint(remote, cache_root):
    """Copy a remote checkpoint folder or prefix locally; returns the local equivalent path."""
    local_root = os.path.join(cache_root, "checkpoint_path")
    if operations.is_directory(remote):
        transfer.copy_parallel(remote, local_root)
        return local_root
    parent, prefix = remote.rstrip("/").rsplit("/", 1)
    names = [url.rsplit("/", 1)[1] for url in operations.glob(f"{parent}/{prefix}*")]
    if not names:
        raise MissingPathError(
            f"checkpoint_path={remote!r}: no checkpoint folder or files with that prefix on object "
            f"storage; give the log_dir of a TRAIN run or a checkpoint prefix like .../model.ckpt-100")
    if operations.exists(f"{parent}/checkpoint"):
        names.append("checkpoint")
    transfer.copy_files(parent, local_root, names)
    return os.path.join(local_root, prefix)


def run_through_local_cache(run, arguments):
    """Call ``run(**arguments)`` with remote ``log_dir`` / ``checkpoint_path`` replaced by local copies.

    Returns ``run``'s result, and raises its error, with every local copy's path in them (an
    export path, a message) given as the remote URL the user passed.
    """
    # ``arguments`` is run()'s locals(): keep only its parameters, whatever run() computed before.
    parameters = inspect.signature(run).parameters
    arguments = {name: value for name, value in arguments.items() if name in parameters}
    remote_log_dir = arguments.get("log_dir") if is_remote(arguments.get("log_dir")) else None
    remote_checkpoint = arguments.get("checkpoint_path") if is_remote(arguments.get("checkpoint_path")) else None
    seconds = _sync_seconds()
    cache_parent = os.environ.get("MOXLITE_CACHE_DIR") or None
    if cache_parent:
        os.makedirs(cache_parent, exist_ok=True)
    cache_root = tempfile.mkdtemp(prefix="moxlite-run-", dir=cache_parent)
    local = dict(arguments)
    sync = None
    try:
        for argument, url in (("log_dir", remote_log_dir), ("checkpoint_path", remote_checkpoint)):
            if url:
                _require_bucket(argument, url)
        if remote_checkpoint:
            local["checkpoint_path"] = _download_checkpoint(remote_checkpoint, cache_root)
        if remote_log_dir:
            local_log_dir = os.path.join(cache_root, "log_dir")
            _download_log_dir(remote_log_dir, local_log_dir)
            local["log_dir"] = local_log_dir
            sync = BackgroundSync(local_log_dir, remote_log_dir, seconds, delete_removed=True)
            sync.mark_in_sync()
            logs.get_logger().info("log_dir %s: training in the local cache %s, synced every %.0f s",
                        remote_log_dir, local_log_dir, seconds)
            sync.start()
    except BaseException:
        shutil.rmtree(cache_root, ignore_errors=True)
        raise
    # What the user reads names the folders the user gave, not the cache that stands in for them.
    in_user_terms = {path: url for path, url in ((local.get("log_dir"), remote_log_dir),
                                                 (local.get("checkpoint_path"), remote_checkpoint)) if url}
    try:
        result = run(**local)
    except BaseException as error:
        _finish(sync, cache_root, raise_errors=False)  # the run's own error is the one to see
        _name_remote_paths(error, in_user_terms)
        raise
    _finish(sync, cache_root, raise_errors=True)
    if isinstance(result, dict):
        return {key: _remote_path(value, in_user_terms) for key, value in result.items()}
    return _remote_path(result, in_user_terms)


def _remote_path(value, in_user_terms):
    """``value`` with each local cache folder in it (a path, or a message) given as its remote URL."""
    if not isinstance(value, str):
        return value
    for local, remote in in_user_terms.items():
        value = value.replace(local, remote.rstrip("/"))
    return value


def _name_remote_paths(error, in_user_terms):
    """Rewrite ``error``'s message in place to name the remote folders (same class, same traceback)."""
    if error.args and isinstance(error.args[0], str):
        error.args = (_remote_path(error.args[0], in_user_terms),) + error.args[1:]


def _finish(sync, cache_root, raise_errors):
    """Last upload, then drop the cache; keep it (and say where) if the upload failed."""
    if sync is not None:
        try:
            sync.stop(final_sync=True)
        except Exception as error:
            logs.get_logger().error("log_dir %s: the last upload failed (%s); the run's files are kept in %s",
                         sync.remote_dir, str(error).splitlines()[0], cache_root)
            if raise_errors:
                raise
            return
    shutil.rmtree(cache_root, ignore_errors=True)
