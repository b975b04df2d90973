"""Scripts that define moxlite's flags themselves (issue 8 item 10), each in its own process.

ModelArts scripts define --data_url and --train_url (and often --batch_size, --num_gpus)
after importing MoXing. Their definition must win without DuplicateFlagError, and
moxlite must keep reading the flag in its own kind.
"""

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent("""
    import sys
    import moxlite as mox
    from absl import flags
    import tensorflow as tf

    tf.compat.v1.flags.DEFINE_string("data_url", "/cache/data", "where ModelArts copied the data")
    tf.compat.v1.flags.DEFINE_string("train_url", None, "where outputs go")
    flags.DEFINE_integer("batch_size", 48, "the script's own batch size")
    flags.DEFINE_string("num_gpus", "1", "a script that took the count as text")
    FLAGS = flags.FLAGS
    FLAGS(sys.argv)
    print("script", FLAGS.data_url, FLAGS.train_url, FLAGS.batch_size, repr(FLAGS.num_gpus))
    print("moxlite", mox.get_flag("data_url"), mox.get_flag("train_url"), mox.get_flag("batch_size"),
          repr(mox.get_flag("num_gpus")))
    mox.set_flag("batch_size", 12)
    print("set", FLAGS.batch_size, mox.get_flag("batch_size"))
    FLAGS.num_gpus = "two"
    try:
        mox.get_flag("num_gpus")
    except TypeError as error:
        print("wrong kind is a TypeError")
    except ValueError as error:
        print("error", error)
""")


def run(*arguments):
    environ = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-c", SCRIPT, *arguments], capture_output=True, text=True,
                          timeout=120, env=environ, cwd=ROOT)


def test_script_definitions_win_and_moxlite_reads_them_in_its_own_kind_or_says_why_not():
    finished = run("--data_url=s3://bucket/mnist", "--train_url=s3://bucket/out", "--num_gpus=2")
    assert finished.returncode == 0, finished.stderr[-2000:]
    lines = finished.stdout.splitlines()
    assert lines[0] == "script s3://bucket/mnist s3://bucket/out 48 '2'"
    assert lines[1] == "moxlite s3://bucket/mnist s3://bucket/out 48 2"   # num_gpus read as an integer
    assert lines[2] == "set 12 12"
    assert lines[3] == ("error --num_gpus='two': the script defines this flag itself, and moxlite reads it "
                        "as an integer; pass a value of that kind or define the flag as one")
