"""What a step of each grammar-workload stack costs, measured side by side, and the CPU seconds to a
target rebuilt from it.

    python tools/time_thor_stacks.py --rounds 3                      # alone on the machine
    python tools/time_thor_stacks.py --rounds 3 --steps-to-target adamw=2400 --steps-to-target KIND=STEPS ...
    python tools/time_thor_stacks.py --quick                          # a check that it runs

The benchmark's runs (``tools/bench_thor.py --workload grammar``) keep the CPU seconds of every
100 steps, but runs made at different times share the machine with different loads, so their CPU
seconds are not comparable. This tool measures the cost of a step of each contender in one
sitting: each round runs every contender for ``--steps`` steps through ``moxlite.run`` (one step
per host call and a log line each, TensorFlow's kernels, no XLA: what the benchmark's runs kept), back to back, the
order rotated round by round. After the first ``--skip`` steps (tracing and the first refresh)
the mean wall and CPU seconds per step are taken over whole refresh cycles (``--steps`` minus
``--skip`` a multiple of THOR's 10), so a refresh step counts as often as in a full run. The
ratios to the first contender are taken within each round and printed as median [min-max].

Contenders are the benchmark's kinds: ``adamw``, ``lamb`` and ``thor+...`` variants given as
``--variant NAME=key:value,...`` with their ``--setting NAME=lr:damping``, e.g. THOR over AdamW
with K-FAC statistics and grafting. With ``--steps-to-target KIND=STEPS`` (each stack's median
steps to the target, read from the benchmark's report), the CPU seconds to the target are
rebuilt as steps x the measured mean CPU seconds per step, and their ratio to the first contender.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile

import sweeplib

DEFAULT_CONTENDERS = ("adamw", "thor+adamw", "thor+adamw+kfac+graft")
DEFAULT_VARIANTS = ("thor+adamw=inner:adamw",
                    "thor+adamw+kfac+graft=inner:adamw,statistics:kfac,damping_end:1,graft:true")
DEFAULT_SETTINGS = ("adamw=0.001", "thor+adamw=0.001:0.05", "thor+adamw+kfac+graft=0.001:0.05")


def mean_step_cost(seconds, skip):
    """The mean of ``seconds`` ({global step: seconds}) over the steps after ``skip``."""
    kept = [value for step, value in seconds.items() if step > skip]
    return sum(kept) / len(kept)


def round_ratios(rounds, kind, base, clock):
    """Per round, ``kind``'s mean step over ``base``'s, on ``clock`` ('wall' or 'cpu')."""
    return [measured[kind][clock] / measured[base][clock] for measured in rounds]


def rebuilt_seconds(steps, rounds, kind):
    """CPU seconds to the target: ``steps`` x ``kind``'s mean CPU step, the median over the rounds."""
    return steps * statistics.median(measured[kind]["cpu"] for measured in rounds)


def train(bench, corpus, kind, setting, steps, log_root):
    """One run of ``steps`` steps of ``kind``; its StepClock."""
    import dataclasses

    import keras

    import moxlite as mox
    from moxlite.models import bert
    from profile_thor_step import StepClock

    keras.utils.set_random_seed(0)
    model = dict(dict(max_sequence_length=bench.SEQ_LENGTH), **bench.WORKLOAD["model"])
    inner = bert.bert_model_fn("tiny", vocabulary_size=corpus.vocab_size, **model)
    clock = StepClock()

    def model_fn(inputs, mode):
        return dataclasses.replace(inner(inputs, mode), hooks=[clock])

    # The schedules of the benchmark's whole run, so the rates are the ones its steps take.
    optimizer_fn = bench.optimizer_fn_for(kind, setting, bench.grammar_workload()["steps"])
    log_dir = tempfile.mkdtemp(prefix=f"time_{kind}_", dir=log_root)
    try:
        mox.run(input_fn=corpus.input_fn_for(0), model_fn=model_fn, optimizer_fn=optimizer_fn,
                run_mode=mox.ModeKeys.TRAIN, batch_size=bench.BATCH, log_dir=log_dir, max_number_of_steps=steps,
                log_every_n_steps=1, steps_per_loop=1, jit_compile=False, save_summary_steps=10 ** 9,
                save_model_steps=10 ** 9)
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)
    return clock


def _pairs(texts, convert):
    out = {}
    for text in texts:
        name, _, value = text.partition("=")
        out[name] = convert(value)
    return out


def _setting(text):
    values = tuple(float(v) for v in text.split(":"))
    return values[0] if len(values) == 1 else values


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60, help="steps per timed run")
    parser.add_argument("--skip", type=int, default=10, help="first steps dropped (tracing, the first refresh)")
    parser.add_argument("--contenders", default=",".join(DEFAULT_CONTENDERS),
                        help="benchmark kinds, the first the base of the ratios")
    parser.add_argument("--variant", action="append", default=list(DEFAULT_VARIANTS), metavar="NAME=key:value,...")
    parser.add_argument("--setting", action="append", default=list(DEFAULT_SETTINGS), metavar="KIND=lr[:damping]")
    parser.add_argument("--steps-to-target", action="append", default=[], metavar="KIND=STEPS")
    parser.add_argument("--quick", action="store_true", help="1 round of 14 steps: a check that it runs, no figures")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.steps, args.skip = 1, 14, 4
    import bench_thor_bert as bench

    bench.configure("grammar")
    if (args.steps - args.skip) % bench.FREQUENCY:
        parser.error(f"--steps minus --skip must be a multiple of THOR's frequency, {bench.FREQUENCY}")
    for text in args.variant:
        name, options = sweeplib.parse_variant(text)
        bench.THOR_VARIANTS[name] = options
    settings = _pairs(args.setting, _setting)
    contenders = args.contenders.split(",")
    missing = [kind for kind in contenders if kind not in settings]
    if missing:
        parser.error(f"no --setting for {missing}")
    log_root = tempfile.mkdtemp(prefix="time_thor_stacks_")
    try:
        corpus = bench.Corpus()
        rounds = []
        for number in range(args.rounds):
            measured = {}
            for kind in sweeplib.rotated(contenders, number):
                clock = train(bench, corpus, kind, settings[kind], args.steps, log_root)
                measured[kind] = {"wall": mean_step_cost(clock.wall, args.skip),
                                  "cpu": mean_step_cost(clock.cpu, args.skip)}
            rounds.append(measured)
            print(f"   round {number + 1}: " + "; ".join(
                f"{kind} {measured[kind]['wall'] * 1e3:.1f} ms wall, {measured[kind]['cpu'] * 1e3:.1f} ms CPU"
                for kind in contenders), flush=True)
    finally:
        shutil.rmtree(log_root, ignore_errors=True)
    base = contenders[0]
    print(f"   {args.rounds} rounds of {args.steps}-step runs (first {args.skip} dropped, then whole refresh cycles); "
          f"mean step, median [min-max] over rounds; ratios to {base} within each round")
    for kind in contenders:
        wall = [m[kind]["wall"] * 1e3 for m in rounds]
        cpu = [m[kind]["cpu"] * 1e3 for m in rounds]
        print(f"   {kind:<24} wall {sweeplib.median_range(wall, '{:.1f}')} ms "
              f"= {sweeplib.median_range(round_ratios(rounds, kind, base, 'wall'), '{:.2f}')}x; "
              f"CPU {sweeplib.median_range(cpu, '{:.1f}')} ms "
              f"= {sweeplib.median_range(round_ratios(rounds, kind, base, 'cpu'), '{:.2f}')}x")
    to_target = _pairs(args.steps_to_target, int)
    if to_target:
        print("   CPU seconds to the target, rebuilt (steps x mean CPU step):")
        for kind, steps in to_target.items():
            seconds = rebuilt_seconds(steps, rounds, kind)
            line = f"   {kind:<24} {steps} steps x {statistics.median(m[kind]['cpu'] for m in rounds) * 1e3:.1f} ms = {seconds:.1f} s"
            if base in to_target and kind != base:
                line += f" = {seconds / rebuilt_seconds(to_target[base], rounds, base):.2f}x {base}"
            print(line)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
