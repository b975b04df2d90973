"""Training the tiny BERT through moxlite.run: a resume equals an uninterrupted run; MWMS equals one process."""

import keras
import numpy as np
import pytest

import moxlite as mox
from moxlite.models import bert
from tests import bertlib, distlib, runlib
from tests.dist_scripts import train_bert


def train(log_dir, steps, **kwargs):
    keras.utils.set_random_seed(0)   # the encoder and heads, made inside model_fn
    return runlib.train(log_dir, bertlib.input_fn_for(bertlib.pretraining_arrays(24)),
                        bert.bert_model_fn("tiny", **bertlib.SIZES),
                        mox.get_optimizer_fn("lamb", learning_rate=0.01), steps=steps, batch_size=4,
                        log_every_n_steps=steps, **kwargs)


def test_an_interrupted_then_resumed_lamb_run_ends_with_the_uninterrupted_weights(tmp_path):
    """Lamb's two moments and the input position come back from the checkpoint (5 steps, stopped after 3:
    the second run reads on mid-epoch)."""
    train(tmp_path / "straight", 5)
    train(tmp_path / "resumed", 3)
    at_three = runlib.checkpoint_by_name(tmp_path / "resumed")
    assert train(tmp_path / "resumed", 5)["global_step"] == 5
    straight, resumed = (runlib.checkpoint_by_name(tmp_path / name) for name in ("straight", "resumed"))
    assert list(straight) == list(resumed) and any("transformer_layer_0" in key for key in straight)
    for key, want in straight.items():
        np.testing.assert_allclose(resumed[key], want, atol=1e-6, err_msg=key)
    assert max(np.abs(resumed[key] - at_three[key]).max() for key in resumed) > 1e-4   # it trained on from 3


@pytest.mark.slow   # a real two-worker MultiWorkerMirrored cluster on loopback
def test_two_sync_workers_with_a_backbone_built_in_the_scope_equal_one_process(launches, tmp_path):
    """Each worker builds the encoder inside moxlite.strategy_scope() (TF's MWMS from the cluster flags)
    before run(); 2 workers x 4 equal one process x 8 after 3 momentum steps."""
    steps = 3
    script = ["python", distlib.script("train_bert.py"), f"--log_dir={tmp_path / 'cluster'}", f"--steps={steps}",
              "--batch=4"]
    run = launches(["--workers=2", "--sync"], script, timeout=300)
    assert run.wait() == 0, run.output()
    assert "2 replica(s)" in run.output()
    train_bert.train(str(tmp_path / "single"), steps, 8)
    cluster, single = (runlib.checkpoint_by_name(tmp_path / name) for name in ("cluster", "single"))
    assert list(cluster) == list(single)
    for key, want in single.items():
        np.testing.assert_allclose(cluster[key], want, atol=1e-5, err_msg=key)
