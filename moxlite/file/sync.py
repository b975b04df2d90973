"""``background_sync_copy``: mirror a local training folder to object storage while training runs.

A daemon thread copies, every ``seconds``, the files that are new or changed since its last
round (size and modification time decide). A round that fails is logged and skipped; the
next one retries, so a flaky network never stops training. TensorFlow's ``checkpoint``
index files are read first and uploaded last in a round, so the remote index never names
a checkpoint whose data is not there yet (the killed-run test caught an index read late).
"""

import os
import threading

from moxlite import logs
from moxlite.file.storage import join, locate, translate_errors
from moxlite.file.transfer import DEFAULT_THREADS, copy_files

_INDEX_NAMES = ("checkpoint",)


def _local_state(local_dir):
    """{relative path: (size, mtime_ns)} of the files under ``local_dir``."""
    state = {}
    for folder, _, files in os.walk(local_dir):
        for name in files:
            path = os.path.join(folder, name)
            try:
                info = os.stat(path)
            except FileNotFoundError:  # removed while we walked (checkpoint rotation)
                continue
            state[os.path.relpath(path, local_dir)] = (info.st_size, info.st_mtime_ns)
    return state


def _index_contents(local_dir):
    """{relative path: bytes} of TF's ``checkpoint`` index files under ``local_dir``."""
    contents = {}
    for folder, _, files in os.walk(local_dir):
        for name in files:
            if name in _INDEX_NAMES:
                try:
                    with open(os.path.join(folder, name), "rb") as stream:
                        contents[os.path.relpath(os.path.join(folder, name), local_dir)] = stream.read()
                except FileNotFoundError:
                    continue
    return contents


class BackgroundSync:
    """A running ``background_sync_copy``. ``sync_now()`` runs a round; ``stop()`` ends it.

    With ``delete_removed``, files this sync uploaded and that later vanished locally (old
    checkpoints rotated away) are removed remotely too.
    """

    def __init__(self, local_dir, remote_dir, seconds=120, threads=DEFAULT_THREADS, delete_removed=False):
        locate(remote_dir)  # a malformed URL fails here, in the caller's thread
        self.local_dir = local_dir
        self.remote_dir = remote_dir
        self.seconds = float(seconds)
        self.threads = threads
        self.delete_removed = delete_removed
        self.rounds = 0
        self.failed_rounds = 0
        self.last_error = None
        self._uploaded = {}
        self._round_lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"mox.file sync {local_dir}", daemon=True)

    def start(self):
        """Start the daemon thread; at interpreter shutdown, where no thread can start (Python
        3.12+ in an ``atexit`` handler), run one round in the calling thread instead."""
        try:
            self._thread.start()
        except RuntimeError:
            self._round(raise_errors=True)
        return self

    def _loop(self):
        while not self._stopping.wait(self.seconds):
            self._round(raise_errors=False)

    def _round(self, raise_errors):
        with self._round_lock:
            try:
                with translate_errors("background_sync_copy", locate(self.local_dir), locate(self.remote_dir)):
                    self._upload_changes()
                self.rounds += 1
            except Exception as error:  # noqa: BLE001 - a failed round must not stop training
                self.failed_rounds += 1
                self.last_error = error
                if raise_errors:
                    raise
                logs.get_logger().warning("mox.file.background_sync_copy(%r -> %r): round skipped: %s",
                               self.local_dir, self.remote_dir, str(error).splitlines()[0])

    def _upload_changes(self):
        # Index files are read before anything else: TF rewrites them only after the checkpoint
        # they name is complete, so this snapshot names files that the walk below will find.
        indexes = _index_contents(self.local_dir)
        state = _local_state(self.local_dir) if os.path.isdir(self.local_dir) else {}
        data = sorted(name for name, signature in state.items()
                      if os.path.basename(name) not in _INDEX_NAMES and self._uploaded.get(name) != signature)
        copy_files(self.local_dir, self.remote_dir, data, self.threads)
        for name in data:
            self._uploaded[name] = state[name]
        for name, content in sorted(indexes.items()):
            if self._uploaded.get(name) != content:
                target = locate(join(self.remote_dir, name))
                target.filesystem.pipe_file(target.path, content)
                self._uploaded[name] = content
        if self.delete_removed:
            present = set(state) | set(indexes)
            for name in [name for name in self._uploaded if name not in present]:
                target = locate(join(self.remote_dir, name))
                if target.filesystem.exists(target.path):
                    target.filesystem.rm(target.path)
                del self._uploaded[name]

    def mark_in_sync(self):
        """Take the local folder as already uploaded (it was just downloaded from the remote)."""
        with self._round_lock:
            self._uploaded = _local_state(self.local_dir) if os.path.isdir(self.local_dir) else {}
            self._uploaded.update(_index_contents(self.local_dir))

    def sync_now(self):
        """Run one round now, in this thread; its error, if any, is raised."""
        self._round(raise_errors=True)

    def stop(self, final_sync=True, timeout=None):
        """End the thread; with ``final_sync``, one last round (raising its error) first."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if final_sync:
            self.sync_now()


def background_sync_copy(local_dir, remote_dir, seconds=120, threads=DEFAULT_THREADS):
    """Start mirroring ``local_dir`` to ``remote_dir`` every ``seconds``; returns the ``BackgroundSync``.

    The thread is a daemon: it never keeps a finished script alive. Call ``stop()`` at the
    end of training for a last, complete round.
    """
    return BackgroundSync(local_dir, remote_dir, seconds, threads).start()
