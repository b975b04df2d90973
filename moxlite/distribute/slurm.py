"""The cluster of a Slurm job step, from TensorFlow's ``SlurmClusterResolver``.

``srun moxlite-run recipe.yaml`` starts one task per process; Slurm tells each
its rank and the step's nodes in environment variables, and TensorFlow's
resolver turns them into the cluster: one ``worker`` per task, ordered by
node name, each node's tasks on consecutive ports from a base port
(``MOXLITE_SLURM_PORT``, TensorFlow's 8888 by default), and each task's
share of the node's GPUs in ``CUDA_VISIBLE_DEVICES``. Worker 0 is the chief;
training is synchronous (MultiWorkerMirroredStrategy).

The resolver reads (TensorFlow 2.21) ``SLURM_PROCID``, ``SLURM_STEP_NUM_TASKS``,
``SLURM_STEP_NODELIST`` and ``SLURM_STEP_TASKS_PER_NODE``; no ``scontrol`` call.
This module reads Slurm's variables only to detect a job step and to say, in
one line, which variable is missing or wrong before the resolver is asked.
"""

import contextlib
import os
import shutil
import subprocess
from unittest import mock

from moxlite import errors

JOB_VARIABLE = "SLURM_JOB_ID"
# What SlurmClusterResolver reads; srun sets them for every task of a step.
STEP_VARIABLES = ("SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE")
PORT_VARIABLE = "MOXLITE_SLURM_PORT"
DEFAULT_PORT_BASE = 8888   # SlurmClusterResolver's default port_base
LAUNCH_FIX = "start every task with srun inside the allocation, e.g. srun moxlite-run recipe.yaml"

# CUDA_VISIBLE_DEVICES value this process was given by the resolver -> the node's GPU list
# before, so that resolving a second time (the dry-run report, then the run) splits the
# node's GPUs again rather than this task's share.
_ASSIGNED = {}
_PRETEND_GPUS = 1 << 16


def in_job(environ):
    """This process runs inside a Slurm allocation (sbatch, salloc or srun)."""
    return bool(environ.get(JOB_VARIABLE, "").strip())


def in_step(environ):
    """This process was started by srun: the step variables the resolver reads are set."""
    return any(name in environ for name in STEP_VARIABLES)


def port_base(environ):
    """The first port of each node's tasks: ``MOXLITE_SLURM_PORT`` or 8888."""
    text = environ.get(PORT_VARIABLE, "").strip()
    if not text:
        return DEFAULT_PORT_BASE
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise errors.ClusterError(
            f"{PORT_VARIABLE}={text!r}: must be a port number in 1..65535 (the first port of each node's "
            f"tasks; task k of a node listens on it + k), e.g. {DEFAULT_PORT_BASE}")
    return int(text)


def check_step(environ):
    """Raise a ClusterError naming the first step variable that is missing or not a number."""
    if not in_step(environ):
        job = environ.get(JOB_VARIABLE, "").strip()
        where = f"Slurm job {job}" if job else "no Slurm job (SLURM_JOB_ID is not set)"
        raise errors.ClusterError(
            f"SLURM_STEP_NUM_TASKS is not set: this process runs in {where} but was not started by srun; "
            f"{LAUNCH_FIX}")
    for name in STEP_VARIABLES:
        if not environ.get(name, "").strip():
            present = [other for other in STEP_VARIABLES if environ.get(other, "").strip()]
            raise errors.ClusterError(
                f"{name} is not set (set: {', '.join(present) or 'none of the others'}): SlurmClusterResolver "
                f"needs all of {', '.join(STEP_VARIABLES)}; {LAUNCH_FIX}, which sets them")
    tasks, rank = environ["SLURM_STEP_NUM_TASKS"].strip(), environ["SLURM_PROCID"].strip()
    if not tasks.isdigit() or int(tasks) < 1:
        raise errors.ClusterError(f"SLURM_STEP_NUM_TASKS={tasks!r}: must be a number of tasks, 1 or more; {LAUNCH_FIX}")
    if not rank.isdigit() or int(rank) >= int(tasks):
        raise errors.ClusterError(
            f"SLURM_PROCID={rank!r}: must be this task's rank in 0..{int(tasks) - 1} "
            f"(SLURM_STEP_NUM_TASKS={tasks}); {LAUNCH_FIX}")
    return int(tasks), int(rank)


def node_gpus(environ):
    """The GPUs of this node as the resolver numbers them: CUDA_VISIBLE_DEVICES's entries, or nvidia-smi's count.

    An empty CUDA_VISIBLE_DEVICES means no GPU (the resolver would count one);
    no variable and no nvidia-smi on PATH means a CPU-only node.
    """
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        if visible in _ASSIGNED:
            return _ASSIGNED[visible]
        return [entry.strip() for entry in visible.split(",") if entry.strip() and entry.strip() != "-1"]
    smi = shutil.which("nvidia-smi", path=environ.get("PATH"))
    if smi is None:
        return []
    try:
        output = subprocess.run([smi, "--list-gpus"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    count = sum(line.startswith("GPU ") for line in output.splitlines())
    return [str(index) for index in range(count)]


def resolve(environ, num_gpus, sync_replicas):
    """(jobs, task_type, task_index, devices per task) of this step's task, from SlurmClusterResolver.

    ``num_gpus`` > 1 asks for that many GPUs per task; 1 (the default) takes the
    resolver's even split of the node's GPUs. On a node without GPUs every task
    trains on its CPU and ``num_gpus`` is kept. A one-task step is one process
    (empty jobs), as without Slurm.
    """
    num_tasks, _ = check_step(environ)
    base = port_base(environ)
    if not sync_replicas:
        raise errors.ClusterError(
            "--sync_replicas=false under Slurm: moxlite makes every Slurm task a synchronous worker "
            "(MultiWorkerMirroredStrategy); set sync_replicas to true, or describe a parameter-server "
            "cluster with TF_CONFIG or the --*_hosts flags")
    if num_tasks == 1:
        return {}, "", 0, num_gpus
    gpus = node_gpus(environ)
    with _reading(environ):
        resolver = _resolver(environ, base, gpus, num_gpus)
        try:
            spec = resolver.cluster_spec()
        except ValueError as error:
            raise errors.ClusterError(
                f"SLURM_STEP_NODELIST={environ['SLURM_STEP_NODELIST']!r} / SLURM_STEP_TASKS_PER_NODE="
                f"{environ['SLURM_STEP_TASKS_PER_NODE']!r}: SlurmClusterResolver cannot read them ({error}); "
                f"{LAUNCH_FIX}") from None
        task_type, task_index = resolver.get_task_info()
        if gpus:
            # The resolver numbers the node's GPUs 0..n-1; a CUDA_VISIBLE_DEVICES Slurm had set
            # (say 2,3) is translated back, so that the task gets the GPUs it was allotted.
            share = [gpus[int(index)] for index in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if index]
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(share)
            _ASSIGNED[os.environ["CUDA_VISIBLE_DEVICES"]] = gpus
    jobs = {job: list(hosts) for job, hosts in spec.as_dict().items()}
    devices = resolver.num_accelerators()["GPU"] if gpus else num_gpus
    return jobs, task_type, task_index, devices


def _resolver(environ, base, gpus, num_gpus):
    import tensorflow as tf

    if gpus:
        options = dict(gpus_per_node=len(gpus), auto_set_gpu=True)
        if num_gpus > 1:
            options["gpus_per_task"] = num_gpus
    else:
        # CPU-only nodes: the resolver still deals out GPUs, so give it more pretend GPUs than
        # any node can have tasks, one per task, and keep CUDA_VISIBLE_DEVICES untouched.
        options = dict(gpus_per_node=_PRETEND_GPUS, gpus_per_task=1, auto_set_gpu=False)
    try:
        resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(port_base=base, **options)
    except ValueError as error:
        raise errors.ClusterError(
            f"SLURM_STEP_NODELIST={environ['SLURM_STEP_NODELIST']!r} / SLURM_STEP_TASKS_PER_NODE="
            f"{environ['SLURM_STEP_TASKS_PER_NODE']!r}: SlurmClusterResolver cannot read them ({error}); "
            f"{LAUNCH_FIX}") from None
    except RuntimeError as error:
        if "GPUs" in str(error):
            raise errors.ClusterError(
                f"--num_gpus={num_gpus}: the node has {len(gpus)} GPU(s) (CUDA_VISIBLE_DEVICES / nvidia-smi) "
                f"for SLURM_STEP_TASKS_PER_NODE={environ['SLURM_STEP_TASKS_PER_NODE']!r}; ask for fewer GPUs per "
                "task, or leave num_gpus at 1 to split the node's GPUs evenly over its tasks") from None
        raise errors.ClusterError(
            f"SLURM_STEP_TASKS_PER_NODE={environ['SLURM_STEP_TASKS_PER_NODE']!r} does not add up to "
            f"SLURM_STEP_NUM_TASKS={environ['SLURM_STEP_NUM_TASKS']!r} ({error}); {LAUNCH_FIX}") from None
    if gpus and resolver.num_accelerators()["GPU"] < 1:
        raise errors.ClusterError(
            f"CUDA_VISIBLE_DEVICES={environ.get('CUDA_VISIBLE_DEVICES', '(nvidia-smi)')!r}: this node's "
            f"{len(gpus)} GPU(s) are fewer than its tasks (SLURM_STEP_TASKS_PER_NODE="
            f"{environ['SLURM_STEP_TASKS_PER_NODE']!r}); start at most {len(gpus)} task(s) per node "
            "(srun --ntasks-per-node), or give the step the whole node's GPUs (--gpus-per-node) "
            "rather than --gpus-per-task")
    return resolver


@contextlib.contextmanager
def _reading(environ):
    """The resolver reads os.environ: make it ``environ`` while it runs, when that is another mapping."""
    if environ is os.environ:
        yield
        return
    with mock.patch.dict(os.environ, environ, clear=True):
        yield
