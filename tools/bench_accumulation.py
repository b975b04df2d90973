"""Peak memory and throughput of batch_gradients (N x B) against one batch of N*B.

    python tools/bench_accumulation.py --num_batches 4 --micro_batch_size 32 --steps 24

Runs three variants of the same CNN training on generated 64x64x3 images,
each in its own subprocess so that its peak resident memory (ru_maxrss of
that process) is its own:

- ``single_B``:    plain momentum, batch B           (the memory target)
- ``accumulate``:  batch_gradients(num_batches=N) over momentum, batch B
- ``single_NB``:   plain momentum, batch N*B          (the throughput target)

and a ``baseline`` process that builds the model and optimizer but does not
train, so that the training-time increase of each variant can be read off.
Throughput counts samples per second over the timed steps (after warm-up and
tracing). Everything runs on the CPU of this machine; on accelerators the
ratios will differ.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

VARIANTS = ("baseline", "single_B", "accumulate", "single_NB")


def _child(variant, num_batches, batch_size, steps):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import keras
    import numpy as np
    import tensorflow as tf

    from moxlite.optimizers import get_optimizer_fn, get_optimizer_wrapper_fn

    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((64, 64, 3)),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(4),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(10),
    ])
    optimizer_fn = get_optimizer_fn("momentum", 0.01, momentum=0.9)
    batch = batch_size
    if variant == "accumulate":
        optimizer_fn = get_optimizer_wrapper_fn("batch_gradients", optimizer_fn, num_batches=num_batches)
    elif variant == "single_NB":
        batch = batch_size * num_batches
    optimizer = optimizer_fn()
    optimizer.build(model.trainable_variables)

    @tf.function
    def step(images, labels):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, model(images),
                                                                               from_logits=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    rng = np.random.RandomState(0)
    images = tf.constant(rng.rand(batch, 64, 64, 3).astype(np.float32))
    labels = tf.constant(rng.randint(0, 10, batch).astype(np.int32))
    samples_per_sec = None
    if variant != "baseline":
        # Steps are counted in samples: the N*B variant runs steps / N steps.
        count = steps if variant != "single_NB" else max(1, steps // num_batches)
        warmup = num_batches if variant != "single_NB" else 1
        for _ in range(warmup):
            step(images, labels).numpy()
        start = time.perf_counter()
        for _ in range(count):
            loss = step(images, labels)
        loss.numpy()
        samples_per_sec = count * batch / (time.perf_counter() - start)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(json.dumps({"variant": variant, "peak_mib": peak_mib, "samples_per_sec": samples_per_sec}))


def _run(variant, args):
    output = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", variant, f"--num_batches={args.num_batches}",
         f"--micro_batch_size={args.batch_size}", f"--steps={args.steps}"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num_batches", type=int, default=4)
    parser.add_argument("--micro_batch_size", dest="batch_size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=24, help="micro-steps of batch B timed (a multiple of N)")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.num_batches, args.batch_size, args.steps)
        return
    results = {variant: _run(variant, args) for variant in VARIANTS}
    base = results["baseline"]["peak_mib"]
    n, b = args.num_batches, args.batch_size
    print(f"CNN on 64x64x3, momentum; N={n}, B={b}; peak RSS per process, baseline (no training) {base:.0f} MiB")
    print(f"{'variant':<34}{'peak MiB':>10}{'over baseline':>15}{'samples/s':>11}")
    labels = {"single_B": f"one batch of B={b}", "accumulate": f"batch_gradients {n} x {b}",
              "single_NB": f"one batch of N*B={n * b}"}
    for variant, label in labels.items():
        r = results[variant]
        print(f"{label:<34}{r['peak_mib']:>10.0f}{r['peak_mib'] - base:>15.0f}{r['samples_per_sec']:>11.1f}")
    acc, single_b, single_nb = results["accumulate"], results["single_B"], results["single_NB"]
    print(f"throughput  accumulate / single N*B: {acc['samples_per_sec'] / single_nb['samples_per_sec']:.3f}")
    print(f"memory over baseline  accumulate / single B:   "
          f"{(acc['peak_mib'] - base) / max(single_b['peak_mib'] - base, 1e-9):.3f}")
    print(f"memory over baseline  accumulate / single N*B: "
          f"{(acc['peak_mib'] - base) / max(single_nb['peak_mib'] - base, 1e-9):.3f}")


if __name__ == "__main__":
    main()
