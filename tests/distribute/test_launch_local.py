"""tools/launch_local.py: real loopback clusters through moxlite.distribute.setup(),
exit codes, timeouts, and teardown that leaves no process behind."""

import signal
import time

import pytest

from tests import distlib

pytestmark = pytest.mark.slow  # real multi-process clusters on loopback


@pytest.fixture
def launches():
    """Start launches with ``launches(args, command, timeout)``; all are killed at teardown."""
    started = []

    def launch(args, command, timeout, extra_env=None, sigint_ignored=False):
        started.append(distlib.Launch(args, command, timeout, extra_env, sigint_ignored))
        return started[-1]

    yield launch
    for one in started:
        one.kill()


def test_sync_two_workers_form_a_multi_worker_cluster_and_all_reduce(launches):
    run = launches(["--workers=2", "--sync"], ["python", distlib.script("cluster_probe.py")], timeout=150)
    assert run.wait() == 0, run.output()
    results = run.results()
    assert set(results) == {"worker:0", "worker:1"}, run.output()
    for task, result in results.items():
        assert result["kind"] == "multi_worker_mirrored"
        assert result["num_workers"] == 2 and result["num_replicas_in_sync"] == 2
        assert result["sum"] == sum(index + 1 for index in range(2))  # each worker adds task_index + 1
    assert results["worker:0"]["is_chief"] and not results["worker:1"]["is_chief"]


def test_async_coordinator_on_worker0_counts_every_scheduled_increment(launches):
    run = launches(["--workers=2", "--ps=1", "--async"], ["python", distlib.script("cluster_probe.py")],
                   timeout=150)
    assert run.wait() == 0, run.output()
    results = run.results()
    assert list(results) == ["worker:0"], run.output()  # only the coordinator runs user code
    coordinator = results["worker:0"]
    assert (coordinator["kind"], coordinator["role"], coordinator["num_workers"]) == ("parameter_server", "coordinator", 2)
    assert coordinator["counter"] == 200  # INCREMENTS scheduled, none lost
    assert any(line.startswith("[worker:1] INFO:moxlite:serving worker:1") for line in run.lines)
    assert any(line.startswith("[ps:0] INFO:moxlite:serving ps:0") for line in run.lines)


def _pids(run, count, seconds=30):
    pids = []
    while len(pids) < count:
        line = run.read_until(lambda text: "PID " in text, seconds)
        assert line is not None, run.output()
        pids.append(int(line.rsplit("PID ", 1)[1]))
    return pids


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_kills_every_task_and_grandchild_even_if_they_ignore_sigterm(launches, signum):
    # The tasks never save: a 2 s grace to do so (the default is 60 s) is all they get.
    # The run's own --timeout only bounds a hang: at the start of a loaded suite the six processes
    # took over 120 s to start, the timeout fired first and the launcher rightly exited 124.
    run = launches(["--workers=2", "--ps=1", "--async", "--save-grace=2"], ["python", distlib.script("stubborn.py")],
                   timeout=600)
    pids = _pids(run, 6)  # 3 tasks, each with a grandchild
    assert all(distlib.alive(pid) for pid in pids)
    interrupted = time.monotonic()
    run.process.send_signal(signum)
    assert run.wait() == 128 + signum
    assert time.monotonic() - interrupted < 30   # the 2 s grace, then SIGTERM, then SIGKILL after 3 s
    time.sleep(0.5)
    assert [pid for pid in pids if distlib.alive(pid)] == []


def test_sigint_stops_a_launcher_started_with_sigint_ignored(launches):
    """A background job of a non-interactive shell (a CI script's `&`, pytest started so) starts with
    SIGINT ignored; the launcher then ran on to its --timeout (exit 124), and so the SIGINT case of
    the interrupt test above waited 600 s and failed. Now it stops at once (130), leaving nothing."""
    run = launches(["--workers=1", "--save-grace=2"], ["python", distlib.script("stubborn.py")], timeout=120,
                   sigint_ignored=True)
    pids = _pids(run, 2)
    run.process.send_signal(signal.SIGINT)
    assert run.wait() == 130, run.output()
    time.sleep(0.5)
    assert [pid for pid in pids if distlib.alive(pid)] == []


def test_timeout_stops_the_run_with_code_124_and_no_survivors(launches):
    run = launches(["--workers=1"], ["python", distlib.script("stubborn.py")], timeout=4)
    pids = _pids(run, 2)
    assert run.wait() == 124
    time.sleep(0.5)
    assert [pid for pid in pids if distlib.alive(pid)] == []
    assert "timeout after 4 s" in run.output()


def test_returns_the_chief_exit_code(launches):
    run = launches(["--workers=2"], ["python", distlib.script("stubborn.py"), "--exit_code=3", "--fail_task=0"],
                   timeout=60)
    assert run.wait() == 3
    assert run.lines[-1] == "[launch_local] worker:0 exit code 3"


def test_a_failing_sync_worker_ends_the_run_with_its_code(launches):
    started = time.monotonic()
    run = launches(["--workers=2"], ["python", distlib.script("stubborn.py"), "--exit_code=5", "--fail_task=1"],
                   timeout=60)
    assert run.wait() == 5
    assert time.monotonic() - started < 30
    assert "[launch_local] worker:1 exited with 5; stopping the run" in run.output()


def test_dry_run_prints_moxing_flags_or_tf_config_per_task(launches):
    run = launches(["--workers=2", "--ps=1", "--async", "--dry-run"], ["python", "train.py"], timeout=30)
    assert run.wait() == 0
    assert [line.split("]")[0] for line in run.lines] == ["[ps:0", "[worker:0", "[worker:1"]
    assert "--job_name=worker --task_index=1" in run.lines[2] and "--sync_replicas=false" in run.lines[2]
    run = launches(["--workers=2", "--ps=1", "--async", "--use-tf-config", "--dry-run"], ["python", "train.py"],
                   timeout=30)
    assert run.wait() == 0
    assert run.lines[0].startswith("[chief:0] TF_CONFIG=") and '"type": "chief"' in run.lines[0]
