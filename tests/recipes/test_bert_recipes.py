"""The BERT recipes, shortened: the tiny THOR and Lamb ones on the bundled corpus, the grammar
corpus's, MindSpore's base and large."""

import os

import numpy as np
import pytest
import tensorflow as tf

from moxlite import run_settings
from moxlite.recipes import builders, cli, loader

from tests import ROOT as REPO

TINY_THOR = os.path.join(REPO, "recipes", "bert_tiny_mlm_thor.yaml")
TINY_LAMB = os.path.join(REPO, "recipes", "bert_tiny_mlm_lamb.yaml")
PRETRAIN = {size: os.path.join(REPO, "recipes", f"bert_{size}_pretrain_thor.yaml") for size in ("base", "large")}
# A few steps of small batches of short sequences, no dropout (runs must agree), no evaluation.
# num_samples: the bundled corpus's 16,870 sequences of 16 tokens, given so that each run skips
# the pass that counts them (4 CPU s each; no schedule here is in epochs).
SHORT = ["run.steps=3", "run.batch_size=4", "run.evaluate=false", "run.log_every_n_steps=1",
         "input.text.seq_length=16", "input.text.max_predictions=3", "input.text.num_samples=16870",
         "input.shuffle_buffer=64",
         "model.bert_tiny.max_sequence_length=16", "model.bert_tiny.dropout=0.0"]


def _arguments(recipe, overrides):
    return [recipe] + [a for o in overrides for a in ("--set", o)]


def _model_weights(log_dir):
    reader = tf.train.load_checkpoint(str(log_dir))
    names = sorted(name for name, _ in tf.train.list_variables(str(log_dir)) if name.startswith("model/"))
    return {name: reader.get_tensor(name) for name in names}


@pytest.mark.slow   # minutes on a loaded 2-core machine: two runs, each tokenizing the bundled corpus
@pytest.mark.grappler   # cheaper with it: 36.2 CPU s with it, 41.9 without (under load)
def _set_the_flags_as_the_recipe(plan):
    """The recipe's settings as MoXing's flags, for mox.run called with plan.arguments() (a recipe
    run passes them as RunConfig fields and sets none)."""
    import moxlite

    for name, value in plan.settings.items():
        moxlite.set_flag(name, run_settings.flag_text(name, value))


def _python_run_equals_the_recipe_run(plan, optimizer_fn, tmp_path, steps):
    """Train ``plan`` with ``optimizer_fn`` into tmp_path/python as the recipe's flags and seed set it,
    then check every model weight against the recipe's run in tmp_path/recipe and its global step;
    returns the Python run's weights."""
    import keras

    import moxlite as mox

    _set_the_flags_as_the_recipe(plan)
    keras.utils.set_random_seed(plan.seed)
    mox.run(**dict(plan.arguments(), optimizer_fn=optimizer_fn))
    recipe, python = _model_weights(tmp_path / "recipe"), _model_weights(tmp_path / "python")
    assert list(recipe) == list(python) and len(python) > 30
    for name, value in python.items():
        np.testing.assert_allclose(recipe[name], value, atol=1e-6, err_msg=name)
    assert tf.train.load_checkpoint(str(tmp_path / "recipe")).get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE") == steps
    return python


@pytest.mark.own_process
def test_tiny_thor_recipe_equals_the_same_stack_written_in_python(capsys, tmp_path):
    """The recipe's schedule blocks and thor settings reach momentum and thor as the Python API builds them."""
    import keras

    import moxlite as mox
    from moxlite.optimizers.thor import schedules as thor_schedules
    from moxlite.recipes import execution

    overrides = SHORT + ["optimizer.wrappers.0.frequency=2", "optimizer.learning_rate.total_steps=3",
                         "optimizer.learning_rate.warmup_steps=2", "optimizer.wrappers.0.damping.total_steps=3"]
    assert cli.main(_arguments(TINY_THOR, overrides + [f"run.log_dir={tmp_path / 'recipe'}"])) == 0
    assert "thor: preconditioning" in capsys.readouterr().out
    plan = builders.build_plan(loader.load([TINY_THOR], overrides + [f"run.log_dir={tmp_path / 'python'}"]))
    learning_rate = thor_schedules.ThorPolynomialDecay(0.04, 0.004, total_steps=3, power=1.0, warmup_steps=2)
    damping = thor_schedules.ThorPolynomialDecay(0.05, 0.001, total_steps=3, power=1.0)
    optimizer_fn = mox.get_optimizer_wrapper_fn(
        "thor", mox.get_optimizer_fn("momentum", learning_rate, momentum=0.9), damping=damping, frequency=2,
        block_size=128, weight_decay=5e-4, weight_decay_exclude=["layernorm", "layer_norm", "bias"])
    _python_run_equals_the_recipe_run(plan, optimizer_fn, tmp_path, 3)


@pytest.mark.slow   # the bundled corpus is tokenized for the run and again for the evaluation
@pytest.mark.grappler   # cheaper with it: 22.5 CPU s with it, 23.7 without (under load)
def test_tiny_lamb_recipe_trains_on_two_replicas_and_reports_held_out_masked_lm_accuracy(capsys, tmp_path):
    overrides = [o for o in SHORT if o != "run.evaluate=false"] + [
        "distribute.num_gpus=2", "run.eval_steps=2", f"run.log_dir={tmp_path / 'lamb'}"]
    assert cli.main(_arguments(TINY_LAMB, overrides)) == 0
    out = capsys.readouterr().out
    assert "Training: 2 replica(s), batch 4 per replica, global batch 8" in out
    result = [line for line in out.splitlines() if line.startswith("[RESULT]")]
    assert len(result) == 1 and "masked_lm_accuracy: " in result[0] and "step 3" in result[0], out


@pytest.mark.parametrize("size", ["base", "large"])
def test_mindspore_pretraining_recipes_carry_the_published_thor_configuration(size):
    """Without building anything: the schedules, the thor settings, the batch and the encoder of the file."""
    loaded = loader.load([PRETRAIN[size]], [])
    plan = builders.build_plan(loaded)
    recipe = loaded.recipe
    assert builders._learning_rate(loaded, plan.settings, None).get_config() == dict(
        initial_value=3.4e-3, end_value=3.244e-5, total_steps=30000, power=1.0)
    thor = recipe.optimizer.wrappers[0]
    assert (recipe.optimizer.name, recipe.optimizer.kwargs) == ("momentum", {"momentum": 0.9})
    assert (thor.name, thor.params["frequency"], thor.params["weight_decay"], thor.params["weight_decay_exclude"]) == (
        "thor", 100, 0.0005, ["layernorm", "layer_norm", "bias"])
    assert thor.params["damping"] == dict(schedule="thor_polynomial", initial_value=5e-2, end_value=1e-6,
                                          total_steps=30000, power=1.0)
    assert (plan.facts.per_replica_batch, plan.facts.global_batch) == (12, 96)
    layers = {"base": (12, 768, 12), "large": (24, 1024, 16)}[size]
    block = getattr(recipe.model, f"bert_{size}")
    assert (block.num_layers, block.hidden_dim, block.num_heads) == layers


@pytest.mark.slow   # minutes on a loaded 2-core machine (two graphs of THOR traced); base differs only in sizes
def test_mindspore_large_pretraining_recipe_runs_shortened_on_synthetic_tokens(capsys, tmp_path):
    """The file as it is but for the encoder (1 layer of width 32), the data (bert_synthetic, 16 tokens),
    3 steps at frequency 2 (a refresh, a stale step, a refresh), one device, float32."""
    size = "large"
    block = f"model.bert_{size}"
    overrides = ["input.bert_synthetic.seq_length=16", "input.bert_synthetic.max_predictions=3",
                 "input.bert_synthetic.num_samples=32", "input.bert_synthetic.vocab_size=64", "input.shuffle_buffer=0",
                 f"{block}.num_layers=1", f"{block}.hidden_dim=32", f"{block}.num_heads=2",
                 f"{block}.intermediate_dim=64", f"{block}.max_sequence_length=16", f"{block}.vocabulary_size=64",
                 "distribute.num_gpus=1", "run.batch_size=4", "run.steps=3", "run.log_every_n_steps=1",
                 "run.evaluate=false", "optimizer.wrappers.0.frequency=2", "precision.amp_level=O0",
                 "precision.loss_scale=0", f"run.log_dir={tmp_path / size}"]
    code = cli.main(_arguments(PRETRAIN[size], overrides))
    out = capsys.readouterr().out
    assert code == 0, out
    assert "step: 3(global step: 3)" in out and "next_sentence_loss" in out
    weights = _model_weights(tmp_path / size)
    assert all(np.all(np.isfinite(w)) for w in weights.values())


GRAMMAR_LAMB = os.path.join(REPO, "recipes", "grammar_mlm_lamb.yaml")


@pytest.mark.slow   # 16.4 user + 0.9 sys CPU s (2026-12-03, beside the sweep): two runs, each tokenizing the corpus
def test_grammar_lamb_recipe_equals_the_same_stack_written_in_python(capsys, tmp_path):
    """grammar_mlm_lamb.yaml shortened (3 steps of 4 sequences of 16 words) through moxlite-run's main, against
    the same data and model with Lamb built by the Python API: lr 0.01 linear to 0, decoupled decay 0.01."""
    import keras

    import moxlite as mox
    from moxlite.recipes import execution

    overrides = ["run.steps=3", "run.batch_size=4", "run.evaluate=false", "run.log_every_n_steps=1",
                 "run.save_model_steps=3", "input.text.seq_length=16", "input.text.max_predictions=3",
                 "input.text.num_samples=17347",   # the corpus's 16-word sequences: given, so no run counts them
                 "input.shuffle_buffer=64", "model.bert_tiny.max_sequence_length=16",
                 "optimizer.learning_rate.decay_steps=3"]
    assert cli.main(_arguments(GRAMMAR_LAMB, overrides + [f"run.log_dir={tmp_path / 'recipe'}"])) == 0
    plan = builders.build_plan(loader.load([GRAMMAR_LAMB], overrides + [f"run.log_dir={tmp_path / 'python'}"]))
    decay = keras.optimizers.schedules.PolynomialDecay(0.01, 3, end_learning_rate=0.0)
    python = _python_run_equals_the_recipe_run(plan, mox.get_optimizer_fn("lamb", learning_rate=decay, weight_decay=0.01), tmp_path, 3)
    # The recipe's 128-wide model over the corpus's 689-word vocabulary, and its 512-wide feed-forward.
    assert any(value.shape == (689, 128) for value in python.values())
    assert any(value.shape == (128, 512) for value in python.values())


GRAMMAR_THOR = os.path.join(REPO, "recipes", "grammar_mlm_thor.yaml")
GRAMMAR_THOR_ADAMW = os.path.join(REPO, "recipes", "grammar_mlm_thor_adamw.yaml")
GRAMMAR_THOR_LEARNING_RATE = 1e-3   # the recipe's AdamW lr, written here apart from it
HEALTH_WARNING = "thor: warning: a factor is below its damping on most layers"


@pytest.mark.own_process
@pytest.mark.slow   # three short runs, each tokenizing the corpus
def test_grammar_thor_adamw_recipe_equals_its_stack_in_python_and_its_curvature_acts(capfd, tmp_path):
    """grammar_mlm_thor_adamw.yaml shortened (4 steps of 4 sequences of 16 words, a refresh every 2 updates: both
    branches of the update) through moxlite-run's main, against thor(adamw) built by the Python API:
    K-FAC statistics, grafting, damping 0.05, AdamW's lr decaying linearly to 0 over the 4 steps with
    decoupled decay 0.01. The recipe's run prints THOR's health line without its warning; the same run in
    MindSpore's statistics prints the warning (its G is below the damping on most layers)."""
    import keras

    import moxlite as mox

    overrides = ["run.steps=4", "run.batch_size=4", "run.evaluate=false", "run.log_every_n_steps=1",
                 "run.save_model_steps=4", "input.text.seq_length=16", "input.text.max_predictions=3",
                 "input.text.num_samples=17347",   # the corpus's 16-word sequences: given, so no run counts them
                 "input.shuffle_buffer=64", "model.bert_tiny.max_sequence_length=16",
                 "optimizer.learning_rate.decay_steps=4", "optimizer.wrappers.0.frequency=2"]
    assert cli.main(_arguments(GRAMMAR_THOR_ADAMW, overrides + [f"run.log_dir={tmp_path / 'recipe'}"])) == 0
    printed = capfd.readouterr()
    assert "thor: preconditioning" in printed.out
    assert [line for line in printed.err.splitlines() if line.startswith("thor: curvature at update 0:")]
    assert HEALTH_WARNING not in printed.err
    plan = builders.build_plan(loader.load([GRAMMAR_THOR_ADAMW], overrides + [f"run.log_dir={tmp_path / 'python'}"]))
    learning_rate = keras.optimizers.schedules.PolynomialDecay(GRAMMAR_THOR_LEARNING_RATE, 4, end_learning_rate=0.0)
    optimizer_fn = mox.get_optimizer_wrapper_fn(
        "thor", mox.get_optimizer_fn("adamw", learning_rate, weight_decay=0.01), damping=0.05, frequency=2,
        block_size=128, weight_decay=0.0, statistics="kfac", graft=True)
    python = _python_run_equals_the_recipe_run(plan, optimizer_fn, tmp_path, 4)
    assert any(value.shape == (689, 128) for value in python.values())

    mindspore = ["optimizer.wrappers.0.statistics=mindspore", "optimizer.wrappers.0.graft=false",
                 f"run.log_dir={tmp_path / 'mindspore'}"]
    capfd.readouterr()
    assert cli.main(_arguments(GRAMMAR_THOR_ADAMW, overrides + mindspore)) == 0
    assert HEALTH_WARNING in capfd.readouterr().err

# The THOR-over-inner-optimizer recipes of the grammar workload: (file, inner optimizer, its first
# learning rate, THOR's damping at its start and end, its statistics, graft).
GRAMMAR_THOR_INNER = [("grammar_mlm_thor_mindspore.yaml", "adamw", 2e-3, (5e-2, 1e-6), "mindspore", False),
                      ("grammar_mlm_thor.yaml", "lamb", 1e-2, (5e-2, 5e-2), "kfac", True)]


@pytest.mark.own_process
@pytest.mark.slow   # two short runs, each tokenizing the corpus
@pytest.mark.parametrize("name, inner, initial, damping, statistics, graft", GRAMMAR_THOR_INNER,
                         ids=[row[0].split(".")[0] for row in GRAMMAR_THOR_INNER])
def test_grammar_thor_over_inner_optimizer_recipes_equal_the_same_stack_written_in_python(
        capfd, tmp_path, name, inner, initial, damping, statistics, graft):
    """grammar_mlm_thor_mindspore.yaml and grammar_mlm_thor.yaml (over Lamb) shortened (4 steps of 4 sequences of
    16 words, a refresh every 2 updates) through moxlite-run's main, against THOR over AdamW / Lamb
    built by the Python API: the inner optimizer's lr decaying linearly to 0 and decoupled decay 0.01,
    THOR's weight decay 0, its damping schedule, statistics and graft; the health line warns in
    MindSpore's statistics only."""
    import keras

    import moxlite as mox
    from moxlite.optimizers.thor import schedules as thor_schedules

    recipe = os.path.join(REPO, "recipes", name)
    overrides = ["run.steps=4", "run.batch_size=4", "run.evaluate=false", "run.log_every_n_steps=1",
                 "run.save_model_steps=4", "input.text.seq_length=16", "input.text.max_predictions=3",
                 "input.text.num_samples=17347",   # the corpus's 16-word sequences: given, so no run counts them
                 "input.shuffle_buffer=64", "model.bert_tiny.max_sequence_length=16",
                 "optimizer.learning_rate.decay_steps=4", "optimizer.wrappers.0.damping.total_steps=4",
                 "optimizer.wrappers.0.frequency=2"]
    assert cli.main(_arguments(recipe, overrides + [f"run.log_dir={tmp_path / 'recipe'}"])) == 0
    printed = capfd.readouterr()
    assert "thor: preconditioning" in printed.out
    # THOR's health line: MindSpore's G is below its damping on most layers (the warning), K-FAC's acts.
    assert [line for line in printed.err.splitlines() if line.startswith("thor: curvature at update 0:")]
    assert (HEALTH_WARNING in printed.err) == (statistics == "mindspore"), printed.err[-2000:]
    plan = builders.build_plan(loader.load([recipe], overrides + [f"run.log_dir={tmp_path / 'python'}"]))
    learning_rate = keras.optimizers.schedules.PolynomialDecay(initial, 4, end_learning_rate=0.0)
    optimizer_fn = mox.get_optimizer_wrapper_fn(
        "thor", mox.get_optimizer_fn(inner, learning_rate, weight_decay=0.01),
        damping=thor_schedules.ThorPolynomialDecay(*damping, total_steps=4, power=1.0), frequency=2,
        block_size=128, weight_decay=0.0, statistics=statistics, graft=graft)
    _python_run_equals_the_recipe_run(plan, optimizer_fn, tmp_path, 4)
