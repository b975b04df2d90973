"""Whether the train step runs compiled by XLA: ``jit_compile = auto | true | false``.

Where XLA can take the step depends on the strategy (``placement``):

- one device in one process (the default strategy, ``OneDeviceStrategy``): the whole
  replica step, forward, backward and the whole optimizer stack, is one XLA function.
  With THOR in the stack (a link that preconditions from layer records), only its plain
  updates are (``WHOLE_STEP_BUT_REFRESH``): an update that refreshes THOR's factors runs
  with its forward and backward compiled and the stack, THOR's inverses with it, on
  TensorFlow's kernels. XLA ran those batched inverses 3.2x slower on the CPU (513 against
  161 ms a step on the grammar masked LM, tools/README.md), more than it saved on the other
  nine steps of ten. The two programs are picked per step by a ``tf.cond`` outside XLA on
  THOR's own decision, read before the step;
- several replicas (Mirrored, MultiWorkerMirrored): each replica's forward and backward
  (model_fn, the loss, its gradients, THOR's layer records) is compiled on its own
  device; the cross-replica part (gradient all-reduce, the optimizer stack's
  ``merge_call``) is not, since XLA compiles one device's program and cannot hold a
  ``merge_call`` or a collective of logical CPU devices. Under Mirrored and
  MultiWorkerMirrored the last stage of the stack, the Keras optimizer's variable updates,
  is compiled again per device (``compiled_updates``);
- parameter servers: each worker's forward and backward, on the values of the variables
  read from the parameter servers before it (an XLA function on a worker cannot read a
  variable of another task); the reads, model_fn's assignments and the optimizer stack
  run uncompiled (``ps_steps``);
- TPUStrategy: compiles every step itself; nothing is added.

A model XLA cannot compile (an op without an XLA kernel: ``tf.numpy_function``,
``tf.py_function``, string ops, summaries written from model_fn) is found while the
step is traced, by looking up every op of the compiled function's trace in XLA's kernel
registry before it ever runs, so no batch is consumed by a failed attempt; the step then
runs without XLA, with one line naming the ops. Under ``true`` that line is a warning (the run goes on uncompiled: a model that runs
without XLA is not made to fail by asking for speed).

``auto`` (the default) measures: after each variant has been traced (its first call,
not timed), the variants alternate in blocks of ``trial_steps / Budget.trial_calls`` steps
until each has run ``trial_steps`` steps. The trial steps are ordinary steps of the run
(both variants train the same variables; they differ only by float32 reordering), so
measuring costs only the difference in speed on at most ``fraction`` of the run's steps
plus one extra trace. Which steps run compiled depends on the step counts alone, never on
the clock or on how the controller splits its calls: a run that makes the same choice ends
with the same numbers. XLA changes the numbers a seeded run ends with, so TensorFlow's
kernels are the default and XLA is kept only when its median rate over its calls beats the
plain variant's by more than the noise margin (``noise_margin``: the wider of
``MIN_MARGIN`` and the spread of either variant's per-call rates); a difference inside the
machine's noise keeps the default. One line gives both rates, the margin and the choice.
A run of fewer than ``min_steps`` steps, or of unknown length (until the input ends), is
not measured: it trains without XLA (logged).

A measured choice is kept (``KeptChoices``): in ``log_dir/jit_compile.json``, which a
resume or a rerun in that log_dir follows whatever its length, and in a per-user cache
(``$XDG_CACHE_HOME/moxlite/jit_compile.json``, else ``~/.cache/moxlite``) keyed by a
fingerprint of the model's step and the machine. A run that would measure and finds the
machine's choice still runs the trial's steps, then trains as kept whatever it measured: it
ends with the numbers of the run that measured, and the choice never flips on a busier
machine. The line says the choice was reused and where from. A run interrupted during its
trial measures again from where it resumes.

Several synchronous workers train the same variant (each variant's traced collectives are
its own): the chief's kept choice or measurement decides, broadcast to every worker, and
each worker's line says what it does and that the chief decided.
"""

import contextlib
import copy
import dataclasses
import functools
import hashlib
import json
import os
import platform
import statistics
import time
from typing import Optional

import tensorflow as tf

from moxlite.training.compiled import mirrored_updates as compiled_updates
from moxlite.training.validation import jit_compile_mode

WHOLE_STEP = "whole step"             # forward, backward and the optimizer stack
PER_REPLICA = "per-replica forward and backward"
WHOLE_STEP_BUT_REFRESH = "whole step (a THOR refresh's: forward and backward)"
PER_WORKER = "per-worker forward and backward on values read from the parameter servers"

TPU_COMPILES = "TPUStrategy compiles every step with XLA itself"

clock = time.perf_counter   # what the measurement times calls with (a test may replace it)

# XLA is kept only when faster than TensorFlow's kernels by more than this share, or by more
# than the measured spread where that is wider (``noise_margin``).
MIN_MARGIN = 0.10
KEPT_FILE = "jit_compile.json"   # the kept choice, in log_dir and in the per-user cache


@dataclasses.dataclass(frozen=True)
class Budget:
    """What ``auto`` may spend on measuring (see the module docstring)."""

    min_steps: int = 200          # runs shorter than this are not measured (no XLA)
    fraction: float = 0.05        # of the run's steps, at most, in the trial (both variants)
    max_trial_steps: int = 50     # per variant
    trial_calls: int = 5          # blocks of steps per variant, alternating (the spread is over their calls)


def noise_margin(plain_rates, xla_rates, floor=MIN_MARGIN):
    """The share by which XLA's median rate must beat the plain one's to be kept: the widest
    spread, (fastest - slowest) / median, of either variant's per-call rates, at least ``floor``."""
    spreads = [(max(rates) - min(rates)) / statistics.median(rates)
               for rates in (plain_rates, xla_rates) if rates and statistics.median(rates) > 0]
    return max([floor] + spreads)


def xla_is_faster(plain_rates, xla_rates, floor=MIN_MARGIN):
    """(keep XLA?, margin): XLA's median rate beats the plain median by more than ``noise_margin``."""
    margin = noise_margin(plain_rates, xla_rates, floor)
    if not plain_rates or not xla_rates:
        return False, margin
    return statistics.median(xla_rates) > statistics.median(plain_rates) * (1 + margin), margin


def machine_description():
    """What identifies this machine for a kept choice: host, processor, cores, TensorFlow, devices."""
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")),
                         model)
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    devices = sorted(f"{device.device_type}:{device.name}" for device in tf.config.list_logical_devices())
    return {"host": platform.node(), "processor": model, "cores": cores, "tensorflow": tf.__version__,
            "devices": devices}


def fingerprint(program):
    """A key for ``program`` (a JSON-able description of the model's step) on this machine."""
    text = json.dumps({"program": program, "machine": machine_description()}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def user_cache_path():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "moxlite", KEPT_FILE)


@dataclasses.dataclass(frozen=True)
class Kept:
    """A measured choice: XLA or not, the rates it rested on, where it was read from."""

    xla: bool
    rates: str
    source: str = ""


class KeptChoices:
    """Where a measured choice is kept and found again (module docstring): ``log_dir`` (the run's
    own, None for none) and the per-user cache under ``key`` (None: not kept there)."""

    def __init__(self, log_dir, key, cache_path=None):
        self.log_dir = log_dir
        self.key = key
        self.cache_path = cache_path or user_cache_path()

    def run_path(self):
        return os.path.join(self.log_dir, KEPT_FILE) if self.log_dir else None

    @staticmethod
    def _read(path):
        try:
            with tf.io.gfile.GFile(path) as stored:
                return json.loads(stored.read())
        except (tf.errors.NotFoundError, OSError, ValueError):
            return None

    def of_run(self):
        """The choice kept in log_dir, if any."""
        path = self.run_path()
        record = self._read(path) if path else None
        if not isinstance(record, dict) or not isinstance(record.get("xla"), bool):
            return None
        return Kept(record["xla"], str(record.get("rates", "")), path)

    def of_machine(self):
        """The choice kept in the per-user cache for this model's step on this machine, if any."""
        records = self._read(self.cache_path) if self.key else None
        record = records.get(self.key) if isinstance(records, dict) else None
        if not isinstance(record, dict) or not isinstance(record.get("xla"), bool):
            return None
        return Kept(record["xla"], str(record.get("rates", "")), self.cache_path)

    def keep(self, kept):
        """Write ``kept`` to log_dir and the per-user cache (a cache that cannot be written is skipped)."""
        record = {"xla": kept.xla, "rates": kept.rates}
        path = self.run_path()
        if path:
            tf.io.gfile.makedirs(self.log_dir)
            with tf.io.gfile.GFile(path, "w") as out:
                out.write(json.dumps({**record, "fingerprint": self.key}, indent=1) + "\n")
        if self.key:
            try:
                records = self._read(self.cache_path)
                records = records if isinstance(records, dict) else {}
                records[self.key] = record
                os.makedirs(os.path.dirname(self.cache_path), exist_ok=True)
                partial = f"{self.cache_path}.{os.getpid()}"
                with open(partial, "w") as out:
                    json.dump(records, out, indent=1, sort_keys=True)
                os.replace(partial, self.cache_path)
            except OSError:
                pass


def placement(strategy, preconditioned=False):
    """(what XLA compiles, or None; why not, when None) for ``strategy``; ``preconditioned``:
    the optimizer stack holds THOR, whose refresh stays out of XLA (module docstring)."""
    if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        return PER_WORKER, None
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return None, TPU_COMPILES
    if isinstance(strategy, tf.distribute.OneDeviceStrategy) \
            or type(strategy).__name__ == "_DefaultDistributionStrategy":
        return (WHOLE_STEP_BUT_REFRESH if preconditioned else WHOLE_STEP), None
    return PER_REPLICA, None


# A function's inputs and plain ordering: not ops XLA compiles.
_STRUCTURAL = frozenset({"Placeholder", "NoOp", "_Arg", "_Retval"})
_XLA_KERNELS = {}   # op type -> whether XLA has a kernel for it, per device type


def _xla_device_type():
    return "XLA_GPU_JIT" if tf.config.list_logical_devices("GPU") else "XLA_CPU_JIT"


def ops_without_xla_kernel(graph_def):
    """The op types in ``graph_def`` (its function library included) that XLA cannot compile
    on this machine's device type, sorted. XLA registers its kernels at its first compile,
    so one tiny function is compiled first."""
    from tensorflow.python.framework import kernels

    if not _XLA_KERNELS:
        # Eagerly, out of the loop being traced: called in its trace, the tiny function became
        # a call node in the training loop's while body, beside the step.
        with tf.init_scope():
            tf.function(lambda x: x + 1, jit_compile=True, autograph=False)(tf.constant(0))
    device_type = _xla_device_type()
    functions = {function.signature.name for function in graph_def.library.function}
    op_types = {node.op for node in graph_def.node} - _STRUCTURAL
    for function in graph_def.library.function:
        op_types.update(node.op for node in function.node_def if node.op not in _STRUCTURAL)
    missing = []
    for op_type in sorted(op_types - functions):
        key = (device_type, op_type)
        if key not in _XLA_KERNELS:
            registered = kernels.get_registered_kernels_for_op(op_type).kernel
            _XLA_KERNELS[key] = any(kernel.device_type == device_type for kernel in registered)
        if not _XLA_KERNELS[key]:
            missing.append(op_type)
    return missing


# ---- compiled functions over any Python structure of tensors ---------------------------------

def _reachable(tensor):
    """True when ``tensor`` belongs to the graph being built or to one it can capture from."""
    graph = tf.compat.v1.get_default_graph()
    while graph is not None:
        if tensor.graph is graph:
            return True
        graph = getattr(graph, "outer_graph", None)
    return False


def _split(value, tensors):
    """``value`` with its tensors appended to ``tensors``; returns a function rebuilding it
    from an iterator over (compiled) tensors in that order."""
    if isinstance(value, tf.Tensor):
        if not _reachable(value):
            # Left behind in a branch of a tf.cond the traced code read only inside it (THOR's
            # probes of the recording branch): not an output, kept as traced.
            return lambda leaves: value
        tensors.append(value)
        return lambda leaves: next(leaves)
    if isinstance(value, tf.IndexedSlices):
        rebuild = _split((value.values, value.indices, value.dense_shape), tensors)
        return lambda leaves: tf.IndexedSlices(*rebuild(leaves))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {field.name: _split(getattr(value, field.name), tensors) for field in dataclasses.fields(value)}

        def rebuild_dataclass(leaves):
            out = copy.copy(value)
            for name, rebuild in fields.items():
                object.__setattr__(out, name, rebuild(leaves))
            return out
        return rebuild_dataclass
    if isinstance(value, dict):
        parts = {key: _split(item, tensors) for key, item in value.items()}
        return lambda leaves: type(value)((key, rebuild(leaves)) for key, rebuild in parts.items())
    if isinstance(value, (list, tuple)):
        parts = [_split(item, tensors) for item in value]
        kind = type(value)
        if hasattr(value, "_fields"):   # a namedtuple
            return lambda leaves: kind(*[rebuild(leaves) for rebuild in parts])
        return lambda leaves: kind([rebuild(leaves) for rebuild in parts])
    return lambda leaves: value   # a Python value (a layer, a variable, a name): kept as traced


class Compiled:
    """``function`` as one XLA function; its arguments are nests of tensors, its results any
    structure of dataclasses, lists, tuples and dicts around tensors (rebuilt as traced)."""

    def __init__(self, function):
        self._function = function
        self._inputs = None
        self._rebuild = None
        self._xla = tf.function(self._flat, jit_compile=True)

    def _flat(self, *leaves):
        args = tf.nest.pack_sequence_as(self._inputs, list(leaves), expand_composites=True)
        tensors = []
        self._rebuild = _split(self._function(*args), tensors)
        return tensors

    def refusal(self, *args):
        """Why XLA cannot compile ``function`` on ``args`` (None if it can): its trace (made
        here, in the caller's graph, and reused by the call) is searched for ops without an
        XLA kernel. Nothing runs."""
        self._inputs = args
        concrete = self._xla.get_concrete_function(*tf.nest.flatten(args, expand_composites=True))
        missing = ops_without_xla_kernel(concrete.graph.as_graph_def())
        if missing:
            return f"no XLA kernel for {', '.join(missing)}"
        return None

    def __call__(self, *args):
        self._inputs = args
        outputs = self._xla(*tf.nest.flatten(args, expand_composites=True))
        return self._rebuild(iter(outputs))


class CompiledStep:
    """The replica step of the synchronous trainer run through XLA where ``placement`` says.

    ``replica_step(batch)`` is what the trainer's replica function calls in place of
    ``train_step(batch)``. The first trace checks the compiled function's trace for ops
    without an XLA kernel; if there are any, ``refused`` names them and the step is traced
    without XLA.
    """

    def __init__(self, train_step, where):
        self.train_step = train_step
        self.where = where
        self.refused: Optional[str] = None
        self._compiled = {}   # one per replica: each reads its own replica's variables
        self._programs = None  # WHOLE_STEP_BUT_REFRESH: (THOR links, plain program, forward and backward)
        self._ran = None       # and whether each (plain, refresh) has run: XLA compiles it at its first run

    def tracing(self):
        """The context the compiled variant's ``strategy.run`` is traced in: with several
        replicas the Keras optimizer's updates compile per device (``compiled_updates``),
        unless XLA refused the step."""
        if self.where != PER_REPLICA:
            return contextlib.nullcontext()
        return compiled_updates.tracing_compiled(lambda: self.refused is None,
                                                 [pipeline.base for pipeline in self.train_step.pipelines])

    def replica_step(self, batch):
        if self.refused is not None:
            return self.train_step(batch)
        if self.where == WHOLE_STEP_BUT_REFRESH:
            return self._plain_or_refresh(batch)
        replica = tf.distribute.get_replica_context()
        key = int(tf.get_static_value(replica.replica_id_in_sync_group)) if replica is not None else 0
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = Compiled(self.train_step if self.where == WHOLE_STEP else self._forward_backward)
            self.refused = compiled.refusal(batch)
            if self.refused is not None:
                return self.train_step(batch)
            self._compiled[key] = compiled
        if self.where == WHOLE_STEP:
            return compiled(batch)
        return self.train_step(batch, gradients=compiled)

    def _forward_backward(self, batch):
        return self.train_step.compiled_gradients(batch)

    def _plain_or_refresh(self, batch):
        """One device, THOR in the stack: a plain update as one XLA program, the whole step traced
        with every THOR assuming no refresh; a refresh with only forward and backward compiled."""
        if self._programs is None:
            thors = [link for stack in self.train_step.pipelines for link in stack.layer_preconditioners()]
            plain = Compiled(functools.partial(self._without_refresh, thors))
            gradients = Compiled(self._forward_backward)
            self.refused = plain.refusal(batch) or gradients.refusal(batch)
            if self.refused is not None:
                return self.train_step(batch)
            self._programs = (thors, plain, gradients)
            with tf.init_scope():   # made eagerly, out of the loop being traced
                self._ran = [tf.Variable(False, trainable=False, name=name) for name in ("plain_ran", "refresh_ran")]
        thors, plain, gradients = self._programs
        ran_plain, ran_refresh = self._ran

        def refresh_update():
            ran_refresh.assign(True)
            return self.train_step(batch, gradients=gradients)

        def plain_update():
            ran_plain.assign(True)
            return plain(batch)

        refresh = tf.reduce_any(tf.stack([thor.refreshes_now() for thor in thors]))
        return tf.cond(refresh, refresh_update, plain_update)

    def warmed(self):
        """Whether each XLA program of the step has run once. XLA compiles a program at its first
        run, so until then a call's time is partly compiling (``JitChoice`` does not time it)."""
        return self._ran is None or all(bool(flag.numpy()) for flag in self._ran)

    def _without_refresh(self, thors, batch):
        with contextlib.ExitStack() as assumptions:
            for thor in thors:
                assumptions.enter_context(thor.assuming_refresh(False))
            return self.train_step(batch)


# ---- which variant runs each call ------------------------------------------------------------

class JitChoice:
    """Whether each call of the synchronous trainer runs the compiled step, and under
    ``auto`` the measurement that decides it (see the module docstring).

    ``plan(asked)`` gives (compiled?, steps) for the next traced call; ``record(compiled,
    steps, seconds)`` tells what it did. ``decided`` is None while measuring.
    """

    def __init__(self, mode, strategy, steps_left, logger, budget=Budget(), agree=None, preconditioned=False,
                 chief=True, kept=None):
        """``steps_left()``: the steps this run will train (None: until the input ends), asked
        at the first call (after a resume has restored the global step). ``agree(flag)``:
        with several synchronous workers, True on every worker when any worker passes True
        (every worker calls it at the same point); None in one process. ``chief``: this
        process's measurement or kept choice is the one every worker follows.
        ``preconditioned``: the stack holds THOR (see ``placement``). ``kept``: the
        ``KeptChoices`` a measured choice is read from and written to (None: not kept)."""
        self.mode = jit_compile_mode(mode)
        self.budget = budget
        self.logger = logger
        self.where, self._reason = placement(strategy, preconditioned)
        self._steps_left = steps_left
        self._agree = agree
        self._chief = chief
        self._kept = kept
        self.decided = None
        self.trial_steps = 0
        self._started = False
        self._steps = {False: 0, True: 0}
        self._rates = {False: [], True: []}   # steps/s of each timed call
        self._traced = {False: False, True: False}
        self._untimed_steps = 0   # the compiled variant's, until its programs have all run once
        self._block = (False, 0)  # the variant of the trial's current block, steps it has run
        self._replayed = None     # the machine's kept choice, applied once the trial's steps have run

    def start(self):
        """Decide what can be decided before any step (and log it); once, at the first call."""
        if self._started:
            return
        self._started = True
        steps_left = self._steps_left()
        budget = self.budget
        if self.mode == "false":
            self.decided = False
        elif self._reason == TPU_COMPILES:
            self.logger.info("jit_compile=%s: %s; nothing is added", self.mode, TPU_COMPILES)
            self.decided = False
        elif self.where is None:
            self._log_without(self._reason)
            self.decided = False
        elif self.mode == "true":
            self.logger.info("jit_compile=true: the %s compiled by XLA", self.where)
            self.decided = True
        elif self._reuse(steps_left is not None and steps_left >= budget.min_steps):
            pass
        elif steps_left is None:
            # A run until the input ends may be short: it is not made to pay for a trial.
            self.logger.info("jit_compile=auto: the run's length is not known (max_number_of_steps=0): without "
                             "XLA, not measured; pass jit_compile=True to compile")
            self.decided = False
        elif steps_left < budget.min_steps:
            self.logger.info("jit_compile=auto: %d steps to train, fewer than %d: without XLA, not measured",
                             steps_left, budget.min_steps)
            self.decided = False
        else:
            share = int(steps_left * budget.fraction / 2)
            self.trial_steps = max(1, min(budget.max_trial_steps, share))

    def _reuse(self, would_measure):
        """Decide from a kept choice (the run's own in log_dir; the machine's when the run would
        measure); with several workers, the chief's, broadcast. True when decided now. The
        machine's choice is not applied at once: the run still runs the trial's steps, as the
        run that measured it did, and then trains as kept (``_replayed``), so that both end with
        the same numbers."""
        kept = None
        if self._kept is not None and self._chief:
            kept = self._kept.of_run() or (self._kept.of_machine() if would_measure else None)
        replay = would_measure and kept is not None and kept.source != self._kept.run_path()
        if self._agree is not None:   # every worker calls agree, in the same order
            found = self._agree(self._chief and kept is not None)
            xla = self._agree(self._chief and kept is not None and kept.xla)
            replay = self._agree(self._chief and replay)
            if not found:
                return False
            if not self._chief:
                if replay:
                    self._replayed = Kept(xla, "", "the chief's")
                    return False
                self.decided = xla
                self.logger.info("jit_compile=auto: the chief's kept choice, for every worker: training %s",
                                 _with(xla))
                return True
        if kept is None:
            return False
        if replay:
            self._replayed = kept
            return False
        self.decided = kept.xla
        self.logger.info("jit_compile=auto: training %s, the choice kept in %s (%s)", _with(kept.xla),
                         kept.source, kept.rates)
        return True

    def _log_without(self, reason):
        if self.mode == "true":
            self.logger.warning("jit_compile=true: %s; training without XLA", reason)
        else:
            self.logger.info("jit_compile=auto: %s; training without XLA", reason)

    def refuse(self, reason):
        """XLA cannot compile this model: the rest of the run goes without it."""
        self._log_without(f"XLA cannot compile this step ({reason})")
        self.decided = False

    def plan(self, asked):
        self.start()
        if self.decided is not None:
            return self.decided, asked
        for variant in (False, True):   # each variant's first call traces (and compiles): untimed
            if not self._traced[variant]:
                return variant, 1
        variant, run = self._block
        block = -(-self.trial_steps // self.budget.trial_calls)
        if self._done(variant):   # a variant whose trial is over is not run again while the other's goes on
            variant, run = not variant, 0
        return variant, max(1, min(asked, self.trial_steps - self._steps[variant], block - run))

    def _done(self, variant):
        """Whether ``variant``'s trial steps are spent."""
        return self._steps[variant] >= self.trial_steps

    def record(self, compiled, steps, seconds, warmed=True):
        """``warmed``: every program of the compiled step has run once (``CompiledStep.warmed``);
        until then, or for ``trial_steps`` steps at most, the compiled variant's calls are not timed."""
        if self.decided is not None or steps <= 0:
            return
        if not self._traced[compiled]:
            if compiled:
                self._untimed_steps += steps
            self._traced[compiled] = not compiled or warmed or self._untimed_steps >= self.trial_steps
            return
        self._steps[compiled] += steps
        self._rates[compiled].append(steps / max(seconds, 1e-12))
        variant, run = self._block
        run = run + steps if variant == compiled else steps
        block = -(-self.trial_steps // self.budget.trial_calls)
        self._block = (not compiled, 0) if run >= block else (compiled, run)
        if self._done(False) and self._done(True):
            self._decide()

    def rate(self, compiled):
        """The median steps/s of ``compiled``'s timed calls (0 before any)."""
        return statistics.median(self._rates[compiled]) if self._rates[compiled] else 0.0

    def _decide(self):
        plain, xla = self.rate(False), self.rate(True)
        faster, margin = xla_is_faster(self._rates[False], self._rates[True])
        measured = (f"{xla:.1f} steps/s with XLA ({self.where}), {plain:.1f} without, medians of {len(self._rates[True])} "
                    f"and {len(self._rates[False])} calls over {self._steps[True]} and {self._steps[False]} steps, "
                    f"margin {100 * margin:.0f}%")
        replayed = self._replayed
        chosen = replayed.xla if replayed is not None else faster
        self.decided = chosen
        if self._agree is not None:   # the chief's measurement or kept choice decides for every worker
            self.decided = self._agree(self._chief and chosen)
        if replayed is not None and not self._chief:
            self.logger.info("jit_compile=auto: the chief's kept choice, for every worker: training %s; the trial's "
                             "steps ran as when it was measured (this worker measured %s)", _with(self.decided), measured)
        elif replayed is not None:
            self.logger.info("jit_compile=auto: training %s, the choice kept in %s (%s); the trial's steps ran as "
                             "when it was measured (here: %s)", _with(self.decided), replayed.source,
                             replayed.rates, measured)
            if self._chief and self._kept is not None:
                self._kept.keep(Kept(self.decided, replayed.rates))   # the run's own from now on
        elif self._chief:
            self.logger.info("jit_compile=auto: %s: training %s", measured, _with(self.decided))
            if self._kept is not None:
                self._kept.keep(Kept(self.decided, measured))
        else:
            self.logger.info("jit_compile=auto: the chief's measurement decides for every worker: training %s "
                             "(this worker measured %s)", _with(self.decided), measured)


def _with(xla):
    return "with XLA" if xla else "without XLA"
