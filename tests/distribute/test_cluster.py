"""Cluster resolution, strategy choice and fault messages, without starting a cluster.

Each expected value is written from the rule it checks (the MoXing flags ->
TensorFlow roles table in moxlite.distribute.cluster), and every fault must
end in a ClusterError within a bounded time instead of a hang.
"""

import json
import socket
import time

import numpy as np
import pytest
import tensorflow as tf

from moxlite import distribute, errors
from moxlite.distribute import cluster, devices, strategy
from moxlite.flags import set_flag


def _flags(**values):
    for name, value in values.items():
        set_flag(name, value)


def _listening_socket():
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    return listener


# ----------------------------------------------------------------- host lists

def test_parse_hosts_normalises_and_keeps_order():
    assert cluster.parse_hosts("--worker_hosts", " h1:2222, h0:0002 ") == ["h1:2222", "h0:2"]
    assert cluster.parse_hosts("--ps_hosts", "") == []


@pytest.mark.parametrize("value, fragment", [
    ("h0", "not host:port"),
    ("h0:2222,", "not host:port"),
    (":2222", "not host:port"),
    ("h0:port", "not a number"),
    ("h0:70000", "not a number in 1..65535"),
    ("h0:2222,h0:2222", "twice"),
])
def test_malformed_host_list_names_flag_value_and_fix(value, fragment):
    with pytest.raises(errors.ClusterError) as raised:
        cluster.parse_hosts("--worker_hosts", value)
    message = str(raised.value)
    assert "--worker_hosts" in message and repr(value) in message and fragment in message
    assert "\n" not in message


@pytest.mark.parametrize("entry, valid", [
    ("h0:2222", True), ("10.0.0.1:1", True), ("[::1]:2222", True), ("[fe80::1]:65535", True),
    ("::1:2222", False), ("h0", False), ("h0:0", False), ("h0:70000", False), ("h 0:1", False),
    ("h0:22:33", False), (":2222", False),
])
def test_flags_and_recipes_accept_the_same_host_port_entries(entry, valid, tmp_path):
    # One rule (cluster.address_problem): the port follows the last ':', an IPv6 host is bracketed.
    from moxlite.recipes import loader

    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"run: {{steps: 5, log_dir: {tmp_path}}}\ninput: {{name: mnist}}\nmodel: {{name: mlp}}\n"
                      f"optimizer: {{name: sgd}}\ndistribute: {{ps_hosts: ['{entry}'], strategy: parameter_server, "
                      f"sync_replicas: false}}\n")
    if valid:
        assert cluster.parse_hosts("--ps_hosts", entry) == [entry]
        assert loader.load([str(recipe)], []).recipe.distribute.ps_hosts == [entry]
    else:
        with pytest.raises(errors.ClusterError, match="--ps_hosts"):
            cluster.parse_hosts("--ps_hosts", entry)
        with pytest.raises(errors.RecipeError, match=r"distribute\.ps_hosts\[0\]: .* must be host:port"):
            loader.load([str(recipe)], [])


# ------------------------------------------------------------- flag mapping

def test_no_cluster_flags_means_one_process_default_strategy():
    view = cluster.resolve()
    assert (view.kind, view.role, view.is_chief, view.num_workers) == ("default", "single", True, 1)
    set_flag("num_gpus", 2)
    assert cluster.resolve().kind == "mirrored"


def test_sync_workers_map_to_multi_worker_mirrored_with_worker0_chief():
    _flags(job_name="worker", task_index=1, worker_hosts="h0:1,h1:1", ps_hosts="h0:2")
    view = cluster.resolve()
    assert view.kind == "multi_worker_mirrored"
    assert (view.role, view.is_chief, view.serves_only, view.num_workers) == ("worker", False, False, 2)
    assert view.training_jobs() == {"worker": ["h0:1", "h1:1"]}  # ps play no part in all-reduce
    set_flag("task_index", 0)
    assert cluster.resolve().role == "chief"
    _flags(job_name="ps", task_index=0)
    assert (cluster.resolve().role, cluster.resolve().serves_only) == ("ps", True)


def test_async_worker0_becomes_coordinator_on_one_port_per_process():
    _flags(job_name="worker", task_index=0, worker_hosts="127.0.0.1:5001,127.0.0.1:5002",
           ps_hosts="127.0.0.1:5003", sync_replicas=False)
    view = cluster.resolve()
    assert view.kind == "parameter_server" and view.coordinator_spawns_worker0
    assert (view.role, view.task_type, view.is_chief, view.serves_only) == ("coordinator", "chief", True, False)
    chief_host, _, chief_port = view.jobs["chief"][0].rpartition(":")
    assert chief_host == "127.0.0.1" and int(chief_port) not in (5001, 5002, 5003)
    # The coordinator's port is picked once per process: the recipe CLI's resolve and run's give one
    # view, so setup() builds the cluster (and worker 0's server) once.
    assert repr(cluster.resolve()) == repr(view)


def test_async_other_tasks_serve_only():
    _flags(job_name="worker", task_index=1, worker_hosts="h:1,h:2", ps_hosts="h:3", sync_replicas=False)
    view = cluster.resolve()
    assert (view.role, view.serves_only, view.is_chief) == ("worker", True, False)
    _flags(job_name="chief", task_index=0, chief_hosts="h:4")
    view = cluster.resolve()
    assert (view.role, view.serves_only, view.coordinator_spawns_worker0) == ("coordinator", False, False)
    _flags(job_name="worker", task_index=0)
    assert cluster.resolve().serves_only  # with an explicit chief, worker 0 only serves


@pytest.mark.parametrize("values, fragment", [
    (dict(job_name="worker", task_index=2, worker_hosts="h:1,h:2"), "--task_index=2"),
    (dict(job_name="boss", worker_hosts="h:1"), "--job_name='boss'"),
    (dict(job_name="ps", ps_hosts="h:1"), "--worker_hosts"),
    (dict(job_name="worker", worker_hosts="h:1,h:2", sync_replicas=False), "--ps_hosts"),
    (dict(job_name="chief", worker_hosts="h:1", ps_hosts="h:2", sync_replicas=False), "--chief_hosts"),
])
def test_inconsistent_flags_are_cluster_errors(values, fragment):
    _flags(**values)
    with pytest.raises(errors.ClusterError, match=fragment.replace("-", r"\-")):
        cluster.resolve()


# --------------------------------------------------------------- TF_CONFIG

def _tf_config(cluster_spec, task_type, index):
    return {"TF_CONFIG": json.dumps({"cluster": cluster_spec, "task": {"type": task_type, "index": index}})}


def test_tf_config_with_ps_is_parameter_server_with_chief_coordinator():
    spec = {"chief": ["h:1"], "worker": ["h:2", "h:3"], "ps": ["h:4"]}
    view = cluster.resolve(environ=_tf_config(spec, "chief", 0))
    assert (view.kind, view.role, view.sync_replicas, view.num_workers) == ("parameter_server", "coordinator", False, 2)
    assert cluster.resolve(environ=_tf_config(spec, "worker", 0)).serves_only


def test_tf_config_without_ps_is_multi_worker_mirrored_and_chief_counts_as_worker():
    spec = {"chief": ["h:1"], "worker": ["h:2"]}
    view = cluster.resolve(environ=_tf_config(spec, "worker", 0))
    assert (view.kind, view.role, view.is_chief, view.num_workers) == ("multi_worker_mirrored", "worker", False, 2)
    assert cluster.resolve(environ=_tf_config(spec, "chief", 0)).is_chief


@pytest.mark.parametrize("text, fragment", [
    ("{not json", "not JSON"),
    ('{"task": {}}', "no 'cluster'"),
    (json.dumps({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 3}}), "task="),
    (json.dumps({"cluster": {"worker": ["h:1"], "ps": ["h:2"]}, "task": {"type": "ps", "index": 0}}), "no 'chief'"),
    (json.dumps({"cluster": {"worker": ["h"]}, "task": {"type": "worker", "index": 0}}), "TF_CONFIG cluster.worker"),
])
def test_malformed_tf_config_is_cluster_error(text, fragment):
    with pytest.raises(errors.ClusterError, match=fragment):
        cluster.resolve(environ={"TF_CONFIG": text})


def test_tf_config_and_cluster_flags_together_are_refused():
    _flags(job_name="worker", worker_hosts="h:1")
    with pytest.raises(errors.ClusterError, match="one way"):
        cluster.resolve(environ=_tf_config({"worker": ["h:1"]}, "worker", 0))


# ------------------------------------------------------- faults, bounded

def test_port_already_taken_is_named_with_its_flag():
    holder = _listening_socket()
    port = holder.getsockname()[1]
    try:
        _flags(job_name="worker", task_index=0, worker_hosts=f"127.0.0.1:{port},127.0.0.1:1")
        with pytest.raises(errors.ClusterError, match=rf"--worker_hosts: 127\.0\.0\.1:{port} .*already in use"):
            distribute.setup(timeout_seconds=5)
    finally:
        holder.close()


def test_missing_sync_peer_fails_within_the_timeout_instead_of_hanging():
    own, absent = cluster.free_port(), cluster.free_port()
    _flags(job_name="worker", task_index=0, worker_hosts=f"127.0.0.1:{own},127.0.0.1:{absent}")
    started = time.monotonic()
    with pytest.raises(errors.ClusterError, match=rf"--worker_hosts: worker:1 at 127\.0\.0\.1:{absent} did not accept"):
        distribute.setup(timeout_seconds=1.5)
    assert time.monotonic() - started < 1.5 + 3


def test_unreachable_parameter_server_fails_within_the_timeout():
    workers = [_listening_socket() for _ in range(2)]
    absent = cluster.free_port()
    try:
        _flags(job_name="chief", chief_hosts=f"127.0.0.1:{cluster.free_port()}", sync_replicas=False,
               worker_hosts=",".join(f"127.0.0.1:{w.getsockname()[1]}" for w in workers),
               ps_hosts=f"127.0.0.1:{absent}")
        started = time.monotonic()
        with pytest.raises(errors.ClusterError, match=rf"--ps_hosts: ps:0 at 127\.0\.0\.1:{absent}"):
            distribute.setup(timeout_seconds=1.5)
        assert time.monotonic() - started < 1.5 + 3
    finally:
        for listener in workers:
            listener.close()


def test_unresolvable_host_fails_at_once():
    view = cluster.ClusterView({"worker": ["no-such-host.invalid:2222"]}, "worker", 0, True, 1, source="flags")
    started = time.monotonic()
    with pytest.raises(errors.ClusterError, match="does not resolve"):
        cluster.wait_until_reachable(view, [("worker", 0)], timeout_seconds=30)
    assert time.monotonic() - started < 15


def test_cluster_timeout_environment_variable_is_checked():
    assert cluster.timeout_from_environ({"MOXLITE_CLUSTER_TIMEOUT": "7.5"}) == 7.5
    assert cluster.timeout_from_environ({}) == 120.0
    with pytest.raises(errors.ClusterError, match="MOXLITE_CLUSTER_TIMEOUT='soon'"):
        cluster.timeout_from_environ({"MOXLITE_CLUSTER_TIMEOUT": "soon"})


# ------------------------------------------------------- local devices

def test_local_devices_use_the_logical_cpus_of_the_test_process():
    assert devices.configure_local_devices(2) == ["/cpu:0", "/cpu:1"]
    setup = distribute.setup()
    assert (setup.kind, setup.num_replicas_in_sync) == ("default", 1)
    assert setup.strategy is tf.distribute.get_strategy()


def test_more_devices_than_the_initialised_runtime_has_is_a_clear_error():
    tf.constant(1.0)  # the runtime is up with the 2 logical CPUs of conftest
    with pytest.raises(errors.ClusterError, match="--num_gpus=3: .*already initialised with 2"):
        devices.configure_local_devices(3)


def test_num_gpus_two_gives_a_mirrored_strategy_whose_sum_is_the_two_device_sum():
    set_flag("num_gpus", 2)
    setup = distribute.setup()
    assert (setup.kind, setup.num_replicas_in_sync, setup.is_chief) == ("mirrored", 2, True)
    values = setup.strategy.run(
        lambda: tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group + 1, tf.float32))
    assert setup.strategy.reduce("SUM", values, axis=None).numpy() == 1 + 2
    assert "distribution: mirrored" in setup.describe() and "CPU:1" in setup.describe()


# ------------------------------------------------ partitioner and TPU

def test_variables_shard_over_several_ps_once_large():
    view = cluster.ClusterView({"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3", "h:4"]}, "chief", 0, False, 1)
    partitioner = strategy.make_partitioner(view)
    big_rows = 2 * strategy.DEFAULT_MIN_SHARD_BYTES // (4 * 8)  # 2 shards' worth of float32 rows of width 8
    assert partitioner(tf.TensorShape([big_rows, 8]), tf.float32) == [2, 1]
    assert partitioner(tf.TensorShape([10, 8]), tf.float32) == [1, 1]
    fixed = strategy.make_partitioner(view, "fixed")
    assert fixed(tf.TensorShape([10, 8]), tf.float32) == [2, 1]
    one_ps = cluster.ClusterView({"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]}, "chief", 0, False, 1)
    assert strategy.make_partitioner(one_ps) is None
    with pytest.raises(errors.ClusterError, match="variable_partitioner='even'"):
        strategy.make_partitioner(view, "even")


def test_tpu_strategy_is_built_from_the_documented_calls(monkeypatch):
    calls = []

    class FakeResolver:
        def __init__(self, tpu=None, **kwargs):
            calls.append(("resolver", tpu, kwargs))

    monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", FakeResolver)
    monkeypatch.setattr(tf.config, "experimental_connect_to_cluster", lambda r: calls.append(("connect", type(r))))
    monkeypatch.setattr(tf.tpu.experimental, "initialize_tpu_system", lambda r: calls.append(("init", type(r))))
    monkeypatch.setattr(tf.distribute, "TPUStrategy", lambda r: ("tpu-strategy", type(r)))
    set_flag("tpu", "grpc://10.0.0.2:8470")
    view = cluster.resolve()
    assert (view.kind, view.role, view.is_chief) == ("tpu", "single", True)
    built, coordinator = strategy.build(view, timeout_seconds=5)
    assert built == ("tpu-strategy", FakeResolver) and coordinator is None
    assert calls == [("resolver", "grpc://10.0.0.2:8470", {}), ("connect", FakeResolver), ("init", FakeResolver)]


@pytest.mark.parametrize("tpu", ["grpc://10.0.0.2", "http://tpu:8470", "my tpu"])
def test_malformed_tpu_address_is_cluster_error(tpu):
    with pytest.raises(errors.ClusterError, match="--tpu"):
        strategy.check_tpu_address(tpu)


def test_tpu_with_a_cluster_description_is_refused():
    _flags(tpu="my-tpu", job_name="worker", worker_hosts="h:1")
    with pytest.raises(errors.ClusterError, match="--tpu='my-tpu'"):
        cluster.resolve()


def test_partition_sizes_follow_min_shard_bytes_formula():
    # MinSizePartitioner: shards = min(max_shards, ceil(bytes / min_shard_bytes)), on axis 0.
    view = cluster.ClusterView({"chief": ["h:1"], "worker": ["h:2"], "ps": ["a:1", "b:1", "c:1"]}, "chief", 0, False, 1)
    partitioner = strategy.make_partitioner(view)
    for rows in (1, 5000, 9000, 20000, 100000):
        nbytes = rows * 16 * 4
        expected = int(min(3, max(1, np.ceil(nbytes / strategy.DEFAULT_MIN_SHARD_BYTES))))
        assert partitioner(tf.TensorShape([rows, 16]), tf.float32)[0] == expected
