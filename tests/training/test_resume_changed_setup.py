"""Resume across a changed setting (issue 21): one line saying what changed and what to do, or carried across.

Each case trains a few steps, changes one setting, and resumes the same
log_dir. A change the checkpoint's optimizer state cannot follow (the THOR
wrapper removed or added, O0 -> O1, THOR's set of layers) is one
CheckpointError naming the checkpoint's setting and this run's, raised before
anything is read or written: the checkpoint files stay byte for byte, and
stderr holds none of TensorFlow's "Value in checkpoint could not be found" or
"Python objects that were not bound" warnings. A new THOR block_size is
carried across: the resumed run recomputes the inverses at its first update,
and its weights equal those of a run whose schedule refreshes at that update.
"""

import os
import shutil

import numpy as np
import pytest

import moxlite as mox
from moxlite import errors
from moxlite.recipes import cli
from tests import runlib

BATCH = 16
TF_WARNINGS = ("Value in checkpoint could not be found", "Python objects that were not bound", "WARNING:tensorflow",
               "expected dtype")


def optimizer_fn(thor=None):
    base = mox.get_optimizer_fn("momentum", 0.05, momentum=0.9)
    if thor is None:
        return base
    return mox.get_optimizer_wrapper_fn("thor", base, **{"damping": 0.1, **thor})


def train(log_dir, steps, optimizer, amp_level="O0"):
    images, labels = runlib.mnist_rows(64)
    mox.set_flag("amp_level", amp_level)
    return runlib.train(log_dir, runlib.input_fn_for(images, labels), runlib.mlp_model_fn, optimizer,
                        steps=steps, batch_size=BATCH, log_every_n_steps=100)


THOR = {"frequency": 2, "block_size": 128}
REFUSED = {
    "thor_removed": (dict(optimizer=optimizer_fn(THOR)), dict(optimizer=optimizer_fn()),
                     "optimizer stack thor > SGD in the checkpoint, SGD in this run; its optimizer state does not "
                     "fit this run, so resume with the settings it was written with"),
    "thor_added": (dict(optimizer=optimizer_fn()), dict(optimizer=optimizer_fn(THOR)),
                   "optimizer stack SGD in the checkpoint, thor > SGD in this run;"),
    "o0_to_o1": (dict(optimizer=optimizer_fn()), dict(optimizer=optimizer_fn(), amp_level="O1"),
                 "precision level O0 (float32) in the checkpoint, O1 (float16) in this run; loss scale none in the "
                 "checkpoint, dynamic in this run;"),
    "thor_layers": (dict(optimizer=optimizer_fn(THOR)), dict(optimizer=optimizer_fn(dict(THOR, exclude=["dense_1"]))),
                    "THOR layers (exclude) [] in the checkpoint, ['dense_1'] in this run; the checkpoint's thor "
                    "preconditioned dense/kernel, dense_1/kernel;"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_change_the_checkpoint_cannot_follow_is_one_line_and_writes_nothing(name, tmp_path, capfd):
    first, second, fragment = REFUSED[name]
    train(tmp_path, 3, **first)
    before = runlib.tree_bytes(tmp_path)
    capfd.readouterr()
    with pytest.raises(errors.CheckpointError) as raised:
        train(tmp_path, 6, **second)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"cannot resume '{tmp_path}/model.ckpt-3': ")
    assert fragment in message
    assert f"checkpoint_path='{tmp_path}' restores the model variables only" in message
    err = capfd.readouterr().err
    assert not [warning for warning in TF_WARNINGS if warning in err], err
    assert runlib.tree_bytes(tmp_path) == before


def test_a_recipe_resumed_without_its_thor_wrapper_exits_2_with_one_line(tmp_path, capfd):
    recipe = tmp_path / "thor.yaml"
    recipe.write_text(f"""\
run: {{steps: 2, batch_size: 16, log_dir: {tmp_path / 'logs'}, evaluate: false}}
input: {{name: synthetic, synthetic: {{image_shape: [8, 8, 1], num_classes: 3, num_samples: 64}}}}
model: {{name: mlp, mlp: {{hidden_units: [8]}}}}
optimizer:
  name: momentum
  learning_rate: 0.05
  wrappers: [{{name: thor, frequency: 2}}]
""")
    assert cli.main([str(recipe)]) == 0
    before = runlib.tree_bytes(tmp_path / "logs")
    capfd.readouterr()
    assert cli.main([str(recipe), "--set", "optimizer.wrappers=[]", "--set", "run.steps=4"]) == 2
    captured = capfd.readouterr()
    lines = captured.err.strip().splitlines()
    assert lines == [line for line in lines if line.startswith("moxlite-run: error: cannot resume")] and len(lines) == 1, \
        captured.err
    assert "optimizer stack thor > SGD in the checkpoint, SGD in this run" in lines[0]
    assert runlib.tree_bytes(tmp_path / "logs") == before


def test_a_new_block_size_is_carried_across_and_equals_a_run_refreshing_at_that_update(tmp_path, capfd):
    # 784 inputs: 7 blocks of 128 before, 4 blocks of 256 after; frequency 3 refreshes at updates 0 and 3.
    first, reference = tmp_path / "carried", tmp_path / "reference"
    train(first, 4, optimizer_fn({"frequency": 3, "block_size": 128}))
    shutil.copytree(first, reference)
    capfd.readouterr()
    # Update 4 is not a refresh at frequency 3: the carried change forces one.
    train(first, 6, optimizer_fn({"frequency": 3, "block_size": 256}))
    out, err = capfd.readouterr()
    carried = [line for line in out.splitlines() + err.splitlines() if "thor.block_size=256" in line]
    assert carried == [f"INFO:moxlite:Resuming {first}/model.ckpt-4 with thor.block_size=256 (the checkpoint had "
                       f"128): its stored inverses do not fit the new blocks, so they are recomputed from the batch "
                       f"of update 4, the first of this run"]
    assert not [warning for warning in TF_WARNINGS if warning in err], err
    # The reference refreshes at update 4 by its own schedule (frequency 4), then not at 5, as the carried run.
    train(reference, 6, optimizer_fn({"frequency": 4, "block_size": 256}))
    got, expected = runlib.checkpoint_by_name(first), runlib.checkpoint_by_name(reference)
    assert list(got) == list(expected)
    for key in got:
        np.testing.assert_allclose(got[key], expected[key], atol=1e-6, rtol=0, err_msg=key)
    assert runlib.checkpoint_step(first) == 6


def test_an_unchanged_setup_resumes_without_a_word(tmp_path, capfd):
    train(tmp_path, 2, optimizer_fn(THOR))
    capfd.readouterr()
    train(tmp_path, 4, optimizer_fn(dict(THOR, damping=0.2)))   # a hyperparameter, not the set-up
    out, err = capfd.readouterr()
    assert "block_size" not in out + err and "cannot resume" not in out + err
    assert not [warning for warning in TF_WARNINGS if warning in err], err
    assert runlib.checkpoint_step(tmp_path) == 4
