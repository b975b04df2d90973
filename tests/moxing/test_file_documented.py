"""``mox.file`` against MoXing's file API documentation, one test per row of its conformance table.

The documentation: huaweicloud/ModelArts-Lab ``docs/moxing_api_doc/MoXing_API_File_apidoc.md``
and ``MoXing_API_File.md``. Each case runs on a local folder and on the loopback S3 server
(moto). Independent references: Python's ``open``/``os`` on a local twin of the same
data, and boto3 reading the server directly (never ``mox.file`` itself).
"""

import os
import shutil

import pytest

from moxlite import file as mox_file
from moxlite import logs
from moxlite.file import storage
from moxlite.file.errors import ObjectStorageError
from tests.s3lib import S3Server
from tests.s3lib import s3  # noqa: F401  (the server fixture)

WHERE = ["local", "s3"]


@pytest.fixture
def bucket(s3):
    return s3.new_bucket()


@pytest.fixture(params=WHERE)
def root(request, tmp_path):
    """A folder URL on local disk or on the S3 server (obs:// is the same store; see tests/moxing/test_file.py)."""
    if request.param == "local":
        return str(tmp_path / "root")
    server = request.getfixturevalue("s3")
    return f"s3://{server.new_bucket()}/root"


def join(base, name):
    return storage.join(base, name)


def stored(url, s3_server=None):
    """{relative path: bytes} of every file under the folder ``url``, read without mox.file."""
    if not storage.is_remote(url):
        found = {}
        for folder, _, names in os.walk(url):
            for name in names:
                with open(os.path.join(folder, name), "rb") as stream:
                    found[os.path.relpath(os.path.join(folder, name), url).replace(os.sep, "/")] = stream.read()
        return found
    bucket, _, prefix = url.split("://", 1)[1].partition("/")
    client = s3_server.client()
    found = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for item in page.get("Contents", []):
            found[item["Key"][len(prefix) + 1:]] = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
    return found


def put(url, files):
    for name, data in files.items():
        mox_file.write(join(url, name), data)


@pytest.fixture
def server(request):
    """The S3 server when the test runs on object storage (None locally)."""
    return request.getfixturevalue("s3")


# --- remove: the documentation's table of cases ------------------------------------------------

TREE = {"file": b"F", "file2": b"G", "dir/a": b"A", "dir/sub/b": b"B", "dir2/c": b"C"}

REMOVE_CASES = [
    # (path as written, recursive, what must be gone)
    ("file", False, {"file"}),
    ("file", True, {"file"}),
    ("file/", False, set()),
    ("file/", True, set()),
    ("dir", False, set()),
    ("dir", True, {"dir/a", "dir/sub/b"}),
    ("dir/", False, set()),
    ("dir/", True, {"dir/a", "dir/sub/b"}),
]


@pytest.mark.parametrize("written, recursive, gone", REMOVE_CASES,
                         ids=[f"{path}-recursive={flag}" for path, flag, _ in REMOVE_CASES])
def test_remove_follows_the_documented_table(root, server, written, recursive, gone, caplog):
    put(root, TREE)
    target = root + "/" + written if storage.is_remote(root) else os.path.join(root, *written.split("/")) + (
        os.sep if written.endswith("/") else "")
    logs.get_logger().addHandler(caplog.handler)
    try:
        mox_file.remove(target, recursive=recursive)
    finally:
        logs.get_logger().removeHandler(caplog.handler)
    expected = {name: data for name, data in TREE.items() if name not in gone}
    assert stored(root, server) == expected
    if not gone:
        assert "did nothing" in caplog.text  # the "do nothing" cases say so, on one line


def test_remove_of_a_missing_path_or_a_bucket_is_refused(root, server):
    with pytest.raises(FileNotFoundError):
        mox_file.remove(join(root, "nothing-here"))
    with pytest.raises(mox_file.MoxFileNotExistsException):
        mox_file.remove(join(root, "nothing-here"), recursive=True)
    if storage.is_remote(root):
        bucket = root.split("://")[1].split("/")[0]
        put(root, {"kept": b"k"})
        with pytest.raises(ObjectStorageError, match="does not delete buckets"):
            mox_file.remove(f"s3://{bucket}", recursive=True)
        assert stored(root, server) == {"kept": b"k"}


# --- copy into a folder ------------------------------------------------------------------------

@pytest.mark.parametrize("source_where, target_where", [("s3", "local"), ("local", "s3"), ("s3", "s3"),
                                                         ("local", "local")])
def test_copy_to_an_existing_folder_is_isadirectoryerror_and_writes_nothing(s3, tmp_path, source_where,
                                                                           target_where):
    bucket = s3.new_bucket()
    places = {"local": str(tmp_path), "s3": f"s3://{bucket}"}
    source = join(places[source_where], "src/data.bin")
    folder = join(places[target_where], "out")
    mox_file.write(source, b"payload")
    mox_file.write(join(folder, "already.txt"), b"there")
    for target in (folder, folder + "/"):
        with pytest.raises(IsADirectoryError, match=r"copy takes the new file's path, e\.g\. .*out/data\.bin"):
            mox_file.copy(source, target)
    assert stored(folder, s3) == {"already.txt": b"there"}
    mox_file.copy(source, join(folder, "data.bin"))  # the path the message names works
    assert stored(folder, s3) == {"already.txt": b"there", "data.bin": b"payload"}
    with pytest.raises(IsADirectoryError, match="copy_parallel"):
        mox_file.copy(folder, join(places[source_where], "elsewhere"))


# --- File: every documented mode ---------------------------------------------------------------

INITIAL = "héllo\nworld\n"


def exercise(stream, binary):
    """The same calls on any file object; returns what they answered."""
    text = (lambda value: value.encode("utf-8")) if binary else (lambda value: value)
    answers = [stream.readable(), stream.writable(), stream.seekable()]
    if stream.readable():
        answers.append(stream.read(3))
    if stream.writable():
        stream.write(text("XY\n"))
        stream.writelines([text("l1\n"), text("l2\n")])
    if stream.readable():
        stream.seek(0)
        answers += [stream.readline(), stream.readlines()]
    answers.append(stream.tell())
    return answers


MODES = mox_file.file_object.DOCUMENTED_MODES + ("rb+",)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("exists", [True, False], ids=["existing", "missing"])
def test_every_documented_mode_does_what_open_does(root, server, tmp_path, mode, exists):
    reference = str(tmp_path / "reference.txt")
    url = join(root, "f.txt")
    if exists:
        for path in (reference, url):
            mox_file.write(path, INITIAL)
    binary = "b" in mode
    try:  # Python's open takes MoXing's spellings ('br+') as they are
        expected_stream = open(reference, mode, **({} if binary else {"encoding": "utf-8"}))
    except FileNotFoundError:
        with pytest.raises(FileNotFoundError):
            mox_file.File(url, mode)
        with pytest.raises(mox_file.MoxFileNotExistsException):
            mox_file.File(url, mode)
        return
    with expected_stream:
        expected = exercise(expected_stream, binary)
    with mox_file.File(url, mode) as stream:
        assert stream.mode == mode and stream.name == url
        answers = exercise(stream, binary)
    assert answers == expected
    with open(reference, "rb") as check:
        expected_bytes = check.read()
    assert stored(root, server).get("f.txt") == expected_bytes


def test_read_plus_uploads_only_once_written(s3, bucket):
    url = f"s3://{bucket}/r-plus.txt"
    mox_file.write(url, "original")
    stream = mox_file.File(url, "r+")
    assert stream.read() == "original"
    s3.client().put_object(Bucket=bucket, Key="r-plus.txt", Body=b"changed by someone else")
    stream.close()  # nothing was written: the object is not replaced by the stale copy
    assert s3.client().get_object(Bucket=bucket, Key="r-plus.txt")["Body"].read() == b"changed by someone else"
    with mox_file.File(url, "r+") as stream:
        stream.seek(8)
        stream.write("!")
        stream.flush()  # flushed: the server has it while the file is open
        assert s3.client().get_object(Bucket=bucket, Key="r-plus.txt")["Body"].read() == (
            b"changed !y someone else")


def test_an_undocumented_mode_and_a_folder_are_refused(root):
    mox_file.make_dirs(join(root, "folder"))
    mox_file.write(join(root, "folder/x"), "x")
    for mode in ("x", "rw", "rb+b", "q"):
        with pytest.raises(ObjectStorageError, match=r"mode must be one of 'r', 'w', 'a', 'r\+'"):
            mox_file.File(join(root, "f.txt"), mode)
    with pytest.raises(IsADirectoryError):
        mox_file.File(join(root, "folder"), "r")
    with pytest.raises(IsADirectoryError):
        mox_file.read(join(root, "folder"))


# --- File.size ---------------------------------------------------------------------------------

def test_file_size_counts_the_bytes_in_the_file_now(root):
    url = join(root, "sized.bin")
    mox_file.write(url, b"0123456789")
    with mox_file.File(url, "rb") as stream:
        assert stream.size() == 10
        stream.read(4)
        assert stream.size() == 10
    with mox_file.File(url, "ab") as stream:
        stream.write(b"abc")
        assert stream.size() == 13  # unflushed bytes count
    with mox_file.File(url, "w") as stream:
        assert stream.size() == 0
        stream.write("ü")
        assert stream.size() == len("ü".encode("utf-8"))


# --- list_directory's options ------------------------------------------------------------------

LISTED = {"a.txt": b"a", "b/c.txt": b"c", "b/d/e.txt": b"e", "f/g.txt": b"g"}


@pytest.mark.parametrize("recursive", [False, True])
def test_list_directory_skip_dir_skip_file_remove_sep(root, tmp_path, recursive):
    put(root, LISTED)
    twin = tmp_path / "twin"  # os.walk's view of the same tree
    put(str(twin), LISTED)
    files, folders = set(), set()
    for folder, subfolders, names in os.walk(twin):
        relative = os.path.relpath(folder, twin)
        prefix = "" if relative == "." else relative.replace(os.sep, "/") + "/"
        if recursive or not prefix:
            files |= {prefix + name for name in names}
            folders |= {prefix + name for name in subfolders}
    assert mox_file.list_directory(root, recursive=recursive) == sorted(files | folders)
    assert mox_file.list_directory(root, recursive=recursive, skip_dir=True) == sorted(files)
    assert mox_file.list_directory(root, recursive=recursive, skip_file=True) == sorted(folders)
    assert mox_file.list_directory(root, recursive=recursive, remove_sep=False) == sorted(
        files | {name + "/" for name in folders})
    assert mox_file.list_directory(url=root, recursive=recursive, remove_sep=False, skip_dir=True) == sorted(files)
    with pytest.raises(NotADirectoryError):
        mox_file.list_directory(join(root, "a.txt"))


# --- set_auth's arguments ----------------------------------------------------------------------

def client_config():
    """The botocore config of the S3 client mox.file uses now (after one request made it)."""
    return storage.remote_filesystem().s3.meta.config


def test_set_auth_passes_its_documented_arguments_to_the_s3_client(s3, bucket):
    mox_file.write(f"s3://{bucket}/x", "x")
    try:
        mox_file.set_auth(ak="testing", sk="testing", server=s3.url, ssl_verify=False, path_style=True,
                          retry=2, retry_wait=0.5, client_timeout=7, long_conn_mode=True, list_max_keys=50)
        assert mox_file.read(f"s3://{bucket}/x") == "x"  # path style: what a loopback server needs
        config = client_config()
        assert config.s3 == {"addressing_style": "path"}
        assert config.retries["total_max_attempts"] == 2 and storage.remote_filesystem().retries == 2
        assert (config.connect_timeout, config.read_timeout) == (7, 7)
        assert config.tcp_keepalive is True
        assert storage.auth_settings()["retry_wait"] == 0.5 and storage.auth_settings()["list_max_keys"] == 50
        mox_file.set_auth(path_style=False, client_timeout=3, read_timeout=9)
        storage.remote_filesystem().connect()
        config = client_config()
        assert config.s3 == {"addressing_style": "virtual"}
        assert (config.connect_timeout, config.read_timeout) == (3, 9)
    finally:
        mox_file.reset_auth()


@pytest.mark.parametrize("argument, value, fix", [
    ("path_style", "yes", "give True or False"), ("retry", 0, "give a positive number"),
    ("retry", 1.5, "give a whole number"), ("client_timeout", -1, "give a positive number"),
    ("ak", 123, "give a string"), ("long_conn_mode", 1, "give True or False")])
def test_set_auth_refuses_a_wrong_value_before_changing_anything(argument, value, fix):
    mox_file.set_auth(retry=5)
    try:
        with pytest.raises(ObjectStorageError) as error:
            mox_file.set_auth(server="elsewhere.example", **{argument: value})
        assert str(error.value) == f"mox.file.set_auth({argument}={value!r}): {fix}"
        assert storage.auth_settings() == {"retry": 5}
    finally:
        mox_file.reset_auth()


# --- append_remote -----------------------------------------------------------------------------

@pytest.mark.parametrize("target_exists", [True, False])
def test_append_remote_adds_one_file_at_the_end_of_another(root, server, target_exists):
    mox_file.write(join(root, "data0.bin"), b"\x00tail")
    if target_exists:
        mox_file.write(join(root, "data1.bin"), b"head")
    mox_file.append_remote(join(root, "data0.bin"), join(root, "data1.bin"))
    files = stored(root, server)
    assert files["data1.bin"] == (b"head" if target_exists else b"") + b"\x00tail"
    assert files["data0.bin"] == b"\x00tail"
    with pytest.raises(FileNotFoundError):
        mox_file.append_remote(join(root, "missing.bin"), join(root, "data1.bin"))
    assert stored(root, server)["data1.bin"] == files["data1.bin"]


# --- the documented exception classes, and the built-ins --------------------------------------

def test_missing_path_is_moxfilenotexists_filenotfound_and_a_404_response(root):
    for call in (lambda: mox_file.stat(join(root, "not_exists")), lambda: mox_file.read(join(root, "nope")),
                 lambda: mox_file.File(join(root, "nope"), "rb"), lambda: mox_file.get_size(join(root, "nope"))):
        with pytest.raises(mox_file.MoxFileNotExistsException) as error:
            call()
        assert isinstance(error.value, FileNotFoundError) and isinstance(error.value, OSError)
        if storage.is_remote(root):
            assert isinstance(error.value, mox_file.MoxFileRespException) and error.value.resp.status == 404


def test_refused_request_is_moxfileresp_permissionerror_with_a_403(s3, bucket):
    mox_file.write(f"s3://{bucket}/secret.txt", "payload")
    with s3.checking_credentials() as (key, secret):
        s3.set_environment(AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY="not-the-secret")
        try:
            with pytest.raises(mox_file.MoxFileRespException) as error:
                mox_file.read(f"s3://{bucket}/secret.txt")
        finally:
            s3.set_environment(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    assert isinstance(error.value, PermissionError)
    assert error.value.resp.status == 403 and error.value.resp.code


def test_clashing_object_names_are_moxfilenameduplicate_before_any_copy(s3, bucket, tmp_path):
    client = s3.client()
    client.put_object(Bucket=bucket, Key="t/a", Body=b"a file")
    client.put_object(Bucket=bucket, Key="t/a/b", Body=b"under a folder of the same name")
    client.put_object(Bucket=bucket, Key="t/c", Body=b"c")
    with pytest.raises(mox_file.MoxFileNameDuplicateException) as error:
        mox_file.copy_parallel(f"s3://{bucket}/t", str(tmp_path / "down"))
    assert isinstance(error.value, FileExistsError) and "'a/b'" in str(error.value)
    assert stored(str(tmp_path / "down")) == {}  # nothing was copied
    client.delete_object(Bucket=bucket, Key="t/a")
    (tmp_path / "in-the-way").mkdir()
    (tmp_path / "in-the-way" / "a").write_bytes(b"a local file where a folder must go")
    with pytest.raises(mox_file.MoxFileNameDuplicateException, match="a local file"):
        mox_file.copy_parallel(f"s3://{bucket}/t", str(tmp_path / "in-the-way"))
    assert stored(str(tmp_path / "in-the-way")) == {"a": b"a local file where a folder must go"}


def test_a_read_broken_after_200_is_moxfilereadexception(tmp_path):
    server = S3Server().start()  # its own server: this test stops it mid-read
    try:
        bucket = server.new_bucket()
        data = os.urandom(mox_file.file_object.READ_BLOCK_BYTES * 2 + 5)
        server.client().put_object(Bucket=bucket, Key="big.bin", Body=data)
        mox_file.set_auth(retry=1, client_timeout=2)
        stream = mox_file.File(f"s3://{bucket}/big.bin", "rb")
        assert stream.read(10) == data[:10]  # the first block came with 200 OK
        server.process.terminate()
        server.process.wait(10)
        with pytest.raises(mox_file.MoxFileReadException) as error:
            stream.read()
        assert isinstance(error.value, ConnectionError) and error.value.resp.status == 200
        assert "broke while reading" in str(error.value)
    finally:
        mox_file.reset_auth()
        server.stop()


def test_builtin_errors_python_users_catch(root):
    mox_file.write(join(root, "file.txt"), "x")
    mox_file.make_dirs(join(root, "folder"))
    mox_file.write(join(root, "folder/inner.txt"), "y")
    with pytest.raises(FileExistsError):
        mox_file.mk_dir(join(root, "folder"))
    with pytest.raises(IsADirectoryError):
        mox_file.copy(join(root, "folder"), join(root, "copy"))
    with pytest.raises(NotADirectoryError):
        list(mox_file.scan_dir(join(root, "file.txt")))
    with pytest.raises(FileNotFoundError):  # mk_dir's documented OSError: the parent is missing
        mox_file.mk_dir(join(root, "missing/new"))
    assert not mox_file.exists(join(root, "missing"))
    with pytest.raises(ObjectStorageError):  # and still a moxlite error: one line, exit code 2
        mox_file.read(join(root, "gone.txt"))


# --- the other documented arguments ------------------------------------------------------------

def test_documented_argument_names_work_as_keywords(root, server, tmp_path):
    mox_file.write(url=join(root, "k/a.txt"), data="a", binary=False)
    mox_file.append(url=join(root, "k/a.txt"), data=b"b", binary=True)
    assert mox_file.read(url=join(root, "k/a.txt"), client_id=3, binary=True) == b"ab"
    mox_file.copy(src_url=join(root, "k/a.txt"), dst_url=join(root, "k/b.txt"), client_id=3)
    assert mox_file.copy_parallel(src_url=join(root, "k"), dst_url=join(root, "k2"), file_list=["a.txt"],
                                  threads=2, is_processing=True, use_queue=True) == 1
    assert stored(join(root, "k2"), server) == {"a.txt": b"ab"}
    mox_file.rename(src_url=join(root, "k2"), dst_url=join(root, "k3"))
    assert mox_file.exists(url=join(root, "k3/a.txt")) and not mox_file.exists(url=join(root, "k2"))
    assert mox_file.is_directory(url=join(root, "k3"))
    assert mox_file.stat(src_url=join(root, "k/b.txt")).length == 2
    assert sorted(mox_file.glob(url=join(root, "k/*.txt"))) == [join(root, "k/a.txt"), join(root, "k/b.txt")]
    assert [entry.name for entry in mox_file.scan_dir(url=join(root, "k"))] == ["a.txt", "b.txt"]
    mox_file.make_dirs(url=join(root, "m/n"))
    mox_file.mk_dir(url=join(root, "m/o"))
    assert mox_file.list_directory(url=join(root, "m")) == ["n", "o"]
    assert [sorted(triple[2]) for triple in mox_file.walk(url=join(root, "k"), topdown=True, onerror=None,
                                                           followlinks=False)] == [["a.txt", "b.txt"]]
    mox_file.remove(url=join(root, "k/b.txt"), recursive=False)
    assert stored(join(root, "k"), server) == {"a.txt": b"ab"}


def test_get_size_of_a_local_folder_is_always_its_whole_tree(root):
    put(root, {"top.bin": b"12", "sub/deep.bin": b"345"})
    if storage.is_remote(root):
        assert mox_file.get_size(root) == 2  # object storage: the objects right under it
    else:
        assert mox_file.get_size(root) == 5  # documented: local is always recursive
    assert mox_file.get_size(root, recursive=True) == 5


def test_walk_followlinks_is_os_walks_on_local_paths(tmp_path):
    put(str(tmp_path / "real"), {"x.txt": b"x"})
    (tmp_path / "tree").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "tree" / "link")
    for follow in (False, True):
        assert list(mox_file.walk(str(tmp_path / "tree"), followlinks=follow)) == list(
            os.walk(str(tmp_path / "tree"), followlinks=follow))


# --- shift('os', 'mox') --------------------------------------------------------------------------

def test_shift_lets_pythons_file_calls_take_object_storage_paths(s3, bucket, tmp_path):
    import glob as pyglob

    remote = f"s3://{bucket}/shifted"
    local = str(tmp_path / "local")
    original_open = open
    mox_file.shift("os", "mox")
    try:
        for base in (remote, local):  # the same calls, and the same answers, on both
            os.makedirs(base + "/sub", exist_ok=True)
            with open(base + "/sub/hello.txt", "w") as stream:
                stream.write("hello world")
            with open(base + "/sub/hello.txt") as stream:
                assert stream.read() == "hello world"
            assert os.listdir(base) == ["sub"] and os.listdir(base + "/sub") == ["hello.txt"]
            assert os.path.exists(base + "/sub/hello.txt") and os.path.isdir(base + "/sub")
            assert os.path.getsize(base + "/sub/hello.txt") == 11
            assert os.stat(base + "/sub/hello.txt").st_size == 11
            assert [entry.name for entry in os.scandir(base + "/sub")] == ["hello.txt"]
            assert pyglob.glob(base + "/sub/*.txt") == [base + "/sub/hello.txt"]
            shutil.copyfile(base + "/sub/hello.txt", base + "/copy.txt")
            os.rename(base + "/copy.txt", base + "/moved.txt")
            shutil.copytree(base + "/sub", base + "/tree")
            assert sorted(os.listdir(base)) == ["moved.txt", "sub", "tree"]
            assert [names for _, _, names in os.walk(base + "/tree")] == [["hello.txt"]]
            os.remove(base + "/moved.txt")
            shutil.rmtree(base + "/tree")
            assert sorted(os.listdir(base)) == ["sub"]
        with pytest.raises(FileExistsError):
            os.makedirs(remote + "/sub")
        assert stored(remote, s3) == {"sub/": b"", "sub/hello.txt": b"hello world"}  # with make_dirs' marker
    finally:
        mox_file.shift("mox", "os")
    assert open is original_open
    with pytest.raises(FileNotFoundError):  # Python's own open again: s3:// is a local name
        open(remote + "/sub/hello.txt")
    with pytest.raises(ObjectStorageError, match=r"give shift\('os', 'mox'\)"):
        mox_file.shift("os", "tf")


def test_framework_import_path_is_moxings():
    from moxlite.framework import file

    import moxlite as mox

    assert file is mox.file and file.File is mox.File
