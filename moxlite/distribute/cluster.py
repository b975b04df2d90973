"""One resolved view of the cluster, from MoXing's flags or from ``TF_CONFIG``.

MoXing describes a cluster with per-process flags::

    --job_name=worker --task_index=0 --ps_hosts=h0:2222 --worker_hosts=h0:2223,h1:2223

TensorFlow describes it with the ``TF_CONFIG`` environment variable::

    {"cluster": {"chief": [...], "worker": [...], "ps": [...]},
     "task": {"type": "worker", "index": 0}}

A Slurm job step (``srun``) describes it with its own variables, which
TensorFlow's ``SlurmClusterResolver`` reads (see ``slurm``).

``resolve()`` reads whichever is set (flags and TF_CONFIG at once is an error;
``--cluster`` / ``distribute.cluster`` picks one source) and returns a
``ClusterView``: the jobs with their addresses, this process's task and the
kind of training the cluster implies. Every mistake found here is a
``ClusterError`` naming the flag (or ``TF_CONFIG``), the value and the fix.

How MoXing's commands map onto TensorFlow's roles:

* synchronous (``--sync_replicas=true``): the workers form a
  MultiWorkerMirroredStrategy cluster; every worker runs the user's script and
  worker 0 is the chief. Parameter servers are not needed; ps tasks, if given,
  exit at once.
* asynchronous (``--sync_replicas=false``): TensorFlow's ParameterServerStrategy
  needs a coordinator task (job ``chief``) that runs the user's script, while
  ps and worker tasks only serve. With ``--chief_hosts`` the coordinator is its
  own process (``--job_name=chief``) and every worker serves. Without it, the
  process started as worker 0 becomes the coordinator on a free port of its
  own host, and serves worker 0 from a second server in its own process, so MoXing's
  one-command-per-task launch works unchanged.
"""

import dataclasses
import json
import os
import socket
import time
from typing import Dict, List

from moxlite import errors
from moxlite.run_settings import CLUSTER_SOURCES   # where the cluster comes from (--cluster, distribute.cluster)

JOB_FLAGS = {"chief": "chief_hosts", "worker": "worker_hosts", "ps": "ps_hosts"}
TASK_TYPES = ("chief", "worker", "ps")
SOURCE_NAMES = {"single": "one process (no cluster described)", "flags": "MoXing's flags (--job_name, --*_hosts)",
                "tf_config": "the TF_CONFIG environment variable", "tpu": "--tpu",
                "slurm": "the Slurm job step (SlurmClusterResolver)"}


@dataclasses.dataclass(frozen=True)
class ClusterView:
    """The cluster as this process sees it.

    jobs: job name -> list of "host:port" addresses (empty dict for one process).
    task_type: this process's job ('' for a single process).
    task_index: this process's index within ``task_type``.
    sync_replicas: synchronous (all-reduce) or asynchronous (parameter-server) training.
    num_gpus: local devices (replicas) per worker.
    tpu: TPU name or address ('' without TPU).
    source: where the description came from: 'single', 'flags', 'tf_config', 'slurm' or 'tpu'.
    coordinator_spawns_worker0: the worker-0 process is the coordinator and
        must also serve worker 0, in its own process (asynchronous, flags, no chief_hosts).
    """

    jobs: Dict[str, List[str]]
    task_type: str
    task_index: int
    sync_replicas: bool
    num_gpus: int
    tpu: str = ""
    source: str = "single"
    coordinator_spawns_worker0: bool = False

    @property
    def kind(self):
        """'default', 'mirrored', 'multi_worker_mirrored', 'parameter_server' or 'tpu'."""
        if self.tpu:
            return "tpu"
        if not self.jobs:
            return "mirrored" if self.num_gpus > 1 else "default"
        if self.jobs.get("ps") and not self.sync_replicas:
            return "parameter_server"
        return "multi_worker_mirrored"

    @property
    def num_workers(self):
        """Processes that compute gradients (the chief counts in synchronous mode)."""
        if not self.jobs:
            return 1
        workers = len(self.jobs.get("worker", []))
        if self.kind == "multi_worker_mirrored":
            workers += len(self.jobs.get("chief", []))
        return workers

    @property
    def role(self):
        """'single', 'chief', 'worker', 'ps' or 'coordinator'."""
        if not self.jobs:
            return "single"
        if self.kind == "parameter_server":
            if self.task_type == "chief":
                return "coordinator"
            return self.task_type
        if self.task_type == "ps":
            return "ps"
        if self.task_type == "chief" or (self.task_index == 0 and "chief" not in self.jobs):
            return "chief"
        return "worker"

    @property
    def is_chief(self):
        """The one process that writes checkpoints, summaries and exports."""
        return self.role in ("single", "chief", "coordinator")

    @property
    def serves_only(self):
        """This process runs a server (or nothing) and never the user's training code."""
        if self.role == "ps":
            return True
        return self.kind == "parameter_server" and self.role == "worker"

    def address(self, task_type=None, task_index=None):
        """"host:port" of a task (this process's by default)."""
        task_type = self.task_type if task_type is None else task_type
        task_index = self.task_index if task_index is None else task_index
        return self.jobs[task_type][task_index]

    def training_jobs(self):
        """The jobs TensorFlow must see: without ps in synchronous mode."""
        if self.kind == "parameter_server":
            return dict(self.jobs)
        return {job: hosts for job, hosts in self.jobs.items() if job != "ps"}

    def flag_of(self, task_type):
        """Where a job's addresses came from, for error messages."""
        if self.source == "tf_config":
            return f"TF_CONFIG cluster.{task_type}"
        if self.source == "slurm":
            return "SLURM_STEP_NODELIST (ports from MOXLITE_SLURM_PORT)"
        return "--" + JOB_FLAGS[task_type]


def parse_hosts(flag, value):
    """Split a comma-separated "host:port" list, checking every entry."""
    if value is None or not str(value).strip():
        return []
    entries = [entry.strip() for entry in str(value).split(",")]
    hosts = []
    for entry in entries:
        hosts.append(_check_address(flag, value, entry))
    duplicates = sorted({host for host in hosts if hosts.count(host) > 1})
    if duplicates:
        raise errors.ClusterError(
            f"{flag}={value!r} lists {duplicates[0]} twice; give every task its own host:port")
    return hosts


def num_gpus_problem(num_gpus):
    """What is wrong with ``num_gpus`` (devices per worker), or None; for flags and recipes."""
    return None if num_gpus >= 1 else "must be at least 1 (devices per worker)"


def address_problem(entry):
    """What is wrong with ``entry`` as a task address, or None if it is a valid ``host:port``.

    The port follows the last ':' and is a number in 1..65535; the host is not
    empty and has no spaces; an IPv6 host is written in brackets, ``[::1]:2222``
    (as gRPC wants it). The one rule for flags, TF_CONFIG and recipes.
    """
    host, sep, port = entry.rpartition(":")
    if not entry or not sep or not host:
        return f"{entry!r} is not host:port"
    if not port.isdigit() or not 0 < int(port) < 65536:
        return f"port {port!r} of {entry!r} is not a number in 1..65535"
    if any(char.isspace() for char in host):
        return f"host {host!r} contains spaces"
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        return f"IPv6 host {host!r} needs brackets: [{host}]:{port}"
    return None


def _check_address(flag, value, entry):
    fix = "write host:port entries separated by commas, e.g. localhost:2222,localhost:2223"
    problem = address_problem(entry)
    if problem:
        raise errors.ClusterError(f"{flag}={value!r}: entry {problem}; {fix}")
    host, _, port = entry.rpartition(":")
    return f"{host}:{int(port)}"


def resolve(get_flag=None, environ=None):
    """The ``ClusterView`` described by MoXing's flags, ``TF_CONFIG`` or a Slurm job step."""
    if get_flag is None:
        from moxlite.flags import flag_value as get_flag   # the flags as set, not the scripts' view
    environ = os.environ if environ is None else environ
    num_gpus = int(get_flag("num_gpus"))
    if num_gpus_problem(num_gpus):
        raise errors.ClusterError(f"--num_gpus={num_gpus}: {num_gpus_problem(num_gpus)}")
    sync_replicas = bool(get_flag("sync_replicas"))
    tpu = get_flag("tpu") or ""
    flag_values = {name: get_flag(name) or "" for name in ("job_name", "ps_hosts", "worker_hosts", "chief_hosts")}
    tf_config = environ.get("TF_CONFIG", "").strip()
    source = _chosen_source(get_flag("cluster") or "auto", flag_values, tf_config, environ)

    if tpu:
        if any(flag_values.values()) or source in ("tf_config", "slurm"):
            raise errors.ClusterError(
                f"--tpu={tpu!r} is set together with a cluster description (flags, TF_CONFIG or Slurm); "
                "a TPU run takes its workers from the TPU: drop --job_name/--*_hosts and TF_CONFIG")
        return ClusterView({}, "", 0, True, num_gpus, tpu=tpu, source="tpu")
    if source == "tf_config":
        return _from_tf_config(tf_config, num_gpus, sync_replicas)
    if source == "flags":
        return _from_flags(flag_values, int(get_flag("task_index")), num_gpus, sync_replicas)
    if source == "slurm":
        from moxlite.distribute import slurm

        jobs, task_type, task_index, devices = slurm.resolve(environ, num_gpus, sync_replicas)
        return ClusterView(jobs, task_type, task_index, True, devices, source="slurm")
    return ClusterView({}, "", 0, sync_replicas, num_gpus)


def _chosen_source(wanted, flag_values, tf_config, environ):
    """The source ``--cluster=wanted`` picks, after checking that it is there."""
    from moxlite.distribute import slurm

    if wanted not in CLUSTER_SOURCES:
        raise errors.ClusterError(f"--cluster={wanted!r}: use one of {', '.join(CLUSTER_SOURCES)}")
    given = [name for name, value in flag_values.items() if value]
    if wanted == "auto":
        if tf_config and given:
            raise errors.ClusterError(
                "TF_CONFIG is set and so are --job_name/--worker_hosts/--ps_hosts/--chief_hosts; "
                "describe the cluster one way: unset TF_CONFIG or drop the flags")
        if given:
            return "flags"
        if tf_config:
            return "tf_config"
        # An sbatch script or an salloc shell is in a job but not in an srun step: one process.
        return "slurm" if slurm.in_job(environ) and slurm.in_step(environ) else "single"
    if wanted in ("tf_config", "slurm") and given:
        raise errors.ClusterError(
            f"--cluster={wanted!r} takes the cluster from {SOURCE_NAMES[wanted]}, but --{given[0]} is set too; "
            f"drop --job_name/--*_hosts or use --cluster=flags")
    if wanted == "tf_config" and not tf_config:
        raise errors.ClusterError(
            "--cluster='tf_config' but TF_CONFIG is not set; set it (Kubeflow's TFJob does, in every pod) "
            "or use --cluster=auto")
    if wanted == "flags" and not given:
        raise errors.ClusterError(
            "--cluster='flags' but none of --job_name/--worker_hosts/--ps_hosts/--chief_hosts is set; "
            "give --worker_hosts (and --job_name, --task_index) or use --cluster=auto")
    if wanted == "slurm" and not slurm.in_job(environ):
        raise errors.ClusterError(
            f"--cluster='slurm' but SLURM_JOB_ID is not set: this process is not in a Slurm job; "
            f"{slurm.LAUNCH_FIX}, or use --cluster=auto")
    return wanted


def _from_flags(values, task_index, num_gpus, sync_replicas):
    jobs = {job: parse_hosts("--" + flag, values[flag]) for job, flag in JOB_FLAGS.items()}
    jobs = {job: hosts for job, hosts in jobs.items() if hosts}
    job_name = values["job_name"]
    if job_name not in TASK_TYPES:
        raise errors.ClusterError(
            f"--job_name={job_name!r}: must be 'worker', 'ps' or 'chief' when --worker_hosts/--ps_hosts are set")
    if "worker" not in jobs:
        raise errors.ClusterError(
            f"--worker_hosts={values['worker_hosts']!r}: a cluster needs at least one worker; "
            "give --worker_hosts=host:port[,host:port...]")
    if len(jobs.get("chief", [])) > 1:
        raise errors.ClusterError(
            f"--chief_hosts={values['chief_hosts']!r}: give exactly one host:port for the coordinator")
    if job_name == "chief" and "chief" not in jobs:
        raise errors.ClusterError(
            "--job_name=chief needs --chief_hosts=host:port (the coordinator's address)")
    hosts = jobs[job_name]
    if not 0 <= task_index < len(hosts):
        raise errors.ClusterError(
            f"--task_index={task_index}: --{JOB_FLAGS[job_name]} lists {len(hosts)} task(s), "
            f"so the index must be in 0..{len(hosts) - 1}")
    if not sync_replicas and "ps" not in jobs:
        raise errors.ClusterError(
            "--sync_replicas=false (asynchronous training) needs parameter servers: "
            "give --ps_hosts=host:port[,...] or use --sync_replicas=true")
    spawns = False
    if not sync_replicas and "chief" not in jobs and job_name == "worker" and task_index == 0:
        # MoXing starts no coordinator: the worker-0 process takes that role on a
        # free port of its own host and serves worker 0 in the same process.
        host = jobs["worker"][0].rpartition(":")[0]
        jobs["chief"] = [f"{host}:{_coordinator_port(jobs['worker'][0])}"]
        job_name, spawns = "chief", True
    return ClusterView(jobs, job_name, task_index if not spawns else 0, sync_replicas, num_gpus,
                       source="flags", coordinator_spawns_worker0=spawns)


def _from_tf_config(text, num_gpus, sync_replicas):
    fix = ('set it to JSON like {"cluster": {"worker": ["host:port", ...]}, '
           '"task": {"type": "worker", "index": 0}}')
    try:
        config = json.loads(text)
    except ValueError as error:
        raise errors.ClusterError(f"TF_CONFIG={errors.describe(text)} is not JSON ({error}); {fix}") from None
    if not isinstance(config, dict) or not isinstance(config.get("cluster"), dict):
        raise errors.ClusterError(f"TF_CONFIG={errors.describe(text)} has no 'cluster' mapping; {fix}")
    jobs = {}
    for job, hosts in config["cluster"].items():
        if job not in TASK_TYPES:
            raise errors.ClusterError(
                f"TF_CONFIG cluster job {job!r} is not supported; use 'chief', 'worker' and 'ps'")
        if not isinstance(hosts, list):
            raise errors.ClusterError(f"TF_CONFIG cluster.{job}={errors.describe(hosts)} must be a list; {fix}")
        jobs[job] = parse_hosts(f"TF_CONFIG cluster.{job}", ",".join(map(str, hosts)))
    jobs = {job: hosts for job, hosts in jobs.items() if hosts}
    task = config.get("task") or {}
    task_type, task_index = task.get("type"), task.get("index", 0)
    if task_type not in jobs or not isinstance(task_index, int) or not 0 <= task_index < len(jobs[task_type]):
        raise errors.ClusterError(
            f"TF_CONFIG task={errors.describe(task)} does not name a task of the cluster "
            f"({', '.join(f'{job}:0..{len(h) - 1}' for job, h in jobs.items())}); fix task.type/task.index")
    if "ps" in jobs:
        # TensorFlow's convention: parameter servers in TF_CONFIG mean
        # asynchronous ParameterServerStrategy training with a chief as coordinator.
        sync_replicas = False
        if "chief" not in jobs or "worker" not in jobs:
            raise errors.ClusterError(
                "TF_CONFIG cluster has 'ps' but no 'chief' or no 'worker'; parameter-server "
                "training needs one chief (the coordinator), workers and ps tasks")
    return ClusterView(jobs, task_type, task_index, sync_replicas, num_gpus, source="tf_config")


_COORDINATOR_PORTS = {}


def _coordinator_port(worker0):
    """The coordinator's port for the worker-0 process at ``worker0``: picked once per process,
    so that every resolve of the same flags gives the same view, and ``setup()`` builds the
    cluster once (the recipe CLI resolves before ``run`` does; with a new port each time the
    second set-up started worker 0's server again, on the port the first one holds)."""
    if worker0 not in _COORDINATOR_PORTS:
        _COORDINATOR_PORTS[worker0] = free_port()
    return _COORDINATOR_PORTS[worker0]


def free_port(host="127.0.0.1"):
    """A TCP port that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def check_port_free(view):
    """Raise if this task's port is already taken by another process."""
    address = view.address()
    port = int(address.rpartition(":")[2])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("", port))
        except OSError:
            raise errors.ClusterError(
                f"{view.flag_of(view.task_type)}: {address} ({view.task_type}:{view.task_index}, this process) "
                f"is already in use by another process; pick a free port or stop the process using it") from None


def wait_until_reachable(view, tasks, timeout_seconds):
    """Wait until every (task_type, index) in ``tasks`` accepts TCP connections.

    Bounded by ``timeout_seconds`` so that a missing process or a wrong
    address ends the run with a ClusterError instead of a hang.
    """
    deadline = time.monotonic() + timeout_seconds
    pending = list(tasks)
    for task_type, index in pending:
        host = view.address(task_type, index).rpartition(":")[0]
        try:
            socket.getaddrinfo(host, None)
        except socket.gaierror:
            raise errors.ClusterError(
                f"{view.flag_of(task_type)}: host {host!r} of {task_type}:{index} does not resolve; "
                "fix the host name or use an IP address") from None
    while pending:
        pending = [task for task in pending if not _accepts(view.address(*task))]
        if not pending:
            return
        if time.monotonic() > deadline:
            task_type, index = pending[0]
            raise errors.ClusterError(
                f"{view.flag_of(task_type)}: {task_type}:{index} at {view.address(task_type, index)} "
                f"did not accept connections within {timeout_seconds:g} s; start its process, fix the "
                "address, or raise MOXLITE_CLUSTER_TIMEOUT")
        time.sleep(0.2)


def _accepts(address):
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except OSError:
        return False


def open_rendezvous_listener(view):
    """Listen on this task's port until the peers are up (see ``strategy``).

    MultiWorkerMirroredStrategy blocks forever in its constructor while a peer
    is missing, so the workers first meet on plain sockets, bounded in time.
    Binding also detects a port that another process holds.
    """
    address = view.address()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("", int(address.rpartition(":")[2])))
    except OSError:
        listener.close()
        raise errors.ClusterError(
            f"{view.flag_of(view.task_type)}: {address} ({view.task_type}:{view.task_index}, this process) "
            f"is already in use by another process; pick a free port or stop the process using it") from None
    listener.listen(64)
    return listener


def describe_jobs(view):
    """"job: host:port, host:port" lines for ``--dry-run``."""
    return [f"{job}: {', '.join(hosts)}" for job, hosts in view.jobs.items()]


def timeout_from_environ(environ=None, default=120.0):
    """Seconds to wait for peers: MOXLITE_CLUSTER_TIMEOUT or ``default``."""
    environ = os.environ if environ is None else environ
    text = environ.get("MOXLITE_CLUSTER_TIMEOUT", "")
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise errors.ClusterError(
            f"MOXLITE_CLUSTER_TIMEOUT={text!r}: must be a positive number of seconds, e.g. 60")
    return value

