"""The asynchronous trainer: parameter-server training steps through a ``ClusterCoordinator``.

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

Micro-batch accumulation (``batch_gradients``): a running sum kept in
variables between scheduled steps would mix micro-batches of different
workers, since consecutive steps land on different workers in any order. So
when the stack's outermost link answers that it accumulates N micro-batches
(``batch_gradients(num_batches=N)``, possibly under loss scaling; see
``moxlite.optimizers.accumulation``, the interface between the two), one
scheduled function reads N micro-batches from its worker's iterator, sums their
gradients in tensors and applies the mean once through the pipeline of what the
link names as applying it (the optimizer below ``batch_gradients``). The
global step advances by N per scheduled function, one per micro-batch as in
MoXing, and ``run_steps`` rounds the steps it is asked for up to whole
updates: choose log, summary and checkpoint intervals that are multiples of N.
The learning rate of an update is read at the global step before its N
micro-batches are counted: the step a run at batch N*B would read.
"""

import contextlib

import numpy as np
import tensorflow as tf

from moxlite import errors
from moxlite.optimizers import accumulation as accumulation_lib
from moxlite.optimizers.schedules import current_learning_rate
from moxlite.training.compiled import jit_choice
from moxlite.training.trainers import nonfinite
from moxlite.training.compiled import ps_steps
from moxlite.training.trainer_protocol import Trainer


class _RemoteScalar:
    """A log value of a scheduled step, fetched only when someone reads it."""

    def __init__(self, remote_value, key):
        self._remote_value = remote_value
        self._key = key

    def __array__(self, dtype=None, copy=None):
        value = np.asarray(self._remote_value.fetch()[self._key])
        return value.astype(dtype) if dtype is not None else value


class AsyncTrainer(Trainer):
    """``run_steps`` schedules steps and returns at once; ``finish`` waits for all of them."""

    def __init__(self, coordinator, strategy, dataset_fn, train_step, global_step, log_keys, jit_compile=None):
        """``jit_compile``: a ``jit_choice.JitChoice``, which says whether each call schedules the
        step with its forward and backward compiled by XLA on values read on the worker
        (``ps_steps``; None: never)."""
        self.coordinator = coordinator
        self.strategy = strategy
        self.global_step = global_step
        self._train_step = train_step
        self._log_keys = list(log_keys)
        self._shown_keys = [key for key in self._log_keys if key not in nonfinite.PRIVATE_KEYS]
        self._accumulations = self._accumulations_of(train_step)
        self.num_batches = self._accumulations[0].num_batches if self._accumulations else 1
        # Built once: the pipeline of what applies each accumulated update, under the run's
        # clipping and non-finite links as the step's own pipeline has them.
        self._applying = [pipeline.applying(accumulation)
                          for pipeline, accumulation in zip(train_step.pipelines, self._accumulations)
                          if self.num_batches > 1]

        def per_worker_dataset_fn():
            return strategy.distribute_datasets_from_function(dataset_fn)

        self.iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))
        # Non-finite steps (nonfinite_policy=stop), counted on the parameter servers and read
        # once per run_steps call, after the scheduled steps are done.
        with strategy.scope():
            self._nonfinite_count = tf.Variable(0, dtype=tf.int64, trainable=False, name="nonfinite_steps")
            self._nonfinite_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="nonfinite_step")
            self._nonfinite_loss = tf.Variable(0.0, trainable=False, name="nonfinite_loss")
        self._choice = jit_compile
        self._value_step = (ps_steps.ValueStep(train_step)
                            if jit_compile is not None and jit_compile.where is not None else None)
        self._refusal_told = False
        # One traced step per variant: without XLA (False) and compiled on values (True).
        # The coordinator calls a step's concrete function with the iterator alone (an argument
        # with a default, bound at the trace, is then missing): one function per variant.
        self._step_fns = {False: tf.function(self._plain_step), True: tf.function(self._compiled_step)}
        self._scheduled = 0
        self._layer_state_created = False

    @staticmethod
    def _accumulations_of(train_step):
        """One ``Accumulation`` per optimizer of ``train_step``; checked to be usable here."""
        accumulations = [accumulation_lib.accumulation_of(o) for o in train_step.optimizers]
        for accumulation in accumulations:
            nested = accumulation_lib.nested_batch_gradients(accumulation.apply_optimizer)
            if nested is not None:
                raise errors.OptimizerError(
                    f"batch_gradients(num_batches={nested.num_batches}) sits below another wrapper; under "
                    f"parameter-server training it must be the outermost wrapper (accumulation happens "
                    f"inside one scheduled step): wrap it last, e.g. batch_gradients(lars(momentum))")
        if len({a.num_batches for a in accumulations}) > 1:
            raise errors.OptimizerError(
                f"optimizer_fn's factories accumulate {sorted({a.num_batches for a in accumulations})} "
                f"micro-batches; under parameter-server training every optimizer must use the same "
                f"batch_gradients num_batches")
        return accumulations

    def _plain_step(self, iterator):
        return self._one_step(iterator, compiled=False)

    def _compiled_step(self, iterator):
        return self._one_step(iterator, compiled=True)

    def _one_step(self, iterator, compiled):
        if self.num_batches > 1:
            return self._one_accumulated_step(iterator, compiled)
        step = self._value_step.replica_step if compiled else self._train_step
        per_replica, guard = self.strategy.run(step, args=(next(iterator),))
        self.global_step.assign_add(1)
        return self._reduced_logs(per_replica, guard)

    def _reduced_logs(self, per_replica, guard):
        """The step's log values (mean over replicas); a non-finite step is counted (``guard``:
        the step's flag and loss, stacked with several replicas, see ``TrainStep.__call__``)."""
        mean = tf.distribute.ReduceOp.MEAN
        logs = {key: self.strategy.reduce(mean, per_replica[key], axis=None) for key in self._shown_keys}
        if isinstance(guard, (tuple, list)):
            bad, loss = (self.strategy.reduce(mean, value, axis=None) for value in guard)
        else:
            reduced = self.strategy.reduce(mean, guard, axis=None)
            bad, loss = reduced[0], reduced[1]
        bad = bad > 0
        self._nonfinite_count.assign_add(tf.cast(bad, tf.int64))
        first = tf.logical_and(bad, tf.equal(self._nonfinite_step, 0))
        self._nonfinite_step.assign(tf.where(first, self.global_step.read_value(), self._nonfinite_step))
        self._nonfinite_loss.assign(tf.where(first, loss, self._nonfinite_loss))
        return logs

    def _one_accumulated_step(self, iterator, compiled):
        batches = tuple(next(iterator) for _ in range(self.num_batches))
        gradients = self._value_step.gradients if compiled else None
        per_replica, guard = self.strategy.run(
            self._train_step.accumulated,
            args=(batches, self._accumulations, self._applying, self._log_keys, gradients))
        # After the update: its learning rate read the step before these micro-batches.
        self.global_step.assign_add(self.num_batches)
        return self._reduced_logs(per_replica, guard)

    def run_steps(self, num_steps, check_state=False, summary_since=None):
        """Schedule ``num_steps`` global steps (rounded up to whole updates of ``num_batches``
        micro-batches); return (global steps scheduled, lazily fetched logs of the last one).
        ``check_state`` is left to the checkpoint saves: reading every variable back from the
        parameter servers at each log line would cost more than the steps. Summaries are the
        controller's to write (``writes_summaries`` is False).

        When the input of a worker ends, its steps fail with OutOfRangeError; the loop then
        waits for the steps in flight and reports the steps actually done.

        Under ``jit_compile`` the steps go in parts, each scheduled on the variant
        ``JitChoice.plan`` names (compiled on values or plain); under ``auto`` the parts of the trial
        are waited for (``join``) and timed, then one part per call is left in flight.
        """
        self.create_layer_state()
        last = None
        left = -(-num_steps // self.num_batches) * self.num_batches
        while left > 0:
            compiled, part = self._choice.plan(left) if self._choice is not None else (False, left)
            started = jit_choice.clock()
            for _ in range(-(-part // self.num_batches)):
                last = self.coordinator.schedule(self._step_fns[compiled], args=(self.iterator,))
                self._scheduled += 1
            if compiled:
                self._tell_refusal()
            measuring = self._choice is not None and self._choice.decided is None
            try:
                # done() does not wait: it raises the error of a failed step (end of input), if
                # any. A part that is being timed waits for its steps (join), else the trial
                # would time the scheduling only.
                self.coordinator.join() if measuring else self.coordinator.done()
            except tf.errors.OutOfRangeError:
                return self._drain(), {}
            part = -(-part // self.num_batches) * self.num_batches
            if self._choice is not None:
                self._choice.record(compiled, part, jit_choice.clock() - started)
            left -= part
        if int(self._nonfinite_count.read_value()):
            raise nonfinite.NonFiniteStep(int(self._nonfinite_step.read_value()),
                                          float(self._nonfinite_loss.read_value()))
        scheduled = -(-num_steps // self.num_batches) * self.num_batches
        return scheduled, {key: _RemoteScalar(last, key) for key in self._shown_keys}

    def create_layer_state(self):
        """Before the step is first traced (by the first ``schedule``): the per-layer state of the
        step's links (THOR's factors and inverses), which they would otherwise create in that
        trace, and a ``tf.function`` whose first trace creates variables is traced twice. As in
        ``SyncTrainer.create_layer_state``: model_fn's forward pass alone is traced, on the
        coordinator, in a function that is never scheduled; then the state is created eagerly in
        the strategy's scope (on the parameter servers), in the order the links saw the layers."""
        step = self._train_step
        if self._layer_state_created or not step.records_layers():
            return
        self._layer_state_created = True

        def see(iterator):
            self.strategy.run(step.see_layers, args=(next(iterator),))

        # The per-worker iterator traces as one worker's iterator (what ``schedule`` traces with).
        tf.function(see).get_concrete_function(self.iterator)
        with self.strategy.scope():
            step.create_layer_state()

    def _tell_refusal(self):
        """After the compiled variant's first trace (at its first schedule): a step XLA cannot
        take was traced without it; the run goes on without XLA, saying why once."""
        if self._value_step.refused is not None and not self._refusal_told:
            self._refusal_told = True
            self._choice.refuse(self._value_step.refused)

    def _drain(self):
        try:
            self.coordinator.join()
        except tf.errors.OutOfRangeError:
            pass
        return 0

    def close(self):
        """Release the per-worker iterators now (see ``SyncTrainer.close``)."""
        self.iterator = None
        self._step_fns = None

    def any_worker(self, requested):
        """One coordinator runs the whole cluster: its own ``requested`` is everyone's."""
        return requested

    def learning_rate(self):
        """The rate the (first) optimizer applies now, read on the host from the parameter servers."""
        return current_learning_rate(self._train_step.optimizers[0])

    def user_summaries(self):
        """Summaries from user functions are not recorded: steps run on remote workers."""
        return contextlib.nullcontext()

    def finish(self, counted_step):
        """Wait for every scheduled step; return the exact global step (the parameter servers'
        count: ``counted_step`` counts steps scheduled, and a re-scheduled step counts twice)."""
        try:
            self.coordinator.join()
        except tf.errors.OutOfRangeError:
            pass
        return int(self.global_step.read_value().numpy())
