"""Models built before run() on several replicas: moxlite.strategy_scope() and the refusal that names it.

The reference for two replicas is one device at twice the per-replica batch (BERT's
losses are means over a batch whose samples all carry the same number of masked
positions, so both see the same gradient).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite.models import bert
from tests import bertlib, runlib

STEPS = 2
PER_REPLICA = 4


def train(tmp_path, name, backbone, batch_size, num_gpus):
    """Train the backbone's masked-LM model for STEPS momentum steps; the trained weights by path."""
    mox.set_flag("num_gpus", num_gpus)
    keras.utils.set_random_seed(7)   # the heads, made inside model_fn
    model_fn = bert.bert_model_fn(backbone=backbone)
    runlib.train(tmp_path / name, bertlib.input_fn_for(bertlib.pretraining_arrays(16)), model_fn,
                 mox.get_optimizer_fn("momentum", learning_rate=0.1, momentum=0.9), steps=STEPS,
                 batch_size=batch_size, log_every_n_steps=STEPS)
    return bertlib.weights_of(model_fn)


def test_a_backbone_built_before_run_outside_the_scope_is_refused_naming_the_scope(tmp_path):
    mox.set_flag("num_gpus", 2)
    backbone = bertlib.tiny_backbone()
    with pytest.raises(mox.errors.ModelFnError, match=r"created before run\(\) outside the distribution strategy "
                                                      r"run\(\) uses \(2 replica\(s\)\); build the model inside "
                                                      r"`with moxlite.strategy_scope\(\):`"):
        train(tmp_path, "refused", backbone, PER_REPLICA, num_gpus=2)
    assert not (tmp_path / "refused").exists() or not any((tmp_path / "refused").iterdir())


def test_the_scope_hands_out_the_strategy_run_uses(two_device_strategy):
    mox.set_flag("num_gpus", 2)
    with mox.strategy_scope() as strategy:
        variable = tf.Variable(1.0)
    assert strategy is two_device_strategy
    assert two_device_strategy.extended.variable_created_in_scope(variable)


def test_backbones_built_in_the_scope_on_two_replicas_equal_one_device_at_twice_the_batch(tmp_path):
    """A constructor and from_preset (a local preset directory), each inside the scope on 2 logical
    devices x 4, against the constructor on 1 device x 8: the same weights after two steps."""
    import keras_hub

    preset = tmp_path / "preset"
    bertlib.tiny_backbone(seed=0).save_to_preset(str(preset))
    one = train(tmp_path, "one", bertlib.tiny_backbone(seed=0), 2 * PER_REPLICA, num_gpus=1)
    mox.set_flag("num_gpus", 2)
    with mox.strategy_scope():
        constructed = bertlib.tiny_backbone(seed=0)
    two_constructed = train(tmp_path, "constructed", constructed, PER_REPLICA, num_gpus=2)
    mox.set_flag("num_gpus", 2)
    with mox.strategy_scope():
        loaded = keras_hub.models.BertBackbone.from_preset(str(preset))
    two_loaded = train(tmp_path, "loaded", loaded, PER_REPLICA, num_gpus=2)
    initial = bertlib.tiny_backbone(seed=0)
    moved = max(np.abs(one[w.path] - w.numpy()).max() for w in initial.trainable_weights)
    assert moved > 1e-3   # the steps trained the encoder
    assert sorted(two_constructed) == sorted(one) == sorted(two_loaded)
    for path, want in one.items():
        np.testing.assert_allclose(two_constructed[path], want, atol=1e-5, err_msg=path)
        np.testing.assert_allclose(two_loaded[path], want, atol=1e-5, err_msg=path)
