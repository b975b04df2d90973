"""Where a THOR step's time goes on the grammar masked-LM workload, against a Lamb step.

    python tools/profile_thor_step.py                 # 5 rounds of 60 steps, then a profile
    python tools/profile_thor_step.py --quick         # a check that it runs, no figures

The workload is tools/bench_thor_bert.py's "grammar" one (recipes/grammar_mlm_lamb.yaml's corpus,
model, batch 32): Lamb at the recipe's learning rate, and THOR over momentum at MindSpore's BERT
settings scaled to the run (the benchmark's ``thor`` kind: refresh every 10 updates), each through
``moxlite.run`` with one step per host call (``steps_per_loop=1``, the same for both), a ModelSpec
hook stamping every step's wall and CPU time.

Step times: each round runs every contender for ``--steps`` steps, back to back, the order
rotated round by round; the first ``--skip`` steps (tracing) are dropped. A THOR step is a refresh
step when its update rebuilds the factors (global steps 1, 11, 21, ...), else a plain
(preconditioned) step. The ratios are taken within a round (so a change of load cancels out) and
printed as median [min-max] over the rounds. Contenders: Lamb and THOR with ``jit_compile`` off
and on, so each is compared like with like. With XLA on one device, Lamb's whole train step is
compiled; THOR's plain updates are too, and its refresh updates compile only forward and backward
(moxlite's two programs for a THOR stack, ``jit_choice.placement``). ``thor+whole`` is THOR with the
whole step as one program, a refresh's branch included, against Lamb with XLA: what moxlite's two
programs are measured against.

The profile: one more THOR and Lamb run each, uncompiled, with TensorFlow's profiler on over
``--profile-steps`` steps after the skipped ones. Every executed op's time is summed by the name
scope THOR's code builds it in (``moxlite.optimizers.thor.preconditioner``): ``thor_statistics``
(the factor sums of a refresh and their all-reduce), ``thor_refresh`` (the factors' inverses),
``thor_precondition`` (A^-1 . grad . G^-1 per layer, and weight decay), and the rest (forward,
backward, the inner optimizer, the loop). Per step kind, the op time per step is printed with
each part's share; op time is not wall time (the loop's Python and waits are not in it), so the
shares are of op time.

Run it alone on the machine (``flock /tmp/bench.lock``): the step times are wall and CPU clocks.
"""

import argparse
import contextlib
import glob
import os
import shutil
import statistics
import sys
import tempfile
import time

import sweeplib

SCOPES = ("thor_statistics", "thor_refresh", "thor_precondition")
CONTENDERS = ("lamb", "thor", "lamb+xla", "thor+xla", "thor+whole")


def _bench():
    import bench_thor_bert

    bench_thor_bert.configure("grammar")
    return bench_thor_bert


def contender_setting(bench, kind):
    """(optimizer kind of bench_thor_bert, its setting): the recipe's Lamb rate, MindSpore's THOR settings."""
    if kind == "lamb":
        return "lamb", bench.grammar_workload()["lamb_lr"]
    return "thor", (bench.MINDSPORE_LR, bench.MINDSPORE_DAMPING)


class StepClock:
    """The ModelSpec hook, called after every step: that step's wall and CPU seconds (its own time
    excluded); optionally TensorFlow's profiler on from step ``profile[0]`` to ``profile[1]``."""

    def __init__(self, profile=None, profile_dir=None):
        self.wall, self.cpu = {}, {}
        self._left = None
        self._profile, self._profile_dir = profile, profile_dir

    def __call__(self, global_step, log_values):
        entered = (time.perf_counter(), time.process_time())
        step = int(global_step)
        if self._left is not None:
            self.wall[step] = entered[0] - self._left[0]
            self.cpu[step] = entered[1] - self._left[1]
        if self._profile is not None:
            import tensorflow as tf

            if step == self._profile[0]:
                tf.profiler.experimental.start(self._profile_dir)
            elif step == self._profile[1]:
                tf.profiler.experimental.stop()
        self._left = (time.perf_counter(), time.process_time())


def train(bench, corpus, kind, steps, log_root, jit_compile, profile=None, profile_dir=None, whole_step=False):
    """One run of ``steps`` steps; returns its StepClock. ``whole_step``: XLA compiles THOR's whole
    step, its refresh included, as it does for any other stack on one device."""
    import dataclasses

    import keras

    import moxlite as mox
    from benchlib import whole_step_placement
    from moxlite.models import bert

    name, setting = contender_setting(bench, kind)
    keras.utils.set_random_seed(0)
    model = dict(dict(max_sequence_length=bench.SEQ_LENGTH), **bench.WORKLOAD["model"])
    inner = bert.bert_model_fn("tiny", vocabulary_size=corpus.vocab_size, **model)
    clock = StepClock(profile, profile_dir)

    def model_fn(inputs, mode):
        return dataclasses.replace(inner(inputs, mode), hooks=[clock])

    # The schedules of the benchmark's whole run, so the rates are the ones its steps take.
    optimizer_fn = bench.optimizer_fn_for(name, setting, bench.grammar_workload()["steps"])
    log_dir = tempfile.mkdtemp(prefix=f"profile_{kind}_", dir=log_root)
    whole = whole_step_placement() if whole_step else contextlib.nullcontext()
    try:
        with whole:
            mox.run(input_fn=corpus.input_fn_for(0), model_fn=model_fn, optimizer_fn=optimizer_fn,
                    run_mode=mox.ModeKeys.TRAIN, batch_size=bench.BATCH, log_dir=log_dir,
                    max_number_of_steps=steps, log_every_n_steps=1, steps_per_loop=1, jit_compile=jit_compile,
                    save_summary_steps=10 ** 9, save_model_steps=10 ** 9)
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)
    return clock


def is_refresh(bench, global_step):
    """Global step n applies update n - 1; THOR refreshes on updates 0, FREQUENCY, 2 FREQUENCY, ..."""
    return (global_step - 1) % bench.FREQUENCY == 0


def step_medians(bench, kind, clock, skip):
    """{(clock name, step kind): median seconds} of the steps after ``skip``."""
    out = {}
    for name, seconds in (("wall", clock.wall), ("cpu", clock.cpu)):
        kept = {step: value for step, value in seconds.items() if step > skip}
        plain = [value for step, value in kept.items() if not (kind.startswith("thor") and is_refresh(bench, step))]
        refresh = [value for step, value in kept.items() if kind.startswith("thor") and is_refresh(bench, step)]
        out[(name, "plain")] = statistics.median(plain)
        if refresh:
            out[(name, "refresh")] = statistics.median(refresh)
    return out


def timing_lines(rounds, steps, skip):
    lines = [f"   {len(rounds)} rounds of {steps}-step runs (first {skip} steps dropped), contenders back to back in "
             f"rotated order; ratios within each round, median [min-max] over the rounds"]
    for clock_name in ("wall", "cpu"):
        lines.append(f"   {'wall clock' if clock_name == 'wall' else 'process CPU time'}:")
        for compiled in ("", "+xla", "+whole"):
            lamb, thor = ("lamb" + compiled if compiled != "+whole" else "lamb+xla"), "thor" + compiled
            if lamb not in rounds[0] or thor not in rounds[0]:
                continue
            lamb_ms = [r[lamb][(clock_name, "plain")] * 1e3 for r in rounds]
            plain_ms = [r[thor][(clock_name, "plain")] * 1e3 for r in rounds]
            refresh_ms = [r[thor][(clock_name, "refresh")] * 1e3 for r in rounds if (clock_name, "refresh") in r[thor]]
            plain_ratio = [p / b for p, b in zip(plain_ms, lamb_ms)]
            refresh_ratio = [p / b for p, b in zip(refresh_ms, lamb_ms)]
            label = {"": "no XLA", "+xla": "XLA", "+whole": "XLA, THOR's whole step"}[compiled]
            lines.append(f"      {label:<7} Lamb step {sweeplib.median_range(lamb_ms, '{:.1f}')} ms; THOR plain step "
                         f"{sweeplib.median_range(plain_ms, '{:.1f}')} ms = "
                         f"{sweeplib.median_range(plain_ratio, '{:.2f}')}x Lamb; refresh step "
                         f"{sweeplib.median_range(refresh_ms, '{:.1f}')} ms = "
                         f"{sweeplib.median_range(refresh_ratio, '{:.2f}')}x")
    return lines


# Ops that run other functions (a branch, a loop body, a called function): their events span
# the ops inside, which have events of their own, so they are left out of the sums.
CALLERS = {"If", "StatelessIf", "While", "StatelessWhile", "Case", "StatelessCase", "PartitionedCall",
           "StatefulPartitionedCall"}


def op_seconds(profile_dir):
    """[(op name, seconds)] of every executed op TensorFlow's profiler wrote under ``profile_dir``
    (events named "name:Type" on the executor's threads; function-calling ops left out)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    events = []
    for path in glob.glob(os.path.join(profile_dir, "**", "*.xplane.pb"), recursive=True):
        space = xplane_pb2.XSpace()
        with open(path, "rb") as file:
            space.ParseFromString(file.read())
        for plane in space.planes:
            metadata = plane.event_metadata
            for line in plane.lines:
                if not line.name.startswith("tf_"):
                    continue
                for event in line.events:
                    name = metadata[event.metadata_id].name
                    if "::" in name or ":" not in name or name.rsplit(":", 1)[1] in CALLERS:
                        continue
                    events.append((name, event.duration_ps * 1e-12))
    return events


def scope_of(op_name):
    for scope in SCOPES:
        if f"{scope}/" in op_name:
            return scope
    return "rest"


def profile_lines(bench, corpus, log_root, skip, profile_steps):
    """THOR's and Lamb's op time per step, by scope (see the module docstring)."""
    first, last = skip, skip + profile_steps
    refreshes = sum(is_refresh(bench, step) for step in range(first + 1, last + 1))
    lines = [f"   profile: global steps {first + 1}-{last} ({refreshes} refresh steps), no XLA, op time summed "
             f"by name scope"]
    per_step = {}
    for kind in ("lamb", "thor"):
        profile_dir = tempfile.mkdtemp(prefix=f"profile_{kind}_trace_", dir=log_root)
        try:
            clock = train(bench, corpus, kind, last + 1, log_root, False, (first, last), profile_dir)
            events = op_seconds(profile_dir)
        finally:
            shutil.rmtree(profile_dir, ignore_errors=True)
        wall = sum(value for step, value in clock.wall.items() if first < step <= last) / profile_steps
        totals = dict.fromkeys(SCOPES + ("rest",), 0.0)
        for name, seconds in events:
            totals[scope_of(name)] += seconds
        op_total = sum(totals.values())
        per_step[kind] = op_total / profile_steps
        lines.append(f"      {kind}: {len(events)} op events; {per_step[kind] * 1e3:.1f} ms of op time per step, "
                     f"{wall * 1e3:.1f} ms wall per step over the same steps")
        if kind != "thor":
            continue
        for scope in SCOPES + ("rest",):
            share = totals[scope] / op_total if op_total else 0.0
            lines.append(f"         {scope:<18} {share:6.1%} of THOR's op time")
        plain = (totals["rest"] + totals["thor_precondition"]) / profile_steps
        refresh_extra = (totals["thor_statistics"] + totals["thor_refresh"]) / max(refreshes, 1)
        lines.append(f"         a plain step: {plain * 1e3:.2f} ms of op time, {totals['thor_precondition'] / profile_steps * 1e3:.2f}"
                     f" ms of it preconditioning; a refresh step adds {refresh_extra * 1e3:.2f} ms"
                     f" ({refresh_extra / plain if plain else 0:.1f}x a plain step)")
        lines.append(f"         THOR's plain step against Lamb's step, op time: {plain / per_step['lamb']:.2f}x")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=60, help="steps per timed run")
    parser.add_argument("--skip", type=int, default=10, help="first steps dropped (tracing, the first refresh)")
    parser.add_argument("--profile-steps", type=int, default=30)
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--quick", action="store_true", help="1 round of 14 steps, a 10-step profile")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.steps, args.skip, args.profile_steps = 1, 14, 2, 10
    contenders = args.contenders.split(",")
    unknown = sorted(set(contenders) - set(CONTENDERS))
    if unknown:
        parser.error(f"--contenders: {unknown} unknown; choose from {', '.join(CONTENDERS)}")
    if args.skip >= args.steps:
        parser.error(f"--skip {args.skip} must be below --steps {args.steps}")
    bench = _bench()
    log_root = tempfile.mkdtemp(prefix="profile_thor_")
    try:
        corpus = bench.Corpus()
        print(f"## grammar: batch {bench.BATCH} x {bench.SEQ_LENGTH} tokens, vocabulary {corpus.vocab_size}, "
              f"THOR frequency {bench.FREQUENCY}, TensorFlow threads: intra-op "
              f"{os.environ.get('TF_NUM_INTRAOP_THREADS', 'default')}")
        rounds = []
        for number in range(args.rounds):
            measured = {}
            for kind in sweeplib.rotated(contenders, number):
                clock = train(bench, corpus, kind.split("+")[0], args.steps, log_root, kind.endswith(("+xla", "+whole")),
                              whole_step=kind.endswith("+whole"))
                measured[kind] = step_medians(bench, kind, clock, args.skip)
            rounds.append(measured)
            print(f"   round {number + 1}: " + "; ".join(
                f"{kind} {measured[kind][('wall', 'plain')] * 1e3:.1f} ms" for kind in contenders), flush=True)
        for line in timing_lines(rounds, args.steps, args.skip):
            print(line)
        if not args.no_profile:
            for line in profile_lines(bench, corpus, log_root, args.skip, args.profile_steps):
                print(line)
    finally:
        shutil.rmtree(log_root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
