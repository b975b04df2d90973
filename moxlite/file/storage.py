"""Where a ``mox.file`` path lives, and how to reach it.

A path is local, or ``s3://bucket/key`` / ``obs://bucket/key``. Huawei OBS speaks the S3
protocol, so both remote schemes go through ``s3fs`` (fsspec's S3 filesystem) against one
endpoint. The endpoint and credentials come from, in order:

1. ``mox.file.set_auth(ak=..., sk=..., server=..., ...)`` in the script;
2. the environment: ``S3_ENDPOINT`` (ModelArts sets it; ``host[:port]`` or a full URL,
   ``S3_USE_HTTPS=0`` for plain http, ``S3_VERIFY_SSL=0`` to skip certificate checks), else
   ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``; credentials from ``AWS_ACCESS_KEY_ID`` /
   ``AWS_SECRET_ACCESS_KEY`` (/ ``AWS_SESSION_TOKEN``) or any other source boto3 reads;
3. nothing: AWS S3 itself.

Every failure is turned into one of ``moxlite.file.errors``' one-line errors by
``translate_errors``.
"""

import contextlib
import dataclasses
import os
import threading

import fsspec

from moxlite.file import shutdown
from moxlite.file.errors import (IsAFolderError, MissingPathError, NotAFolderError, ObjectStorageError,
                                 PathExistsError, Response, StorageAccessError, StorageReadError,
                                 StorageUnreachableError)

REMOTE_SCHEMES = ("s3", "obs")

# A dead endpoint must fail in bounded time: about connect_timeout x attempts.
DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 60.0
DEFAULT_ATTEMPTS = 3

_settings = {}
_filesystems = {}
_lock = threading.Lock()


# set_auth's arguments: MoXing's documented ones, then the ones moxlite added before them.
_BOOLEAN_ARGUMENTS = ("is_secure", "ssl_verify", "long_conn_mode", "path_style")
_POSITIVE_ARGUMENTS = ("port", "retry", "retries", "retry_wait", "client_timeout", "list_max_keys",
                       "connect_timeout", "read_timeout")
_TEXT_ARGUMENTS = ("ak", "sk", "server", "security_token", "region")


def set_auth(ak=None, sk=None, server=None, port=None, is_secure=None, ssl_verify=None,
             long_conn_mode=None, path_style=None, retry=None, retry_wait=None, client_timeout=None,
             list_max_keys=None, security_token=None, region=None, connect_timeout=None,
             read_timeout=None, retries=None):
    """Set the object-storage endpoint, credentials and client options for this process.

    MoXing's arguments, and what each becomes in the S3 client (botocore, through s3fs):

    - ``ak`` / ``sk``: the access key id and secret; ``server``: a host
      (``obs.cn-north-4.myhuaweicloud.com``) or a full URL, completed by ``port`` and
      ``is_secure`` (https when True); ``ssl_verify=False`` skips the certificate check.
    - ``path_style``: True sends ``https://server/bucket/key`` (botocore's ``addressing_style
      ='path'``, what HEC and most private endpoints need), False ``https://bucket.server/key``
      (``'virtual'``, OBS's public cloud). Unset: botocore chooses.
    - ``retry``: attempts per request (botocore's ``total_max_attempts`` and s3fs's retry loop).
    - ``client_timeout``: seconds to wait for a connection and for each answer (botocore's
      ``connect_timeout`` and ``read_timeout``, unless those are given themselves).
    - ``long_conn_mode``: TCP keep-alive on the client's pooled connections (botocore's
      ``tcp_keepalive``).
    - ``retry_wait`` and ``list_max_keys`` are accepted and kept, but no S3 client setting
      matches them: botocore waits between attempts by its own exponential back-off, and
      listings come in the server's pages (1,000 keys).

    ``security_token`` (a temporary credential's token), ``region``, ``connect_timeout``,
    ``read_timeout`` and ``retries`` (an older spelling of ``retry``) are moxlite's own.
    Arguments left ``None`` keep their current value (the environment's, by default). A
    wrong type is refused before anything changes.
    """
    given = dict(ak=ak, sk=sk, server=server, port=port, is_secure=is_secure, ssl_verify=ssl_verify,
                 long_conn_mode=long_conn_mode, path_style=path_style, retry=retry, retry_wait=retry_wait,
                 client_timeout=client_timeout, list_max_keys=list_max_keys, security_token=security_token,
                 region=region, connect_timeout=connect_timeout, read_timeout=read_timeout, retries=retries)
    given = {key: value for key, value in given.items() if value is not None}
    for key, value in given.items():
        _check_auth_argument(key, value)
    if "retries" in given:
        given.setdefault("retry", given.pop("retries"))
    with _lock:
        _settings.update(given)


def _check_auth_argument(key, value):
    if key in _BOOLEAN_ARGUMENTS and not isinstance(value, bool):
        raise ObjectStorageError(f"mox.file.set_auth({key}={value!r}): give True or False")
    if key in _POSITIVE_ARGUMENTS and (isinstance(value, bool) or not isinstance(value, (int, float))
                                       or value < 0 or (value == 0 and key != "retry_wait")):
        raise ObjectStorageError(f"mox.file.set_auth({key}={value!r}): give a positive number")
    if key in ("retry", "retries", "port", "list_max_keys") and not float(value).is_integer():
        raise ObjectStorageError(f"mox.file.set_auth({key}={value!r}): give a whole number")
    if key in _TEXT_ARGUMENTS and not isinstance(value, str):
        raise ObjectStorageError(f"mox.file.set_auth({key}={value!r}): give a string")


def auth_settings():
    """A copy of what ``set_auth`` set (for reading; the keys are set_auth's argument names)."""
    with _lock:
        return dict(_settings)


def reset_auth():
    """Forget ``set_auth``'s settings: the environment decides again."""
    with _lock:
        _settings.clear()


def _env_flag(name, default):
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


def endpoint_url():
    """The S3 endpoint URL in force, or None for AWS's own."""
    server = (_settings.get("server") or os.environ.get("S3_ENDPOINT")
              or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"))
    if not server:
        return None
    if "://" not in server:
        secure = _settings.get("is_secure", _env_flag("S3_USE_HTTPS", True))
        server = ("https://" if secure else "http://") + server
    port = _settings.get("port")
    if port and server.count(":") < 2:
        server = f"{server.rstrip('/')}:{port}"
    return server


def _filesystem_options():
    options = dict(
        endpoint_url=endpoint_url(),
        key=_settings.get("ak"), secret=_settings.get("sk"), token=_settings.get("security_token"),
        ssl_verify=_settings.get("ssl_verify", _env_flag("S3_VERIFY_SSL", True)),
        region=_settings.get("region") or os.environ.get("S3_REGION"),
        connect_timeout=float(_settings.get("connect_timeout", _settings.get(
            "client_timeout", DEFAULT_CONNECT_TIMEOUT))),
        read_timeout=float(_settings.get("read_timeout", _settings.get("client_timeout", DEFAULT_READ_TIMEOUT))),
        attempts=int(_settings.get("retry", DEFAULT_ATTEMPTS)),
        path_style=_settings.get("path_style"),
        keepalive=_settings.get("long_conn_mode"),
        # Credentials read from the environment are part of the key, so changing them takes effect.
        env_key=os.environ.get("AWS_ACCESS_KEY_ID"), env_secret=os.environ.get("AWS_SECRET_ACCESS_KEY"))
    return options


def remote_filesystem():
    """The s3fs filesystem for the settings in force (one per distinct setting)."""
    shutdown.remote_io_in_calling_threads()   # in an atexit handler: no new futures
    options = _filesystem_options()
    key = tuple(sorted(options.items()))
    with _lock:
        found = _filesystems.get(key)
        if found is not None:
            return found
    import s3fs  # imported on first remote use only: it pulls in aiobotocore

    client_kwargs = {}
    if options["region"]:
        client_kwargs["region_name"] = options["region"]
    if not options["ssl_verify"]:
        client_kwargs["verify"] = False
    config_kwargs = dict(connect_timeout=options["connect_timeout"], read_timeout=options["read_timeout"],
                         retries={"total_max_attempts": options["attempts"], "mode": "standard"})
    if options["path_style"] is not None:
        config_kwargs["s3"] = {"addressing_style": "path" if options["path_style"] else "virtual"}
    if options["keepalive"] is not None:
        config_kwargs["tcp_keepalive"] = options["keepalive"]
    filesystem = s3fs.S3FileSystem(
        key=options["key"], secret=options["secret"], token=options["token"],
        endpoint_url=options["endpoint_url"], client_kwargs=client_kwargs,
        use_ssl=not (options["endpoint_url"] or "").startswith("http://"),
        config_kwargs=config_kwargs,
        # Other processes (a training job, its sync thread) write the same prefixes: never
        # answer a listing from a cache.
        use_listings_cache=False, skip_instance_cache=True)
    filesystem.retries = options["attempts"]  # s3fs's own retry loop (timeouts, broken reads)
    with _lock:
        _filesystems[key] = filesystem
    return filesystem


@dataclasses.dataclass(frozen=True)
class Location:
    """A path as the user wrote it, with the filesystem that holds it."""

    url: str
    scheme: str  # "" for local paths
    path: str  # the path in ``filesystem``'s terms: "bucket/key" for object storage

    @property
    def remote(self):
        return bool(self.scheme)

    @property
    def folder_form(self):
        """True when the user wrote the path with a trailing separator (``s3://b/dir/``)."""
        return self.url.endswith("/") or (not self.remote and self.url.endswith(os.sep))

    @property
    def filesystem(self):
        return remote_filesystem() if self.remote else fsspec.filesystem("file")

    @property
    def bucket(self):
        return self.path.split("/", 1)[0] if self.remote else ""

    def url_of(self, filesystem_path):
        """The user-facing URL of a path returned by the filesystem."""
        if not self.remote:
            return filesystem_path
        return f"{self.scheme}://{filesystem_path.lstrip('/')}"

    def child(self, relative):
        """This location joined with a relative path."""
        if not relative:
            return self
        return locate(join(self.url, relative))


def is_remote(path):
    """True for ``s3://`` and ``obs://`` paths."""
    return isinstance(path, str) and path.split("://", 1)[0].lower() in REMOTE_SCHEMES and "://" in path


def locate(path):
    """Parse ``path`` (a str or os.PathLike) into a ``Location``."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path:
        raise ObjectStorageError(f"mox.file: path={path!r} is not a path; give a local path or s3://bucket/key")
    if "://" in path:
        scheme, rest = path.split("://", 1)
        scheme = scheme.lower()
        if scheme not in REMOTE_SCHEMES:
            raise ObjectStorageError(
                f"mox.file: path={path!r} has scheme {scheme!r}; use a local path, s3:// or obs://")
        rest = rest.strip("/")
        if not rest:
            raise ObjectStorageError(f"mox.file: path={path!r} names no bucket; use {scheme}://bucket/key")
        return Location(url=path, scheme=scheme, path=rest)
    return Location(url=path, scheme="", path=os.path.abspath(os.path.expanduser(path)))


def join(base, relative):
    """``os.path.join`` that keeps ``s3://`` URLs intact."""
    if is_remote(base):
        return base.rstrip("/") + "/" + relative.replace(os.sep, "/").lstrip("/")
    return os.path.join(base, relative)


def _is_unreachable(error):
    names = {type(cause).__name__ for cause in _causes(error)}
    unreachable = {"EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError",
                   "ClientConnectorError", "ServerDisconnectedError", "ConnectionRefusedError",
                   "FSTimeoutError", "ReadTimeoutError", "TimeoutError"}
    return bool(names & unreachable)


def _causes(error):
    seen = []
    while error is not None and error not in seen:
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen


def _response(error):
    """The server's answer behind ``error`` (a botocore ClientError among its causes), or None."""
    for cause in _causes(error):
        answer = getattr(cause, "response", None)
        if isinstance(answer, dict) and "ResponseMetadata" in answer:
            metadata = answer.get("ResponseMetadata", {})
            details = answer.get("Error", {})
            return Response(metadata.get("HTTPStatusCode"), details.get("Message", ""), details.get("Code", ""))
    return None


def _first_line(error):
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def _bucket_exists(location):
    try:
        return location.filesystem.exists(location.bucket)
    except Exception:  # the question is asked only to word an error; never mask the first one
        return True


def _credential_hint():
    if _settings.get("ak"):
        return "the access key given to mox.file.set_auth(ak=...)"
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        return "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY"
    return "boto3's default credentials"


def _is_broken_read(error):
    names = {type(cause).__name__ for cause in _causes(error)}
    return bool(names & {"ResponseStreamingError", "ClientPayloadError", "IncompleteReadError",
                         "ContentLengthError", "IncompleteRead"})


@contextlib.contextmanager
def translate_errors(operation, *locations, reading=False):
    """Turn any failure of ``operation`` on ``locations`` into a one-line ``mox.file`` error.

    ``reading``: the failure happened while reading an object already opened (the server
    had answered 200 OK), so a lost connection is MoXing's ``MoxFileReadException``.
    """
    try:
        yield
    except ObjectStorageError:
        raise
    except Exception as error:  # noqa: BLE001 - every failure gets one clear line
        remote = next((location for location in locations if location.remote), None)
        where = ", ".join(repr(location.url) for location in locations)
        prefix = f"mox.file.{operation}({where})"
        if remote is None:
            if isinstance(error, FileNotFoundError):
                raise MissingPathError(f"{prefix}: no such file or directory") from error
            if isinstance(error, PermissionError):
                raise StorageAccessError(f"{prefix}: permission denied ({_first_line(error)})") from error
            if isinstance(error, IsADirectoryError):
                raise IsAFolderError(f"{prefix}: is a folder, not a file") from error
            if isinstance(error, NotADirectoryError):
                raise NotAFolderError(f"{prefix}: a part of the path is a file, not a folder") from error
            if isinstance(error, FileExistsError):
                raise PathExistsError(f"{prefix}: already exists") from error
            raise
        endpoint = endpoint_url() or "AWS S3"
        if _is_broken_read(error) or (reading and _is_unreachable(error)):
            raise StorageReadError(
                f"{prefix}: the connection to {endpoint} broke while reading ({type(error).__name__}); "
                f"read the file again", resp=_response(error) or Response(200, "OK")) from None
        if _is_unreachable(error):
            raise StorageUnreachableError(
                f"{prefix}: the object-storage endpoint {endpoint} did not answer "
                f"({type(error).__name__}); check S3_ENDPOINT (or mox.file.set_auth(server=...)) "
                f"and the network") from None
        resp = _response(error)
        if isinstance(error, PermissionError):
            raise StorageAccessError(
                f"{prefix}: {endpoint} refused the request ({_first_line(error)}); check the credentials "
                f"in {_credential_hint()} and the bucket's permissions", resp=resp) from None
        if isinstance(error, FileNotFoundError):
            resp = resp or Response(404, "Not Found", "NoSuchKey")
            if not _bucket_exists(remote):
                raise MissingPathError(
                    f"{prefix}: bucket {remote.bucket!r} does not exist at {endpoint}; create it or fix "
                    f"the bucket name", resp=resp) from None
            raise MissingPathError(f"{prefix}: no such object or folder", resp=resp) from None
        raise ObjectStorageError(f"{prefix}: {type(error).__name__}: {_first_line(error)}", resp=resp) from None
