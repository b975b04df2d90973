"""Scripts that define moxlite's flags themselves (issue 8 item 10), each in its own process.

ModelArts scripts define --data_url and --train_url (and often --batch_size, --num_gpus)
after importing MoXing. Their definition must win without DuplicateFlagError, and
moxlite must keep reading the flag in its own kind.
"""

import os
import subprocess
import sys
import textwrap

from tests import ROOT

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


# Issue 31 item 4: every flag of moxlite's table, defined by the script. A value per kind, as
# given on the command line, and what get_flag must read from it.
COMMAND_LINE = {"integer": ("3", 3), "integer or auto": ("4", 4), "boolean": ("false", False),
                "float": ("0.25", 0.25), "string": ("h:1", "h:1")}
# What `import tensorflow` does to the flags is importing absl.logging (which defines --log_dir),
# and tf.compat.v1.flags is absl.flags: the scripts do just that, without TensorFlow's seconds.
EVERY_FLAG = {
    # moxlite, then "TensorFlow", then the script's definitions
    "moxlite first": """
        import moxlite as mox
        from absl import logging
        for name in FLAG_TABLE:
            flags.DEFINE_string(name, "script-default", "the script's own " + name)
    """,
    # the script's definitions before absl.logging, moxlite or TensorFlow is imported
    "script first": """
        for name in FLAG_TABLE:
            flags.DEFINE_string(name, "script-default", "the script's own " + name)
        import moxlite as mox
        from absl import logging
    """,
}


def every_flag_script(order, names):
    head = f"import sys\nfrom absl import flags\nFLAG_TABLE = {sorted(names)!r}\n"
    return head + textwrap.dedent(EVERY_FLAG[order]) + textwrap.dedent("""
        flags.FLAGS(sys.argv)
        print(sorted(name for name in FLAG_TABLE if flags.FLAGS[name].help != "the script's own " + name))
        for name in sorted(FLAG_TABLE):
            print(name, repr(mox.get_flag(name)))
    """)


def test_every_moxing_flag_can_be_defined_by_the_script_whatever_the_import_order():
    from absl import flags as absl_flags
    import tensorflow as tf
    from moxlite.flags import FLAG_TABLE

    assert tf.compat.v1.flags.DEFINE_string.__module__ == absl_flags.DEFINE_string.__module__   # absl's
    assert tf.compat.v1.flags.FLAGS["log_dir"] is absl_flags.FLAGS["log_dir"]   # one flag table
    arguments = [f"--{name}={COMMAND_LINE[kind][0]}" for name, (kind, _, _) in sorted(FLAG_TABLE.items())]
    expected = ["[]"] + [f"{name} {COMMAND_LINE[kind][1]!r}" for name, (kind, _, _) in sorted(FLAG_TABLE.items())]
    assert "log_dir" in FLAG_TABLE   # the one absl defines first
    for order in EVERY_FLAG:
        environ = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
        finished = subprocess.run([sys.executable, "-c", every_flag_script(order, FLAG_TABLE), *arguments],
                                  capture_output=True, text=True, timeout=120, env=environ, cwd=ROOT)
        assert finished.returncode == 0, (order, finished.stderr[-2000:])
        assert finished.stdout.splitlines() == expected, order
