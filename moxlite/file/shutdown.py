"""mox.file at interpreter shutdown: copies without new threads, failures as a non-zero exit.

ModelArts scripts upload their local cache to OBS from an ``atexit`` handler. By then Python
refuses new thread-pool work (``cannot schedule new futures after interpreter shutdown``;
Python 3.12 also refuses new threads), and an exception that leaves an ``atexit`` handler is
printed as "Exception ignored in atexit callback" while the process still exits 0: the outputs
are lost and the job looks successful. So:

- ``run_all`` runs the copies on a thread pool, or in the calling thread where no pool can
  start;
- ``remote_io_in_calling_threads`` gives fsspec's event loop (s3fs) an executor that runs
  each blocking call (aiohttp's DNS look-up) at once instead of on a pool;
- ``install`` (done when ``moxlite.file`` is imported) routes a mox.file error that leaves an
  ``atexit`` handler to one report on stderr (its traceback and its line) and ends the process
  with status 1 once the ``atexit`` handlers registered after ``moxlite.file``'s import have
  run (at once, when the failure comes later, or when ``moxlite.file`` was first imported
  during shutdown). Other unraisable exceptions go to the hook that was there before.
"""

import atexit
import concurrent.futures
import logging
import os
import sys
import threading
import traceback

EXIT_STATUS = 1

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_state = {"installed": False, "failed": False, "last_handler_ran": False, "previous_hook": None,
          "loop_executor_replaced": False}


def run_all(task, items, threads):
    """``task(*item)`` for every item, on up to ``threads`` threads; the exceptions (None each
    that succeeded), in order. Where Python can start no pool (interpreter shutdown), the
    items left run one after the other in the calling thread."""
    results = [None] * len(items)
    futures = {}
    try:
        pool = concurrent.futures.ThreadPoolExecutor(max(1, min(threads, len(items))))
    except RuntimeError:
        pool = None
    try:
        for index, item in enumerate(items):
            if pool is None:
                results[index] = _call(task, item)
                continue
            try:
                futures[index] = pool.submit(task, *item)
            except RuntimeError:   # shutting down: no new futures (3.12: no new threads)
                pool.shutdown(wait=True)
                pool = None
                results[index] = _call(task, item)
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    for index, future in futures.items():
        results[index] = future.exception()
    return results


class _CallingThreadExecutor(concurrent.futures.ThreadPoolExecutor):
    """asyncio's default executor at shutdown: each call runs at once, in the loop's thread
    (asyncio takes only a ThreadPoolExecutor; this one never starts a thread)."""

    def submit(self, fn, /, *args, **kwargs):
        future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:   # noqa: BLE001 -- handed back in the future
            future.set_exception(error)
        return future


def remote_io_in_calling_threads():
    """At shutdown, before object-storage I/O: fsspec's loop gets the calling-thread executor
    (its default pool would raise "cannot schedule new futures after interpreter shutdown")."""
    if _state["loop_executor_replaced"] or not shutting_down():
        return
    import fsspec.asyn

    fsspec.asyn.get_loop().set_default_executor(_CallingThreadExecutor(max_workers=1))
    _state["loop_executor_replaced"] = True


def _call(task, item):
    try:
        task(*item)
    except Exception as error:   # noqa: BLE001 -- handed back like a future's exception
        return error
    return None


def _raised_in_mox_file(error):
    frames = traceback.walk_tb(getattr(error, "__traceback__", None))
    return any(os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _PACKAGE_DIR
               for frame, _ in frames)


def _unraisable(unraisable):
    error = unraisable.exc_value
    if "atexit" not in (unraisable.err_msg or "") or error is None or not _raised_in_mox_file(error):
        (_state["previous_hook"] or sys.__unraisablehook__)(unraisable)
        return
    where = getattr(unraisable.object, "__qualname__", None) or repr(unraisable.object)
    traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
    print(f"mox.file failed in the atexit handler {where}: {type(error).__name__}: {error}; "
          f"the process exits with status {EXIT_STATUS}", file=sys.stderr)
    _state["failed"] = True
    if _state["last_handler_ran"]:   # the handler was registered before moxlite.file's import
        _exit()


def _last_handler():
    """Registered at import, so it runs after the handlers a script registers later."""
    _state["last_handler_ran"] = True
    if _state["failed"]:
        _exit()


def _exit():
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(EXIT_STATUS)


def install():
    """Route mox.file failures in atexit handlers to a report and a non-zero exit (once)."""
    if _state["installed"]:
        return
    _state["installed"] = True
    _state["previous_hook"] = sys.unraisablehook
    sys.unraisablehook = _unraisable
    if shutting_down():   # first imported inside an atexit handler: a handler registered now may not run
        _state["last_handler_ran"] = True
    else:
        atexit.register(_last_handler)


def shutting_down():
    """True once Python has begun to shut down (the main thread is stopped before atexit runs)."""
    return not threading.main_thread().is_alive()
