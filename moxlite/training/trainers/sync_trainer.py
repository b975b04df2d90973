"""The synchronous trainer: moxlite's own training loop on tf.distribute (no ``model.fit``).

``strategy.run`` inside a ``tf.function`` that runs up to ``steps_per_loop``
steps per call, for the default strategy, MirroredStrategy,
MultiWorkerMirroredStrategy and TPUStrategy. The asynchronous
(parameter-server) trainer lives in ``async_trainer``; both are a
``trainer_protocol.Trainer``, so the controller drives them the same way.
"""

import contextlib
import functools

import numpy as np
import tensorflow as tf

from moxlite import compat
from moxlite.distribute import averaged_state
from moxlite.optimizers.schedules import current_learning_rate
from moxlite.training.compiled import jit_choice
from moxlite.training.trainers import nonfinite
from moxlite.training.reporting import user_summary_step
from moxlite.training.trainer_protocol import Trainer

# What a traced call does after its steps (``SyncTrainer._steps``): nothing more, check that
# the state is finite, or check it and write the summaries of its last step.
NO_REPORT, CHECK, CHECK_AND_SUMMARIES = 0, 1, 2


def first_or_mean(strategy, per_replica, first_only):
    """One value per log key: the first replica's (MoXing's log_first_clone) or the mean."""
    if strategy.num_replicas_in_sync == 1:
        return per_replica
    if first_only:
        return tf.nest.map_structure(lambda v: strategy.experimental_local_results(v)[0], per_replica)
    return tf.nest.map_structure(
        lambda v: strategy.reduce(tf.distribute.ReduceOp.MEAN, v, axis=None), per_replica)


def is_infinite(dataset):
    """True when ``dataset`` (a distributed dataset) is known never to end (e.g. ``.repeat()``)."""
    cardinality = getattr(dataset, "cardinality", None)
    if callable(cardinality):   # a plain tf.data.Dataset (the default strategy); a property otherwise
        cardinality = cardinality()
    try:
        return cardinality is not None and int(cardinality) == int(tf.data.INFINITE_CARDINALITY)
    except (TypeError, ValueError):
        return False


class SyncTrainer(Trainer):
    """Synchronous steps: every replica steps together, one global step per step."""

    def __init__(self, strategy, dataset_fn, train_step, global_step, log_keys, log_first_clone=True,
                 summaries=None, save_summary_steps=0, nonfinite_policy=nonfinite.Policy(), state_variables=(),
                 global_batch_size=0, jit_compile=None):
        """``state_variables``: the floating-point variables a checked call verifies are finite
        (model and optimizer variables, see ``run_steps``). ``summaries``: the run's training
        ``reporting.SummaryWriter``, which a call the controller ends on a summary step writes
        to; ``global_batch_size`` serves the throughput written there. ``jit_compile``: a
        ``jit_choice.JitChoice``, which says whether each call runs the step compiled by XLA
        (None: never)."""
        self.strategy = strategy
        self.nonfinite_policy = nonfinite_policy
        self.skipped_nonfinite = 0
        self._consecutive_nonfinite = 0
        self.global_step = global_step
        self._train_step = train_step
        self._log_keys = list(log_keys)
        self._shown_keys = [key for key in self._log_keys if key not in nonfinite.PRIVATE_KEYS]
        self._log_first_clone = log_first_clone
        self._summaries = summaries
        self._save_summary_steps = save_summary_steps
        self._state_variables = list(state_variables)
        # BatchNorm-like state kept per replica and averaged at the end of each call (averaged_state).
        self._replica_averaged = averaged_state.replica_averaged(self._state_variables)
        self._checked_step = None   # the global step of the last call that verified the state
        self._global_batch_size = global_batch_size
        dataset = strategy.distribute_datasets_from_function(dataset_fn)
        self._infinite = is_infinite(dataset)
        # Reading ahead would lose the batch read for the step after a non-finite one, which
        # nonfinite_policy=skip goes on to train on.
        self._read_ahead = nonfinite_policy.action == "stop"
        self.iterator = iter(dataset)
        # The iterator is passed, not captured: a traced function that captures an iterator
        # keeps it alive until interpreter shutdown, where destroying it can hang the process
        # (TF's iterator destructor waits for a tf.data thread that has already stopped).
        # One traced loop per variant of the step: without XLA (False) and compiled (True).
        self._choice = jit_compile
        self._compiled_step = (jit_choice.CompiledStep(train_step, jit_compile.where)
                               if jit_compile is not None and jit_compile.where is not None else None)
        self._loops = {variant: tf.function(functools.partial(self._steps, compiled=variant))
                       for variant in (False, True)}
        self._traced = {}
        self._layer_state_created = False
        self._flat_iterator = None   # the iterator's resource handles, what a call passes for it
        self._step_counts = {}
        # What a call does after its steps, in one argument (each costs a few microseconds a
        # call): [NO_REPORT, CHECK or CHECK_AND_SUMMARIES, then for the latter the host time
        # (seconds since the epoch) and global step the summary's throughput is measured from].
        self._reports = {kind: tf.constant([kind, 0.0, 0.0], tf.float64) for kind in (NO_REPORT, CHECK)}
        self._any_worker = None
        self._untimed = (0.0, 0)   # see ``take_untimed``
        self._warm = False         # every program of the compiled step has run once

    def _steps(self, iterator, num_steps, report, compiled=False):
        """Up to ``num_steps`` steps; ends early at the input's end or after a non-finite step
        (the host then stops, or logs the skipped step as it would after a one-step call).
        Then, by ``report`` (see ``__init__``): checks that every state variable is finite,
        and (``CHECK_AND_SUMMARIES``) writes the summaries of the last step if all steps ran.

        Returns one float64 vector, the only tensor the host reads after a call (each output
        costs a few microseconds a call): steps done, 1 if the last one was non-finite, 1 if
        the state is not finite, the global step, the last step's summed loss, then its log
        values in ``self._shown_keys`` order. ``compiled``: the replica step runs through XLA
        (``jit_choice.CompiledStep``).
        """
        keys = self._shown_keys
        logs = {key: tf.zeros([], tf.float32) for key in keys}
        done = tf.constant(0, tf.int64)
        bad = tf.constant(False)
        bad_loss = tf.constant(0.0)
        # On an infinite input the end never comes: a plain read, without an optional.
        read = (lambda: next(iterator)) if self._infinite else iterator.get_next_as_optional
        if self._read_ahead:
            # The batch of the next step is read while this one computes (nothing orders the
            # two), but never after the call's last step: a call reads exactly the batches
            # it steps on, unless a non-finite step ends it (the run then stops).
            batch = read()
            while self._more(done, num_steps, bad, batch):
                following = tf.cond(done + 1 < num_steps, read, lambda: batch)
                logs, bad, bad_loss = self._one_step(self._value(batch), keys, compiled)
                batch = following
                done += 1
        else:
            # One condition, no ``break`` on an infinite input: the loop carries nothing
            # more than it returns (a ``for`` over ``tf.range`` with a ``break`` adds three
            # counters and a conditional per step).
            while self._more(done, num_steps, bad):
                batch = read()
                if not self._infinite and not batch.has_value():
                    break
                logs, bad, bad_loss = self._one_step(self._value(batch), keys, compiled)
                done += 1
        averaged_state.average_replica_state(self._replica_averaged)
        complete = tf.logical_and(tf.equal(done, num_steps), tf.logical_not(bad))
        broken = tf.cond(report[0] >= CHECK, lambda: self._report(report, complete, logs), lambda: tf.constant(False))
        status = [done, bad, broken, self.global_step.read_value(), bad_loss] + [logs[key] for key in keys]
        return tf.stack([tf.cast(value, tf.float64) for value in status])

    def _more(self, done, num_steps, bad, batch=None):
        """Whether the loop takes another step: steps are left, the last was finite, and
        (for a finite input read ahead) ``batch`` holds one."""
        more = tf.logical_and(done < num_steps, tf.logical_not(bad))
        if batch is not None and not self._infinite:
            more = tf.logical_and(more, batch.has_value())
        return more

    def _value(self, batch):
        """The batch a read returned (an optional's value for a finite input)."""
        return batch if self._infinite else batch.get_value()

    def _report(self, report, complete, logs):
        """True when a state variable is not finite; otherwise, when asked and every step ran,
        writes the log values, learning rate and throughput at the global step (here rather
        than on the host, where each eager summary costs about 1 ms)."""
        broken = tf.logical_not(nonfinite.variables_finite(self._state_variables))
        writer = self._summaries if self._summaries is not None and self._save_summary_steps else None
        if writer is None or writer.writer is None:
            return broken
        write = tf.logical_and(tf.logical_and(tf.equal(report[0], CHECK_AND_SUMMARIES), complete),
                               tf.logical_not(broken))

        def write_summaries():
            values = {key: logs[key] for key in self._shown_keys}
            values["learning_rate"] = self.learning_rate()
            values["sample_per_sec"] = self._samples_per_second(report[1], report[2])
            writer.traced_scalars(self.global_step.read_value(), values)
            return tf.constant(True)

        with tf.control_dependencies([tf.cond(write, write_summaries, lambda: tf.constant(False))]):
            return tf.identity(broken)

    def _samples_per_second(self, since_time, since_step):
        """Samples per second from (``since_time``, ``since_step``) to now, as the host's
        ``reporting.Throughput`` measures them for the log line (0 for an empty interval)."""
        steps = tf.cast(self.global_step.read_value(), tf.float64) - since_step
        elapsed = tf.timestamp() - since_time
        rate = tf.where(tf.logical_and(elapsed > 0, steps > 0),
                        steps * self._global_batch_size / tf.maximum(elapsed, 1e-9), tf.constant(0.0, tf.float64))
        return tf.cast(rate, tf.float32)

    @property
    def writes_summaries(self):
        """True: a call that ends on a summary step writes the log values, learning rate and
        throughput."""
        return True

    def _one_step(self, batch, keys, compiled=False):
        """One step on ``batch``: its log values, whether it was non-finite, its summed loss."""
        tracing = self._compiled_step.tracing() if compiled else contextlib.nullcontext()
        # The train step on each replica (through XLA when ``compiled``): its log values and its
        # non-finite flag and loss (stacked, for one reduction, when there are several replicas).
        step = self._compiled_step.replica_step if compiled else self._train_step
        with user_summary_step(self.global_step.read_value() + 1), tracing:
            per_replica, guard = self.strategy.run(step, args=(batch,))
        if self.strategy.num_replicas_in_sync > 1:
            # Any replica's non-finite step is the step's: a SUM, whatever log_first_clone says.
            guard = self.strategy.reduce(tf.distribute.ReduceOp.SUM, guard, axis=None)
        flag, loss = guard[0], guard[1]
        logs = first_or_mean(self.strategy, {k: per_replica[k] for k in keys}, self._log_first_clone)
        self.global_step.assign_add(1)
        return logs, flag > 0, loss

    def run_steps(self, num_steps, check_state=False, summary_since=None):
        """Run up to ``num_steps`` steps; return (steps done, log values of the last step).

        Fewer steps than asked means the input ended. A traced call ends after a non-finite
        step; under nonfinite_policy=skip the remaining steps then run in further calls, so
        the skips are reported step by step whatever the number of steps per call.
        ``check_state``: then verify, in the same traced call, that the weights and optimizer
        variables are finite, and raise ``NonFiniteStep`` if not (the controller asks before
        it reports anything: a gradient can break the weights while the loss stays finite).
        ``summary_since`` (given when the last step is a summary step; implies ``check_state``):
        then write its log values, learning rate and the throughput since ``summary_since`` =
        (host time in seconds since the epoch, global step), if every step ran and the state
        is finite.
        """
        total, last_logs, logs = 0, None, {}
        untimed_before = self._untimed
        while total < num_steps:
            asked = num_steps - total
            # Under jit_compile=auto a call may be split: part of it on each variant of the step.
            compiled, part = self._choice.plan(asked) if self._choice is not None else (False, asked)
            if self._traced is not None and compiled not in self._traced:
                part = 1   # the call that traces runs one step: the throughput leaves it out
            final = part == asked   # the call's report (check, summaries) is made after its last step
            if not final:
                report = self._reports[NO_REPORT]
            elif summary_since is not None:
                # measured from ``summary_since`` without this call's earlier traced parts, as the host does
                since_time, since_step = summary_since
                report = tf.constant([CHECK_AND_SUMMARIES, since_time + self._untimed[0] - untimed_before[0],
                                      since_step + self._untimed[1] - untimed_before[1]], tf.float64)
            else:
                report = self._reports[CHECK if check_state else NO_REPORT]
            values = self._call(compiled, part, report)
            done, bad, broken, step = (int(value) for value in values[:4])
            bad_loss = float(values[4])
            logs = {key: np.float32(value) for key, value in zip(self._shown_keys, values[5:])}
            total += done
            if done:
                last_logs = logs
            if bad:
                # Only a call's last step can be non-finite: the run of such steps grows or restarts.
                self._consecutive_nonfinite = self._consecutive_nonfinite + 1 if done == 1 else 1
                nonfinite.handle(self.nonfinite_policy, self, step, bad_loss,
                                 1, self._consecutive_nonfinite)
            if broken:
                # After a skipped step too: skipping keeps finite weights finite, not broken ones.
                raise nonfinite.NonFiniteStep(step, None, in_weights=True, since=self._checked_step)
            if bad:
                continue
            if final and (check_state or summary_since is not None):
                self._checked_step = step
            if done:
                self._consecutive_nonfinite = 0
            if done < part:
                break   # the input ended
        return total, last_logs if last_logs is not None else logs

    def _call(self, compiled, num_steps, report):
        """One traced call of ``num_steps`` steps on the ``compiled`` variant of the step; its
        status vector as numpy (see ``_steps``). The first call of a variant traces it; under
        ``jit_compile`` a step XLA refuses (found while tracing, before anything runs) turns
        the compiled variant into the plain one for the rest of the run."""
        if num_steps not in self._step_counts:
            self._step_counts[num_steps] = tf.constant(num_steps, tf.int64)
        started = jit_choice.clock()   # a call that traces is timed with its tracing
        self.create_layer_state()
        tracing = compiled not in self._traced
        if tracing:
            # Called directly, with the iterator flattened once: a tf.function call looks
            # up its trace by the arguments' type specs and binds them to the signature,
            # each time (about 0.3 ms a call here, more than a one-step graph).
            self._traced[compiled] = compat.FlatCall(
                self._loops[compiled].get_concrete_function(self.iterator, self._step_counts[num_steps], report))
            if self._flat_iterator is None:
                self._flat_iterator = compat.FlatCall.flatten(self.iterator)
            if compiled and self._compiled_step.refused is not None:
                # Traced without XLA after all: it serves as the plain variant.
                self._choice.refuse(self._compiled_step.refused)
                self._traced.setdefault(False, self._traced[True])
        compiling = tracing or (compiled and not self._warm)
        values = self._traced[compiled](self._flat_iterator + [self._step_counts[num_steps], report]).numpy()
        seconds = jit_choice.clock() - started
        if compiling:
            self._untimed = (self._untimed[0] + seconds, self._untimed[1] + int(values[0]))
            self._warm = self._warm or (compiled and (self._compiled_step is None or self._compiled_step.warmed()))
        if self._choice is not None:
            warmed = (not compiled or self._choice.decided is not None or self._compiled_step is None
                      or self._compiled_step.warmed())
            self._choice.record(compiled, int(values[0]), seconds, warmed)
        return values

    def take_untimed(self):
        """(seconds, steps) of the calls since last asked that traced the loop or ran a compiled
        program for the first time (XLA compiles it then); the throughput leaves them out."""
        untimed, self._untimed = self._untimed, (0.0, 0)
        return untimed

    def create_layer_state(self):
        """Before the loop is first traced: the per-layer state of the step's links (THOR's
        factors and inverses), which they would otherwise create on first sight of the layers,
        in that trace. A ``tf.function`` whose first trace creates variables is traced again
        (the first trace is not kept), so each THOR run would trace its step twice: here only
        model_fn's forward pass is traced, per replica, in a function that is never run.

        The job calls it before training starts, so that a link refusing its layers (THOR's
        ``include``) does so before anything is written; the first call does it otherwise."""
        step = self._train_step
        if self._layer_state_created or not step.records_layers():
            return
        self._layer_state_created = True

        def see(iterator):
            with user_summary_step(self.global_step.read_value() + 1):
                self.strategy.run(step.see_layers, args=(next(iterator),))

        tf.function(see).get_concrete_function(self.iterator)
        with self.strategy.scope():
            step.create_layer_state()

    def finish(self, counted_step):
        """Nothing is in flight after ``run_steps``: the controller's count is exact."""
        return counted_step

    def any_worker(self, requested):
        """True when any worker passes ``requested``: every worker calls this at the same step
        (a small all-reduce of the flags), so synchronous workers stop together."""
        if self._any_worker is None:
            def reduce(flag):
                per_replica = self.strategy.run(lambda: tf.identity(flag))
                return self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

            self._any_worker = tf.function(reduce)
        return bool(self._any_worker(tf.constant(1 if requested else 0, tf.int32)) > 0)

    def close(self):
        """Release the input iterator now.

        The traced function refers back to this object, so without this the iterator would
        live until the garbage collector finds the cycle, possibly at interpreter shutdown,
        where TensorFlow's iterator destructor can wait forever for its tf.data threads.
        """
        self.iterator = None
        self._loops = None
        self._traced = None
        self._flat_iterator = None

    def user_summaries(self):
        """A context in which summaries that user functions write land in the summary writer
        on every ``save_summary_steps``-th global step (entered once for the whole run)."""
        if self._summaries is None:
            return contextlib.ExitStack()
        return self._summaries.user_summaries(self.global_step, self._save_summary_steps)

    def learning_rate(self):
        """The rate the (first) optimizer applies now, a float32 scalar tensor."""
        return current_learning_rate(self._train_step.optimizers[0])
