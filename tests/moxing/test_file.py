"""``mox.file`` against a real S3-compatible server (moto, on loopback) and the local disk.

Independent references: the bytes written, ``os``/``glob``/``os.walk`` on the same tree
kept locally, and boto3 reading the server directly.
"""

import glob as pyglob
import logging
import os
import time

import numpy as np
import pytest

from moxlite import file as mox_file
from moxlite import logs
from moxlite.file import storage
from moxlite.file.errors import (MissingPathError, ObjectStorageError, StorageAccessError,
                                 StorageUnreachableError)
from tests.s3lib import free_port
from tests.s3lib import s3  # noqa: F401  (the server fixture)


@pytest.fixture
def bucket(s3):
    return s3.new_bucket()


def make_tree(root, seed=0):
    """A small tree of random bytes: nested folders, an empty file, an empty folder, 6 MiB (multipart)."""
    rng = np.random.default_rng(seed)
    files = {
        "a.txt": b"alpha\n",
        "empty.bin": b"",
        "sub/b.bin": rng.integers(0, 256, 1000, dtype=np.uint8).tobytes(),
        "sub/deeper/c.bin": rng.integers(0, 256, 70_000, dtype=np.uint8).tobytes(),
        "sub/deeper/d.txt": "ünïcode ✓\n".encode("utf-8"),
        "big/model.data": rng.integers(0, 256, 6 * 1024 * 1024 + 17, dtype=np.uint8).tobytes(),
    }
    for name, data in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
        with open(os.path.join(root, name), "wb") as stream:
            stream.write(data)
    return files


def local_files(root):
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as stream:
                found[os.path.relpath(path, root)] = stream.read()
    return found


def test_tree_copied_up_and_down_is_bit_exact(s3, bucket, tmp_path):
    files = make_tree(tmp_path / "src")
    copied = mox_file.copy_parallel(str(tmp_path / "src"), f"s3://{bucket}/tree")
    assert copied == len(files)
    # The server itself holds exactly these objects and bytes (read with boto3, not mox.file).
    client = s3.client()
    listing = client.list_objects_v2(Bucket=bucket, Prefix="tree/")["Contents"]
    assert sorted(item["Key"] for item in listing) == sorted(f"tree/{name}" for name in files)
    for name, data in files.items():
        assert client.get_object(Bucket=bucket, Key=f"tree/{name}")["Body"].read() == data
    mox_file.copy_parallel(f"s3://{bucket}/tree", str(tmp_path / "down"))
    assert local_files(tmp_path / "down") == files
    # obs:// is the same store through the same endpoint.
    mox_file.copy_parallel(f"obs://{bucket}/tree", str(tmp_path / "down_obs"), threads=2)
    assert local_files(tmp_path / "down_obs") == files


def test_listing_stat_walk_glob_match_the_local_tree(s3, bucket, tmp_path):
    files = make_tree(tmp_path / "src")
    os.makedirs(tmp_path / "src" / "sub" / "deeper" / "more", exist_ok=True)  # empty locally: no object
    remote = f"s3://{bucket}/tree"
    mox_file.copy_parallel(str(tmp_path / "src"), remote)
    local = str(tmp_path / "src")

    assert mox_file.list_directory(remote) == sorted(os.listdir(local))
    assert mox_file.list_directory(local) == sorted(os.listdir(local))
    expected_recursive = sorted(set(files) | {"sub", "sub/deeper", "big"})
    assert mox_file.list_directory(remote, recursive=True) == expected_recursive
    assert mox_file.list_directory(local, recursive=True) == sorted(expected_recursive + ["sub/deeper/more"])

    for name, data in files.items():
        info = mox_file.stat(f"{remote}/{name}")
        assert (info.length, info.is_directory) == (len(data), False)
        assert abs(info.mtime_nsec / 1e9 - time.time()) < 300
        assert mox_file.get_size(f"{remote}/{name}") == len(data)
        assert mox_file.stat(os.path.join(local, name)).length == len(data)
        assert mox_file.stat(os.path.join(local, name)).mtime_nsec == os.stat(os.path.join(local, name)).st_mtime_ns
    assert mox_file.stat(f"{remote}/sub").is_directory
    assert mox_file.is_directory(f"{remote}/sub") and not mox_file.is_directory(f"{remote}/a.txt")
    assert mox_file.get_size(remote, recursive=True) == sum(len(data) for data in files.values())
    assert mox_file.get_size(local, recursive=True) == sum(len(data) for data in files.values())
    assert mox_file.get_size(remote) == len(files["a.txt"]) + len(files["empty.bin"])

    walked = [(folder[len(remote):], dirs, names) for folder, dirs, names in mox_file.walk(remote)]
    expected = [(folder[len(local):], sorted(d for d in dirs if d != "more"), sorted(names))
                for folder, dirs, names in os.walk(local) if not folder.endswith("more")]
    assert sorted(walked) == sorted(expected)

    assert mox_file.glob(f"{remote}/sub/deeper/*.bin") == [f"{remote}/sub/deeper/c.bin"]
    assert sorted(mox_file.glob(f"{remote}/*.txt")) == [f"{remote}/a.txt"]
    assert mox_file.glob(os.path.join(local, "sub", "*", "*.txt")) == pyglob.glob(
        os.path.join(local, "sub", "*", "*.txt"))

    entries = list(mox_file.scan_dir(remote))
    assert [(entry.name, entry.is_dir()) for entry in entries] == [
        ("a.txt", False), ("big", True), ("empty.bin", False), ("sub", True)]
    assert entries[0].path == f"{remote}/a.txt" and entries[0].stat().length == len(files["a.txt"])
    local_entries = sorted((entry.name, entry.is_dir()) for entry in mox_file.scan_dir(local))
    assert local_entries == sorted((entry.name, entry.is_dir()) for entry in os.scandir(local))


@pytest.mark.parametrize("where", ["local", "s3", "obs"])
def test_read_write_append_make_remove_rename_same_on_every_store(s3, bucket, tmp_path, where):
    root = str(tmp_path / "root") if where == "local" else f"{where}://{bucket}/root"
    join = storage.join
    mox_file.write(join(root, "notes/n.txt"), "first line\n")
    mox_file.append(join(root, "notes/n.txt"), "second line\n")
    mox_file.append(join(root, "notes/new.txt"), b"\x00\xff")
    assert mox_file.read(join(root, "notes/n.txt")) == "first line\nsecond line\n"
    assert mox_file.read(join(root, "notes/new.txt"), binary=True) == b"\x00\xff"
    mox_file.write(join(root, "notes/n.txt"), b"replaced")
    assert mox_file.read(join(root, "notes/n.txt"), binary=True) == b"replaced"

    mox_file.make_dirs(join(root, "made/a/b"))
    mox_file.make_dirs(join(root, "made/a/b"))  # exist_ok, as os.makedirs(..., exist_ok=True)
    assert mox_file.is_directory(join(root, "made/a/b")) and mox_file.exists(join(root, "made/a"))
    mox_file.mk_dir(join(root, "single"))
    assert mox_file.is_directory(join(root, "single"))
    with pytest.raises(OSError):
        mox_file.mk_dir(join(root, "single"))

    mox_file.copy(join(root, "notes/new.txt"), join(root, "copied/new.txt"))
    assert mox_file.read(join(root, "copied/new.txt"), binary=True) == b"\x00\xff"
    mox_file.rename(join(root, "copied/new.txt"), join(root, "moved.bin"))
    assert not mox_file.exists(join(root, "copied/new.txt"))
    assert mox_file.read(join(root, "moved.bin"), binary=True) == b"\x00\xff"
    mox_file.rename(join(root, "notes"), join(root, "notes2"))
    assert not mox_file.exists(join(root, "notes"))
    assert mox_file.list_directory(join(root, "notes2")) == ["n.txt", "new.txt"]

    mox_file.remove(join(root, "notes2"))  # a folder without recursive: MoXing's table says "do nothing"
    assert mox_file.list_directory(join(root, "notes2")) == ["n.txt", "new.txt"]
    mox_file.remove(join(root, "moved.bin"))
    assert not mox_file.exists(join(root, "moved.bin"))
    with pytest.raises(MissingPathError):
        mox_file.remove(join(root, "moved.bin"))
    mox_file.remove(join(root, "notes2"), recursive=True)
    assert not mox_file.exists(join(root, "notes2"))
    with pytest.raises(MissingPathError):
        mox_file.read(join(root, "notes2/n.txt"))
    with pytest.raises(FileNotFoundError):  # still the built-in a Python caller catches
        mox_file.list_directory(join(root, "nowhere"))


def test_copy_and_rename_across_local_and_object_storage(s3, bucket, tmp_path):
    files = make_tree(tmp_path / "src")
    mox_file.copy(str(tmp_path / "src" / "sub" / "b.bin"), f"s3://{bucket}/one/b.bin")
    mox_file.copy(f"s3://{bucket}/one/b.bin", f"obs://{bucket}/two/b.bin")
    mox_file.copy(f"s3://{bucket}/two/b.bin", str(tmp_path / "back" / "b.bin"))
    assert (tmp_path / "back" / "b.bin").read_bytes() == files["sub/b.bin"]
    with pytest.raises(ObjectStorageError, match="copy_parallel"):
        mox_file.copy(f"s3://{bucket}/one", str(tmp_path / "x"))

    mox_file.rename(str(tmp_path / "src"), f"s3://{bucket}/renamed")  # a local folder up
    assert not (tmp_path / "src").exists()
    mox_file.rename(f"s3://{bucket}/renamed", str(tmp_path / "again"))  # and down
    assert local_files(tmp_path / "again") == files
    assert not mox_file.exists(f"s3://{bucket}/renamed")


def test_file_object_with_flush_logging_and_append(s3, bucket):
    url = f"s3://{bucket}/logs/train.log"
    client = s3.client()
    with mox_file.File(url, "w") as stream:
        stream.write("line 1\n")
        stream.flush()
        # flush() pushed it: the server has it while the file is still open.
        assert client.get_object(Bucket=bucket, Key="logs/train.log")["Body"].read() == b"line 1\n"
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
        logger = logging.getLogger("test_mox_file.file_object")
        logger.propagate = False
        logger.addHandler(handler)
        logger.warning("through logging")
        logger.removeHandler(handler)
        assert client.get_object(Bucket=bucket, Key="logs/train.log")["Body"].read() == (
            b"line 1\nWARNING through logging\n")
    assert stream.closed
    with mox_file.File(url, "a") as stream:
        stream.write("appended\n")
    with mox_file.File(url, "r") as stream:
        assert list(stream) == ["line 1\n", "WARNING through logging\n", "appended\n"]
    with mox_file.File(url, "rb") as stream:
        assert stream.read(4) == b"line"
    with pytest.raises(ObjectStorageError, match="mode"):
        mox_file.File(url, "x")
    with pytest.raises(MissingPathError):
        mox_file.File(f"s3://{bucket}/missing.txt")


def test_file_object_works_with_pandas(s3, bucket):
    import pandas  # in the test extra: mox.File must be usable by pandas (issue 12)
    frame = pandas.DataFrame({"id": [1, 2, 3], "score": [0.5, 0.25, 0.125]})
    with mox_file.File(f"s3://{bucket}/table.csv", "w") as stream:
        frame.to_csv(stream, index=False)
    with mox_file.File(f"s3://{bucket}/table.csv", "r") as stream:
        back = pandas.read_csv(stream)
    assert back.equals(frame)


def wait_for(predicate, seconds=30.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def test_background_sync_catches_up_with_files_written_after_it_started(s3, bucket, tmp_path):
    local = tmp_path / "train"
    local.mkdir()
    (local / "before.txt").write_bytes(b"before")
    remote = f"s3://{bucket}/train"
    client = s3.client()

    def remote_bytes(key):
        try:
            return client.get_object(Bucket=bucket, Key=f"train/{key}")["Body"].read()
        except client.exceptions.NoSuchKey:
            return None

    sync = mox_file.background_sync_copy(str(local), remote, seconds=0.2)
    try:
        assert wait_for(lambda: remote_bytes("before.txt") == b"before")
        (local / "events").mkdir()
        (local / "events" / "after.bin").write_bytes(b"\x01" * 1000)
        assert wait_for(lambda: remote_bytes("events/after.bin") == b"\x01" * 1000)
        (local / "before.txt").write_bytes(b"changed, longer")
        assert wait_for(lambda: remote_bytes("before.txt") == b"changed, longer")
        (local / "last.txt").write_bytes(b"last")
    finally:
        sync.stop(final_sync=True)
    assert remote_bytes("last.txt") == b"last"  # the final round ran
    assert sync.failed_rounds == 0 and sync.rounds >= 3


def test_background_sync_skips_a_failed_round_and_keeps_going(s3, tmp_path, caplog):
    local = tmp_path / "train"
    local.mkdir()
    (local / "x.txt").write_text("x")
    missing = f"nobucket-{free_port()}"
    logs.get_logger().addHandler(caplog.handler)   # moxlite's channel does not propagate to the root logger
    sync = mox_file.background_sync_copy(str(local), f"s3://{missing}/train", seconds=0.1)
    try:
        assert wait_for(lambda: sync.failed_rounds >= 2, seconds=30)
        assert sync._thread.is_alive()
        assert isinstance(sync.last_error, MissingPathError)
    finally:
        with pytest.raises(MissingPathError, match=missing):
            sync.stop(final_sync=True)
        logs.get_logger().removeHandler(caplog.handler)
    assert "round skipped" in caplog.text


def one_line(error):
    text = str(error.value)
    assert "\n" not in text and "Traceback" not in text
    return text


def test_missing_bucket_is_one_clear_error(s3, tmp_path):
    make_tree(tmp_path / "src")
    for call in (lambda: mox_file.read("s3://no-such-bucket-here/x.txt"),
                 lambda: mox_file.list_directory("s3://no-such-bucket-here/dir"),
                 lambda: mox_file.copy_parallel(str(tmp_path / "src"), "s3://no-such-bucket-here/dir"),
                 lambda: mox_file.make_dirs("s3://no-such-bucket-here/dir")):
        with pytest.raises(MissingPathError) as error:
            call()
        assert "bucket 'no-such-bucket-here' does not exist" in one_line(error)
    assert error.value.exit_code == 2


def test_wrong_credentials_are_one_clear_error(s3, bucket):
    mox_file.write(f"s3://{bucket}/secret.txt", "payload")
    with s3.checking_credentials() as (key, secret):
        s3.set_environment(AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret)
        assert mox_file.read(f"s3://{bucket}/secret.txt") == "payload"  # the right key is accepted
        s3.set_environment(AWS_SECRET_ACCESS_KEY="not-the-secret")
        with pytest.raises(StorageAccessError) as error:
            mox_file.read(f"s3://{bucket}/secret.txt")
        assert "refused" in one_line(error) and "AWS_SECRET_ACCESS_KEY" in one_line(error)
        s3.set_environment(AWS_ACCESS_KEY_ID="AKIAUNKNOWN000000000", AWS_SECRET_ACCESS_KEY=secret)
        with pytest.raises(StorageAccessError) as error:
            mox_file.exists(f"s3://{bucket}/secret.txt")
        assert "refused" in one_line(error)
        mox_file.set_auth(ak=key, sk=secret)  # set_auth wins over the environment
        try:
            assert mox_file.read(f"s3://{bucket}/secret.txt") == "payload"
        finally:
            mox_file.reset_auth()
    s3.set_environment(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")


def test_unreachable_endpoint_fails_in_bounded_time(s3):
    closed = f"http://127.0.0.1:{free_port()}"
    s3.set_environment(S3_ENDPOINT=closed)
    try:
        for call in (lambda: mox_file.exists("s3://bucket/x"), lambda: mox_file.write("s3://bucket/x", "y")):
            started = time.monotonic()
            with pytest.raises(StorageUnreachableError) as error:
                call()
            assert time.monotonic() - started < 30
            assert closed in one_line(error) and "S3_ENDPOINT" in one_line(error)
    finally:
        s3.set_environment(S3_ENDPOINT=s3.url)


def test_bad_paths_are_refused_up_front():
    with pytest.raises(ObjectStorageError, match="hdfs"):
        mox_file.read("hdfs://cluster/x")
    with pytest.raises(ObjectStorageError, match="names no bucket"):
        mox_file.exists("s3://")


def test_endpoint_from_the_environment_as_modelarts_sets_it(monkeypatch):
    for name in ("S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "S3_USE_HTTPS"):
        monkeypatch.delenv(name, raising=False)
    assert mox_file.endpoint_url() is None
    monkeypatch.setenv("S3_ENDPOINT", "obs.example-region.example.com")
    assert mox_file.endpoint_url() == "https://obs.example-region.example.com"
    monkeypatch.setenv("S3_USE_HTTPS", "0")
    assert mox_file.endpoint_url() == "http://obs.example-region.example.com"
    mox_file.set_auth(server="10.0.0.1", port=9000, is_secure=True)
    try:
        assert mox_file.endpoint_url() == "https://10.0.0.1:9000"
    finally:
        mox_file.reset_auth()
