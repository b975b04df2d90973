"""THOR against momentum and Adam on the bundled digits, through moxlite.run; and THOR's cost at scale.

    python tools/bench_thor.py                 # the reduced run (a shared machine)
    python tools/bench_thor.py --full          # the full run, for a quiet machine
    python tools/bench_thor.py --plan          # ResNet-50, BERT-base and BERT-large on paper, no training
    python tools/bench_thor.py --workload bert_tiny   # THOR, Lamb, AdamW on BERT-tiny (tools/bench_thor_bert.py)
    python tools/bench_thor.py --models mlp --optimizers momentum,thor,thor+pi \
        --thor-variant thor+pi=pi_damping:1 --thor-variant thor+trace=refresh:trace,trace_threshold:0.2
                                               # THOR past MindSpore: pi damping, trace refresh

Training benchmark. Two models on moxlite's 4,000 training / 1,000 test
digits, batch 64: a small CNN (conv5x5(8)-maxpool-conv5x5(16)-maxpool-dense(10))
and the MLP (784-256-10). Each optimizer is first swept over a few learning
rates (THOR: learning rate and damping together, always wrapping momentum 0.9)
on seed 0; the best setting (fewest steps to the target test accuracy, then
the higher final accuracy) is then run on the other seeds. Every run is one
``moxlite.run`` call whose model_fn closes over a Keras model; a ModelSpec
hook fires after every step, stamps the time, and every ``--eval-every``
steps measures test accuracy on all 1,000 test digits (time spent in the hook
is not counted).

THOR variants (``--thor-variant NAME=key:value,...``) add optimizers that are
THOR with other wrapper parameters (``pi_damping``, ``refresh``,
``trace_threshold``, ``interval_growth``, ``frequency``); each is swept over the
same (learning rate, damping) settings as THOR and reported beside it.
``--optimizers`` chooses which run (default: momentum, adam, thor and the variants).

Printed per model and optimizer (median over seeds, [min-max]): steps and
seconds to the target (95 % test for the CNN, 93 % for the MLP), final test
accuracy and the ratios to momentum. Then the step times, measured side by
side: a few rounds of short runs of every optimizer at its best setting, back
to back, the order rotated each round; per run the median plain step (THOR:
inverses reused) and the median refresh step (THOR: factors recomputed and
inverted); per round the ratios to momentum's step of that round; printed as
the median and [min-max] over rounds, so a change of load between rounds
cancels out. The first step of a run carries graph tracing: it is timed as the
run's median step of the same kind instead, in both the step times and the
seconds to target.

A plot (test accuracy against steps and against seconds, one line per
optimizer: the median over seeds) is written with matplotlib when it is
installed (``pip install -e ".[plot]"``); without it the script says so and
still prints the tables.
"""

import argparse
import math
import os
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sweeplib  # noqa: E402  (tools/, put on the path above)
from sweeplib import median_range, ratio, reach, rotated  # noqa: E402

TARGETS = {"cnn": 0.95, "mlp": 0.93}
BATCH = 64
FREQUENCY = 50
# THOR variants named on the command line: kind -> extra thor wrapper parameters (``--thor-variant``).
THOR_VARIANTS = {"thor": {}}

# optimizer -> settings swept on seed 0; THOR settings are (learning rate, damping), around momentum 0.9.
REDUCED = dict(
    steps={"cnn": 300, "mlp": 300}, seeds=3, eval_every=10, timing_rounds=4, timing_steps=110,
    sweeps={
        "momentum": [0.02, 0.05, 0.1],
        "adam": [1e-3, 3e-3],
        "thor": [(0.01, 0.03), (0.02, 0.1)],
    })
FULL = dict(
    steps={"cnn": 600, "mlp": 800}, seeds=5, eval_every=10, timing_rounds=10, timing_steps=210,
    sweeps={
        "momentum": [0.01, 0.02, 0.05, 0.1, 0.2],
        "adam": [3e-4, 1e-3, 3e-3, 1e-2],
        "thor": [(0.005, 0.03), (0.01, 0.03), (0.02, 0.03), (0.01, 0.1), (0.02, 0.1), (0.03, 0.1)],
    })


# ----------------------------------------------------------------- one run

def build_network(model_name, seed):
    import keras

    keras.utils.set_random_seed(seed)
    if model_name == "cnn":
        return keras.Sequential([
            keras.Input((28, 28, 1)),
            keras.layers.Conv2D(8, 5, activation="relu"), keras.layers.MaxPooling2D(2),
            keras.layers.Conv2D(16, 5, activation="relu"), keras.layers.MaxPooling2D(2),
            keras.layers.Flatten(), keras.layers.Dense(10)])
    return keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Flatten(),
                             keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)])


def optimizer_fn_for(kind, setting, steps):
    import moxlite as mox

    if kind == "momentum":
        return mox.get_optimizer_fn("momentum", learning_rate=setting, momentum=0.9)
    if kind == "adam":
        return mox.get_optimizer_fn("adam", learning_rate=setting)
    learning_rate, damping = setting
    inner = mox.get_optimizer_fn("momentum", learning_rate=learning_rate, momentum=0.9)
    options = dict({"frequency": FREQUENCY}, **THOR_VARIANTS[kind])
    return mox.get_optimizer_wrapper_fn("thor", inner, damping=damping, **options)


def is_thor(kind):
    return kind in THOR_VARIANTS


def frequency_of(kind):
    return THOR_VARIANTS.get(kind, {}).get("frequency", FREQUENCY)


class Recorder:
    """The ModelSpec hook: per-step times (its own time excluded) and test accuracy every few steps."""

    def __init__(self, network, test_images, test_labels, eval_every):
        self.network = network
        self.test_images = test_images
        self.test_labels = test_labels
        self.eval_every = eval_every
        self.step_seconds = {}
        self.step_cpu_seconds = {}   # the process's CPU time per step (all its threads): less sensitive to load
        self.curve = []  # (step, training seconds so far, test accuracy)
        self._left_hook = None

    def __call__(self, global_step, log_values):
        entered, entered_cpu = time.perf_counter(), time.process_time()
        step = int(global_step)
        if self._left_hook is not None and step not in self.step_seconds:
            self.step_seconds[step] = entered - self._left_hook[0]
            self.step_cpu_seconds[step] = entered_cpu - self._left_hook[1]
        if step % self.eval_every == 0 and (not self.curve or self.curve[-1][0] != step):
            self.curve.append((step, None, self.accuracy()))
        self._left_hook = (time.perf_counter(), time.process_time())

    def accuracy(self):
        import numpy as np

        logits = self.network(self.test_images, training=False)
        return float(np.mean(np.argmax(np.asarray(logits), axis=1) == self.test_labels))


def is_refresh(kind, step):
    """THOR refreshes on applied update 0, frequency, 2*frequency, ...: global steps 1, 1 + frequency, ..."""
    return is_thor(kind) and (step - 1) % frequency_of(kind) == 0


def train_once(model_name, kind, setting, seed, steps, eval_every, data, log_root):
    import keras
    import tensorflow as tf

    import moxlite as mox

    (train_images, train_labels), (test_images, test_labels) = data
    network = build_network(model_name, seed)
    recorder = Recorder(network, test_images, test_labels, eval_every)

    def input_fn(mode):
        dataset = tf.data.Dataset.from_tensor_slices((train_images, train_labels))
        return dataset.shuffle(len(train_labels), seed=seed).repeat()

    def model_fn(inputs, mode):
        images, labels = inputs
        logits = network(images, training=mode == mox.ModeKeys.TRAIN)
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))
        return mox.ModelSpec(loss=loss, log_info={"loss": loss}, hooks=[recorder])

    # A fresh directory per run: a log_dir holding a checkpoint would resume instead of training.
    log_dir = tempfile.mkdtemp(prefix=f"{model_name}_{kind}_{setting}_{seed}_".replace(" ", ""), dir=log_root)
    made = []

    def optimizer_fn():
        made.append(optimizer_fn_for(kind, setting, steps)())
        return made[-1]

    from moxlite.training.trainers.nonfinite import NonFiniteError

    try:
        mox.run(input_fn=input_fn, model_fn=model_fn, optimizer_fn=optimizer_fn,
                run_mode=mox.ModeKeys.TRAIN, batch_size=BATCH, log_dir=log_dir, max_number_of_steps=steps,
                log_every_n_steps=1, save_summary_steps=10 ** 9, save_model_steps=10 ** 9)
        diverged = None
    except NonFiniteError as error:   # a setting that diverges is a result of the sweep, not its end
        diverged = str(error).split(":")[0]
    result = finish(kind, recorder, steps)
    if diverged:   # ranked below every run that trained: never at the target, final accuracy 0
        result.update(final=0.0, diverged=diverged)
    result["inversions"] = layer_inversions(kind, made[-1], steps) if made else None
    return result


def layer_inversions(kind, optimizer, steps):
    """How many layer inversions THOR did in the run (refresh 'trace' counts them; 'fixed' inverts every
    preconditioned layer at every refresh)."""
    if not is_thor(kind):
        return None
    counts = optimizer.inversion_counts()
    if counts is not None:
        return sum(counts.values())
    return len(optimizer.preconditioned_layers()) * math.ceil(steps / frequency_of(kind))


def finish(kind, recorder, steps):
    """Step times with step 1 (graph tracing) replaced by the median of its kind; the curve in training seconds."""
    times = recorder.step_seconds
    plain = [t for s, t in times.items() if not is_refresh(kind, s)]
    refresh = [t for s, t in times.items() if is_refresh(kind, s)]
    like_first = refresh if is_refresh(kind, 1) and refresh else plain
    if like_first:   # empty when the run stopped at its first step
        times[1] = statistics.median(like_first)
    elapsed, curve = 0.0, []
    for step, _, accuracy in recorder.curve:
        elapsed = sum(times.get(s, 0.0) for s in range(1, step + 1))
        curve.append((step, elapsed, accuracy))
    cpu = recorder.step_cpu_seconds
    return dict(curve=curve, plain=plain, refresh=refresh, final=curve[-1][2] if curve else float("nan"),
                cpu_plain=[t for s, t in cpu.items() if s > 1 and not is_refresh(kind, s)],
                cpu_refresh=[t for s, t in cpu.items() if s > 1 and is_refresh(kind, s)])


def benchmark(config, models, log_root, print_fn=print):
    from moxlite.data import mnist

    (train_images, train_labels), (test_images, test_labels) = mnist.split(0.2, 0)
    data = ((train_images[..., None], train_labels), (test_images[..., None], test_labels))
    kinds = list(config.get("optimizers") or config["sweeps"])
    results = {}
    for model_name in models:
        steps, target = config["steps"][model_name], TARGETS[model_name]
        print_fn(f"\n## {model_name}: {steps} steps of batch {BATCH}, target {target:.0%} test accuracy")

        def train(kind, setting, seed):
            return train_once(model_name, kind, setting, seed, steps, config["eval_every"], data, log_root)

        def describe(kind, setting, run):
            reached = reach(run["curve"], target)
            return (f"   sweep {kind:<9} {str(setting):<14} steps to target: {reached[0] if reached else '-':>5}   "
                    f"final test {run['final']:.4f}" + (f" ({run['diverged']})" if run.get("diverged") else "")
                    + (f"   layer inversions {run['inversions']}" if run.get("inversions") is not None else ""))

        def rank(run):   # fewest steps to the target, then the higher final accuracy
            reached = reach(run["curve"], target)
            return (reached[0] if reached else 10 ** 9), -run["final"]

        best = sweeplib.sweep_then_seeds(kinds, lambda kind: config["sweeps"]["thor" if is_thor(kind) else kind],
                                         train, rank, config["seeds"], print_fn, describe)
        results[model_name] = best
        lines = report(model_name, best, target)
        if config["timing_rounds"]:
            rounds = timing_rounds(model_name, best, config["timing_rounds"], config["timing_steps"], data, log_root)
            lines += step_time_lines(rounds, config["timing_steps"]) + estimated_time_lines(best, rounds, target)
        for line in lines:
            print_fn(line)
    return results


def timing_rounds(model_name, best, rounds, steps, data, log_root, clock="wall"):
    """Short runs of every optimizer at its best setting, back to back, the order rotated each round.

    Returns one dict per round: kind -> (median plain step, median refresh step, 10th-percentile
    plain step) in seconds of ``clock`` ("wall", or "cpu": the process's CPU time);
    with clock "both", a pair of such lists (wall, cpu) from the same runs.
    Ratios are taken within a round, so a change of load between rounds cancels out.
    """
    kinds = list(best)
    measured = {"wall": [], "cpu": []}
    for number in range(rounds):
        this_round = {"wall": {}, "cpu": {}}
        for kind in rotated(kinds, number):
            run = train_once(model_name, kind, best[kind][0], 100 + number, steps, steps + 1, data, log_root)
            for name, prefix in (("wall", ""), ("cpu", "cpu_")):
                plain, refresh = run[prefix + "plain"], run[prefix + "refresh"]
                this_round[name][kind] = (statistics.median(plain), statistics.median(refresh) if refresh else None,
                                          tenth_percentile(plain))
        for name in measured:
            measured[name].append(this_round[name])
    return (measured["wall"], measured["cpu"]) if clock == "both" else measured[clock]


# The settings the timing-only mode uses (the reduced run's best: README, "When THOR pays off").
TIMED_SETTINGS = {"cnn": {"momentum": 0.05, "thor": (0.01, 0.03)}, "mlp": {"momentum": 0.1, "thor": (0.02, 0.1)}}


def timing_only(models, rounds, steps, log_root, print_fn=print):
    """Only the step times of momentum and THOR (no sweep, no seeds): the cheapest measure of the
    plain-step and refresh-step ratios, in wall and in CPU time, from the same paired rounds."""
    from moxlite.data import mnist

    (train_images, train_labels), (test_images, test_labels) = mnist.split(0.2, 0)
    data = ((train_images[..., None], train_labels), (test_images[..., None], test_labels))
    for model_name in models:
        best = {kind: (setting, []) for kind, setting in TIMED_SETTINGS[model_name].items()}
        wall, cpu = timing_rounds(model_name, best, rounds, steps, data, log_root, clock="both")
        print_fn(f"\n## {model_name}: settings {TIMED_SETTINGS[model_name]}, batch {BATCH}, frequency {FREQUENCY}")
        for name, measured in (("wall clock", wall), ("process CPU time", cpu)):
            print_fn(f"   {name}:")
            for line in step_time_lines(measured, steps):
                print_fn(line)


def report(model_name, best, target):
    lines = [f"   {'optimizer':<24}{'steps to ' + format(target, '.0%'):>22}{'seconds to ' + format(target, '.0%'):>26}"
             f"{'final test acc.':>28}   reached"]
    summary = {}
    for kind, (setting, runs) in best.items():
        reached = [reach(run["curve"], target) for run in runs]
        steps = [r[0] if r else None for r in reached]
        seconds = [r[1] if r else None for r in reached]
        finals = [run["final"] for run in runs]
        summary[kind] = (steps, seconds, finals)
        label = f"{kind} {setting}"
        inversions = [run.get("inversions") for run in runs]
        inverted = f"   layer inversions {median_range(inversions)}" if any(v is not None for v in inversions) else ""
        lines.append(f"   {label:<24}{median_range(steps):>22}{median_range(seconds, '{:.2f}'):>26}"
                     f"{median_range(finals, '{:.4f}'):>28}   {sum(r is not None for r in reached)}/{len(runs)}"
                     f"{inverted}")
    base_steps, base_seconds, base_finals = summary["momentum"]
    for kind in summary:
        if kind == "momentum":
            continue
        steps, seconds, finals = summary[kind]
        lines.append(f"   {kind} / momentum: steps {ratio(steps, base_steps)}, seconds {ratio(seconds, base_seconds)}, "
                     f"final accuracy {statistics.median(finals) - statistics.median(base_finals):+.4f}")
    return lines


def tenth_percentile(values):
    """The 10th percentile: on a loaded machine, nearer a step's own cost than the median."""
    ordered = sorted(values)
    return ordered[int(0.1 * (len(ordered) - 1))]


def step_time_lines(rounds, steps):
    """Each optimizer's plain (and THOR's refresh) step against momentum's step of the same round."""
    def ratios(kind, which):
        return [r[kind][which] / r["momentum"][0] for r in rounds if r[kind][which] is not None]

    momentum = [r["momentum"][0] * 1e3 for r in rounds]
    lines = [f"   step times: {len(rounds)} rounds of {steps}-step runs, optimizers back to back in rotated order; "
             f"ratios to momentum's step within each round, median [min-max]",
             f"      momentum step {median_range(momentum, '{:.2f}')} ms"]
    for kind in rounds[0]:
        if kind == "momentum":
            continue
        plain = [r[kind][0] * 1e3 for r in rounds]
        line = (f"      {kind} step {median_range(plain, '{:.2f}')} ms = "
                f"{median_range(ratios(kind, 0), '{:.2f}')}x momentum")
        refresh = [r[kind][1] * 1e3 for r in rounds if r[kind][1] is not None]
        if refresh:
            line = (f"      {kind} plain step {median_range(plain, '{:.2f}')} ms = "
                    f"{median_range(ratios(kind, 0), '{:.2f}')}x momentum; refresh step "
                    f"{median_range(refresh, '{:.1f}')} ms = {median_range(ratios(kind, 1), '{:.1f}')}x")
        lines.append(line)
    fast = [f"{kind} {median_range([r[kind][2] / r['momentum'][2] for r in rounds], '{:.2f}')}x"
            for kind in rounds[0] if kind != "momentum"]
    lines.append(f"      10th-percentile plain steps against momentum's (less sensitive to load): {'; '.join(fast)}")
    return lines


def estimated_time_lines(best, rounds, target):
    """Time to target rebuilt from the step counts and each round's paired step times (less load noise).

    THOR's steps to target include one refresh per ``FREQUENCY`` updates (the first included).
    """
    def median_steps(kind):
        steps = [r[0] if r else None for r in (reach(run["curve"], target) for run in best[kind][1])]
        median = sweeplib.censored_median(steps)
        return None if math.isinf(median) else median

    base = median_steps("momentum")
    lines = []
    for kind in best:
        steps = median_steps(kind)
        if kind == "momentum" or steps is None or base is None:
            continue
        refreshes = math.ceil(steps / frequency_of(kind)) if is_thor(kind) else 0
        ratios = []
        for r in rounds:
            refresh = r[kind][1] if r[kind][1] is not None else r[kind][0]
            ratios.append(((steps - refreshes) * r[kind][0] + refreshes * refresh) / (base * r["momentum"][0]))
        lines.append(f"   {kind} time to target rebuilt from its {steps:g} steps ({refreshes} refreshes) and the paired "
                     f"step times, against momentum's {base:g}: {median_range(ratios, '{:.2f}')}x")
    return lines


# ----------------------------------------------------------------- the plot

def plot(results, path, print_fn=print):
    try:
        import matplotlib
    except ImportError:
        print_fn(f"\nNo plot: matplotlib is not installed (pip install -e \".[plot]\"); {path} not written.")
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    figure, axes = plt.subplots(len(results), 2, figsize=(11, 4 * len(results)), squeeze=False)
    for row, (model_name, best) in enumerate(results.items()):
        for kind, (setting, runs) in best.items():
            steps = [point[0] for point in runs[0]["curve"]]
            length = min(len(run["curve"]) for run in runs)
            accuracy = np.median([[p[2] for p in run["curve"][:length]] for run in runs], axis=0)
            seconds = np.median([[p[1] for p in run["curve"][:length]] for run in runs], axis=0)
            label = f"{kind} {setting}"
            axes[row, 0].plot(steps[:length], accuracy, label=label)
            axes[row, 1].plot(seconds, accuracy, label=label)
        for column, unit in enumerate(("steps", "training seconds")):
            axis = axes[row, column]
            axis.axhline(TARGETS[model_name], color="grey", linestyle=":", linewidth=1)
            axis.set_ylim(0.8, 1.0)
            axis.set_xlabel(unit)
            axis.set_ylabel("test accuracy")
            axis.set_title(f"{model_name}: test accuracy vs {unit} (median of seeds)")
            axis.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    print_fn(f"\nPlot written to {path}")
    return True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", action="store_true", help="print the at-scale plan (ResNet-50, BERT-base, BERT-large) and exit")
    parser.add_argument("--full", action="store_true", help="the full benchmark (more seeds, steps and settings)")
    parser.add_argument("--models", default="cnn,mlp", help="comma-separated: cnn, mlp")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per optimizer (>= 3 for the goals)")
    parser.add_argument("--workload", default="digits", choices=("digits", "bert_tiny", "grammar"),
                        help="digits: the CNN and MLP against momentum and Adam; bert_tiny: masked-LM pre-training "
                             "on the bundled corpus against Lamb and AdamW (tools/bench_thor_bert.py); grammar: the "
                             "same on recipes/grammar_mlm_lamb.yaml's corpus and model (2x128, 3000 steps)")
    parser.add_argument("--quick", action="store_true", help="bert_tiny: a few steps, one seed (a check that it runs)")
    parser.add_argument("--plot", default=None, help="plot file (default tools/bench_thor.png, bert_tiny: "
                                                     "tools/figures/bench_thor_bert_tiny.png)")
    parser.add_argument("--results", default=None,
                        help="bert_tiny: the folder of run files, reused by later commands "
                             "(default <log-root>/bert_tiny_results)")
    parser.add_argument("--lamb-settings", default=None, help="bert_tiny: Lamb's sweep as learning rates")
    parser.add_argument("--adamw-settings", default=None, help="bert_tiny: AdamW's sweep as learning rates")
    parser.add_argument("--report-only", action="store_true",
                        help="bert_tiny: the tables and plot from the kept runs alone (a missing seed is left out)")
    parser.add_argument("--run-seeds", default=None,
                        help="bert_tiny: only these seeds (e.g. 1,2) of each optimizer's first setting; no sweep")
    parser.add_argument("--timed-seeds", default=None,
                        help="bert_tiny --timing-only: the seeds to time, e.g. 0,1 (default: all)")
    parser.add_argument("--log-root", default="runs/bench_thor", help="where the runs' log_dirs go")
    parser.add_argument("--timing-only", action="store_true",
                        help="only momentum's and THOR's step times (wall and CPU), at fixed settings; no sweep")
    parser.add_argument("--rounds", type=int, default=None, help="timing rounds (default: the run's)")
    parser.add_argument("--timing-steps", type=int, default=None, help="steps per timing run (default: the run's)")
    parser.add_argument("--optimizers", default=None,
                        help="comma-separated: momentum, adam, thor and --thor-variant names (default: all)")
    parser.add_argument("--thor-variant", action="append", default=[], metavar="NAME=key:value,...",
                        help="THOR with other wrapper parameters, e.g. thor+pi=pi_damping:1 (repeatable)")
    parser.add_argument("--thor-settings", default=None,
                        help="THOR's sweep as lr:damping pairs, e.g. 0.01:0.03,0.02:0.1 (default: the run's)")
    parser.add_argument("--momentum-settings", default=None,
                        help="momentum's sweep as learning rates, e.g. 0.05,0.1 (default: the run's)")
    parser.add_argument("--steps", type=int, default=None, help="training steps per run (default: the run's)")
    parser.add_argument("--target", choices=("lowest", "median"), default="lowest",
                        help="bert_tiny, grammar: the target is the best baseline's lowest final accuracy over "
                             "its seeds (default) or their median")
    parser.add_argument("--no-timing", action="store_true", help="skip the timing rounds (steps to target only)")
    parser.add_argument("--eval-every", type=int, default=None,
                        help="digits: test accuracy every this many steps, the resolution of steps to target "
                             "(default: the run's, 10)")
    parser.add_argument("--block-size", type=int, default=128, help="--plan: block size against full inverses")
    parser.add_argument("--bert-sequence", type=int, default=128, help="--plan: tokens per BERT sample")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if args.plan:
        import thor_plan

        print("\n".join(thor_plan.plan(bert_sequence=args.bert_sequence, block_size=args.block_size)))
        return 0
    import logging

    logging.getLogger("moxlite").setLevel(logging.WARNING)
    from moxlite.training import reporting

    reporting.get_logger().setLevel(logging.WARNING)
    if args.workload in ("bert_tiny", "grammar"):
        import bench_thor_bert

        figure = "bench_thor_bert_tiny.png" if args.workload == "bert_tiny" else "bench_thor_grammar.png"
        args.plot = args.plot or os.path.join(REPO, "tools", "figures", figure)
        os.makedirs(os.path.dirname(os.path.abspath(args.plot)), exist_ok=True)
        bench_thor_bert.main(args)
        return 0
    args.plot = args.plot or os.path.join(REPO, "tools", "bench_thor.png")
    config = dict(FULL if args.full else REDUCED)
    if args.seeds:
        config["seeds"] = args.seeds
    for text in args.thor_variant:
        name, options = sweeplib.parse_variant(text)
        THOR_VARIANTS[name] = options
    config["sweeps"] = dict(config["sweeps"])
    if args.thor_settings:
        config["sweeps"]["thor"] = [tuple(float(v) for v in pair.split(":")) for pair in args.thor_settings.split(",")]
    if args.momentum_settings:
        config["sweeps"]["momentum"] = [float(v) for v in args.momentum_settings.split(",")]
    config["optimizers"] = ([k.strip() for k in args.optimizers.split(",")] if args.optimizers
                            else list(config["sweeps"]) + [k for k in THOR_VARIANTS if k != "thor"])
    if "momentum" not in config["optimizers"]:
        config["optimizers"].insert(0, "momentum")   # the ratios are to momentum
    if args.steps:
        config["steps"] = {model: args.steps for model in config["steps"]}
    if args.eval_every:
        config["eval_every"] = args.eval_every
    if args.no_timing:
        config["timing_rounds"] = 0
    for key, value in (("timing_rounds", args.rounds), ("timing_steps", args.timing_steps)):
        if value:
            config[key] = value
    models = [m.strip() for m in args.models.split(",")]
    os.makedirs(args.log_root, exist_ok=True)
    if args.timing_only:
        timing_only(models, config["timing_rounds"], config["timing_steps"], args.log_root)
        return 0
    print(f"{'Full' if args.full else 'Reduced'} run: {config['seeds']} seeds, sweeps {config['sweeps']}, "
          f"THOR frequency {FREQUENCY}, steps {config['steps']}, test accuracy every {config['eval_every']} steps")
    started = time.time()
    results = benchmark(config, models, args.log_root)
    os.makedirs(os.path.dirname(os.path.abspath(args.plot)), exist_ok=True)
    plot(results, args.plot)
    print(f"\nTotal wall time {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
