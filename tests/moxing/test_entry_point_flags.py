"""MoXing's entry point (tf.app.run -> absl.app.run) and get_flag('worker_hosts') counting workers."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

import moxlite as mox
from moxlite.distribute import cluster

from tests import ROOT

SCRIPT = textwrap.dedent("""
    import sys
    from absl import app, flags
    import tensorflow as tf
    import moxlite as mox

    tf.compat.v1.flags.DEFINE_string("data_url", None, "dataset dir")
    flags.DEFINE_integer("epochs", 3, "the script's own flag")
    FLAGS = flags.FLAGS

    def main(*args, **kwargs):
        num_workers = len(mox.get_flag("worker_hosts").split(","))
        print("flags", FLAGS.data_url, FLAGS.epochs, mox.get_flag("num_gpus"), mox.get_flag("sync_replicas"),
              mox.get_flag("worker_hosts"), num_workers)

    if __name__ == "__main__":
        if sys.argv[1] == "absl":
            del sys.argv[1]
            app.run(main)
        else:
            del sys.argv[1]
            tf.compat.v1.app.run(main=main)
""")


def _run(*arguments, environ=None):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("TF_CONFIG", None)
    env.update(environ or {})
    finished = subprocess.run([sys.executable, "-c", SCRIPT, *arguments], capture_output=True, text=True,
                              timeout=180, env=env, cwd=ROOT)
    assert finished.returncode == 0, finished.stderr[-3000:]
    return [line for line in finished.stdout.splitlines() if line.startswith("flags")][-1].split()[1:]


@pytest.mark.slow   # two Python processes that import TensorFlow
def test_app_run_parses_moxlite_and_script_flags_together():
    got = _run("absl", "--data_url=/cache/data", "--epochs=7", "--num_gpus=2", "--nosync_replicas",
               "--worker_hosts=h0:2223, h1:2223,")
    assert got == ["/cache/data", "7", "2", "False", "h0:2223,h1:2223", "2"]
    # tf.app.run's TF2 spelling, with the cluster in TF_CONFIG instead of flags.
    tf_config = {"cluster": {"chief": ["h0:1"], "worker": ["h1:1", "h2:1"]}, "task": {"type": "chief", "index": 0}}
    got = _run("tf_compat_v1", "--epochs=5", environ={"TF_CONFIG": json.dumps(tf_config)})
    assert got == ["None", "5", "1", "True", "h0:1,h1:1,h2:1", "3"]


def test_single_process_counts_one_worker():
    assert mox.get_flag("worker_hosts") == "" and len(mox.get_flag("worker_hosts").split(",")) == 1
    mox.set_flag("worker_hosts", "a:1,,b:2 ,")
    assert mox.get_flag("worker_hosts") == "a:1,b:2"


def test_the_cluster_resolver_still_reads_the_flags_as_set(monkeypatch):
    tf_config = {"cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": {"type": "worker", "index": 1}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
    assert len(mox.get_flag("worker_hosts").split(",")) == 2
    view = cluster.resolve()   # not "TF_CONFIG is set and so are --worker_hosts"
    assert view.num_workers == 2
