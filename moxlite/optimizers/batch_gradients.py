"""``batch_gradients``: accumulate ``num_batches`` micro-batch gradients, apply their mean once.

With gradients g_1 .. g_N of N consecutive micro-batches of B samples (each
the gradient of that micro-batch's mean loss), the inner optimizer applies

    g = (g_1 + ... + g_N) / N

on every N-th step and nothing on the others, which is the gradient of the
mean loss over N*B samples: N steps at batch B end where one step at batch
N*B would. The inner optimizer counts applied updates: its ``iterations`` and
its Keras learning-rate schedule advance once per N micro-batches (this
wrapper applies and reads its inner optimizer inside
``schedules.micro_steps_per_update(N)``; it changes nothing in that optimizer).

Communication (MoXing's ``sync_on_apply``):

- True: each replica accumulates its own gradients locally; the replicas
  all-reduce once per N steps, when applying.
- False: the gradients are all-reduced on every micro-step, then accumulated.

Accumulators are ON_READ (per-replica) variables with SUM aggregation. The
invariant is that their sum over replicas is the accumulated total gradient,
so a checkpoint (which saves that sum) restores exactly, even onto another
number of replicas. ``accumulate_on="cpu"`` keeps one accumulator set per
replica in host memory instead of device memory; those checkpoints need the
same replica count to restore.

The "is this the applying step" condition is a ``tf.cond`` taken in
cross-replica context, on this wrapper's own micro-step counter.
"""

import keras
import tensorflow as tf

from moxlite import compat
from moxlite.optimizers import pipeline, schedules
from moxlite.optimizers import recipe_tables
from moxlite.optimizers import wrapper as wrapper_lib


@keras.saving.register_keras_serializable(package="moxlite")
class BatchGradients(wrapper_lib.OptimizerWrapper):
    """Apply the mean of ``num_batches`` micro-batch gradients once (see the module docstring)."""

    NAME = "batch_gradients"
    PARAMETERS = recipe_tables.BATCH_GRADIENTS_PARAMETERS

    @property
    def learning_rate(self):
        with schedules.micro_steps_per_update(self.num_batches):
            return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, learning_rate):
        self.inner_optimizer.learning_rate = learning_rate

    # What it is as a link of a pipeline: num_batches steps above make one update below.

    @property
    def apply_every(self):
        return self.num_batches

    @property
    def accumulates_micro_batches(self):
        return self.num_batches > 1

    clipped_after = True   # clipping applies to the accumulated mean, once per update

    def accumulation(self, inner):
        """num_batches micro-batches make one update, applied by the inner stack."""
        return pipeline.Accumulation(self.num_batches, self.inner_optimizer)

    # State.

    def _build_own_state(self, variables):
        self._micro_step = self.add_variable(
            shape=(), dtype="int64", aggregation="only_first_replica", name="micro_step")
        if self.accumulate_on == "device":
            self._accumulators = [self._new_accumulator(v, synchronization="on_read", aggregation="sum")
                                  for v in variables]
        else:
            distribution = tf.distribute.get_strategy()
            self._host_accumulators = []
            for replica in range(distribution.num_replicas_in_sync):
                with self._on_host(distribution):
                    self._host_accumulators.append([
                        self._new_accumulator(v, synchronization="none", aggregation="none",
                                              suffix=f"replica_{replica}") for v in variables])
        self._accumulator_index = {id(v): i for i, v in enumerate(variables)}

    def _new_accumulator(self, variable, synchronization, aggregation, suffix=""):
        name = _variable_slug(variable) + "_accumulator" + (f"_{suffix}" if suffix else "")
        with keras.name_scope(self.name, caller=self):
            accumulator = keras.Variable(
                initializer="zeros", shape=variable.shape, dtype=variable.dtype, trainable=False,
                synchronization=synchronization, aggregation=aggregation, name=name)
        compat.track_optimizer_variable(self, accumulator)
        return accumulator

    @staticmethod
    def _on_host(distribution):
        """A scope that creates plain (not mirrored) variables on this worker's host CPU.

        Asks the strategy's variable creator for a single-device variable, the
        way tf.distribute places its own host-side variables.
        """
        host = "/device:CPU:0"
        if tf.distribute.has_strategy():
            worker = distribution.extended.worker_devices[0]
            host = worker.rsplit("/device:", 1)[0] + host
        return compat.single_device_variables(host)

    # The step.

    def _apply_in_cross_replica_context(self, distribution, grads, variables, reduced, rest):
        def apply_inner(distribution, grads, variables, reduced):
            # The stack below counts one update per num_batches micro-batches.
            with schedules.micro_steps_per_update(self.num_batches):
                rest(distribution, grads, variables, reduced)

        if self.num_batches == 1:
            apply_inner(distribution, grads, variables, reduced)
            return
        if not reduced and not self.sync_on_apply:
            grads = wrapper_lib.sum_across_replicas(distribution, grads, variables)
            reduced = True
        grads, variables = list(grads), list(variables)
        is_applying = tf.equal((self._micro_step.value + 1) % self.num_batches, 0)

        def apply_mean():
            mean = self._mean_with(distribution, grads, variables, reduced)
            if not reduced:
                mean = wrapper_lib.sum_across_replicas(distribution, mean, variables)
            apply_inner(distribution, mean, variables, True)
            self._reset(distribution, variables)

        def accumulate():
            self._accumulate(distribution, grads, variables, reduced)

        tf.cond(is_applying, apply_mean, accumulate)
        self.assign_add(self._micro_step, tf.constant(1, tf.int64))

    # Per-replica arithmetic. A reduced gradient (the same total on every
    # replica) is added as total / replicas, so that the sum over replicas of
    # the accumulators stays the accumulated total.

    def _local_share(self, gradient, reduced):
        if not reduced:
            return gradient
        replicas = tf.distribute.get_replica_context().num_replicas_in_sync
        return gradient / replicas

    def _accumulators_of(self, replica_index, variables):
        if self.accumulate_on == "device":
            bank = self._accumulators
        else:
            bank = self._host_accumulators[replica_index]
        return [bank[self._accumulator_index[id(v)]] for v in variables]

    def _replica_index(self):
        replica_id = tf.distribute.get_replica_context().replica_id_in_sync_group
        return tf.get_static_value(replica_id) if not isinstance(replica_id, int) else replica_id

    def _accumulate(self, distribution, grads, variables, reduced):
        def add(grads):
            accumulators = self._accumulators_of(self._replica_index(), variables)
            for accumulator, gradient in zip(accumulators, grads):
                self.assign_add(accumulator, self._local_share(gradient, reduced))
        distribution.extended.call_for_each_replica(add, args=(grads,))

    def _mean_with(self, distribution, grads, variables, reduced):
        """Per replica: (accumulated + this micro-batch) / num_batches, in the form handed down.

        Unreduced: each replica's partial mean (to be summed across replicas).
        Reduced: each replica's copy of the full mean.
        """
        def mean(grads):
            replicas = tf.distribute.get_replica_context().num_replicas_in_sync
            accumulators = self._accumulators_of(self._replica_index(), variables)
            out = []
            for accumulator, gradient in zip(accumulators, grads):
                local = tf.convert_to_tensor(accumulator.value) + self._local_share(gradient, reduced)
                if reduced:
                    local = local * replicas
                out.append(local / self.num_batches)
            return out
        return distribution.extended.call_for_each_replica(mean, args=(grads,))

    def _reset(self, distribution, variables):
        def zero():
            for accumulator in self._accumulators_of(self._replica_index(), variables):
                self.assign(accumulator, tf.zeros_like(accumulator.value))
        distribution.extended.call_for_each_replica(zero)


def _variable_slug(variable):
    """A variable name usable inside another variable's name."""
    path = compat.variable_attribute(variable, "path") or variable.name
    return path.replace("/", "_").replace(":", "_")
