"""Shared test set-up: two logical CPU devices stand in for two GPUs.

The logical devices must be configured before TensorFlow initialises its
runtime, so this happens at import time, before any test module runs.
"""

import os
import re

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# Keras without its optional IPython, matplotlib and pandas, here and in every process a test
# starts that inherits PYTHONPATH (tests/subprocess_site/sitecustomize.py says why).
SUBPROCESS_SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "subprocess_site")
if SUBPROCESS_SITE not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [SUBPROCESS_SITE, os.environ.get("PYTHONPATH")]))
from tests.subprocess_site import sitecustomize as _keras_optional  # noqa: E402

_keras_optional.install()

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

NUM_LOGICAL_DEVICES = 2

_cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    _cpu, [tf.config.LogicalDeviceConfiguration()] * NUM_LOGICAL_DEVICES)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """Move what the imports and collection built into the collector's permanent generation.

    The modules, TensorFlow's and Keras's included, live as long as the worker; leaving them
    to the collector made every full collection during the tests walk them again.
    """
    from moxlite import process_exit

    process_exit.freeze_survivors()


# Grappler (TensorFlow's graph optimiser, run when a traced function is first called) off in
# the pytest processes: the tests' graphs run a few steps each, so rewriting them costs more
# than it saves (measured: the in-process tests' CPU about 18 % lower). It changes no op's
# semantics, only fusions and reorderings, so results differ at most by float32 rounding.
# A ported script (tests/portlib.py) runs with grappler off too; the other processes the tests
# start (clusters, the console script) keep TensorFlow's default, as a user's run does, and so
# does a test marked `grappler` (its figures were measured with grappler on).
# MOXLITE_TEST_GRAPPLER=1 keeps grappler on for every test.
GRAPPLER_ON = os.environ.get("MOXLITE_TEST_GRAPPLER") == "1"


def _set_grappler(on):
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": not on})


_set_grappler(GRAPPLER_ON)

# Importing compat leaves moxlite's functions unconverted by AutoGraph (as in every run), so a
# test of one module alone traces its code as a run does, whatever the tests imported before.
from moxlite import compat as _compat  # noqa: E402,F401


@pytest.fixture
def two_device_strategy():
    """The MirroredStrategy over the two logical CPU devices (the one moxlite.run uses too)."""
    from moxlite.distribute.strategy import mirrored_strategy

    return mirrored_strategy(["/cpu:0", "/cpu:1"])


@pytest.fixture(autouse=True)
def _fresh_flags_and_keras():
    """Every test starts from default flags and fresh Keras names.

    Keras's own garbage collection is skipped (``free_memory=False``): it scanned every
    object in the worker at each test (0.2 s after the imports, about 0.5 s in a worker that
    has run a few hundred tests), and Python's automatic collector frees the same cycles.
    """
    from moxlite import flags
    import keras

    flags.reset_flags()
    keras.backend.clear_session(free_memory=False)
    yield
    flags.reset_flags()


@pytest.fixture(autouse=True)
def _own_user_cache(tmp_path_factory, monkeypatch):
    """Every test has its own per-user cache (jit_compile=auto keeps its choices there): a choice
    one test measured is not another test's, nor the user's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("user_cache")))


def _patched_methods(strategy):
    """Names of ``strategy``'s methods (its own or its ``extended``'s) replaced on the instance by
    something other than the method itself (monkeypatch's undo leaves the bound method there)."""
    patched = []
    for owner in (strategy, strategy.extended):
        for name, value in vars(owner).items():
            method = getattr(type(owner), name, None)
            if callable(value) and callable(method):
                if getattr(value, "__func__", None) is method and getattr(value, "__self__", None) is owner:
                    continue
                patched.append(f"{type(owner).__name__}.{name}")
    return sorted(patched)


@pytest.fixture(autouse=True)
def _cached_strategies_left_as_found(request):
    """A test that patches one of moxlite's cached MirroredStrategies must put it back (monkeypatch).

    ``mirrored_strategy`` hands every run in the process the same strategy per device set; a
    counter once left patched on one was read by the traces of later tests in the same worker,
    which failed far from the cause. This fails the test that left it instead.
    """
    from moxlite.distribute import strategy as strategy_lib

    before = {key: _patched_methods(s) for key, s in strategy_lib._MIRRORED_STRATEGIES.items()}
    yield
    for key, cached in strategy_lib._MIRRORED_STRATEGIES.items():
        left = sorted(set(_patched_methods(cached)) - set(before.get(key, [])))
        if left:
            pytest.fail(f"{request.node.nodeid} left {', '.join(left)} patched on the cached strategy over "
                        f"{list(key)}; patch it with monkeypatch so it is put back", pytrace=False)


@pytest.fixture(autouse=True)
def _grappler_as_marked(request):
    """Grappler on for a test marked `grappler`, off again after it (see GRAPPLER_ON above)."""
    if GRAPPLER_ON or request.node.get_closest_marker("grappler") is None:
        yield
        return
    _set_grappler(True)
    try:
        yield
    finally:
        _set_grappler(False)


@pytest.fixture(scope="session")
def mnist_arrays():
    """The bundled MNIST sample, as float32 images in [0, 1] and int32 labels."""
    from moxlite.data import mnist

    images, labels = mnist.load_arrays()
    return images.astype(np.float32) / 255.0, labels.astype(np.int32)


@pytest.fixture
def launches():
    """Start local clusters with tools/launch_local.py: ``launch(launcher_args, command, timeout,
    extra_env=None)`` (``extra_env``: variables set for every task).

    Every cluster started is killed (process groups included) when the test ends.
    """
    from tests import distlib

    started = []

    def launch(args, command, timeout, extra_env=None):
        started.append(distlib.Launch(args, command, timeout, extra_env=extra_env))
        return started[-1]

    yield launch
    for one in started:
        one.kill()


@pytest.fixture(scope="session")
def sync_run_stopped_by_sigterm(tmp_path_factory):
    """``distlib.stopped_and_resumed_sync_run``: one cluster (four TensorFlow processes, two
    runs) for the two tests that check it, tests/distribute/test_training.py's resume and
    tests/training/test_run_interrupts.py's SIGTERM forwarding. Both are in the cluster group
    (they are marked ``cluster``), so under xdist one worker runs both and starts it once."""
    from tests import distlib

    return distlib.stopped_and_resumed_sync_run(tmp_path_factory.mktemp("sync_run_stopped_by_sigterm"))


# Under pytest-xdist (the README's test command: -n 2 --dist loadgroup), the tests that
# start a multi-process cluster on loopback run one at a time, in one xdist group, while
# the other workers take the rest. Two clusters at once on two cores would each run at
# half speed against their bounded waits. A test is in the group if it uses the
# `launches` fixture or is marked `cluster` (it starts one through tests.distlib itself).
CLUSTER_GROUP = "clusters"


# Longest first: the tests listed in tests/test_times.txt (the `call` lines of a
# `--durations` table) run in order of their recorded time, before every other test, so
# that no long test starts when the other worker is about to finish. xdist hands out its
# work units in collection order (the cluster group, its largest, first), so this order is
# the order in which the workers take the tests. A `slow` test not listed yet counts as
# UNLISTED_SLOW_SECONDS. Refresh the file after adding a long test (see its header).
TEST_TIMES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_times.txt")
UNLISTED_SLOW_SECONDS = 30.0
_DURATION_LINE = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s+call\s+(.+?)\s*$")


def recorded_test_times(path=TEST_TIMES):
    """{test id: seconds} from the `--durations` lines in ``path`` (other lines are ignored)."""
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as lines:
        matches = (_DURATION_LINE.match(line) for line in lines)
        return {_without_group(match.group(2)): float(match.group(1)) for match in matches if match}


def _without_group(nodeid):
    """The test id without the "@clusters" that xdist's loadgroup appends (a table made under
    the README's command has it; the ordering here runs before xdist adds it)."""
    suffix = "@" + CLUSTER_GROUP
    return nodeid[:-len(suffix)] if nodeid.endswith(suffix) else nodeid


def expected_seconds(item, times):
    if item.nodeid in times:
        return times[item.nodeid]
    return UNLISTED_SLOW_SECONDS if item.get_closest_marker("slow") else 0.0


def _shares_a_module_fixture(item):
    """Whether ``item`` uses a module- or class-scoped fixture (built once for the tests next to it)."""
    definitions = getattr(item, "_fixtureinfo", None)
    definitions = definitions.name2fixturedefs if definitions else {}
    return any(d.scope in ("module", "class", "package") for defs in definitions.values() for d in defs)


def longest_first(items, times):
    """``items`` by expected time, longest first; the rest keep their order (the sort is stable).

    The tests of one module that share a module-scoped fixture move together, as one block
    keyed by its longest test, so that the fixture is still built once per worker.
    """
    block_seconds = {}
    for item in items:
        if _shares_a_module_fixture(item):
            block = item.nodeid.split("::", 1)[0]
            block_seconds[block] = max(block_seconds.get(block, 0.0), expected_seconds(item, times))

    def seconds(item):
        if _shares_a_module_fixture(item):
            return block_seconds[item.nodeid.split("::", 1)[0]]
        return expected_seconds(item, times)

    items.sort(key=lambda item: -seconds(item))


# tryfirst: xdist's worker reads the xdist_group marks in its own pytest_collection_modifyitems
# (it appends "@clusters" to each grouped test's id, which is what --dist loadgroup groups by),
# and a conftest hook without it ran after that one: the marks came too late, and the cluster
# tests were spread over both workers, two clusters at a time, each module fixture built twice.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if "launches" in item.fixturenames or item.get_closest_marker("cluster"):
            item.add_marker(pytest.mark.xdist_group(CLUSTER_GROUP))
    longest_first(items, recorded_test_times())


# A test marked own_process runs in a pytest process of its own. TensorFlow keeps what a large
# graph (the grammar masked LM's THOR step, a BERT plan) allocated for as long as the process
# lives, about 1 GB each, and the xdist workers run several hundred tests: together they filled
# the machine's 24 GiB. The parent keeps the test's place (its id, its outcome, its time).
OWN_PROCESS = "MOXLITE_TEST_OWN_PROCESS"
OWN_PROCESS_TIMEOUT = 900


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if pyfuncitem.get_closest_marker("own_process") is None or os.environ.get(OWN_PROCESS):
        return None
    import subprocess
    import sys

    from tests import ROOT

    environ = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    environ[OWN_PROCESS] = "1"
    nodeid = pyfuncitem.nodeid.split("@")[0]   # xdist's group suffix is not part of the id
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", nodeid],
                          cwd=ROOT, env=environ, capture_output=True, text=True, timeout=OWN_PROCESS_TIMEOUT)
    if done.returncode != 0:
        pytest.fail(f"{nodeid} in its own process exited {done.returncode}:\n{done.stdout[-8000:]}\n"
                    f"{done.stderr[-4000:]}", pytrace=False)
    return True
