"""The suite's own scheduling (tests/conftest.py): recorded times read back, longest tests first."""

import ast
import os
from types import SimpleNamespace

import pytest

from tests import ROOT, conftest


class _Item:
    """What the ordering reads of a pytest item: its id, its markers, its fixtures' scopes."""

    def __init__(self, nodeid, slow=False, module_fixture=False):
        self.nodeid = nodeid
        self._slow = slow
        scope = "module" if module_fixture else "function"
        self._fixtureinfo = SimpleNamespace(name2fixturedefs={"f": [SimpleNamespace(scope=scope)]})

    def get_closest_marker(self, name):
        return object() if name == "slow" and self._slow else None


def test_recorded_times_are_the_call_lines_of_a_durations_table(tmp_path):
    table = tmp_path / "times.txt"
    table.write_text("# a comment\n"
                     "120.50s call     tests/test_a.py::test_long[a b]\n"
                     "3.00s setup    tests/test_a.py::test_long[a b]\n"
                     "  7s call tests/test_b.py::test_short\n"
                     "1 passed in 9.1s\n")
    assert conftest.recorded_test_times(str(table)) == {"tests/test_a.py::test_long[a b]": 120.5,
                                                        "tests/test_b.py::test_short": 7.0}
    assert conftest.recorded_test_times(str(tmp_path / "absent.txt")) == {}
    # Under --dist loadgroup a grouped test's id ends in "@clusters": read as the plain id.
    table.write_text("88.00s call     tests/test_c.py::test_cluster@clusters\n"
                     "5.00s call     tests/test_c.py::test_param[a@b]\n")
    assert conftest.recorded_test_times(str(table)) == {"tests/test_c.py::test_cluster": 88.0,
                                                        "tests/test_c.py::test_param[a@b]": 5.0}


def test_longest_first_keeps_the_others_in_order_and_a_module_fixture_block_together():
    items = [_Item("tests/test_a.py::one"), _Item("tests/test_a.py::two"),
             _Item("tests/test_m.py::uses_fixture_1", module_fixture=True),
             _Item("tests/test_m.py::plain"),
             _Item("tests/test_m.py::uses_fixture_2", module_fixture=True),
             _Item("tests/test_z.py::new_and_slow", slow=True),
             _Item("tests/test_z.py::long")]
    times = {"tests/test_z.py::long": 100.0, "tests/test_m.py::uses_fixture_2": 50.0,
             "tests/test_a.py::two": 5.0}
    conftest.longest_first(items, times)
    assert [item.nodeid for item in items] == [
        "tests/test_z.py::long",
        "tests/test_m.py::uses_fixture_1", "tests/test_m.py::uses_fixture_2",   # one block, keyed 50 s
        "tests/test_z.py::new_and_slow",                                         # unlisted slow: 30 s
        "tests/test_a.py::two",
        "tests/test_a.py::one", "tests/test_m.py::plain"]


def test_the_cluster_group_is_marked_before_xdist_reads_the_groups(request):
    """xdist groups a test by the "@group" its worker appends to the test id, in its own
    pytest_collection_modifyitems, from the xdist_group marks present then; conftest's hook,
    which adds them, must run before it (tryfirst). Under xdist, every cluster test of this
    worker's collection carries the group in its id. Both hold on any subset of the suite,
    one with no cluster test included."""
    impls = request.config.pluginmanager.hook.pytest_collection_modifyitems.get_hookimpls()
    ours = [at for at, impl in enumerate(impls) if getattr(impl.plugin, "__name__", "") == "tests.conftest"]
    assert len(ours) == 1 and impls[ours[0]].tryfirst
    if hasattr(request.config, "workerinput") and request.config.getvalue("loadgroup"):
        workers = [at for at, impl in enumerate(impls) if type(impl.plugin).__name__ == "WorkerInteractor"]
        assert len(workers) == 1 and ours[0] > workers[0]   # pluggy calls the list from its end
        clusters = [item for item in request.session.items
                    if "launches" in item.fixturenames or item.get_closest_marker("cluster")]
        assert all(item.nodeid.endswith("@" + conftest.CLUSTER_GROUP) for item in clusters)


def _parametrized(function):
    return any(isinstance(d, ast.Call) and ast.unparse(d.func).endswith("mark.parametrize")
               for d in function.decorator_list)


def _missing_from_the_suite(nodeid):
    """Why ``nodeid`` (a `--durations` id) names no test of the suite, or None if it names one.

    Read from the source, without importing it: the file, then the class and function names the
    id gives. An id without parameters must not name a parametrized function (whose ids all carry
    them); one with parameters is not checked further (a fixture's params make them too)."""
    path, *names = nodeid.split("::")
    if not os.path.isfile(os.path.join(ROOT, path)):
        return "no such file"
    with open(os.path.join(ROOT, path), encoding="utf-8") as source:
        body = ast.parse(source.read()).body
    *classes, function = names
    for name in classes:
        found = [node for node in body if isinstance(node, ast.ClassDef) and node.name == name]
        if not found:
            return f"no class {name}"
        body = found[0].body
    name, parametrized = function.split("[", 1)[0], "[" in function
    found = [node for node in body if isinstance(node, ast.FunctionDef) and node.name == name]
    if not found:
        return f"no function {name}"
    if not parametrized and _parametrized(found[0]):
        return f"{name} is parametrized: its ids end in [...]"
    return None


def test_every_test_in_the_times_file_is_in_the_suite():
    """A test renamed, moved or parametrized after the table was made would keep no place in the
    order; the table names only tests that exist, by the ids pytest gives them."""
    missing = {nodeid: why for nodeid in conftest.recorded_test_times()
               if (why := _missing_from_the_suite(nodeid))}
    assert not missing, missing
    assert _missing_from_the_suite("tests/test_suite_order.py::test_no_such_test") == "no function test_no_such_test"
    assert _missing_from_the_suite("tests/test_no_such_file.py::test_a") == "no such file"
    assert _missing_from_the_suite("tests/test_warmstart.py::Absent::test_a") == "no class Absent"
    assert _missing_from_the_suite("tests/test_suite_order.py::test_grappler_is_off_in_the_pytest_process_unless_asked_for") is None
    ps_nonfinite = "tests/training/test_run_nonfinite.py::test_parameter_server_training_stops_at_a_non_finite_step_and_keeps_finite_checkpoints"
    assert _missing_from_the_suite(ps_nonfinite).endswith("is parametrized: its ids end in [...]")
    assert _missing_from_the_suite(ps_nonfinite + "[2]") is None


def _meta_optimizer_disabled_for_function_calls():
    """What the next first call of a traced function reads: the eager context's call options."""
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.eager import context

    proto = config_pb2.ConfigProto.FromString(context.context().function_call_options.config_proto_serialized)
    return proto.graph_options.rewrite_options.disable_meta_optimizer


def test_grappler_is_off_in_the_pytest_process_unless_asked_for():
    assert _meta_optimizer_disabled_for_function_calls() is not conftest.GRAPPLER_ON


@pytest.mark.grappler
def test_a_test_marked_grappler_runs_with_it_on():
    assert _meta_optimizer_disabled_for_function_calls() is False
