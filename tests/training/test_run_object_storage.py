"""``moxlite.run`` with ``log_dir`` / ``checkpoint_path`` on object storage (moto's S3 server on loopback).

Reference: the same training in a local ``log_dir``, uninterrupted.
"""

import dataclasses
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite.file.errors import MissingPathError
from tests import ROOT, runlib
from tests.s3lib import s3  # noqa: F401  (the server fixture)

BATCH = 16
STEPS = 24


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("MOXLITE_CACHE_DIR", str(cache))
    monkeypatch.setenv("MOXLITE_SYNC_SECONDS", "0.2")
    return cache


def arguments(log_dir, steps, input_fn=None, model_fn=None, **kwargs):
    images, labels = runlib.mnist_rows(300)
    values = dict(
        input_fn=input_fn or runlib.input_fn_for(images, labels, shuffle_seed=7),
        model_fn=model_fn or runlib.mlp_model_fn,
        optimizer_fn=mox.get_optimizer_fn("adam", learning_rate=0.01),
        run_mode=mox.ModeKeys.TRAIN, batch_size=BATCH, log_dir=str(log_dir),
        max_number_of_steps=steps, log_every_n_steps=5)
    values.update(kwargs)
    return values


def evaluate(log_dir=None, checkpoint_path=None):
    images, labels = runlib.mnist_rows(64, offset=300)
    return mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=runlib.mlp_model_fn,
                   run_mode=mox.ModeKeys.EVAL, batch_size=BATCH, log_dir=log_dir,
                   checkpoint_path=checkpoint_path)


def remote_keys(s3, bucket, prefix):
    pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(item["Key"][len(prefix):] for page in pages for item in page.get("Contents", []))


def waiting_model_fn(s3, bucket, key, at_step, seen):
    """The reference MLP with a hook that, at ``at_step``, holds training (20 s at most) until
    ``key`` appears on the server: proof that the upload happens while training still runs."""

    def hook(global_step, log_values):
        if int(global_step) == at_step:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and key not in remote_keys(s3, bucket, ""):
                time.sleep(0.1)
            seen.append(key in remote_keys(s3, bucket, ""))

    def model_fn(inputs, mode):
        spec = runlib.mlp_model_fn(inputs, mode)
        return dataclasses.replace(spec, hooks=[hook])

    return model_fn


def test_train_to_s3_resume_from_it_equals_an_uninterrupted_run(s3, tmp_path, cache_dir):
    bucket = s3.new_bucket()
    remote = f"s3://{bucket}/run"
    mox.run(**arguments(tmp_path / "straight", STEPS))

    mox.run(**arguments(remote, 11, save_model_steps=5))  # stops off the save cadence
    first = remote_keys(s3, bucket, "run/")
    assert "checkpoint" in first and "model.ckpt-11.index" in first
    assert any(name.startswith("events.out.tfevents") for name in first), first  # summaries synced
    assert os.listdir(cache_dir) == []  # the local copy is gone after a good final sync

    result = mox.run(**arguments(remote, STEPS, save_model_steps=5, keep_checkpoint_max=2))
    assert result["global_step"] == STEPS
    after = remote_keys(s3, bucket, "run/")
    # retention removed the old checkpoints locally, and the sync removed them remotely
    assert "model.ckpt-24.index" in after and "model.ckpt-5.index" not in after

    downloaded = tmp_path / "downloaded"
    mox.file.copy_parallel(remote, str(downloaded))
    assert runlib.checkpoint_step(str(downloaded)) == STEPS
    straight = runlib.checkpoint_variables(str(tmp_path / "straight"))
    resumed = runlib.checkpoint_variables(str(downloaded))
    assert len(straight) == len(resumed) == 4
    for a, b in zip(straight, resumed):
        np.testing.assert_allclose(a, b, atol=1e-6)

    # EVAL from the remote log_dir, and from a remote checkpoint_path, equal EVAL of the local run.
    reference = evaluate(log_dir=str(tmp_path / "straight"))
    from_log_dir = evaluate(log_dir=remote)
    from_checkpoint = evaluate(log_dir=str(tmp_path / "eval_only"), checkpoint_path=remote)
    for name in ("loss", "accuracy"):
        assert from_log_dir[name] == pytest.approx(reference[name], abs=1e-6)
        assert from_checkpoint[name] == pytest.approx(reference[name], abs=1e-6)
    assert any(key.startswith("eval/") for key in remote_keys(s3, bucket, "run/"))  # eval summaries

    exported = mox.run(input_fn=runlib.input_fn_for(*runlib.mnist_rows(16)), model_fn=runlib.mlp_model_fn,
                       run_mode=mox.ModeKeys.EXPORT, batch_size=BATCH, log_dir=remote)
    assert exported.startswith(remote + "/")
    assert mox.file.exists(exported + "/saved_model.pb")


def test_two_replica_training_resumes_from_s3_like_a_local_two_replica_run(s3, tmp_path, cache_dir):
    mox.set_flag("num_gpus", 2)  # MirroredStrategy on two logical CPU devices (conftest)
    bucket = s3.new_bucket()
    remote = f"s3://{bucket}/run"
    mox.run(**arguments(tmp_path / "local", 7))
    mox.run(**arguments(tmp_path / "local", 14))
    mox.run(**arguments(remote, 7))
    assert mox.run(**arguments(remote, 14))["global_step"] == 14
    mox.file.copy_parallel(remote, str(tmp_path / "downloaded"))
    for a, b in zip(runlib.checkpoint_variables(str(tmp_path / "local")),
                    runlib.checkpoint_variables(str(tmp_path / "downloaded"))):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_checkpoints_reach_object_storage_while_training_runs(s3, tmp_path, cache_dir):
    bucket = s3.new_bucket()
    seen = []
    model_fn = waiting_model_fn(s3, bucket, "run/model.ckpt-5.index", at_step=10, seen=seen)
    result = mox.run(**arguments(f"s3://{bucket}/run", 16, model_fn=model_fn, save_model_steps=5))
    assert result["global_step"] == 16
    assert seen == [True]


def test_missing_bucket_fails_before_training(s3, tmp_path, cache_dir):
    called = []

    def input_fn(mode):
        called.append(mode)
        raise AssertionError("input_fn must not be reached")

    with pytest.raises(MissingPathError, match="log_dir='s3://no-such-bucket-x/run': bucket 'no-such-bucket-x'"):
        mox.run(**arguments("s3://no-such-bucket-x/run", 5, input_fn=input_fn))
    assert called == [] and os.listdir(cache_dir) == []


def _model_fn_exporting_to_model(inputs, mode):
    """The DLS MNIST example's export: ``ExportSpec(..., version='model')``."""
    spec = runlib.mlp_model_fn(inputs, mode)
    return dataclasses.replace(spec, export_spec=dataclasses.replace(spec.export_spec, version="model"))


def test_rerunning_a_finished_export_job_on_s3_fails_as_locally_naming_the_users_path(s3, tmp_path, cache_dir):
    """A rerun of a finished job: nothing to train, then the export finds its version there, as on a
    local log_dir; the result and the error name the s3:// folder, not the local cache."""
    bucket = s3.new_bucket()
    remote = f"s3://{bucket}/job"
    local = str(tmp_path / "job")
    messages = {}
    for log_dir in (local, remote):
        job = arguments(log_dir, 3, model_fn=_model_fn_exporting_to_model, export_model=mox.ExportKeys.TF_SERVING)
        result = mox.run(**job)
        assert result["export_path"] == f"{log_dir}/model/model"
        with pytest.raises(mox.errors.ExportError) as rerun:
            mox.run(**job)
        messages[log_dir] = str(rerun.value)
    assert messages[remote] == messages[local].replace(local, remote)
    assert messages[local] == (f"ExportSpec.version='model': {local}/model/model already exists; use "
                               f"version=-1 for the next version, or another name")
    assert "saved_model.pb" in remote_keys(s3, bucket, "job/model/model/")
    assert os.listdir(cache_dir) == []


def test_recipe_trains_to_s3_and_evaluates_from_it(s3, cache_dir, capsys):
    from moxlite.recipes import cli

    bucket = s3.new_bucket()
    recipe = os.path.join(ROOT, "recipes", "mnist_mlp.yaml")
    common = [recipe, "--set", f"run.log_dir=s3://{bucket}/recipe", "--set", "model.mlp.hidden_units=[8]"]
    assert cli.main(common + ["--set", "run.steps=20", "--set", "run.log_every_n_steps=10"]) == 0
    trained = capsys.readouterr().out
    keys = remote_keys(s3, bucket, "recipe/")
    assert "recipe.yaml" in keys and "checkpoint" in keys and "model.ckpt-20.index" in keys
    assert cli.main(common + ["--mode", "eval"]) == 0
    evaluated = capsys.readouterr().out
    # train mode's closing evaluation and a separate eval run read the same remote checkpoint
    accuracy = [line.split("accuracy: ")[1].split()[0] for line in (trained + evaluated).splitlines()
                if line.startswith("[RESULT] accuracy:") or "[RESULT]" in line and "accuracy:" in line]
    assert len(accuracy) == 2 and accuracy[0] == accuracy[1], (trained, evaluated)


KILLED_TRAINER = """
import sys
import moxlite as mox
from tests.training import test_run_object_storage as here
mox.run(**here.arguments(sys.argv[1], 100000, save_model_steps=5))
"""


def remote_checkpoint_step(s3, bucket, key):
    """The step TF's ``checkpoint`` index on the server names (-1 if there is none yet)."""
    try:
        text = s3.client().get_object(Bucket=bucket, Key=key)["Body"].read().decode()
    except s3.client().exceptions.NoSuchKey:
        return -1
    found = re.search(r'^model_checkpoint_path: ".*-(\d+)"', text, re.MULTILINE)
    return int(found.group(1)) if found else -1


@pytest.mark.slow
def test_a_killed_run_resumes_from_what_reached_object_storage(s3, tmp_path, cache_dir):
    bucket = s3.new_bucket()
    remote = f"s3://{bucket}/run"
    root = ROOT
    environ = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   TF_CPP_MIN_LOG_LEVEL="3")
    trainer = subprocess.Popen([sys.executable, "-c", KILLED_TRAINER, remote], env=environ, cwd=root,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and trainer.poll() is None:
            if remote_checkpoint_step(s3, bucket, "run/checkpoint") >= 15:
                break
            time.sleep(0.2)
        assert trainer.poll() is None, trainer.stderr.read().decode()[-3000:]
        os.kill(trainer.pid, signal.SIGKILL)  # no final sync: only what the background rounds uploaded
    finally:
        if trainer.poll() is None:
            trainer.kill()
        trainer.wait()
    downloaded = tmp_path / "at_kill"
    mox.file.copy_parallel(remote, str(downloaded))
    reached = runlib.checkpoint_step(str(downloaded))  # the index names a checkpoint that is all there
    assert reached >= 15 and reached % 5 == 0
    # Reference: the same checkpoint resumed from a local folder (an exact resume, see
    # test_run_checkpoints). Both run in this process, so flags and seeds set by earlier
    # tests (a recipe sets the global seed) apply to both alike.
    mox.run(**arguments(downloaded, reached + 7))
    result = mox.run(**arguments(remote, reached + 7, save_model_steps=5))
    assert result["global_step"] == reached + 7
    mox.file.copy_parallel(remote, str(tmp_path / "resumed"))
    for a, b in zip(runlib.checkpoint_variables(str(downloaded)),
                    runlib.checkpoint_variables(str(tmp_path / "resumed"))):
        np.testing.assert_allclose(a, b, atol=1e-6, err_msg=f"resumed from the server at {reached}")


def test_a_log_dir_that_is_an_object_is_refused(s3, cache_dir):
    bucket = s3.new_bucket()
    mox.file.write(f"s3://{bucket}/run", "not a folder")
    with pytest.raises(mox.file.ObjectStorageError, match=r"log_dir='s3://.*/run' is an object, not a folder"):
        mox.run(**arguments(f"s3://{bucket}/run", 5))
    assert mox.file.read(f"s3://{bucket}/run") == "not a folder" and os.listdir(cache_dir) == []


def test_moxlite_run_reports_a_missing_bucket_in_one_line(s3, cache_dir, capsys):
    from moxlite.recipes import cli

    recipe = os.path.join(ROOT, "recipes", "mnist_mlp.yaml")
    code = cli.main([recipe, "--set", "run.log_dir=obs://no-such-bucket-y/run", "--set", "run.steps=5"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.count("\n") == 0 and "bucket 'no-such-bucket-y' does not exist" in err, err


def test_remote_data_is_copied_once_per_process(s3, tmp_path, cache_dir):
    from moxlite.file import data_cache

    bucket = s3.new_bucket()
    for name in ("train-0.rec", "train-1.rec", "eval-0.rec"):
        s3.client().put_object(Bucket=bucket, Key=f"data/{name}", Body=name.encode())
    local = data_cache.local_copy(f"obs://{bucket}/data", "train-*")
    assert sorted(os.listdir(local)) == ["train-0.rec", "train-1.rec"]
    assert open(os.path.join(local, "train-1.rec"), "rb").read() == b"train-1.rec"
    s3.client().put_object(Bucket=bucket, Key="data/train-0.rec", Body=b"changed")
    assert data_cache.local_copy(f"obs://{bucket}/data/", "train-*") == local  # reused, not fetched again
    assert open(os.path.join(local, "train-0.rec"), "rb").read() == b"train-0.rec"
    whole = data_cache.local_copy(f"obs://{bucket}/data")
    assert sorted(os.listdir(whole)) == ["eval-0.rec", "train-0.rec", "train-1.rec"]
    assert data_cache.local_copy(str(tmp_path)) == str(tmp_path)  # local paths pass through
    with pytest.raises(MissingPathError, match="no file matches 'test-\\*'"):
        data_cache.local_copy(f"obs://{bucket}/data", "test-*")


def test_raw_image_folder_on_object_storage(s3, cache_dir):
    bucket = s3.new_bucket()
    images, labels = runlib.mnist_rows(3)
    uploaded = {}
    for index, (row, folder) in enumerate(zip(images, ["seven", "two", "seven"])):
        png = tf.io.encode_png(tf.cast(tf.reshape(row * 255.0, [28, 28, 1]), tf.uint8)).numpy()
        uploaded[f"{folder}/{index}.png"] = png
        s3.client().put_object(Bucket=bucket, Key=f"raw/{folder}/{index}.png", Body=png)
    meta = mox.ImageClassificationRawMetadata(base_dir=f"obs://{bucket}/raw")
    assert meta.labels == ["seven", "two"] and meta.num_classes == 2 and meta.total_num_samples == 3
    assert meta.label_ids == [0, 0, 1]
    for path in meta.file_paths:
        relative = "/".join(path.split(os.sep)[-2:])
        assert open(path, "rb").read() == uploaded[relative]
