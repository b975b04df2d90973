"""Command-line flags meant for moxlite that nothing reads get one warning line each.

``tf.compat.v1.app.run`` (MoXing scripts' entry point) tolerates flags nobody defined, so a typo
(``--num_gpu=2``) or a MoXing flag moxlite does not implement (``--variable_update``, ``--dgc_*``)
trained as if not passed, in silence.
"""

import importlib
import sys

from absl import flags as absl_flags

import moxlite as mox
from moxlite import flags
from tests import runlib


def test_a_near_miss_and_moxings_unimplemented_flags_are_named_and_the_rest_left_alone(monkeypatch):
    argv = ["--variable_update=distributed_replicated_dgc", "--dgc_sparsity_strategy=0.75,0.999",
            "--num_gpu=2", "--num_gpus=1", "--nosync_replicas", "--learning_rate=0.1", "--data_url=x",
            "--verbosity=0", "--helpfull", "positional", "--", "--variable_update=after_the_separator"]
    lines = flags.unheeded_command_line_flags(argv)
    assert len(lines) == 3, lines
    assert lines[0].startswith("--variable_update=distributed_replicated_dgc: a MoXing flag moxlite does not "
                               "implement, ignored; the distribution comes from --num_gpus")
    assert lines[1].startswith("--dgc_sparsity_strategy=0.75,0.999: a MoXing flag moxlite does not implement")
    assert "deep gradient compression" in lines[1]
    assert lines[2].startswith("--num_gpu=2: not a moxlite flag") and lines[2].endswith("(did you mean --num_gpus?)")


def test_a_flag_the_script_defines_itself_is_its_own(monkeypatch):
    absl_flags.DEFINE_boolean("clone_on_cpu", False, "a script's own flag of MoXing's name")
    try:
        assert flags.unheeded_command_line_flags(["--clone_on_cpu", "--noclone_on_cpu"]) == []
    finally:
        delattr(absl_flags.FLAGS, "clone_on_cpu")
    assert len(flags.unheeded_command_line_flags(["--clone_on_cpu"])) == 1


def test_run_says_it_once_per_process_and_trains_as_without_the_flag(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(sys, "argv", ["train.py", "--num_gpu=2"])
    monkeypatch.setattr(importlib.import_module("moxlite.training.run"), "_told_flags", set())
    images, labels = runlib.mnist_rows(64)
    outputs = []
    for name in ("first", "second"):
        mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=runlib.softmax_model_fn,
                optimizer_fn=mox.get_optimizer_fn("sgd", learning_rate=0.1), run_mode=mox.ModeKeys.TRAIN,
                batch_size=16, log_dir=str(tmp_path / name), max_number_of_steps=2)
        captured = capsys.readouterr()
        outputs.append(captured.out + captured.err)
    told = [line for line in outputs[0].splitlines() if "--num_gpu=2: not a moxlite flag" in line]
    assert len(told) == 1 and "(did you mean --num_gpus?)" in told[0]
    assert "Training: 1 replica(s)" in outputs[0]      # ignored, as the line says
    assert "--num_gpu=2" not in outputs[1]
