"""mox.file in atexit handlers (issue 31 item 3), each script in its own interpreter.

ModelArts scripts copy their local cache back to OBS from an ``atexit`` handler. There Python
starts no new thread-pool work, so ``copy_parallel`` used to raise "cannot schedule new futures
after interpreter shutdown", printed as "Exception ignored in atexit callback", and the job
exited 0 with nothing uploaded. The reference for what arrived is the source tree itself
(local: ``filecmp``; object storage: boto3's listing and bytes).
"""

import filecmp
import os
import subprocess
import sys
import textwrap

from tests.s3lib import s3  # noqa: F401 -- the module's S3 server fixture
from tests import ROOT


def run_script(source, cwd, extra_env=None):
    environ = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3", **(extra_env or {}))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(source)], capture_output=True, text=True,
                          timeout=120, env=environ, cwd=cwd)


def make_tree(base):
    os.makedirs(os.path.join(base, "train", "deep"))
    for name, text in {"train/1.txt": "one", "train/deep/2.txt": "two", "eval.txt": "three"}.items():
        with open(os.path.join(base, name), "w", encoding="utf-8") as stream:
            stream.write(text)


def same_tree(left, right):
    comparison = filecmp.dircmp(left, right)
    if comparison.left_only or comparison.right_only or comparison.diff_files or comparison.funny_files:
        return False
    return all(same_tree(os.path.join(left, sub), os.path.join(right, sub)) for sub in comparison.common_dirs)


EVERY_OPERATION = """
    import atexit
    import moxlite as mox
    {touch_before}

    def at_exit():
        f = mox.file
        f.copy_parallel("src", "out/tree")
        f.copy("src/eval.txt", "out/copied.txt")
        f.make_dirs("out/made/deeper")
        f.mk_dir("out/one")
        f.write("out/written.txt", "w1")
        f.append("out/written.txt", "+a")
        with f.File("out/file_object.txt", "w") as stream:
            stream.write("fo")
        f.copy_parallel("src", "out/to_move")
        f.rename("out/to_move", "out/moved")
        f.copy("src/eval.txt", "out/to_remove.txt")
        f.remove("out/to_remove.txt")
        print("read", f.read("out/written.txt"))
        print("exists", f.exists("out/tree/train/deep/2.txt"), f.is_directory("out/made/deeper"))
        print("list", sorted(f.list_directory("out/tree")), f.get_size("out/copied.txt"),
              f.stat("out/copied.txt").length)
        print("walk", sorted(name for _, _, names in f.walk("out/tree") for name in names))
        print("glob", sorted(os.path.basename(p) for p in f.glob("out/tree/train/*.txt")))
        sync = f.background_sync_copy("src", "out/synced", seconds=3600)
        sync.sync_now()
        sync.stop()

    import os
    atexit.register(at_exit)
    print("main done")
"""


def test_every_operation_works_in_an_atexit_handler(tmp_path):
    for touch_before in ("mox.file.exists('src')", "pass"):   # mox.file imported before, or first there
        case = tmp_path / touch_before.split("(")[0].replace(".", "_")
        make_tree(str(case / "src"))
        finished = run_script(EVERY_OPERATION.format(touch_before=touch_before), cwd=str(case))
        assert finished.returncode == 0, finished.stderr[-3000:]
        assert "Exception ignored" not in finished.stderr
        assert finished.stdout.splitlines() == [
            "main done", "read w1+a", "exists True True", "list ['eval.txt', 'train'] 5 5",
            "walk ['1.txt', '2.txt', 'eval.txt']", "glob ['1.txt']"]
        source = str(case / "src")
        for copied in ("out/tree", "out/moved", "out/synced"):
            assert same_tree(source, str(case / copied)), copied
        assert not (case / "out" / "to_move").exists() and not (case / "out" / "to_remove.txt").exists()
        assert (case / "out" / "copied.txt").read_text() == "three"
        assert (case / "out" / "file_object.txt").read_text() == "fo"
        assert (case / "out" / "made" / "deeper").is_dir() and (case / "out" / "one").is_dir()


FAILING_UPLOAD = """
    import atexit
    import moxlite as mox
    {register_before}
    mox.file.exists("src")
    {register_after}
    print("main done")
"""
HANDLER = "atexit.register(lambda: mox.file.copy_parallel('src', 'a_file/tree'))"


def test_an_upload_that_fails_in_an_atexit_handler_is_an_error_and_a_non_zero_exit(tmp_path):
    # Registered after mox.file's import (the usual order) and before it (the exit comes at once).
    for register_before, register_after in (("", HANDLER), (HANDLER, "")):
        case = tmp_path / ("before" if register_before else "after")
        make_tree(str(case / "src"))
        (case / "a_file").write_text("in the way")
        finished = run_script(FAILING_UPLOAD.format(register_before=register_before,
                                                    register_after=register_after), cwd=str(case))
        assert finished.returncode == 1, (finished.returncode, finished.stderr[-3000:])
        assert finished.stdout.splitlines() == ["main done"]
        assert "Exception ignored" not in finished.stderr
        last = finished.stderr.strip().splitlines()[-1]
        assert last.startswith("mox.file failed in the atexit handler <lambda>: NotAFolderError: "
                               "mox.file.copy_parallel('src', 'a_file/tree')"), last
        assert last.endswith("the process exits with status 1")


def test_a_failure_the_handler_catches_leaves_the_exit_status_alone(tmp_path):
    make_tree(str(tmp_path / "src"))
    (tmp_path / "a_file").write_text("in the way")
    finished = run_script("""
        import atexit
        import moxlite as mox

        def at_exit():
            try:
                mox.file.copy_parallel("src", "a_file/tree")
            except mox.file.NotAFolderError:
                print("caught")
        atexit.register(at_exit)
        mox.file.exists("src")
    """, cwd=str(tmp_path))
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert finished.stdout.splitlines() == ["caught"]


def test_copy_parallel_to_and_from_object_storage_in_an_atexit_handler(tmp_path, s3):  # noqa: F811
    bucket = s3.new_bucket()
    make_tree(str(tmp_path / "src"))
    finished = run_script(f"""
        import atexit
        import moxlite as mox

        def at_exit():
            mox.file.copy_parallel("src", "s3://{bucket}/cache")
            mox.file.copy_parallel("s3://{bucket}/cache", "back")
        atexit.register(at_exit)
    """, cwd=str(tmp_path))
    assert finished.returncode == 0, finished.stderr[-3000:]
    listed = s3.client().list_objects_v2(Bucket=bucket)["Contents"]
    assert sorted(item["Key"] for item in listed) == ["cache/eval.txt", "cache/train/1.txt", "cache/train/deep/2.txt"]
    assert s3.client().get_object(Bucket=bucket, Key="cache/train/deep/2.txt")["Body"].read() == b"two"
    assert same_tree(str(tmp_path / "src"), str(tmp_path / "back"))
