"""tools/profile_thor_step.py's profile reading: op times summed by THOR's name scopes, each op once."""

import os
import sys
import time

import tensorflow as tf

from tests import ROOT
sys.path.insert(0, os.path.join(ROOT, "tools"))
import profile_thor_step  # noqa: E402


def test_op_times_are_summed_by_scope_without_counting_a_branch_twice(tmp_path):
    matrix = tf.random.stateless_normal([256, 256], seed=[1, 2])

    @tf.function
    def step(x, refresh):
        with tf.name_scope("thor_precondition"):
            y = tf.matmul(x, x)
        # The refresh's ops run inside an If: the If's own event spans them and must not count.
        z = tf.cond(refresh, lambda: _refresh(y), lambda: y)
        return tf.reduce_sum(tf.nn.relu(z))

    def _refresh(y):
        with tf.name_scope("thor_refresh"):
            return tf.matmul(y, y) + tf.linalg.inv(y[:64, :64] + 64.0 * tf.eye(64))[0, 0]

    step(matrix, tf.constant(True))
    step(matrix, tf.constant(False))
    tf.profiler.experimental.start(str(tmp_path))
    started = time.perf_counter()
    for refresh in (True, False, True):
        step(matrix, tf.constant(refresh)).numpy()
    wall = time.perf_counter() - started
    tf.profiler.experimental.stop()
    events = profile_thor_step.op_seconds(str(tmp_path))
    by_scope = {}
    for name, seconds in events:
        by_scope.setdefault(profile_thor_step.scope_of(name), []).append((name, seconds))
    # Three preconditioning matmuls, two refreshes' matmuls (the If's branch ran twice), the rest.
    # Matched by node name ("name:Type"): the type may be a rewritten kernel (oneDNN runs MatMul
    # as _MklMatMul on CPUs with AVX-512).
    def count(scope, node):
        return sum(name.rsplit(":", 1)[0].endswith(node) for name, _ in by_scope[scope])

    assert count("thor_precondition", "/MatMul") == 3
    assert count("thor_refresh", "/MatMul") == 2
    assert count("rest", "Relu") == 3
    assert not any(name.rsplit(":", 1)[1] in profile_thor_step.CALLERS for name, _ in events)
    # Each op once: the sum of op times fits in the calls' wall time (one executor thread here or not).
    assert sum(seconds for _, seconds in events) <= wall * os.cpu_count()
