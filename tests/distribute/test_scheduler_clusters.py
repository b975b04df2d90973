"""Clusters described by a scheduler: a Slurm job step (srun) and Kubeflow's TFJob (TF_CONFIG).

The expected clusters are written from the schedulers' own rules: TensorFlow's
SlurmClusterResolver (one worker per task, nodes in name order, a node's tasks on
consecutive ports from the base, the node's GPUs split evenly), and the training
operator's genClusterSpec (``<job>-<replica type>-<index>.<namespace>.svc:<port>`` per
replica, a ``task`` and ``"environment": "cloud"``). The two multi-process tests train on
loopback and compare the weights with one process at the same global batch.
"""

import json
import os
import socket
import sys

import numpy as np
import pytest

from moxlite import errors
from moxlite.distribute import cluster, slurm
from moxlite.flags import set_flag
from moxlite.recipes import cli, schema
from tests import distlib, runlib
from tests.dist_scripts import train_mnist

TRAIN_SCRIPT = [sys.executable, distlib.script("train_mnist.py")]


def _step(rank=0, tasks=2, nodes="localhost", per_node="2", port=23456, **more):
    """The variables srun sets for one task of a step (and the port base moxlite reads)."""
    environ = {"SLURM_JOB_ID": "4242", "SLURM_PROCID": str(rank), "SLURM_STEP_NUM_TASKS": str(tasks),
               "SLURM_STEP_NODELIST": nodes, "SLURM_STEP_TASKS_PER_NODE": per_node,
               slurm.PORT_VARIABLE: str(port), "CUDA_VISIBLE_DEVICES": ""}
    environ.update(more)
    return environ


def _use(monkeypatch, environ):
    """Make ``environ`` this process's scheduler environment (no other SLURM_* or TF_CONFIG)."""
    for name in list(os.environ):
        if name.startswith("SLURM_") or name == "TF_CONFIG":
            monkeypatch.delenv(name)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)


def _kubeflow_tf_config(job, namespace, replicas, task_type, index, port=2222):
    """The TF_CONFIG the training operator gives the pod of ``task_type:index`` (genTFConfigJSONStr).

    ``replicas``: replica type (lower case) -> count. Go marshals the struct's fields in order
    (cluster, task, environment) and the map's keys sorted.
    """
    spec = {rtype: [f"{job}-{rtype}-{i}.{namespace}.svc:{port}" for i in range(count)]
            for rtype, count in sorted(replicas.items())}
    return json.dumps({"cluster": spec, "task": {"type": task_type, "index": index}, "environment": "cloud"},
                      separators=(",", ":"))


# The TF_CONFIG of the chief pod of the README's TFJob "mnist" (1 chief, 2 workers, 1 ps).
DOCUMENTED_TF_CONFIG = (
    '{"cluster":{"chief":["mnist-chief-0.default.svc:2222"],"ps":["mnist-ps-0.default.svc:2222"],'
    '"worker":["mnist-worker-0.default.svc:2222","mnist-worker-1.default.svc:2222"]},'
    '"task":{"type":"chief","index":0},"environment":"cloud"}')


def _consecutive_free_ports(count):
    """A base port such that base .. base+count-1 are all free on loopback (the Slurm resolver's layout)."""
    for _ in range(50):
        base = cluster.free_port()
        probes = []
        try:
            for port in range(base, base + count):
                probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                probes.append(probe)
                probe.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for probe in probes:
                probe.close()
    raise AssertionError("no run of free ports found")


# ----------------------------------------------------------------- Slurm: the resolver's cluster

def test_a_slurm_step_is_a_worker_per_task_in_node_order_on_consecutive_ports(monkeypatch):
    # 2 nodes x 2 tasks; the nodes are listed out of order, the resolver sorts them.
    for name, value in _step(rank=3, tasks=4, nodes="n2,n1", per_node="2(x2)", port=23000,
                             CUDA_VISIBLE_DEVICES="4,5,6,7").items():
        monkeypatch.setenv(name, value)
    view = cluster.resolve()
    assert view.jobs == {"worker": ["n1:23000", "n1:23001", "n2:23000", "n2:23001"]}
    assert (view.source, view.kind, view.task_type, view.task_index, view.role) == (
        "slurm", "multi_worker_mirrored", "worker", 3, "worker")
    # Task 3 is its node's second task: the second half of the node's 4 GPUs, as Slurm numbered them.
    assert view.num_gpus == 2 and os.environ["CUDA_VISIBLE_DEVICES"] == "6,7"
    assert cluster.resolve() == view and os.environ["CUDA_VISIBLE_DEVICES"] == "6,7"   # resolving again


def test_without_cuda_visible_devices_the_node_gpus_come_from_nvidia_smi(monkeypatch, tmp_path):
    # A fake nvidia-smi on PATH lists 2 GPUs; the node's 2 tasks get one each.
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA Fake (UUID: GPU-a)'\necho 'GPU 1: NVIDIA Fake (UUID: GPU-b)'\n")
    fake.chmod(0o755)
    environ = _step(rank=1)
    del environ["CUDA_VISIBLE_DEVICES"]
    _use(monkeypatch, dict(environ, PATH=str(tmp_path)))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    view = cluster.resolve()
    assert (view.task_index, view.num_gpus, os.environ["CUDA_VISIBLE_DEVICES"]) == (1, 1, "1")


def test_on_a_cpu_node_every_task_trains_on_its_cpu_and_gpus_are_left_alone():
    environ = _step(rank=0)
    view = cluster.resolve(environ=environ)
    assert view.jobs == {"worker": ["localhost:23456", "localhost:23457"]}
    assert (view.role, view.is_chief, view.num_gpus, view.num_workers) == ("chief", True, 1, 2)
    assert environ["CUDA_VISIBLE_DEVICES"] == ""


def test_a_one_task_step_is_one_process():
    view = cluster.resolve(environ=_step(tasks=1, per_node="1"))
    assert (view.jobs, view.kind, view.source) == ({}, "default", "slurm")


@pytest.mark.parametrize("described, expected", [
    ({}, "slurm"),                                                       # srun: auto-detected
    ({"cluster": "single"}, "single"),                                   # asked for one process
    ({"worker_hosts": "127.0.0.1:1", "job_name": "worker"}, "flags"),     # the user's flags win
    ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0}})},
     "tf_config"),
])
def test_auto_takes_the_flags_then_tf_config_then_the_slurm_step(described, expected):
    environ = _step()
    for name, value in described.items():
        if name == "TF_CONFIG":
            environ[name] = value
        else:
            set_flag(name, value)
    assert cluster.resolve(environ=environ).source == expected


def test_an_sbatch_script_outside_srun_is_one_process_unless_slurm_is_asked_for():
    batch = {"SLURM_JOB_ID": "4242", "SLURM_NTASKS": "2"}   # what a batch script sees, without step variables
    assert cluster.resolve(environ=batch).source == "single"
    set_flag("cluster", "slurm")
    with pytest.raises(errors.ClusterError, match=r"^SLURM_STEP_NUM_TASKS is not set: .*Slurm job 4242.*srun"):
        cluster.resolve(environ=batch)


def _without(environ, name):
    return {key: value for key, value in environ.items() if key != name}


@pytest.mark.parametrize("environ, cluster_flag, fragment", [
    ({}, "slurm", r"^--cluster='slurm' but SLURM_JOB_ID is not set: .*srun moxlite-run"),
    (_without(_step(), "SLURM_STEP_NODELIST"), "auto", r"^SLURM_STEP_NODELIST is not set .*srun"),
    (_without(_step(), "SLURM_PROCID"), "auto", r"^SLURM_PROCID is not set "),
    (_step(rank=2), "auto", r"^SLURM_PROCID='2': must be this task's rank in 0..1 \(SLURM_STEP_NUM_TASKS=2\)"),
    (_step(tasks="two"), "auto", r"^SLURM_STEP_NUM_TASKS='two': must be a number of tasks"),
    (_step(per_node="3"), "auto", r"^SLURM_STEP_TASKS_PER_NODE='3' does not add up to SLURM_STEP_NUM_TASKS='2'"),
    (_step(nodes="n[1-"), "auto", r"^SLURM_STEP_NODELIST='n\[1-' / .*cannot read them"),
    (_step(port="99999"), "auto", r"^MOXLITE_SLURM_PORT='99999': must be a port number in 1..65535"),
    (_step(CUDA_VISIBLE_DEVICES="0"), "auto", r"^CUDA_VISIBLE_DEVICES='0': this node's 1 GPU\(s\) are fewer than "
                                              r"its tasks .*--ntasks-per-node"),
    ({}, "tf_config", r"^--cluster='tf_config' but TF_CONFIG is not set"),
    ({"TF_CONFIG": _kubeflow_tf_config("mnist", "default", {"chief": 1, "worker": 2}, "worker", 2)}, "auto",
     r"^TF_CONFIG task=\{'type': 'worker', 'index': 2\} does not name a task of the cluster "
     r"\(chief:0..0, worker:0..1\); fix task.type/task.index"),
    ({"TF_CONFIG": _kubeflow_tf_config("mnist", "default", {"chief": 1, "worker": 1}, "evaluator", 0)}, "auto",
     r"^TF_CONFIG task=\{'type': 'evaluator', 'index': 0\} does not name a task of the cluster"),
])
def test_a_wrong_scheduler_environment_is_one_line_naming_the_variable(environ, cluster_flag, fragment):
    set_flag("cluster", cluster_flag)
    with pytest.raises(errors.ClusterError, match=fragment) as raised:
        cluster.resolve(environ=environ)
    assert "\n" not in str(raised.value)


def test_asynchronous_training_under_slurm_is_refused_with_the_alternatives():
    set_flag("sync_replicas", False)
    with pytest.raises(errors.ClusterError, match=r"^--sync_replicas=false under Slurm: .*TF_CONFIG"):
        cluster.resolve(environ=_step())


def test_the_recipe_key_offers_the_sources_the_resolver_knows():
    from moxlite import run_settings

    assert run_settings.CLUSTER_SOURCES == cluster.CLUSTER_SOURCES
    field = {f.name: f for f in schema.DistributeSection.__dataclass_fields__.values()}["cluster"]
    assert field.metadata["choices"] == cluster.CLUSTER_SOURCES and field.default == "auto"


# ----------------------------------------------------------------- moxlite-run under a scheduler

def test_dry_run_says_the_cluster_came_from_the_slurm_step(capsys, monkeypatch, tmp_path):
    _use(monkeypatch, _step(rank=1, port=23100))
    code = cli.main(["recipes/mnist_mlp.yaml", "--set", f"run.log_dir={tmp_path / 'never'}", "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    assert ("Strategy: MultiWorkerMirroredStrategy: 2 worker(s) x 1 device(s), 2 replica(s) in sync per step; "
            "this process: worker (task 1)") in out
    assert ("Cluster from: the Slurm job step (SlurmClusterResolver), 2 task(s): worker:0 at localhost:23100, "
            "worker:1 at localhost:23101") in out
    assert not (tmp_path / "never").exists()


def test_a_recipe_gives_the_task_its_gpus_before_anything_can_start_tensorflow(monkeypatch, tmp_path):
    # CUDA_VISIBLE_DEVICES only counts before TensorFlow's runtime starts; building the input is
    # the first step that may start it, so the task's share must be set by then.
    from moxlite.recipes import builders, loader

    _use(monkeypatch, _step(rank=1, CUDA_VISIBLE_DEVICES="0,1"))
    seen = []
    build_input = builders._build_input
    monkeypatch.setattr(builders, "_build_input",
                        lambda loaded: seen.append(os.environ["CUDA_VISIBLE_DEVICES"]) or build_input(loaded))
    loaded = loader.load(["recipes/mnist_mlp.yaml"], [f"run.log_dir={tmp_path / 'never'}"])
    loader.resolve_references(loaded)
    plan = builders.build_plan(loaded)
    assert seen == ["1"] and plan.facts.num_workers == 2 and plan.facts.devices_per_worker == 1


@pytest.mark.parametrize("environ, fragment", [
    (_step(rank=5), "SLURM_PROCID='5'"),
    ({"SLURM_JOB_ID": "1", "SLURM_PROCID": "0"}, "SLURM_STEP_NUM_TASKS is not set"),
    ({"TF_CONFIG": _kubeflow_tf_config("mnist", "default", {"chief": 1, "worker": 1}, "ps", 0)}, "TF_CONFIG task="),
])
def test_moxlite_run_exits_2_with_one_line_and_writes_nothing(capsys, monkeypatch, tmp_path, environ, fragment):
    _use(monkeypatch, environ)
    code = cli.main(["recipes/mnist_mlp.yaml", "--set", f"run.log_dir={tmp_path / 'never'}"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("moxlite-run: error: ") and fragment in lines[0], lines
    assert not (tmp_path / "never").exists()


def test_the_cluster_flag_after_the_recipe_files_is_the_recipe_key():
    assert [(o.text, o.written) for o in cli.cluster_flag_overrides(["--cluster=slurm"])] == [
        ('distribute.cluster="slurm"', "--cluster=slurm")]


def test_cluster_slurm_with_hosts_in_the_recipe_is_refused_at_the_key(capsys, tmp_path):
    code = cli.main(["recipes/mnist_mlp.yaml", "--set", f"run.log_dir={tmp_path / 'never'}",
                     "--set", "distribute.cluster=slurm", "--set", "distribute.worker_hosts=['h:1']", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and "distribute.cluster: 'slurm' takes the cluster from the Slurm job step" in err
    assert "distribute.worker_hosts is set too" in err


# ----------------------------------------------------------------- Kubeflow TFJob: TF_CONFIG

def test_the_documented_tf_config_is_the_training_operators_and_gives_each_pod_its_role():
    replicas = {"chief": 1, "worker": 2, "ps": 1}
    assert _kubeflow_tf_config("mnist", "default", replicas, "chief", 0) == DOCUMENTED_TF_CONFIG
    roles = {}
    for task_type, count in replicas.items():
        for index in range(count):
            view = cluster.resolve(environ={"TF_CONFIG": _kubeflow_tf_config("mnist", "default", replicas,
                                                                             task_type, index)})
            roles[f"{task_type}:{index}"] = (view.kind, view.role, view.serves_only)
    ps = "parameter_server"
    assert roles == {"chief:0": (ps, "coordinator", False), "worker:0": (ps, "worker", True),
                     "worker:1": (ps, "worker", True), "ps:0": (ps, "ps", True)}


# ----------------------------------------------------------------- multi-process, on loopback

STEPS, PER_REPLICA = 10, 16


def _one_process_weights(log_dir, global_batch):
    """The reference: one process, one device, the cluster's global batch."""
    train_mnist.train(str(log_dir), STEPS, global_batch, model="softmax")
    return runlib.checkpoint_variables(str(log_dir))


@pytest.fixture(scope="module")
def one_process_weights(tmp_path_factory):
    """The reference of the synchronous clusters: global batch 2 x 16."""
    return _one_process_weights(tmp_path_factory.mktemp("single"), 2 * PER_REPLICA)


def _train_as_tasks(environments, log_dir, tmp_path, training=None):
    """Run the training script as one task per environment; the first ``training`` tasks (all by
    default) must exit 0, the others (servers) are killed then."""
    tasks = distlib.Tasks(TRAIN_SCRIPT + [f"--log_dir={log_dir}", f"--steps={STEPS}", f"--batch={PER_REPLICA}",
                                          "--model=softmax"], environments, timeout=150, output_dir=tmp_path)
    try:
        assert tasks.wait(training) == [0] * (training or len(environments)), tasks.output()
    finally:
        tasks.kill()
    return tasks


def _tfjob_environments(replicas, order):
    """Each pod's TF_CONFIG from the operator, its host names turned into free loopback ports (the rest identical)."""
    hosts = [f"mnist-{rtype}-{index}.default.svc:2222" for rtype, count in replicas.items() for index in range(count)]
    ports = []
    while len(ports) < len(hosts):
        port = cluster.free_port()
        ports += [port] if port not in ports else []
    environments = []
    for task_type, index in order:
        text = _kubeflow_tf_config("mnist", "default", replicas, task_type, index)
        for host, port in zip(hosts, ports):
            text = text.replace(host, f"127.0.0.1:{port}")
        environments.append({"TF_CONFIG": text})
    return environments


def _assert_same_weights(log_dir, reference):
    weights = runlib.checkpoint_variables(str(log_dir))
    assert len(weights) == len(reference) == 2
    for got, want in zip(weights, reference):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.cluster
def test_two_srun_tasks_train_like_one_process(one_process_weights, tmp_path):
    base = _consecutive_free_ports(2)
    log_dir = tmp_path / "slurm"
    tasks = _train_as_tasks([_step(rank=rank, nodes="127.0.0.1", port=base) for rank in (0, 1)], log_dir, tmp_path)
    assert "RESULT" in tasks.output(0) and "global batch 32" in tasks.output(0), tasks.output(0)
    _assert_same_weights(log_dir, one_process_weights)


@pytest.mark.slow
@pytest.mark.cluster
def test_a_tfjob_chief_and_worker_train_like_one_process(one_process_weights, tmp_path):
    environments = _tfjob_environments({"chief": 1, "worker": 1}, [("chief", 0), ("worker", 0)])
    assert json.loads(environments[0]["TF_CONFIG"])["environment"] == "cloud"
    log_dir = tmp_path / "tfjob"
    tasks = _train_as_tasks(environments, log_dir, tmp_path)
    assert "global batch 32" in tasks.output(0), tasks.output(0)
    _assert_same_weights(log_dir, one_process_weights)


@pytest.mark.slow
@pytest.mark.cluster
def test_a_tfjob_with_a_parameter_server_trains_like_one_process(tmp_path):
    # Chief (coordinator), one worker, one ps: with a single worker the asynchronous steps run in
    # order, so the weights equal one process's at the worker's batch.
    environments = _tfjob_environments({"chief": 1, "worker": 1, "ps": 1}, [("chief", 0), ("worker", 0), ("ps", 0)])
    log_dir = tmp_path / "tfjob_ps"
    tasks = _train_as_tasks(environments, log_dir, tmp_path, training=1)
    assert "RESULT" in tasks.output(0) and runlib.checkpoint_step(str(log_dir)) == STEPS, tasks.output(0)
    _assert_same_weights(log_dir, _one_process_weights(tmp_path / "single", PER_REPLICA))
