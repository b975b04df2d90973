"""Per amp level: training samples/s and peak memory of ViT-Ti or Swin-T on synthetic images.

    TF_CPP_MIN_LOG_LEVEL=3 python tools/bench_precision.py [--model vit|swin] [--rounds 1]

Each (level, round) trains in its own process through ``moxlite.run`` (so one
level's memory cannot leak into another's figure), on the same synthetic images,
with the same seed and steps; the levels' order is reversed on every other round.
Printed per level: samples/s over the timed steps (after the warm-up steps, which
include tracing), the process's peak resident memory, and "growth", the peak minus
the memory before the first step (activations, gradients, optimizer slots and the
traced graph), each as median [min, max] over rounds and as a ratio to O0.

On this CPU-only machine float16 is emulated and slower than float32: the figures
are what was measured here, not GPU figures, which this tool does not claim.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

LEVELS = (("O0", "float16"), ("O1", "float16"), ("O2", "float16"), ("O3", "float16"), ("O1", "bfloat16"))
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _rss_kib():
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def child(options):
    """Train one level; print a JSON line of the measurements."""
    import keras
    import numpy as np
    import tensorflow as tf

    import moxlite as mox
    from moxlite.models import build_model_fn

    keras.utils.set_random_seed(0)
    size, batch = options.image_size, options.batch_size
    rng = np.random.default_rng(0)
    images = rng.random((batch * 4, size, size, 3), dtype=np.float32)
    labels = rng.integers(0, 100, batch * 4).astype(np.int32)

    def input_fn(mode):
        return tf.data.Dataset.from_tensor_slices((images, labels)).repeat()

    if options.model == "vit":
        model_fn = build_model_fn("vit_tiny", 100, patch_size=options.patch_size, drop_path=0.0)
    else:
        model_fn = build_model_fn("swin_tiny", 100, patch_size=options.patch_size,
                                  window_size=options.window_size, drop_path=0.0)
    mox.set_flag("amp_level", options.level)
    mox.set_flag("compute_dtype", options.compute_dtype)
    marks = {}

    def hook(step, values):
        marks[step] = time.perf_counter()

    def timed_model_fn(inputs, mode):
        spec = model_fn(inputs, mode)
        spec.hooks = [hook]
        if "before_first_step" not in marks:
            marks["before_first_step"] = _rss_kib()
        return spec

    total = options.warmup + options.steps
    with tempfile.TemporaryDirectory() as log_dir:
        mox.run(input_fn=input_fn, model_fn=timed_model_fn,
                optimizer_fn=mox.get_optimizer_fn("adamw", learning_rate=1e-4),
                run_mode=mox.ModeKeys.TRAIN, batch_size=batch, log_dir=log_dir,
                max_number_of_steps=total, log_every_n_steps=options.warmup, save_model_steps=10 ** 9,
                save_summary_steps=10 ** 9)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    seconds = marks[total] - marks[options.warmup]
    print(json.dumps({"samples_per_sec": options.steps * batch / seconds, "peak_mib": peak / 1024,
                      "growth_mib": (peak - marks["before_first_step"]) / 1024}))


def _spread(values):
    return f"{statistics.median(values):9.2f} [{min(values):.2f}, {max(values):.2f}]"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("vit", "swin"), default="vit")
    parser.add_argument("--image_size", type=int, default=64)
    parser.add_argument("--patch_size", type=int, default=8)
    parser.add_argument("--window_size", type=int, default=4)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--level", default="O0", help=argparse.SUPPRESS)
    parser.add_argument("--compute_dtype", default="float16", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        child(options)
        return
    results = {level: [] for level in LEVELS}
    for round_index in range(options.rounds):
        order = LEVELS if round_index % 2 == 0 else tuple(reversed(LEVELS))
        for level, compute in order:
            command = [sys.executable, os.path.abspath(__file__), "--child", "--level", level,
                       "--compute_dtype", compute] + [f"--{key}={getattr(options, key)}" for key in
                                                      ("model", "image_size", "patch_size", "window_size",
                                                       "batch_size", "warmup", "steps")]
            done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=os.environ.copy())
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            if done.returncode or not lines:
                sys.exit(f"bench_precision: {level}/{compute} failed:\n{done.stderr[-2000:]}")
            results[(level, compute)].append(json.loads(lines[-1]))
            print(f"round {round_index + 1}: {level} {compute}: {lines[-1]}", flush=True)
    base = results[("O0", "float16")]
    print(f"\n{options.model}, {options.image_size}x{options.image_size} synthetic images, batch "
          f"{options.batch_size}, {options.steps} timed steps after {options.warmup}, {options.rounds} round(s); "
          f"CPU only: float16 here is not a GPU figure")
    print(f"{'level':14} {'samples/s (median [min, max])':34} {'x O0':>6} {'peak MiB':>28} {'x O0':>6} "
          f"{'growth MiB':>28} {'x O0':>6}")
    for (level, compute), runs in results.items():
        label = level if level == "O0" else f"{level} {compute}"
        row = [label.ljust(14)]
        for key in ("samples_per_sec", "peak_mib", "growth_mib"):
            values = [run[key] for run in runs]
            ratio = statistics.median(values) / statistics.median(r[key] for r in base)
            row.append(f"{_spread(values):>34} {ratio:6.2f}")
        print(" ".join(row))


if __name__ == "__main__":
    main()
