"""THOR against Lamb and AdamW on BERT-tiny masked-LM pre-training over the bundled corpus, through moxlite.run.

    python tools/bench_thor.py --workload bert_tiny            # the reduced run (a shared machine)
    python tools/bench_thor.py --workload bert_tiny --full     # more steps, seeds and settings
    python tools/bench_thor.py --workload bert_tiny --quick    # a check that it runs (minutes), no figures

The workload: moxlite's built-in bert_tiny (keras-hub's BertBackbone, 2 layers, hidden 64, 2 heads,
dropout 0.1) on the ``text`` data set's bundled corpus (WordPiece, sequences of SEQ_LENGTH tokens,
15 % masked by the 80/10/10 rule), batch BATCH. Each optimizer is swept on seed 0 (THOR: learning
rate and damping together, over momentum 0.9, frequency FREQUENCY, weight decay 5e-4 with LayerNorm
and biases excluded, as MindSpore's BERT THOR; Lamb and AdamW: the learning rate, weight decay 0.01);
its best setting (the highest final held-out accuracy) is then run on the other seeds. Every
``--eval-every`` steps a ModelSpec hook measures the masked-LM accuracy (weighted, as model_fn's) on
the whole held-out split, masked once; its own time is not counted.

Printed: per optimizer, the median [min-max] over seeds of the steps and training seconds to the
target, the final held-out accuracy, and the ratios to Lamb and to AdamW. The target is the lowest
final held-out accuracy over the seeds of the best baseline (the one of Lamb and AdamW with the
higher median final accuracy): an accuracy every seed of the best baseline reaches. Step 1 carries
graph tracing and is timed as the run's median step of its kind (THOR: refresh or not). A plot
(held-out accuracy against steps and against seconds, medians over seeds) is written with
matplotlib when it is installed.
"""

import dataclasses
import statistics
import tempfile
import time

SEQ_LENGTH = 64
MAX_PREDICTIONS = 10
BATCH = 32
FREQUENCY = 100
BASELINES = ("lamb", "adamw")

# optimizer -> settings swept on seed 0; THOR settings are (learning rate, damping).
REDUCED = dict(steps=600, seeds=3, eval_every=50, sweeps={
    "thor": [(0.05, 0.05), (0.1, 0.05)],
    "lamb": [3e-3, 1e-2],
    "adamw": [1e-3, 3e-3],
})
FULL = dict(steps=2000, seeds=5, eval_every=100, sweeps={
    "thor": [(0.02, 0.05), (0.05, 0.05), (0.1, 0.05), (0.1, 0.1), (0.2, 0.1)],
    "lamb": [1e-3, 3e-3, 1e-2, 2e-2],
    "adamw": [3e-4, 1e-3, 3e-3, 1e-2],
})
QUICK = dict(steps=6, seeds=1, eval_every=3, sweeps={"thor": [(0.05, 0.05)], "lamb": [1e-2], "adamw": [1e-3]})


def optimizer_fn_for(kind, setting):
    import moxlite as mox

    if kind == "lamb":
        return mox.get_optimizer_fn("lamb", learning_rate=setting, weight_decay=0.01)
    if kind == "adamw":
        return mox.get_optimizer_fn("adamw", learning_rate=setting, weight_decay=0.01)
    learning_rate, damping = setting
    inner = mox.get_optimizer_fn("momentum", learning_rate=learning_rate, momentum=0.9)
    return mox.get_optimizer_wrapper_fn("thor", inner, damping=damping, frequency=FREQUENCY, weight_decay=5e-4,
                                        weight_decay_exclude=["layernorm", "layer_norm", "bias"])


def corpus(seed):
    """The bundled corpus as moxlite's ``text`` data set (input_fn, facts) and its held-out batches, masked once."""
    import numpy as np

    from moxlite.contract import ModeKeys
    from moxlite.data import text_datasets

    data = text_datasets.text(seq_length=SEQ_LENGTH, max_predictions=MAX_PREDICTIONS, seed=seed)
    held_out = [{key: np.asarray(value) for key, value in batch.items()}
                for batch in data.input_fn(ModeKeys.EVAL).batch(256)]
    return data, held_out


class Recorder:
    """The ModelSpec hook: per-step times (its own time excluded) and held-out masked-LM accuracy every few steps."""

    def __init__(self, network_of, held_out, eval_every):
        self.network_of = network_of
        self.held_out = held_out
        self.eval_every = eval_every
        self.step_seconds = {}
        self.curve = []   # (step, None, accuracy); seconds are filled in by finish()
        self._left_hook = None

    def __call__(self, global_step, log_values):
        entered = time.perf_counter()
        step = int(global_step)
        if self._left_hook is not None and step not in self.step_seconds:
            self.step_seconds[step] = entered - self._left_hook
        if step % self.eval_every == 0 and (not self.curve or self.curve[-1][0] != step):
            self.curve.append((step, None, self.accuracy()))
        self._left_hook = time.perf_counter()

    def accuracy(self):
        import tensorflow as tf

        from moxlite.models import bert

        network = self.network_of()
        right = total = 0.0
        for batch in self.held_out:
            encoded = network.backbone({"token_ids": batch["input_ids"], "segment_ids": batch["segment_ids"],
                                        "padding_mask": batch["input_mask"]}, training=False)
            logits = tf.cast(network.masked_lm_head(encoded["sequence_output"],
                                                    mask_positions=batch["masked_lm_positions"]), tf.float32)
            _, accuracy = bert.masked_lm_loss_and_accuracy(logits, batch["masked_lm_ids"], batch["masked_lm_weights"])
            weight = float(batch["masked_lm_weights"].sum())
            right += float(accuracy) * weight
            total += weight
        return right / total


def is_refresh(kind, step):
    """THOR refreshes on applied update 0, FREQUENCY, ...: global steps 1, 1 + FREQUENCY, ..."""
    return kind == "thor" and (step - 1) % FREQUENCY == 0


def train_once(kind, setting, seed, steps, eval_every, data, held_out, log_root):
    import keras

    import moxlite as mox
    from moxlite.models import bert

    keras.utils.set_random_seed(seed)
    inner = bert.bert_model_fn("tiny", vocabulary_size=data.text.vocab_size, max_sequence_length=SEQ_LENGTH)
    recorder = Recorder(inner.network, held_out, eval_every)

    def model_fn(inputs, mode):
        return dataclasses.replace(inner(inputs, mode), hooks=[recorder])

    # A fresh directory per run: a log_dir holding a checkpoint would resume instead of training.
    log_dir = tempfile.mkdtemp(prefix=f"bert_tiny_{kind}_{seed}_", dir=log_root)
    mox.run(input_fn=data.input_fn, model_fn=model_fn, optimizer_fn=optimizer_fn_for(kind, setting),
            run_mode=mox.ModeKeys.TRAIN, batch_size=BATCH, log_dir=log_dir, max_number_of_steps=steps,
            log_every_n_steps=max(steps, 1), save_summary_steps=10 ** 9, save_model_steps=10 ** 9)
    return finish(kind, recorder)


def finish(kind, recorder):
    """The curve in training seconds, step 1 (graph tracing) timed as the median step of its kind."""
    times = recorder.step_seconds
    plain = [t for s, t in times.items() if not is_refresh(kind, s)]
    refresh = [t for s, t in times.items() if is_refresh(kind, s)]
    same_kind = refresh if is_refresh(kind, 1) and refresh else plain
    if same_kind:
        times[1] = statistics.median(same_kind)
    curve = [(step, sum(times.get(s, 0.0) for s in range(1, step + 1)), accuracy)
             for step, _, accuracy in recorder.curve]
    return dict(curve=curve, final=curve[-1][2] if curve else float("nan"))


def reach(curve, target):
    """(steps, seconds) when held-out accuracy first reaches target, or None."""
    for step, seconds, accuracy in curve:
        if accuracy >= target:
            return step, seconds
    return None


def benchmark(config, log_root, print_fn=print):
    """{optimizer: (best setting, [one run per seed])}, after the sweep on seed 0."""
    data, held_out = corpus(seed=0)
    print_fn(f"\n## bert_tiny: {config['steps']} steps of batch {BATCH} x {SEQ_LENGTH} tokens, vocabulary "
             f"{data.text.vocab_size}, {sum(len(b['input_ids']) for b in held_out)} held-out sequences")
    best = {}
    for kind, settings in config["sweeps"].items():
        tried = []
        for setting in settings:
            run = train_once(kind, setting, 0, config["steps"], config["eval_every"], data, held_out, log_root)
            print_fn(f"   sweep {kind:<6} {str(setting):<14} final held-out accuracy {run['final']:.4f}")
            tried.append((-run["final"], str(setting), setting, run))
        tried.sort(key=lambda t: t[:2])
        best[kind] = (tried[0][2], [tried[0][3]])
    for seed in range(1, config["seeds"]):
        for kind in best:
            best[kind][1].append(train_once(kind, best[kind][0], seed, config["steps"], config["eval_every"], data,
                                            held_out, log_root))
    return best


def target_of(best):
    """(baseline, target): the baseline with the higher median final accuracy, and its lowest final accuracy."""
    baseline = max(BASELINES, key=lambda kind: statistics.median(run["final"] for run in best[kind][1]))
    return baseline, min(run["final"] for run in best[baseline][1])


def _median_range(values, form="{:.0f}"):
    values = [v for v in values if v is not None]
    if not values:
        return "not reached"
    return f"{form.format(statistics.median(values))} [{form.format(min(values))}-{form.format(max(values))}]"


def _ratio(values, base):
    values, base = [v for v in values if v is not None], [v for v in base if v is not None]
    if not values or not base:
        return "n/a (a side did not reach the target)"
    return f"{statistics.median(values) / statistics.median(base):.2f}x"


def report(best):
    baseline, target = target_of(best)
    lines = [f"   target: {target:.4f} held-out masked-LM accuracy (the lowest final accuracy of the best baseline, "
             f"{baseline})",
             f"   {'optimizer':<22}{'steps to target':>22}{'seconds to target':>26}{'final accuracy':>28}   reached"]
    summary = {}
    for kind, (setting, runs) in best.items():
        reached = [reach(run["curve"], target) for run in runs]
        steps = [r[0] if r else None for r in reached]
        seconds = [r[1] if r else None for r in reached]
        finals = [run["final"] for run in runs]
        summary[kind] = (steps, seconds, finals)
        lines.append(f"   {kind + ' ' + str(setting):<22}{_median_range(steps):>22}"
                     f"{_median_range(seconds, '{:.1f}'):>26}{_median_range(finals, '{:.4f}'):>28}   "
                     f"{sum(r is not None for r in reached)}/{len(runs)}")
        rounded = [None if s is None else round(s, 1) for s in seconds]
        lines.append(f"      every seed: steps {steps}, seconds {rounded}, "
                     f"final {[round(f, 4) for f in finals]}")
    for base in BASELINES:
        steps, seconds, finals = summary["thor"]
        base_steps, base_seconds, base_finals = summary[base]
        lines.append(f"   thor / {base}: steps {_ratio(steps, base_steps)}, seconds {_ratio(seconds, base_seconds)}, "
                     f"final accuracy {statistics.median(finals) - statistics.median(base_finals):+.4f}")
    return lines


def plot(best, path, print_fn=print):
    try:
        import matplotlib
    except ImportError:
        print_fn(f"\nNo plot: matplotlib is not installed (pip install -e \".[plot]\"); {path} not written.")
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    baseline, target = target_of(best)
    figure, axes = plt.subplots(1, 2, figsize=(11, 4), squeeze=False)
    for kind, (setting, runs) in best.items():
        length = min(len(run["curve"]) for run in runs)
        steps = [point[0] for point in runs[0]["curve"][:length]]
        accuracy = np.median([[p[2] for p in run["curve"][:length]] for run in runs], axis=0)
        seconds = np.median([[p[1] for p in run["curve"][:length]] for run in runs], axis=0)
        axes[0, 0].plot(steps, accuracy, label=f"{kind} {setting}")
        axes[0, 1].plot(seconds, accuracy, label=f"{kind} {setting}")
    for column, unit in enumerate(("steps", "training seconds")):
        axis = axes[0, column]
        axis.axhline(target, color="grey", linestyle=":", linewidth=1)
        axis.set_xlabel(unit)
        axis.set_ylabel("held-out masked-LM accuracy")
        axis.set_title(f"bert_tiny: accuracy vs {unit} (median of seeds; target from {baseline})")
        axis.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    print_fn(f"\nPlot written to {path}")
    return True


def main(args, print_fn=print):
    """The bert_tiny workload of tools/bench_thor.py (its --full, --quick, --seeds, --plot, --log-root)."""
    import os

    config = dict(QUICK if args.quick else FULL if args.full else REDUCED)
    if args.seeds:
        config["seeds"] = args.seeds
    os.makedirs(args.log_root, exist_ok=True)
    print_fn(f"{'Quick' if args.quick else 'Full' if args.full else 'Reduced'} run: {config['seeds']} seed(s), "
             f"sweeps {config['sweeps']}, THOR frequency {FREQUENCY}, {config['steps']} steps, held-out accuracy "
             f"every {config['eval_every']} steps")
    started = time.time()
    best = benchmark(config, args.log_root, print_fn)
    for line in report(best):
        print_fn(line)
    plot(best, args.plot, print_fn)
    print_fn(f"\nTotal wall time {time.time() - started:.0f} s")
    return best
