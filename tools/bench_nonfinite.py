"""Cost of the non-finite guard: moxlite.run with the guard against the same run without it.

The per-step guard (``moxlite.training.trainers.nonfinite.step_flag``) checks the loss under the
default ``--policy stop`` and every gradient too under ``--policy skip``. "Without" replaces
it, in this process only, by constant flags, so both contenders trace the same loop (the
check of the whole state before each report stays in both). Same MLP, data and batch;
rounds alternate the order; steps/sec is measured from the ``--warmup`` step to the last,
through moxlite's log lines.

    python tools/bench_nonfinite.py [--steps 1000] [--warmup 200] [--rounds 3] [--steps_per_loop 1]
                                    [--policy stop|skip]
"""

import argparse
import sys
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import logging  # noqa: E402

import tensorflow as tf  # noqa: E402

import moxlite as mox  # noqa: E402
from moxlite.data import mnist  # noqa: E402
from moxlite.training import reporting
from moxlite.training.trainers import nonfinite  # noqa: E402
from benchlib import mlp_model_fn  # noqa: E402

_REAL_FLAG = nonfinite.step_flag


def _no_guard(losses, gradient_lists, optimizers, check_gradients=True):
    return {nonfinite.FLAG_KEY: tf.constant(0.0), nonfinite.LOSS_KEY: tf.constant(0.0)}


class _StepTimes(logging.Handler):
    def __init__(self):
        super().__init__()
        self.times = {}

    def emit(self, record):
        message = record.getMessage()
        if "(global step: " in message:
            self.times[int(message.split("(global step: ")[1].split(")")[0])] = time.perf_counter()


def one_run(images, labels, guard, steps, warmup, steps_per_loop):
    nonfinite.step_flag = _REAL_FLAG if guard else _no_guard
    times = _StepTimes()
    logger = reporting.get_logger()
    logger.addHandler(times)

    try:
        mox.run(input_fn=lambda mode: tf.data.Dataset.from_tensor_slices((images, labels)).repeat(),
                model_fn=mlp_model_fn, optimizer_fn=mox.get_optimizer_fn("momentum", 0.05, momentum=0.9),
                run_mode=mox.ModeKeys.TRAIN, batch_size=64, log_dir=tempfile.mkdtemp(prefix="bench-nonfinite-"),
                max_number_of_steps=steps, log_every_n_steps=10, steps_per_loop=steps_per_loop)
    finally:
        logger.removeHandler(times)
        nonfinite.step_flag = _REAL_FLAG
    return (steps - warmup) / (times.times[steps] - times.times[warmup])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps_per_loop", type=int, default=1)
    parser.add_argument("--policy", choices=nonfinite.POLICIES, default="stop",
                        help="stop (default): the guard checks the loss; skip: every gradient too")
    args = parser.parse_args()
    sys.argv[1:] = []   # moxlite reads MoXing's flags from the command line
    mox.set_flag("nonfinite_policy", args.policy)
    (images, labels), _ = mnist.split(validation_fraction=0.2, seed=0)
    images = images.reshape(len(images), -1).astype("float32")
    rates = {True: [], False: []}
    for round_index in range(args.rounds):
        order = (True, False) if round_index % 2 == 0 else (False, True)
        for guard in order:
            rates[guard].append(one_run(images, labels, guard, args.steps, args.warmup, args.steps_per_loop))
    for guard in (True, False):
        values = rates[guard]
        print(f"{'with guard' if guard else 'no guard  '}: median {statistics.median(values):7.1f} steps/s, "
              f"min {min(values):7.1f}, max {max(values):7.1f} ({len(values)} rounds)")
    ratio = [g / n for g, n in zip(rates[True], rates[False])]
    print(f"guard / no guard, per round: {', '.join(f'{r:.3f}' for r in ratio)}; median {statistics.median(ratio):.3f}")


if __name__ == "__main__":
    main()
