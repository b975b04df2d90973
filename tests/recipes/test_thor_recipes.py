"""THOR from recipes: schedule blocks for the learning rate and the damping, their errors, and the
digits THOR recipes (over momentum and Adam) and MindSpore's ResNet-50 one."""

import os
import re

import pytest
import tensorflow as tf

from moxlite import context, run_settings
from moxlite.optimizers import current_learning_rate
from moxlite.recipes import builders, cli, loader
from tests.optimizers.thor.test_schedules import mindspore_lr_table
from tests import ROOT as REPO

MLP = os.path.join(REPO, "recipes", "mnist_mlp.yaml")


def _set_the_flags_as_the_recipe(plan):
    """The recipe's settings as MoXing's flags, for mox.run called with plan.arguments() (a recipe
    run passes them as RunConfig fields and sets none)."""
    import moxlite

    for name, value in plan.settings.items():
        moxlite.set_flag(name, run_settings.flag_text(name, value))


def test_help_recipe_lists_the_thor_schedules_and_their_keys(capsys):
    assert cli.main(["--help-recipe"]) == 0
    out = capsys.readouterr().out
    assert "'thor', 'thor_damping', 'thor_polynomial'" in out
    assert "thor: lr_init, lr_decay, lr_end_epoch, decay_epochs" in out
    assert "thor's damping: a number or a schedule block" in out


def test_thor_learning_rate_block_derives_steps_per_epoch_from_the_run(tmp_path):
    # mnist: 4,000 training digits; 32 per replica x 2 replicas = 64 a step: 62 updates an epoch.
    loaded = loader.load([MLP], [f"run.log_dir={tmp_path / 'never'}", "run.batch_size=32", "distribute.num_gpus=2",
                                 "optimizer={name: momentum, kwargs: {momentum: 0.9}, learning_rate: "
                                 "{schedule: thor, lr_init: 0.1, lr_decay: 2.0, lr_end_epoch: 3, decay_epochs: 2}}"])
    plan = builders.build_plan(loaded)
    table = mindspore_lr_table(0.1, 2.0, 3, 62, 2)
    global_step = tf.Variable(0, dtype=tf.int64)
    with context.activate(context.RunContext(global_step=global_step, global_batch_size=64, num_samples=4000)):
        optimizer = plan.optimizer_fn()
    for step in (0, 61, 62, 123, 124, 150):
        global_step.assign(step)
        assert float(current_learning_rate(optimizer)) == pytest.approx(float(table[step]), rel=1e-6), step
    assert not (tmp_path / "never").exists()


def test_explicit_steps_per_epoch_wins_and_polynomial_block_builds(tmp_path):
    loaded = loader.load([MLP], [f"run.log_dir={tmp_path / 'never'}",
                                 "optimizer.learning_rate={schedule: thor, lr_init: 0.1, lr_decay: 1.0, "
                                 "lr_end_epoch: 2, steps_per_epoch: 10}"])
    schedule = builders._learning_rate(loaded)
    assert schedule.steps_per_epoch == 10 and float(schedule(9)) == pytest.approx(0.05, rel=1e-6)
    loaded = loader.load([MLP], [f"run.log_dir={tmp_path / 'never'}",
                                 "optimizer.learning_rate={schedule: thor_polynomial, initial_value: 0.0034, "
                                 "end_value: 3.244e-5, total_steps: 100}"])
    assert float(builders._learning_rate(loaded)(50)) == pytest.approx((0.0034 - 3.244e-5) / 2 + 3.244e-5, rel=1e-6)


def test_dry_run_shows_the_damping_schedule_with_its_settings(capsys, tmp_path):
    """The thor wrapper's line names the damping schedule and its resolved settings, not an object address."""
    recipe = os.path.join(REPO, "recipes", "mnist_cnn_thor.yaml")
    assert cli.main([recipe, "--set", f"run.log_dir={tmp_path / 'never'}", "--dry-run"]) == 0
    out = capsys.readouterr().out
    thor_line = next(line for line in out.splitlines() if line.strip().startswith("1. thor("))
    samples, global_batch = map(int, re.search(r"ceil\((\d+) samples / global batch (\d+)\)", out).groups())
    # The recipe's block {damping_init: 0.03, decay_rate: 0.5}; steps_per_epoch is MindSpore's samples // batch.
    assert (f"thor(damping=thor_damping(damping_init=0.03, decay_rate=0.5, steps_per_epoch={samples // global_batch}), "
            in thor_line), thor_line
    assert "object at 0x" not in out
    assert not (tmp_path / "never").exists()

BAD_SCHEDULES = [
    ("{schedule: thor, lr_init: -1, lr_decay: 4, lr_end_epoch: 50}",
     "optimizer.learning_rate.lr_init: thor: lr_init=-1 is out of range; expected a finite number > 0"),
    ("{schedule: thor, lr_init: 0.1, lr_decay: 4, lr_end_epoch: 50, decay_epoch: 39}",
     "optimizer.learning_rate.decay_epoch: schedule 'thor' takes no argument 'decay_epoch' (did you mean 'decay_epochs'?)"),
    ("{schedule: thor, lr_init: 0.1, lr_end_epoch: 50}",
     "optimizer.learning_rate.lr_decay: missing: schedule 'thor' needs lr_init, lr_decay, lr_end_epoch, steps_per_epoch"),
    ("{schedule: thor_polynomial, initial_value: 0.1, end_value: 0.0, total_steps: many}",
     "optimizer.learning_rate.total_steps: thor_polynomial: total_steps='many' is out of range; expected a whole number > 0"),
    ("{schedule: thorr, lr_init: 0.1}", "'thorr' is not one of"),
]


@pytest.mark.parametrize("block, expected", BAD_SCHEDULES, ids=["lr_init", "typo", "missing", "total_steps", "kind"])
def test_bad_schedule_blocks_print_one_located_line_exit_2_and_write_nothing(capsys, tmp_path, block, expected):
    log_dir = tmp_path / "logs"
    code = cli.main([MLP, "--set", f"run.log_dir={log_dir}", "--set", f"optimizer.learning_rate={block}"])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1, captured.err
    assert lines[0].startswith("moxlite-run: error: ") and expected in lines[0], lines[0]
    assert "Traceback" not in captured.err and not log_dir.exists()


def test_steps_per_epoch_of_a_user_input_without_num_samples_is_asked_for(capsys, tmp_path):
    code = cli.main([MLP, "--set", f"run.log_dir={tmp_path / 'logs'}", "--set", "input.name=tests.runlib:mnist_rows",
                     "--set", "model.num_classes=10", "--set",
                     "optimizer.learning_rate={schedule: thor_damping, damping_init: 0.03, decay_rate: 0.5}"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.endswith("optimizer.learning_rate.steps_per_epoch: schedule 'thor_damping' needs steps_per_epoch, "
                        "and the number of training samples is unknown; set it, or input.num_samples"), err


CNN_THOR = os.path.join(REPO, "recipes", "mnist_cnn_thor.yaml")
# 4,000 digits // 500 = 8 updates an epoch, and lr 0 at epoch 1: the schedules move fast enough to tell apart.
FAST_SCHEDULES = ["run.batch_size=500", "run.steps=6", "run.evaluate=false", "model.lenet.filters=[4]",
                  "model.lenet.dense_units=16", "optimizer.wrappers.0.frequency=2",
                  "optimizer.learning_rate.lr_end_epoch=1", "optimizer.wrappers.0.damping.decay_rate=0.01"]


def _recipe_model_weights(log_dir):
    reader = tf.train.load_checkpoint(str(log_dir))
    names = sorted(name for name, _ in tf.train.list_variables(str(log_dir)) if name.startswith("model/"))
    return [reader.get_tensor(name) for name in names]


CNN_THOR_ADAM = os.path.join(REPO, "recipes", "mnist_cnn_thor_adam.yaml")


@pytest.mark.parametrize("recipe, inner, arguments", [(CNN_THOR, "momentum", {"momentum": 0.9}),
                                                      (CNN_THOR_ADAM, "adam", {})], ids=["momentum", "adam"])
def test_cnn_thor_recipe_equals_the_same_stack_written_in_python(capsys, tmp_path, recipe, inner, arguments):
    """The recipe's schedule blocks reach the inner optimizer and thor as the Python API would build them."""
    import keras
    import numpy as np

    import moxlite as mox
    from moxlite.optimizers.thor import schedules as thor_schedules
    from moxlite.recipes import execution

    overrides = FAST_SCHEDULES + [f"run.log_dir={tmp_path / 'recipe'}"]
    assert cli.main([recipe] + [a for o in overrides for a in ("--set", o)]) == 0
    capsys.readouterr()
    plan = builders.build_plan(loader.load([recipe], overrides[:-1] + [f"run.log_dir={tmp_path / 'python'}"]))
    learning_rate = thor_schedules.ThorLearningRate(0.01, 1.0, lr_end_epoch=1, steps_per_epoch=8)
    damping = thor_schedules.ThorDamping(0.03, 0.01, steps_per_epoch=8)
    optimizer_fn = mox.get_optimizer_wrapper_fn(
        "thor", mox.get_optimizer_fn(inner, learning_rate, **arguments), damping=damping, frequency=2,
        block_size=128)
    _set_the_flags_as_the_recipe(plan)
    keras.utils.set_random_seed(plan.seed)
    mox.run(**dict(plan.arguments(), optimizer_fn=optimizer_fn))
    recipe_weights, python_weights = _recipe_model_weights(tmp_path / "recipe"), _recipe_model_weights(tmp_path / "python")
    assert len(recipe_weights) == len(python_weights) == 6
    for a, b in zip(recipe_weights, python_weights):
        np.testing.assert_allclose(a, b, atol=1e-6)
    # It trained, and the step count is the recipe's.
    assert tf.train.load_checkpoint(str(tmp_path / "recipe")).get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE") == 6


def test_resnet50_thor_recipe_trains_its_stack_shortened_on_a_small_resnet(capsys, tmp_path):
    """MindSpore's ResNet-50 THOR configuration as the recipe file writes it: its stack
    (momentum -> thor, the published schedules, loss scale 128) trains, shortened.

    2 steps at frequency 2: a refresh (step 1), then a step on the stale inverses (2): both
    branches of the update run. The network is the recipe's but small_resnet (depth 8, width 4,
    16x16 images, one device, fp16 off: on CPU it is emulated): the full ResNet-50 cost about a
    minute of tracing and showed nothing more. THOR's updates of the layers ResNet-50 is made of
    (convolutions with strides, same and valid padding, biases; BatchNorm left out; the dense
    head) equal numpy on small models (tests/optimizers/thor/test_thor.py), on 2 replicas as on 1
    (tests/optimizers/thor/test_real_models.py, tests/optimizers/thor/test_bert.py); that
    model.name resnet50 builds keras.applications' ResNet-50 with its head is checked with the 32k
    recipe (tests/recipes/test_run.py).
    """
    import numpy as np

    from moxlite.models import networks

    log_dir = tmp_path / "r50"
    recipe = os.path.join(REPO, "recipes", "resnet50_imagenet_thor.yaml")
    overrides = ["input.name=synthetic", "input.synthetic.num_classes=10", "input.synthetic.num_samples=16",
                 "input.synthetic.image_shape=[16, 16, 3]", "model.name=small_resnet", "model.small_resnet.depth=8",
                 "model.small_resnet.base_width=4",
                 "input.shuffle_buffer=0", "distribute.num_gpus=1", "run.batch_size=2", "run.steps=2",
                 "optimizer.wrappers.0.frequency=2", "run.evaluate=false", "run.log_every_n_steps=1",
                 "precision.use_fp16=false", f"run.log_dir={log_dir}"]
    code = cli.main([recipe] + [a for o in overrides for a in ("--set", o)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "step: 2(global step: 2)" in out
    reader = tf.train.load_checkpoint(str(log_dir))
    assert reader.get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE") == 2
    weights = _recipe_model_weights(log_dir)
    reference = networks.small_resnet((16, 16, 3), 10, depth=8, base_width=4)
    assert sum(w.size for w in weights) == reference.count_params()
    assert all(np.all(np.isfinite(w)) for w in weights)
    # The published schedules, steps_per_epoch derived from 16 samples // (1 x 2) = 8 updates an epoch.
    loaded = loader.load([recipe], overrides)
    schedule = builders._learning_rate(loaded, builders.settings_of(loaded.recipe), 16)
    assert schedule.get_config() == dict(lr_init=0.05672, lr_decay=4.9687, lr_end_epoch=50.0, steps_per_epoch=8.0,
                                         decay_epochs=39.0)
