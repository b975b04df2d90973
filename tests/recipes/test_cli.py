"""moxlite-run's --dry-run, --mode and --help-recipe: what they print and that they write nothing."""

import math
import re

import yaml

from moxlite.recipes import cli

LARS_32K = "recipes/resnet50_imagenet_lars_32k.yaml"


def dry_run(capsys, *arguments):
    code = cli.main([*arguments, "--dry-run"])
    captured = capsys.readouterr()
    return code, captured.out


def test_dry_run_of_the_32k_recipe_shows_stack_strategy_and_batches(capsys, tmp_path):
    log_dir = tmp_path / "never"
    code, out = dry_run(capsys, LARS_32K, "--set", "input.name=synthetic", "--set", f"run.log_dir={log_dir}")
    assert code == 0
    recipe = yaml.safe_load(open(LARS_32K))
    per_replica, devices = recipe["run"]["batch_size"], recipe["distribute"]["num_gpus"]
    num_batches = recipe["optimizer"]["wrappers"][1]["num_batches"]
    samples = recipe["input"]["synthetic"]["num_samples"]
    stack = re.findall(r"^  \d\. (\w+)\(", out, flags=re.MULTILINE)
    assert stack == ["batch_gradients", "lars", "momentum"]  # outermost to innermost
    assert f"num_batches={num_batches}" in out and "ratio=0.001" in out and "weight_decay=0.0001" in out
    assert f"MirroredStrategy: 1 worker(s) x {devices} device(s), {devices} replica(s) in sync per step" in out
    assert (f"Batch: per replica {per_replica}, global {per_replica * devices} "
            f"({per_replica} x {devices} replicas), per update {per_replica * devices * num_batches}") in out
    assert per_replica * devices * num_batches == 32768
    assert f"Steps per epoch: {math.ceil(samples / (per_replica * devices))} " in out
    assert not log_dir.exists()


def test_dry_run_prints_the_resolved_recipe_with_overrides_applied(capsys, tmp_path):
    code, out = dry_run(capsys, "recipes/mnist_mlp.yaml", "--set", "run.steps=17", "--set",
                        f"run.log_dir={tmp_path / 'never'}", "--mode", "eval")
    assert code == 0
    resolved = yaml.safe_load(out.split("\nOptimizer")[0])
    assert resolved["run"]["steps"] == 17 and resolved["run"]["mode"] == "eval"
    assert resolved["model"]["mlp"]["hidden_units"] == [128]
    assert "Optimizer: none (run.mode is eval)" in out
    assert "Steps per epoch: 63 (ceil(4000 samples / global batch 64))" in out
    assert not (tmp_path / "never").exists()


def test_dry_run_counts_replicas_of_a_parameter_server_cluster(capsys, tmp_path):
    code, out = dry_run(capsys, "recipes/mnist_mlp.yaml", "--set", f"run.log_dir={tmp_path / 'never'}",
                        "--set", "distribute={strategy: parameter_server, sync_replicas: false, num_gpus: 2, "
                                 "ps_hosts: ['localhost:2222'], worker_hosts: ['localhost:2223', 'localhost:2224'], "
                                 "job_name: worker, task_index: 1}")
    assert code == 0
    assert ("ParameterServerStrategy (asynchronous): 2 worker(s) x 2 device(s), 2 replica(s) in sync per step, "
            "1 parameter server(s); this process: worker (task 1)") in out
    assert "Batch: per replica 64, global 256 (64 x 4 replicas)" in out


def test_help_recipe_lists_the_sections_and_exits_0(capsys):
    assert cli.main(["--help-recipe"]) == 0
    out = capsys.readouterr().out
    for section in ("run:", "input:", "model:", "optimizer:", "distribute:", "precision:"):
        assert f"\n{section}" in out
    assert "optimizer.wrappers (list of mapping, default []): Wrappers applied in order, innermost first" in out


def test_distribute_and_precision_sections_become_moxing_flags(tmp_path):
    import moxlite
    from moxlite import run_settings
    from moxlite.recipes import builders, loader

    loaded = loader.load(["recipes/mnist_mlp.yaml"], [
        f"run.log_dir={tmp_path / 'never'}", "run.checkpoint_exclude_patterns=[logits, bn]",
        "distribute={strategy: parameter_server, sync_replicas: false, num_gpus: 2, job_name: worker, "
        "task_index: 1, ps_hosts: ['h0:2222'], worker_hosts: ['h0:2223', 'h1:2223']}",
        "precision={use_fp16: true, loss_scale: dynamic, gradient_clip: 5, gradient_clip_type: norm}"])
    settings = builders.settings_of(loaded.recipe)
    assert {name: settings[name] for name in ("ps_hosts", "worker_hosts", "checkpoint_exclude_patterns", "keep_fp32",
                                              "sync_replicas", "gradient_clip")} == {
        "ps_hosts": ["h0:2222"], "worker_hosts": ["h0:2223", "h1:2223"], "checkpoint_exclude_patterns": ["logits", "bn"],
        "keep_fp32": None, "sync_replicas": False, "gradient_clip": 5}
    # As flags (what a script calling run() with plan.arguments() sets), each in its flag's form.
    for name, value in settings.items():
        moxlite.set_flag(name, run_settings.flag_text(name, value))
    expected = {"num_gpus": 2, "sync_replicas": False, "job_name": "worker", "task_index": 1,
                "ps_hosts": "h0:2222", "worker_hosts": "h0:2223,h1:2223", "use_fp16": True,
                "loss_scale": "dynamic", "gradient_clip": 5.0, "gradient_clip_type": "norm",
                "checkpoint_exclude_patterns": "logits,bn"}
    assert {name: moxlite.get_flag(name) for name in expected} == expected
    assert not (tmp_path / "never").exists()


def test_moxing_cluster_flags_after_the_recipe_become_distribute_overrides():
    assert [override.text for override in cli.cluster_flag_overrides([
        "--job_name=worker", "--task_index=1", "--ps_hosts=", "--worker_hosts=127.0.0.1:1,127.0.0.1:2",
        "--nosync_replicas"])] == [
        'distribute.job_name="worker"', "distribute.task_index=1", "distribute.ps_hosts=[]",
        'distribute.worker_hosts=["127.0.0.1:1", "127.0.0.1:2"]', "distribute.sync_replicas=false"]


def test_an_argument_that_is_neither_an_option_nor_a_cluster_flag_exits_2(capsys, tmp_path):
    code = cli.main(["recipes/mnist_mlp.yaml", "--set", f"run.log_dir={tmp_path / 'never'}", "--steps=5"])
    err = capsys.readouterr().err
    assert code == 2 and "unrecognized argument '--steps=5'" in err and "--worker_hosts" in err
    assert not (tmp_path / "never").exists()


def test_dry_run_warns_that_keep_batchnorm_fp32_does_nothing_at_o0(capsys, tmp_path):
    code, out = dry_run(capsys, "recipes/mnist_mlp.yaml", "--set", f"run.log_dir={tmp_path / 'never'}",
                        "--set", "precision.keep_batchnorm_fp32=true")
    assert code == 0
    assert "precision.keep_batchnorm_fp32) has no effect at amp_level O0" in out


def test_the_cluster_flags_are_overrides_named_as_typed():
    overrides = cli.cluster_flag_overrides(["--cluster=slurm", "--nosync_replicas"])
    assert [(o.text, o.written) for o in overrides] == [('distribute.cluster="slurm"', "--cluster=slurm"),
                                                        ("distribute.sync_replicas=false", "--nosync_replicas")]


def test_an_error_on_a_cluster_flag_names_the_flag_as_typed(capsys, tmp_path):
    code = cli.main(["recipes/mnist_mlp.yaml", "--set", f"run.log_dir={tmp_path / 'never'}", "--cluster=slurm",
                     "--worker_hosts=127.0.0.1:2222", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("moxlite-run: error: --cluster=slurm: distribute.cluster: 'slurm'"), err
    assert "--set distribute" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "never").exists()


def test_a_near_miss_of_a_cluster_flag_gets_the_flag_it_meant(capsys, tmp_path):
    code = cli.main(["recipes/mnist_mlp.yaml", "--set", f"run.log_dir={tmp_path / 'never'}", "--num_gpu=2"])
    err = capsys.readouterr().err
    assert code == 2 and "unrecognized argument '--num_gpu=2' (did you mean --num_gpus?)" in err
    assert not (tmp_path / "never").exists()


def test_a_recipe_key_given_as_a_flag_gets_the_set_that_sets_it(capsys, tmp_path):
    code = cli.main(["recipes/mnist_mlp.yaml", "--set", f"run.log_dir={tmp_path / 'never'}", "--steps=100"])
    err = capsys.readouterr().err
    assert code == 2 and "'--steps=100' (the recipe key run.steps is set with --set run.steps=100)" in err
    assert not (tmp_path / "never").exists()


def test_help_lists_the_cluster_flags(capsys):
    try:
        cli.main(["--help"])
    except SystemExit as done:
        assert done.code == 0
    out = capsys.readouterr().out
    assert "MoXing's cluster flags" in out
    assert all(f"--{name} " in out for name in cli.CLUSTER_FLAGS), out


def test_the_bundled_overlay_alone_says_which_base_it_follows(capsys):
    code = cli.main(["recipes/mnist_large_batch.yaml", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and "missing required key" not in err
    assert ("recipes/mnist_large_batch.yaml: has no input and no model section: it is an overlay, meant to follow a "
            "base recipe on the command line, e.g. moxlite-run recipes/mnist_mlp.yaml recipes/mnist_large_batch.yaml"
            in err), err


def test_an_optimizer_argument_keras_refuses_is_reported_at_its_set_with_the_value(capsys, tmp_path):
    code = cli.main(["recipes/mnist_mlp.yaml", "--set", f"run.log_dir={tmp_path / 'never'}",
                     "--set", "optimizer.kwargs.momentum=9"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(
        "moxlite-run: error: --set optimizer.kwargs.momentum=9: optimizer.kwargs.momentum: 9: momentum: "), err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "never").exists()
