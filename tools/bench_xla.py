"""moxlite's jit_compile (auto, true, false) against hand-written loops with and without XLA and model.fit.

Three models on the bundled digits (batch 64, momentum 0.9): the MLP (784-256-10), a
small CNN (moxlite's ``lenet``: 2 conv, pool, 2 dense) and a small ViT (moxlite's
``vit_tiny`` at 2 blocks, 4 heads, 64 wide, patches of 7; ``--vit_full`` for ViT-Ti's
own sizes). For each, six contenders run the same steps per traced call (``--steps_per_loop``):

* ``moxlite.run`` with ``jit_compile`` ``auto`` (measures, keeps the faster), ``true`` and ``false``;
* the hand-written loop (one ``tf.function`` of N steps over an iterator) whose step is
  ``tf.function(jit_compile=True)``, and the same without XLA;
* ``model.fit(jit_compile=True, steps_per_execution=N)``.

Each reads its loss every N steps; steps/sec is taken from the ``--warmup`` step to the
last one (tracing, compiling and auto's trial, at most 2 x 50 steps, fall before the
default warmup of 150 at 1000 steps). Rounds alternate the order of the contenders.
The table gives each contender's median steps/sec and, per model, the median and range
over rounds of moxlite auto's ratio to the faster hand-written loop and to model.fit.

    python tools/bench_xla.py [--steps 1000] [--warmup 150] [--rounds 5] [--steps_per_loop 10]
                              [--models mlp,cnn,vit] [--vit_full] [--quick]

``--quick`` (40 steps, warmup 10, one round) only checks that every contender runs.

``--models thor`` (with ``--thor_frequency``, default 20) compares, on the MLP with THOR
around momentum: moxlite's placement for THOR (plain updates as one whole-step XLA
program, refresh updates with only forward and backward compiled), the whole step as one
XLA program (moxlite's placement before), a prototype of two whole-step programs (refresh
and plain, see ``thor_two_programs``), and no XLA.
"""

import argparse
import contextlib
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import moxlite as mox  # noqa: E402
from moxlite.data import mnist  # noqa: E402
from moxlite.models import build_model_fn  # noqa: E402
from moxlite.models.networks import NETWORKS  # noqa: E402
from moxlite.training.compiled import jit_choice  # noqa: E402
from benchlib import (dataset, fit_times, hand_written_times, loss_fn, moxlite_times, quiet_console,  # noqa: E402
                      spread, steady_rate, whole_step_placement)

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCKS["wall"]
BATCH = 64
LEARNING_RATE, MOMENTUM = 0.01, 0.9
SMALL_VIT = {"patch_size": 7, "embed_dim": 64, "depth": 2, "num_heads": 4, "drop_path": 0.0}
FULL_VIT = {"patch_size": 7, "drop_path": 0.0}
MODELS = {"mlp": ("mlp", {"hidden_units": [256]}), "cnn": ("lenet", {}), "vit": ("vit_tiny", SMALL_VIT)}
CONTENDERS = ("moxlite auto", "moxlite true", "moxlite false", "hand XLA", "hand", "fit XLA")
AUTO_LINE = "jit_compile=auto: "


def images_for(name, images):
    return images.reshape(-1, 784) if name == "mlp" else images.reshape(-1, 28, 28, 1)


def time_moxlite(model, images, labels, steps, n, jit_compile):
    """(step, time) marks and auto's choice line (None under true and false). Each run has its own
    per-user cache, so that auto measures every round instead of reusing the first's choice."""
    import tempfile

    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="bench_xla_cache_")
    network, options = MODELS[model]
    times, kept = moxlite_times(
        images, labels, clock, keep_prefixes=(AUTO_LINE,), model_fn=build_model_fn(network, 10, **options),
        optimizer_fn=mox.get_optimizer_fn("momentum", LEARNING_RATE, momentum=MOMENTUM), batch_size=BATCH,
        max_number_of_steps=steps, log_every_n_steps=n, steps_per_loop=n, save_summary_steps=0,
        jit_compile=jit_compile)
    return times, (kept[-1] if kept else None)


def keras_network(model):
    network, options = MODELS[model]
    shape = (784,) if model == "mlp" else (28, 28, 1)
    return NETWORKS[network](shape, 10, **options)


def time_hand_written(model, images, labels, steps, n, xla):
    """N steps per call over an iterator; the step itself compiled by XLA when ``xla``."""
    network = keras_network(model)
    optimizer = keras.optimizers.SGD(LEARNING_RATE, momentum=MOMENTUM)
    optimizer.build(network.trainable_variables)

    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, network(x, training=True))
        gradients = tape.gradient(loss, network.trainable_variables)
        optimizer.apply_gradients(zip(gradients, network.trainable_variables))
        return loss, tf.constant(True)

    step = tf.function(train_step, jit_compile=True) if xla else train_step
    return hand_written_times(step, iter(dataset(images, labels, BATCH)), steps, n, n, clock), None


def time_fit(model, images, labels, steps, n):
    network = keras_network(model)
    network.compile(optimizer=keras.optimizers.SGD(LEARNING_RATE, momentum=MOMENTUM),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                    steps_per_execution=n, jit_compile=True)
    return fit_times(network, dataset(images, labels, BATCH), steps, n, clock), None


THOR_CONTENDERS = ("thor moxlite", "thor one program", "thor two programs", "thor no XLA")


@contextlib.contextmanager
def thor_two_programs():
    """A prototype, for this benchmark only: THOR's refresh and plain steps as two XLA programs.

    Under it the one-device compiled step (``jit_choice.CompiledStep``) traces the step twice,
    each time with THOR's refresh decision fixed to a constant (so XLA keeps only that side
    of THOR's conds), and picks one of the two programs per step by a ``tf.cond`` outside
    XLA on the decision moxlite's one program computes inside it."""
    original = jit_choice.CompiledStep.replica_step

    def replica_step(self, batch):
        thors = [link for pipeline in self.train_step.pipelines for link in pipeline._receivers
                 if hasattr(link, "_is_collecting")]
        if self.where != jit_choice.WHOLE_STEP or not thors:
            return original(self, batch)
        thor = thors[0]
        if not hasattr(self, "_two_programs"):
            def fixed(refresh):
                def step(batch):
                    thor._is_collecting = lambda: tf.constant(refresh)
                    try:
                        return self.train_step(batch)
                    finally:
                        del thor._is_collecting
                return jit_choice.Compiled(step)
            self._two_programs = {refresh: fixed(refresh) for refresh in (True, False)}
        programs = self._two_programs
        return tf.cond(thor._is_collecting(), lambda: programs[True](batch), lambda: programs[False](batch))

    jit_choice.CompiledStep.replica_step = replica_step
    try:
        yield
    finally:
        jit_choice.CompiledStep.replica_step = original


def time_thor(images, labels, steps, n, name, frequency):
    """moxlite on the MLP with THOR (frequency ``frequency``) around momentum: moxlite's
    placement, one whole-step XLA program, the two-program prototype, or no XLA."""
    optimizer_fn = mox.get_optimizer_wrapper_fn(
        "thor", mox.get_optimizer_fn("momentum", LEARNING_RATE, momentum=MOMENTUM), frequency=frequency)
    network, options = MODELS["mlp"]
    split = thor_two_programs() if name == "thor two programs" else contextlib.nullcontext()
    whole = whole_step_placement() if name in ("thor one program", "thor two programs") else contextlib.nullcontext()
    with whole, split:
        times, _ = moxlite_times(
            images, labels, clock, model_fn=build_model_fn(network, 10, **options), optimizer_fn=optimizer_fn,
            batch_size=BATCH, max_number_of_steps=steps, log_every_n_steps=n, steps_per_loop=n,
            save_summary_steps=0, jit_compile="false" if name == "thor no XLA" else "true")
    return times, None


def run_contender(name, model, images, labels, steps, n, frequency=20):
    if name.startswith("thor"):
        return time_thor(images, labels, steps, n, name, frequency)
    if name.startswith("moxlite"):
        return time_moxlite(model, images, labels, steps, n, name.split()[1])
    if name.startswith("hand"):
        return time_hand_written(model, images, labels, steps, n, xla=name == "hand XLA")
    return time_fit(model, images, labels, steps, n)


def choice_of(line):
    """'XLA', 'no XLA' or the line itself (not measured, refused) from auto's log line."""
    if line is None:
        return "no line"
    if line.endswith("training with XLA"):
        return "XLA"
    if line.endswith("training without XLA"):
        return "no XLA"
    return line


def measure_model(model, images, labels, options, contenders=CONTENDERS):
    """{contender: [steps/sec per round]} and auto's choice per round, for one model; rounds
    alternate the contenders' order."""
    rates = {name: [] for name in contenders}
    choices = []
    for round_index in range(options.rounds):
        for name in contenders if round_index % 2 == 0 else reversed(contenders):
            keras.backend.clear_session()
            times, auto_line = run_contender(name, model, images, labels, options.steps, options.steps_per_loop,
                                             options.thor_frequency)
            rates[name].append(steady_rate(times, options.warmup))
            print(f"{model:4s} round {round_index + 1} {name}: {rates[name][-1]:.0f} steps/s", flush=True)
            if name == "moxlite auto":
                choices.append(auto_line)
    return rates, choices


def print_model(model, rates, choices, options):
    auto = rates["moxlite auto"]
    faster_hand = [max(a, b) for a, b in zip(rates["hand XLA"], rates["hand"])]
    medians = " | ".join(f"{statistics.median(rates[name]):.0f}" for name in CONTENDERS)
    print(f"\n{model}: batch {BATCH}, steps {options.warmup}->{options.steps}, steps per call "
          f"{options.steps_per_loop}, rounds {options.rounds}, clock {options.clock} "
          "(median steps/sec; ratios: median (min-max) over rounds)")
    print("| model | " + " | ".join(CONTENDERS) + " | auto / faster hand | auto / fit XLA |")
    print("|---|" + "---|" * (len(CONTENDERS) + 2))
    print(f"| {model} | {medians} | {spread([a / h for a, h in zip(auto, faster_hand)])} | "
          f"{spread([a / f for a, f in zip(auto, rates['fit XLA'])])} |")
    for name, values in rates.items():
        print(f"{model:4s} {name:14s} rounds: {', '.join(f'{v:.0f}' for v in values)}")
    print(f"{model:4s} auto's choice per round: {', '.join(choice_of(line) for line in choices)}")
    if choices and choices[0] is not None:
        print(f"{model:4s} auto's first line: {choices[0]}")
    sys.stdout.flush()


def print_thor(rates, options):
    """THOR's table: median steps/sec, and the ratios of moxlite's placement and of the
    two-program prototype to one whole-step program."""
    print(f"\nthor (MLP, frequency {options.thor_frequency}): batch {BATCH}, steps {options.warmup}->{options.steps}, "
          f"steps per call {options.steps_per_loop}, rounds {options.rounds}, clock {options.clock}")
    print("| " + " | ".join(THOR_CONTENDERS) + " | moxlite / one program | two programs / one program |")
    print("|---|" + "---|" * (len(THOR_CONTENDERS) + 1))
    one = rates["thor one program"]
    ratios = {name: spread([value / base for value, base in zip(rates[name], one)])
              for name in ("thor moxlite", "thor two programs")}
    print("| " + " | ".join(f"{statistics.median(rates[name]):.0f}" for name in THOR_CONTENDERS)
          + f" | {ratios['thor moxlite']} | {ratios['thor two programs']} |")
    for name, values in rates.items():
        print(f"thor {name:18s} rounds: {', '.join(f'{v:.0f}' for v in values)}")
    sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps_per_loop", type=int, default=10)
    parser.add_argument("--models", default="mlp,cnn,vit",
                        help="of mlp, cnn, vit and thor (THOR on the MLP: one XLA program against two)")
    parser.add_argument("--thor_frequency", type=int, default=20, help="THOR's refresh frequency (--models thor)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall seconds, or this process's CPU seconds (all threads)")
    parser.add_argument("--vit_full", action="store_true", help="ViT-Ti's own sizes (192 wide, 12 blocks, 3 heads)")
    parser.add_argument("--quick", action="store_true", help="40 steps, warmup 10, one round: a smoke run")
    options = parser.parse_args()
    sys.argv[1:] = []   # moxlite reads MoXing's flags from the command line
    global clock
    clock = CLOCKS[options.clock]
    if options.quick:
        options.steps, options.warmup, options.rounds = 40, 10, 1
    if options.vit_full:
        MODELS["vit"] = ("vit_tiny", FULL_VIT)
    quiet_console()
    (images, labels), _ = mnist.split()
    for model in [m.strip() for m in options.models.split(",")]:
        started = time.perf_counter()
        if model == "thor":
            rates, _ = measure_model(model, images_for("mlp", images), labels, options, THOR_CONTENDERS)
            print_thor(rates, options)
        else:
            rates, choices = measure_model(model, images_for(model, images), labels, options)
            print_model(model, rates, choices, options)
        print(f"{model:4s} took {time.perf_counter() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
