#!/usr/bin/env python
"""Throughput of 1 vs 2 workers, synchronous and asynchronous, on loopback.

    python tools/bench_distributed.py [--steps 300] [--batch 32]

Every configuration trains the same MLP on the bundled MNIST sample through
moxlite.run, started by tools/launch_local.py. The figure is the mean of
moxlite's own ``sample/sec`` console values after the first logged one (the
first includes tracing). Ratios are printed with ``os.cpu_count()``: on a
machine with 2 cores, two workers plus a ps share the cores, so a ratio
below 1 says "loopback with too few cores", not "distribution is broken".
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RATE = re.compile(r"sample/sec: ([0-9.]+)")


def train_task(args):
    """Run inside each task: one moxlite.run with the cluster flags on argv."""
    sys.path.insert(0, ROOT)
    import tensorflow as tf

    import moxlite as mox
    from benchlib import mlp_model_fn
    from moxlite.data import datasets

    # The recipes' mnist data set (the shuffled split, reshuffled every epoch), flattened for
    # the MLP. The raw rows are sorted by label: the first 500 are all zeros, which the loss
    # learns in a few steps, and each worker would see one class at a time.
    digits = datasets.build("mnist", {})

    def input_fn(mode):
        return digits.input_fn(mode).map(lambda image, label: (tf.reshape(image, [-1]), label))

    mox.run(input_fn=input_fn, model_fn=mlp_model_fn, optimizer_fn=mox.get_optimizer_fn("sgd", 0.05),
            run_mode=mox.ModeKeys.TRAIN, batch_size=args.batch, log_dir=args.log_dir,
            max_number_of_steps=args.steps, log_every_n_steps=args.log_every,
            save_model_secs=3600)  # no checkpoint inside the measured window


def measure(name, launcher_args, args):
    """Mean steady-state samples/sec of one configuration."""
    log_dir = tempfile.mkdtemp(prefix="moxlite-bench-")  # fresh: a checkpoint would resume
    task = [sys.executable, os.path.abspath(__file__), "--task", f"--log_dir={log_dir}", f"--steps={args.steps}",
            f"--batch={args.batch}", f"--log_every={args.log_every}"]
    if launcher_args is None:
        command = task
    else:
        command = [sys.executable, os.path.join(ROOT, "tools", "launch_local.py"), *launcher_args,
                   "--timeout=600", "--", *task]
    environ = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
    try:
        finished = subprocess.run(command, capture_output=True, text=True, env=environ, timeout=700)
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)
    chief_lines = [line for line in (finished.stdout + finished.stderr).splitlines()
                   if "sample/sec" in line and (launcher_args is None or line.startswith("[worker:0]"))]
    rates = [float(RATE.search(line).group(1)) for line in chief_lines][1:]
    if finished.returncode != 0 or not rates:
        raise SystemExit(f"{name}: failed (exit {finished.returncode})\n{finished.stdout[-3000:]}{finished.stderr[-3000:]}")
    return sum(rates) / len(rates)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="steps per worker")
    parser.add_argument("--batch", type=int, default=32, help="batch per replica")
    parser.add_argument("--log_every", type=int, default=50)
    parser.add_argument("--task", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--log_dir", help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args()
    if args.task:
        train_task(args)
        return 0
    configurations = [
        ("sync, 1 worker", None),
        ("sync, 2 workers", ["--workers=2", "--sync"]),
        ("async, 1 worker + 1 ps", ["--workers=1", "--ps=1", "--async"]),
        ("async, 2 workers + 1 ps", ["--workers=2", "--ps=1", "--async"]),
    ]
    rates = {}
    for name, launcher_args in configurations:
        rates[name] = measure(name, launcher_args, args)
        print(f"{name:26s} {rates[name]:10.1f} samples/sec", flush=True)
    print(f"cpu cores (os.cpu_count()): {os.cpu_count()}")
    print(f"sync  2 workers / 1 worker: {rates['sync, 2 workers'] / rates['sync, 1 worker']:.2f}x")
    print(f"async 2 workers / 1 worker: {rates['async, 2 workers + 1 ps'] / rates['async, 1 worker + 1 ps']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
