"""moxlite.run against the loops a Keras 3 user writes, at the same steps per traced call.

Same model (an MLP 784-256-10 on the bundled MNIST sample), same data
pipeline, same batch, same optimizer (SGD), one process, measured side by
side. For each N in ``--steps_per_loop`` (default 1 and 50) four contenders
run N steps per call into TensorFlow:

* ``moxlite.run`` with ``steps_per_loop=N``;
* a hand-written loop: one ``tf.function`` that runs N train steps over a
  dataset iterator (``for _ in tf.range(n): x, y = next(iterator)``);
* ``model.fit`` with ``steps_per_execution=N``;
* the hand-written loop with a per-step check added (one sum over the loss and
  every gradient, ``is_finite``, leave the traced loop at a non-finite step):
  what moxlite's guard cost before it checked only the loss per step.

A further variant, moxlite with ``save_summary_steps=0``, has rows of its own:
moxlite doing only the work the hand-written loop does (by default it also
writes TensorBoard scalars every 100 steps).

``auto`` in ``--steps_per_loop`` (in the default list) adds moxlite as a user
runs it: the default ``steps_per_loop="auto"`` and the default log line every
10 steps, so calls of up to 10 steps. It is compared with the other two at the
largest N.

Each reads its loss every max(10, N) steps (moxlite through its own log
lines, the hand-written loop with ``float(loss)``, model.fit in a batch
callback) and notes the time; steps/sec is taken between the ``--warmup``
step and the last step, so tracing and start-up are left out. Rounds
alternate the order of the contenders and of the N values. The table gives,
per N, each contender's median steps/sec and the median and range over rounds
of moxlite's ratio to each other contender in the same round (on a shared
2-core machine single rounds vary by 15 % or more). ``--clock cpu`` counts
this process's CPU seconds (all threads) instead of wall seconds: what each
step costs, less disturbed when other jobs share the cores.

    python tools/bench_runner.py [--steps 1000] [--warmup 100] [--batch_size 64] [--rounds 5]
                                 [--steps_per_loop 1,50,auto] [--clock wall|cpu]
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import moxlite as mox  # noqa: E402
from moxlite.data import mnist  # noqa: E402
from benchlib import (HIDDEN, dataset, fit_times, hand_written_times, loss_fn, mlp_model_fn,  # noqa: E402
                      moxlite_times, quiet_console, spread, steady_rate)

LOG_EVERY = 10
AUTO = "auto"
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCKS["wall"]


def log_every(steps_per_loop):
    """Steps between loss reads: 10, or once per traced call when a call runs more."""
    return LOG_EVERY if steps_per_loop == AUTO else max(LOG_EVERY, steps_per_loop)


def build_model():
    return keras.Sequential([keras.Input((784,)), keras.layers.Dense(HIDDEN, activation="relu"),
                             keras.layers.Dense(10)])


def time_moxlite(images, labels, batch_size, steps, steps_per_loop, summaries=True):
    times, _ = moxlite_times(images, labels, clock, model_fn=mlp_model_fn,
                             optimizer_fn=mox.get_optimizer_fn("sgd", 0.05), batch_size=batch_size,
                             max_number_of_steps=steps, log_every_n_steps=log_every(steps_per_loop),
                             steps_per_loop=steps_per_loop, save_summary_steps=100 if summaries else 0)
    return times


def time_hand_written_loop(images, labels, batch_size, steps, steps_per_loop, check_finite=False):
    """The loop a Keras 3 user writes by hand: N train steps per tf.function call, over an iterator.

    check_finite: also compute moxlite's per-step non-finite flag and leave the call at a
    non-finite step, as moxlite's default ``nonfinite_policy=stop`` does.
    """
    model = build_model()
    optimizer = keras.optimizers.SGD(0.05)

    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        if not check_finite:
            return loss, tf.constant(True)
        total = tf.add_n([loss] + [tf.reduce_sum(g) for g in gradients])
        return loss, tf.math.is_finite(total)

    iterator = iter(dataset(images, labels, batch_size))
    return hand_written_times(train_step, iterator, steps, steps_per_loop, log_every(steps_per_loop), clock)


def time_fit(images, labels, batch_size, steps, steps_per_loop):
    model = build_model()
    model.compile(optimizer=keras.optimizers.SGD(0.05),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  steps_per_execution=steps_per_loop)
    return fit_times(model, dataset(images, labels, batch_size), steps, log_every(steps_per_loop), clock)


def time_checked_hand_written_loop(images, labels, batch_size, steps, steps_per_loop):
    return time_hand_written_loop(images, labels, batch_size, steps, steps_per_loop, check_finite=True)


def time_moxlite_without_summaries(images, labels, batch_size, steps, steps_per_loop):
    return time_moxlite(images, labels, batch_size, steps, steps_per_loop, summaries=False)


CONTENDERS = {"moxlite.run": time_moxlite, "hand-written": time_hand_written_loop, "model.fit": time_fit,
              "hand+check": time_checked_hand_written_loop}
OTHERS = ("hand-written", "model.fit", "hand+check")
# Not in the table's columns: moxlite doing only the work the hand-written loop does.
NO_SUMMARIES = "moxlite, no summaries"
VARIANTS = {NO_SUMMARIES: time_moxlite_without_summaries}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps_per_loop", default="1,50,auto",
                        help="comma-separated N values; 'auto' adds moxlite's default against the largest N")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall seconds, or this process's CPU seconds (all threads)")
    options = parser.parse_args()
    sys.argv[1:] = []   # moxlite reads MoXing's flags (--steps_per_loop too) from the command line
    global clock
    clock = CLOCKS[options.clock]
    values = [n.strip() for n in options.steps_per_loop.split(",")]
    loops = [int(n) for n in values if n != AUTO]
    runs = [(n, name) for n in loops for name in [*CONTENDERS, *VARIANTS]]
    if AUTO in values:
        runs.append((AUTO, "moxlite.run"))
    quiet_console()
    (images, labels), _ = mnist.split()
    images = images.reshape(-1, 784)
    rates = {run: [] for run in runs}
    for round_index in range(options.rounds):
        for n, name in runs if round_index % 2 == 0 else reversed(runs):
            keras.backend.clear_session()
            times = {**CONTENDERS, **VARIANTS}[name](images, labels, options.batch_size, options.steps, n)
            rates[(n, name)].append(steady_rate(times, options.warmup))
    print(f"cores: {os.cpu_count()}  batch: {options.batch_size}  steps: {options.warmup}->{options.steps}  "
          f"rounds: {options.rounds}  clock: {options.clock}  "
          f"(median steps/sec; ratios: median (min-max) over rounds)")
    print("| N | moxlite.run | hand-written | model.fit | hand+check | moxlite / hand-written | moxlite / model.fit "
          "| moxlite / hand+check |")
    print("|---|---|---|---|---|---|---|---|")
    for n in loops:
        ratios = [[m / o for m, o in zip(rates[(n, "moxlite.run")], rates[(n, other)])] for other in OTHERS]
        medians = " | ".join(f"{statistics.median(rates[(n, name)]):.0f}" for name in CONTENDERS)
        print(f"| {n} | {medians} | " + " | ".join(spread(r) for r in ratios) + " |")
    for n in loops:
        ratios = [[m / o for m, o in zip(rates[(n, NO_SUMMARIES)], rates[(n, other)])] for other in OTHERS]
        print(f"| {n}, moxlite without summaries (save_summary_steps=0) | {statistics.median(rates[(n, NO_SUMMARIES)]):.0f} "
              "| | | | " + " | ".join(spread(r) for r in ratios) + " |")
    if loops:
        top = max(loops)
        for mine, label in (((1, "moxlite.run"), "moxlite at N=1"), ((AUTO, "moxlite.run"), "moxlite default (auto)")):
            if mine in rates and mine[0] != top:
                ratios = [[m / o for m, o in zip(rates[mine], rates[(top, other)])] for other in OTHERS]
                print(f"| {label} vs the others at N={top} | {statistics.median(rates[mine]):.0f} | | | | "
                      + " | ".join(spread(r) for r in ratios) + " |")
    for (n, name), values in rates.items():
        print(f"N={n!s:<4} {name:13s} rounds: {', '.join(f'{v:.0f}' for v in values)}")


if __name__ == "__main__":
    main()
