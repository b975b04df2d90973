"""moxlite's traced training loop against the hand-written one, graph against graph.

The same MLP, data and N as ``bench_runner.py``, but neither side's host work is timed:
moxlite's traced loop (captured from a short ``moxlite.run``) and the hand-written
``tf.function`` are each called directly through their concrete functions, both the way
moxlite calls its loop (``compat.FlatCall``), with one host read per call, alternating
over ``--rounds``. What is left between the two is the work
inside the graphs; ``bench_runner.py``'s gap beyond it is host work between calls (log
lines, summaries).

    python tools/bench_loop_graph.py [--steps_per_loop 50] [--rounds 30]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import moxlite as mox  # noqa: E402
from moxlite import compat  # noqa: E402
from moxlite.data import mnist  # noqa: E402
from moxlite.training.trainers import sync_trainer  # noqa: E402
import bench_runner  # noqa: E402
from benchlib import mlp_model_fn  # noqa: E402


def moxlite_call(images, labels, steps_per_loop):
    """A call of moxlite's traced loop (the trainer of a short run, kept open)."""
    trainers = []
    original_close = sync_trainer.SyncTrainer.close
    sync_trainer.SyncTrainer.close = lambda trainer: trainers.append(trainer)   # keep the iterator alive
    try:
        with tempfile.TemporaryDirectory() as log_dir:
            mox.run(input_fn=lambda mode: tf.data.Dataset.from_tensor_slices((images, labels)).repeat(),
                    model_fn=mlp_model_fn, optimizer_fn=mox.get_optimizer_fn("sgd", 0.05),
                    run_mode=mox.ModeKeys.TRAIN, batch_size=64, log_dir=log_dir,
                    max_number_of_steps=steps_per_loop, log_every_n_steps=steps_per_loop,
                    steps_per_loop=steps_per_loop)
    finally:
        sync_trainer.SyncTrainer.close = original_close
    trainer = trainers[0]
    flat = trainer._flat_iterator + [tf.constant(steps_per_loop, tf.int64), trainer._reports[sync_trainer.NO_REPORT]]
    # The trainer keeps one traced loop per variant (plain, XLA); a short run uses the plain one.
    traced = trainer._traced.get(False) or next(iter(trainer._traced.values()))
    return lambda: traced(flat).numpy()


def hand_written_call(images, labels, steps_per_loop):
    model, optimizer = bench_runner.build_model(), keras.optimizers.SGD(0.05)

    @tf.function
    def train_steps(iterator, num_steps):
        loss = tf.zeros([])
        for _ in tf.range(num_steps):
            x, y = next(iterator)
            with tf.GradientTape() as tape:
                loss = bench_runner.loss_fn(y, model(x, training=True))
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    iterator = iter(bench_runner.dataset(images, labels, 64))
    count = tf.constant(steps_per_loop)
    # Called the way moxlite calls its loop, so that only the graphs differ.
    traced = compat.FlatCall(train_steps.get_concrete_function(iterator, count))
    flat = compat.FlatCall.flatten(iterator, count)
    return lambda: float(traced(flat))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps_per_loop", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=30)
    options = parser.parse_args()
    sys.argv[1:] = []   # moxlite reads MoXing's flags from the command line
    (images, labels), _ = mnist.split()
    images = images.reshape(-1, 784)
    n = options.steps_per_loop
    calls = {"moxlite": moxlite_call(images, labels, n), "hand-written": hand_written_call(images, labels, n)}
    for call in calls.values():
        for _ in range(5):
            call()
    repeats = max(1, 1000 // n)
    wall, cpu = {name: [] for name in calls}, {name: [] for name in calls}
    for round_index in range(options.rounds):
        order = list(calls) if round_index % 2 == 0 else list(reversed(calls))
        for name in order:
            started, started_cpu = time.perf_counter(), time.process_time()
            for _ in range(repeats):
                calls[name]()
            wall[name].append((time.perf_counter() - started) / (repeats * n) * 1e6)
            cpu[name].append((time.process_time() - started_cpu) / (repeats * n) * 1e6)
    print(f"N={n}, {options.rounds} rounds of {repeats} calls, median us per step (wall / CPU):")
    for name in calls:
        print(f"  {name:13s} {statistics.median(wall[name]):7.1f} / {statistics.median(cpu[name]):7.1f}")
    for label, times in (("wall", wall), ("CPU", cpu)):
        ratios = [hand / mine for mine, hand in zip(times["moxlite"], times["hand-written"])]
        print(f"moxlite speed / hand-written, {label}: median {statistics.median(ratios):.3f} "
              f"({min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
