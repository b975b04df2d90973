"""THOR against Lamb and AdamW on BERT-tiny masked-LM pre-training over the bundled corpus, through moxlite.run.

    python tools/bench_thor.py --workload bert_tiny --no-timing      # sweep and seeds: steps to target
    flock /tmp/bench.lock python tools/bench_thor.py --workload bert_tiny --timing-only
                                                 # the best settings again, timed: wall seconds to target
    python tools/bench_thor.py --workload bert_tiny --quick          # a check that it runs, no figures

The workload is the recipes' (recipes/bert_tiny_mlm_thor.yaml and its Lamb baseline): moxlite's
bert_tiny (keras-hub's BertBackbone: 2 layers, hidden 64, 2 heads, dropout 0.1) on the ``text``
data set's bundled corpus (WordPiece with the bundled vocabulary, SEQ_LENGTH-token sequences, 15 %
masked by the 80/10/10 rule, at most MAX_PREDICTIONS predictions), batch BATCH, with the recipes'
schedules over the run's steps: THOR over momentum 0.9 (frequency FREQUENCY, 128-blocks, weight
decay 5e-4 without LayerNorm and biases) with its learning rate and damping decaying linearly to
1/10 and 1/50 of their start (MindSpore's BERT schedules, thor_polynomial, whose lr ends at 1/100),
the learning rate after a THOR_WARMUP-step linear warm-up (not in MindSpore's); Lamb and AdamW
(weight decay 0.01) with a linear decay to 0. A setting is THOR's (start learning rate, start damping), a
baseline's start learning rate.

Each optimizer is swept on seed 0 (the highest final held-out accuracy wins); its best setting is
then run on the other seeds, which change the initial weights, dropout, the shuffle and the masks.
A ModelSpec hook fires every ``eval_every`` steps (the log interval): it stamps the wall and CPU
time of the steps since its last call and measures the masked-LM accuracy (weighted, as model_fn's)
on the whole held-out split, masked once; its own time is not counted. The first interval carries
graph tracing: it is timed as the median interval of its kind (holding a THOR refresh or not).

The target is the lowest final held-out accuracy over the seeds of the best baseline (of Lamb and
AdamW, the one with the higher median final accuracy): an accuracy every seed of it reaches.

Steps to target are seeded, so they do not depend on the machine's load: the sweep runs at low
priority with ``--no-timing``. ``--timing-only`` runs each optimizer's best setting of the seed-0
sweep on every seed (``--timed-seeds`` for some, then nothing is reported), kept as timed: run it
alone (through the benchmarks' lock); the runs its sweep has to make are timed too. A timed run is
the same seeded run, so where no untimed run of a seed is kept it gives that seed's steps too.
``--run-seeds 1,2`` runs only those seeds of each optimizer's first setting (no sweep, no report).
Every run is kept as a JSON file under ``--results`` (only when it reached its last step) and
reused by a later command with the same steps, so the work can be split across commands
(``--optimizers``, ``--thor-settings``, ``--lamb-settings``, ``--adamw-settings``) and locked calls.
``--thor-variant NAME=key:value,...`` adds THOR with other wrapper parameters (pi_damping,
refresh, trace_threshold, interval_growth, frequency, include, exclude: one regular expression,
``a|b`` for two) or other schedules (warmup: steps of linear lr warm-up; lr_end, damping_end: the
decays' ends as fractions of their start), ``lars:RATIO`` (THOR over lars(momentum)), or
``inner:adamw`` (``adam``, ``lamb``: THOR over that optimizer, run as its baseline is), with any of
THOR's parameters (``statistics:kfac``), reported against THOR in a second table.

Printed: per optimizer, the median [min-max] over seeds of the steps, wall seconds (timed runs
only) and CPU seconds (the process's, every run) to the target, every seed, the final held-out
accuracy, the ratios of THOR to Lamb and to AdamW. The plot (held-out accuracy against steps and
against CPU seconds, medians over seeds) needs matplotlib (``pip install -e ".[plot]"``).
"""

import dataclasses
import json
import math
import os
import statistics
import tempfile
import time

import sweeplib

SEQ_LENGTH = 64
MAX_PREDICTIONS = 10
BATCH = 32
# The recipe's refresh interval: 10 reached the target on 2 seeds of 3 at 400/475, 50 on 1 at 600 (tools/README.md).
FREQUENCY = 10
BLOCK_SIZE = 128
BASELINES = ("lamb", "adamw")
# The recipes' schedules: their ends as fractions of their start and THOR's warm-up
# (bert_tiny_mlm_thor.yaml: learning rate 0.04 -> 0.004 after 50 warm-up steps, damping 0.05 ->
# 0.001; bert_tiny_mlm_lamb.yaml: lr -> 0). MindSpore's own form is lr_end:0.01,warmup:0.
THOR_LR_END, THOR_DAMPING_END, THOR_WARMUP = 1 / 10, 1 / 50, 50
# THOR variants named on the command line: kind -> extra thor wrapper parameters, and the
# benchmark's own schedule options (SCHEDULE_OPTIONS), which are not the wrapper's.
THOR_VARIANTS = {"thor": {}}
# warmup: steps of linear learning-rate warm-up (the decayed lr times min(1, (step + 1) / warmup),
# default THOR_WARMUP); lr_end, damping_end: the schedules' ends as fractions of their start
# (default THOR_LR_END, THOR_DAMPING_END).
SCHEDULE_OPTIONS = ("warmup", "lr_end", "damping_end")
# lars: a LARS coefficient; THOR then wraps lars(momentum) (LARS's trust ratio per variable on the
# preconditioned gradient, no LARS weight decay, biases and LayerNorm unscaled: its default exclude).
# inner: the optimizer THOR wraps, "momentum" (0.9, the default) or "adamw", "adam", "lamb" (the
# setting's lr decaying linearly to 0 as the baselines', their decoupled weight decay 0.01 where they
# have one, none from THOR: the AdamW and Lamb baselines with THOR added, and nothing else changed).
INNER_OPTIONS = ("lars", "inner")

# optimizer -> settings swept on seed 0; the recipe's own setting first.
REDUCED = dict(steps=600, seeds=3, eval_every=25, sweeps={
    # the recipe's lr, its neighbours (tools/README.md: 0.03, 0.05 and 0.06 ended lower), MindSpore's BERT lr
    "thor": [(0.04, 0.05), (0.03, 0.05), (0.05, 0.05), (0.0034, 0.05)],
    "lamb": [1e-2, 3e-3, 3e-2],
    "adamw": [3e-3, 1e-3, 1e-2],
})
FULL = dict(steps=2000, seeds=5, eval_every=25, sweeps={
    "thor": [(0.05, 0.05), (0.1, 0.05), (0.02, 0.05), (0.05, 0.2), (0.1, 0.2), (0.2, 0.1)],
    "lamb": [1e-2, 3e-3, 3e-2, 1e-3],
    "adamw": [3e-3, 1e-3, 1e-2, 3e-4],
})
QUICK = dict(steps=50, seeds=1, eval_every=25, sweeps={"thor": [(0.05, 0.05)], "lamb": [1e-2], "adamw": [3e-3]})

# The workload: "bert_tiny" (the constants above, the bundled corpus, bert_tiny's own sizes) or
# "grammar" (configure("grammar"): recipes/grammar_mlm_lamb.yaml's data, model, batch and steps).
WORKLOAD = dict(name="bert_tiny", data={}, model={})
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAMMAR_RECIPE = os.path.join(REPO, "recipes", "grammar_mlm_lamb.yaml")
# MindSpore's BERT schedules (shared/reference/thor.md: lr 3.4e-3 -> 3.244e-5 and damping 5e-2 -> 1e-6,
# polynomial power 1, no warm-up, frequency 100), the refresh interval scaled with the run's length
# (100 over 30,000 steps -> 10 over the grammar run's 3,000: the same 300 refreshes).
MINDSPORE_LR, MINDSPORE_LR_END, MINDSPORE_DAMPING, MINDSPORE_DAMPING_END = 3.4e-3, 3.244e-5, 5e-2, 1e-6
GRAMMAR_EVAL_EVERY = 100
# thor+bt: the BERT-tiny recipe's form (bert_tiny_mlm_thor.yaml: lr 0.04 -> 1/10 after a 50-step
# warm-up, damping 0.05 -> 1/50), swept as its own kind beside MindSpore's form.
GRAMMAR_VARIANTS = {"thor+bt": {"warmup": 50, "lr_end": 1 / 10, "damping_end": 1 / 50}}
_BERT_TINY_DEFAULTS = None


def grammar_workload(recipe=GRAMMAR_RECIPE):
    """The grammar workload's settings, read from its Lamb recipe: (data, model, batch, steps, Lamb's lr)."""
    import yaml

    with open(recipe) as file:
        loaded = yaml.safe_load(file)
    text = loaded["input"]["text"]
    data = dict(train_files=[os.path.join(REPO, path) for path in text["train_files"]],
                eval_files=[os.path.join(REPO, path) for path in text["eval_files"]],
                vocabulary=os.path.join(REPO, text["vocabulary"]),
                seq_length=int(text["seq_length"]), max_predictions=int(text["max_predictions"]))
    model = dict(loaded["model"]["bert_tiny"])
    return dict(data=data, model=model, batch=int(loaded["run"]["batch_size"]), steps=int(loaded["run"]["steps"]),
                lamb_lr=float(loaded["optimizer"]["learning_rate"]["initial_learning_rate"]))


def configure(name):
    """Set the module's workload ("bert_tiny" or "grammar"); returns the (REDUCED, FULL, QUICK) configs."""
    global SEQ_LENGTH, MAX_PREDICTIONS, BATCH, FREQUENCY, THOR_LR_END, THOR_DAMPING_END, THOR_WARMUP, _BERT_TINY_DEFAULTS
    if _BERT_TINY_DEFAULTS is None:
        _BERT_TINY_DEFAULTS = dict(SEQ_LENGTH=SEQ_LENGTH, MAX_PREDICTIONS=MAX_PREDICTIONS, BATCH=BATCH,
                                   FREQUENCY=FREQUENCY, THOR_LR_END=THOR_LR_END, THOR_DAMPING_END=THOR_DAMPING_END,
                                   THOR_WARMUP=THOR_WARMUP)
    globals().update(_BERT_TINY_DEFAULTS)
    for kind in GRAMMAR_VARIANTS:
        THOR_VARIANTS.pop(kind, None)
    if name == "bert_tiny":
        WORKLOAD.update(name="bert_tiny", data={}, model={})
        return REDUCED, FULL, QUICK
    if name != "grammar":
        raise ValueError(f"workload {name!r}: choose bert_tiny or grammar")
    grammar = grammar_workload()
    WORKLOAD.update(name="grammar", data=grammar["data"], model=grammar["model"])
    SEQ_LENGTH, MAX_PREDICTIONS, BATCH = grammar["data"]["seq_length"], grammar["data"]["max_predictions"], grammar["batch"]
    FREQUENCY = 10
    THOR_LR_END, THOR_DAMPING_END, THOR_WARMUP = (MINDSPORE_LR_END / MINDSPORE_LR,
                                                  MINDSPORE_DAMPING_END / MINDSPORE_DAMPING, 0)
    THOR_VARIANTS.update(GRAMMAR_VARIANTS)
    lamb = grammar["lamb_lr"]
    sweeps = {
        # MindSpore's BERT lr and damping first; then its form at 2x, 4x, 6x and 10x the lr
        "thor": [(MINDSPORE_LR, MINDSPORE_DAMPING), (0.0068, MINDSPORE_DAMPING), (0.0136, MINDSPORE_DAMPING),
                 (0.0204, MINDSPORE_DAMPING), (10 * MINDSPORE_LR, MINDSPORE_DAMPING)],
        "thor+bt": [(0.04, 0.05)],
        "lamb": [lamb, lamb / 2, lamb * 2],   # the recipe's 0.01, 0.005, 0.02
        # 3e-3 stayed at the most frequent token on seed 0, so the third value is below, not above
        "adamw": [3e-3, 1e-3, 3e-4],
    }
    reduced = dict(steps=grammar["steps"], seeds=3, eval_every=GRAMMAR_EVAL_EVERY, sweeps=sweeps)
    quick = dict(steps=20, seeds=1, eval_every=10,
                 sweeps={"thor": [sweeps["thor"][0]], "thor+bt": sweeps["thor+bt"], "lamb": [lamb], "adamw": [3e-3]})
    return reduced, reduced, quick


def settings_for(config, kind):
    """The settings swept for ``kind``: its own list, else THOR's for a THOR variant."""
    if kind in config["sweeps"]:
        return config["sweeps"][kind]
    return config["sweeps"]["thor"]


def is_thor(kind):
    return kind in THOR_VARIANTS


def run_options(kind):
    """A THOR kind's options with the benchmark's defaults filled in (None for a baseline): what
    optimizer_fn_for builds, and what a kept run is checked against, so a run kept before a default
    changed (THOR_LR_END, THOR_WARMUP, FREQUENCY) is run again, not reused."""
    if not is_thor(kind):
        return None
    defaults = {"lr_end": THOR_LR_END, "warmup": THOR_WARMUP, "damping_end": THOR_DAMPING_END, "frequency": FREQUENCY}
    return dict(defaults, **THOR_VARIANTS[kind])


def frequency_of(kind):
    return run_options(kind)["frequency"] if is_thor(kind) else FREQUENCY


def optimizer_fn_for(kind, setting, steps):
    import keras

    import moxlite as mox
    from moxlite.optimizers.thor.schedules import ThorPolynomialDecay

    if kind in BASELINES:
        decay = keras.optimizers.schedules.PolynomialDecay(setting, steps, end_learning_rate=0.0)
        return mox.get_optimizer_fn(kind, learning_rate=decay, weight_decay=0.01)
    learning_rate, damping = setting
    options = run_options(kind)
    schedule = {key: options.pop(key) for key in SCHEDULE_OPTIONS + INNER_OPTIONS if key in options}
    damping = ThorPolynomialDecay(damping, damping * schedule["damping_end"], steps)
    inner_name = schedule.get("inner", "momentum")
    if inner_name != "momentum":
        decay = keras.optimizers.schedules.PolynomialDecay(learning_rate, steps, end_learning_rate=0.0)
        inner = mox.get_optimizer_fn(inner_name, learning_rate=decay,
                                     **({"weight_decay": 0.01} if inner_name in BASELINES else {}))
        return mox.get_optimizer_wrapper_fn("thor", inner, damping=damping, block_size=BLOCK_SIZE,
                                            weight_decay=0.0, **options)
    decay = ThorPolynomialDecay(learning_rate, learning_rate * schedule["lr_end"], steps,
                                warmup_steps=int(schedule["warmup"]))
    inner = mox.get_optimizer_fn("momentum", momentum=0.9, learning_rate=decay)
    if "lars" in schedule:
        inner = mox.get_optimizer_wrapper_fn("lars", inner, ratio=float(schedule["lars"]), weight_decay=0.0)
    return mox.get_optimizer_wrapper_fn(
        "thor", inner, damping=damping, block_size=BLOCK_SIZE, weight_decay=5e-4,
        weight_decay_exclude=["layernorm", "layer_norm", "bias"],
        **options)


class Corpus:
    """The bundled corpus, tokenized once per process (a run shuffles and masks it as the ``text`` data set does).

    The training split's packed sequences are kept in memory; a run's input_fn shuffles them
    with its seed and masks them with ``text_datasets.masked_examples``, the text data set's own
    masking (the same rule and random numbers of (seed, index)). The held-out split comes from
    the text data set itself (seed 0: masked the same way for every run), in batches of 256.
    """

    def __init__(self):
        import numpy as np

        from moxlite.contract import ModeKeys
        from moxlite.data import text_checks, text_datasets, wordpiece

        files = WORKLOAD["data"]
        train_files = files.get("train_files", [wordpiece.BUNDLED_TRAIN])
        vocabulary = files.get("vocabulary", wordpiece.BUNDLED_VOCABULARY)
        data = text_datasets.text(train_files=files.get("train_files", ()), eval_files=files.get("eval_files", ()),
                                  vocabulary=files.get("vocabulary"), seq_length=SEQ_LENGTH,
                                  max_predictions=MAX_PREDICTIONS, seed=0)
        self.vocab_size = data.text.vocab_size
        self.held_out = [{key: np.asarray(value) for key, value in batch.items()}
                         for batch in data.input_fn(ModeKeys.EVAL).batch(256)]
        vocab = text_datasets.text_vocabulary(train_files, vocabulary)
        self._ids = vocab.ids
        packed = text_datasets.pack_sequences(text_datasets._lines(train_files), vocab.tokenize,
                                              SEQ_LENGTH, vocab.ids[text_checks.CLS], vocab.ids[text_checks.SEP])
        self.train_sequences = np.stack([np.asarray(sequence) for sequence in packed])

    def input_fn_for(self, seed):
        import tensorflow as tf

        from moxlite.data import text_datasets

        def input_fn(mode):
            sequences = tf.data.Dataset.from_tensor_slices(self.train_sequences)
            sequences = sequences.shuffle(len(self.train_sequences), seed=seed, reshuffle_each_iteration=True)
            return text_datasets.masked_examples(sequences.repeat(), seed=seed, vocab_size=self.vocab_size,
                                                 ids=self._ids, mask_rate=0.15, max_predictions=MAX_PREDICTIONS)

        return input_fn

    def held_out_sequences(self):
        return sum(len(batch["input_ids"]) for batch in self.held_out)


class LazyCorpus:
    """The Corpus, tokenized on first use only: a command whose runs are all kept needs none."""

    def __init__(self, print_fn=print):
        self._corpus = None
        self._print_fn = print_fn

    def __getattr__(self, name):
        if self._corpus is None:
            self._corpus = Corpus()
            self._print_fn(f"   corpus: vocabulary {self._corpus.vocab_size}, {len(self._corpus.train_sequences)} "
                           f"training and {self._corpus.held_out_sequences()} held-out sequences")
        return getattr(self._corpus, name)


class Recorder:
    """The ModelSpec hook, called every log interval: wall and CPU seconds of the interval (its own
    time excluded) and, unless ``held_out`` is None, the held-out masked-LM accuracy."""

    def __init__(self, network_of, held_out):
        self.network_of = network_of
        self.held_out = held_out
        self.wall = {}    # last step of an interval -> its seconds
        self.cpu = {}
        self.curve = []   # (step, accuracy)
        self._left_hook = None

    def __call__(self, global_step, log_values):
        entered, entered_cpu = time.perf_counter(), time.process_time()
        step = int(global_step)
        if self._left_hook is not None and step not in self.wall:
            self.wall[step] = entered - self._left_hook[0]
            self.cpu[step] = entered_cpu - self._left_hook[1]
        if self.held_out is not None and (not self.curve or self.curve[-1][0] != step):
            self.curve.append((step, self.accuracy()))
        self._left_hook = (time.perf_counter(), time.process_time())

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


def holds_refresh(kind, last_step, interval):
    """Whether the interval of steps (last_step - interval, last_step] holds a THOR refresh (global
    steps 1, 1 + frequency, ...: applied updates 0, frequency, ...)."""
    if not is_thor(kind):
        return False
    frequency = frequency_of(kind)
    return any((step - 1) % frequency == 0 for step in range(last_step - interval + 1, last_step + 1))


def first_interval_timed(kind, seconds, interval):
    """``seconds`` ({last step: seconds}) with the first interval (graph tracing; not measured) set to the
    median of the measured intervals of its kind."""
    seconds = dict(seconds)
    same = [value for step, value in seconds.items()
            if holds_refresh(kind, step, interval) == holds_refresh(kind, interval, interval)]
    same = same or list(seconds.values())
    if same:
        seconds[interval] = statistics.median(same)
    return seconds


def seconds_to(run, step, clock="wall"):
    """Training seconds (``clock``: "wall", or "cpu": the process's CPU time) from the start to the end
    of ``step`` (a multiple of the interval)."""
    return sum(value for last, value in run[clock].items() if int(last) <= step)


def run_path(results, kind, setting, seed, steps, timed):
    name = f"{kind}_{'_'.join(map(str, setting)) if isinstance(setting, (tuple, list)) else setting}_seed{seed}_{steps}"
    return os.path.join(results, name + ("_timed" if timed else "") + ".json")


def stored_run(results, kind, setting, seed, steps, timed):
    """The run kept under ``results`` for these arguments (and the kind's options), or None."""
    path = run_path(results, kind, setting, seed, steps, timed)
    if not os.path.exists(path):
        return None
    with open(path) as file:
        stored = json.load(file)
    return stored if stored.get("options") == run_options(kind) else None


def train_once(kind, setting, seed, config, corpus, results, log_root, timed=False, only_timed=False):
    """One run: {curve, wall, cpu, final, inversions}, read from ``results`` when it was kept there.

    timed: a run made now is kept as timed (made alone on the machine, through the lock).
    only_timed: only a timed run will do. Otherwise a timed run stands in for an untimed one:
    it is the same seeded run (its held-out curve is measured too, its time excluded)."""
    steps, interval = config["steps"], config["eval_every"]
    stored = stored_run(results, kind, setting, seed, steps, True)
    if not only_timed:
        stored = stored_run(results, kind, setting, seed, steps, False) or stored
    if stored is not None:
        return stored
    timed = timed or only_timed
    path = run_path(results, kind, setting, seed, steps, timed)
    options = run_options(kind)
    import keras

    import moxlite as mox
    from moxlite.models import bert

    keras.utils.set_random_seed(seed)
    model = dict(dict(max_sequence_length=SEQ_LENGTH), **WORKLOAD["model"])
    inner = bert.bert_model_fn("tiny", vocabulary_size=corpus.vocab_size, **model)
    recorder = Recorder(inner.network, corpus.held_out)

    def model_fn(inputs, mode):
        return dataclasses.replace(inner(inputs, mode), hooks=[recorder])

    made = []

    def optimizer_fn():
        made.append(optimizer_fn_for(kind, setting, steps)())
        return made[-1]

    # A fresh directory per run: a log_dir holding a checkpoint would resume instead of training.
    log_dir = tempfile.mkdtemp(prefix=f"{WORKLOAD['name']}_{kind}_{seed}_", dir=log_root)
    mox.run(input_fn=corpus.input_fn_for(seed), model_fn=model_fn, optimizer_fn=optimizer_fn,
            run_mode=mox.ModeKeys.TRAIN, batch_size=BATCH, log_dir=log_dir, max_number_of_steps=steps,
            log_every_n_steps=interval, save_summary_steps=10 ** 9, save_model_steps=10 ** 9)
    if not recorder.curve or recorder.curve[-1][0] != steps:   # stopped early (SIGTERM, SIGINT): keep nothing
        raise SystemExit(f"{kind} {setting} seed {seed} stopped before step {steps}; the run is not kept")
    run = dict(kind=kind, setting=setting, seed=seed, steps=steps, timed=timed, options=options,
               curve=recorder.curve, final=recorder.curve[-1][1] if recorder.curve else None,
               wall=first_interval_timed(kind, recorder.wall, interval),
               cpu=first_interval_timed(kind, recorder.cpu, interval),
               inversions=layer_inversions(kind, made[-1], steps) if made else None)
    with open(path, "w") as file:
        json.dump(run, file)
    return json.loads(json.dumps(run))   # as a later command reads it (tuples become lists)


def layer_inversions(kind, optimizer, steps):
    """THOR's layer inversions in the run (refresh 'trace' counts them; 'fixed' inverts every layer each refresh)."""
    if not is_thor(kind):
        return None
    counts = optimizer.inversion_counts()
    if counts is not None:
        return int(sum(counts.values()))
    return len(optimizer.preconditioned_layers()) * math.ceil(steps / frequency_of(kind))


def sweep(config, kinds, corpus, results, log_root, print_fn=print, timed=False):
    """{optimizer: (best setting, [one run per seed])}, the sweep on seed 0 (highest final accuracy);
    the runs it makes are kept as timed with ``timed``."""
    def settings_of(kind):
        return settings_for(config, kind)

    def train(kind, setting, seed):
        return train_once(kind, setting, seed, config, corpus, results, log_root, timed=timed)

    def describe(kind, setting, run):
        inverted = f"   layer inversions {run['inversions']}" if run.get("inversions") is not None else ""
        return f"   sweep {kind:<14} {str(setting):<14} final held-out accuracy {run['final']:.4f}{inverted}"

    return sweeplib.sweep_then_seeds(kinds, settings_of, train, lambda run: -run["final"], config["seeds"],
                                     print_fn, describe)


def kept_best(config, kinds, results):
    """As ``sweep``, from the kept runs alone (``--report-only``): a setting or seed with no kept run is
    left out, and an optimizer with none at all."""
    def kept(kind, setting, seed):
        steps = config["steps"]
        return (stored_run(results, kind, setting, seed, steps, False)
                or stored_run(results, kind, setting, seed, steps, True))

    best = {}
    for kind in kinds:
        tried = [(-run["final"], str(setting), setting, run) for setting in
                 settings_for(config, kind) for run in [kept(kind, setting, 0)] if run]
        if tried:
            setting = min(tried, key=lambda t: t[:2])[2]
            best[kind] = (setting, [run for run in (kept(kind, setting, seed) for seed in range(config["seeds"]))
                                    if run is not None])
    return best


# How the target is set from the best baseline's final accuracies (``--target``): ``lowest``, the
# lowest over its seeds (every seed of the baseline reaches it); ``median``, their median (issue 43's
# rule: THOR must reach what the baseline's typical seed ends at).
TARGET_RULES = {"lowest": min, "median": statistics.median}


def target_of(best, rule="lowest"):
    """(baseline, target): the baseline with the higher median final accuracy, and its final accuracies
    reduced by ``rule`` (a key of TARGET_RULES)."""
    present = [kind for kind in BASELINES if kind in best]
    baseline = max(present, key=lambda kind: statistics.median(run["final"] for run in best[kind][1]))
    return baseline, TARGET_RULES[rule](run["final"] for run in best[baseline][1])


def steps_to(run, target):
    reached = sweeplib.reach(run["curve"], target)
    return reached[0] if reached else None


def time_best(best, config, corpus, results, log_root, seeds, print_fn=print):
    """Each optimizer's best setting run again, timed, on ``seeds`` (the order rotated seed by seed)."""
    for number, seed in enumerate(seeds):
        for kind in sweeplib.rotated(list(best), number):
            run = train_once(kind, best[kind][0], seed, config, corpus, results, log_root, only_timed=True)
            print_fn(f"   timed {kind:<14} seed {seed}: {seconds_to(run, config['steps']):.1f} s for "
                     f"{config['steps']} steps, final held-out accuracy {run['final']:.4f}")


def stored_timings(best, results, config):
    """{kind: {seed: timed run}} of the timed runs already under ``results``."""
    timed = {}
    for kind, (setting, runs) in best.items():
        for seed in (run["seed"] for run in runs):
            run = stored_run(results, kind, setting, seed, config["steps"], True)
            if run is not None:
                timed.setdefault(kind, {})[seed] = run
    return timed


def rows(best, timed, target, kinds):
    """Table lines for ``kinds`` and {kind: (steps, seconds, finals)} per seed."""
    lines = [f"   {'optimizer':<26}{'steps to target':>24}{'wall s to target':>26}{'CPU s to target':>26}"
             f"{'final accuracy':>26}   reached"]
    summary = {}
    for kind in kinds:
        setting, runs = best[kind]
        steps = [steps_to(run, target) for run in runs]
        seeds = [run["seed"] for run in runs]
        seconds = [seconds_to(timed[kind][seed], s) if s is not None and seed in timed.get(kind, {}) else None
                   for seed, s in zip(seeds, steps)]
        cpu = [seconds_to(run, s, "cpu") if s is not None else None for run, s in zip(runs, steps)]
        finals = [run["final"] for run in runs]
        inversions = [run.get("inversions") for run in runs]
        summary[kind] = (steps, seconds, finals, cpu)
        label = f"{kind} {tuple(setting) if isinstance(setting, list) else setting}"
        wall = ("not timed" if all(s is None for s in seconds) and any(s is not None for s in steps)
                else sweeplib.median_range(seconds, '{:.1f}'))
        lines.append(f"   {label:<26}{sweeplib.median_range(steps):>24}"
                     f"{wall:>26}{sweeplib.median_range(cpu, '{:.1f}'):>26}"
                     f"{sweeplib.median_range(finals, '{:.4f}'):>26}"
                     f"   {sum(s is not None for s in steps)}/{len(runs)}")
        inverted = f", layer inversions {inversions}" if any(v is not None for v in inversions) else ""
        lines.append(f"      seeds {seeds}: steps {steps}, wall s {[None if s is None else round(s, 1) for s in seconds]},"
                     f" CPU s {[None if s is None else round(s, 1) for s in cpu]},"
                     f" final {[round(f, 4) for f in finals]}{inverted}")
    return lines, summary


def report(best, timed, rule="lowest"):
    if not any(kind in best for kind in BASELINES):
        lines = ["   no baseline's runs under --results, so no target: run --optimizers lamb (or adamw) "
                 "into the same --results, then --report-only"]
        for kind, (setting, runs) in best.items():
            lines.append(f"   {kind} {setting}: final held-out accuracy "
                         + ", ".join(f"{run['final']:.4f} (seed {run['seed']})" for run in runs))
        return lines
    baseline, target = target_of(best, rule)
    lines = [f"   target: {target:.4f} held-out masked-LM accuracy (the {rule} final accuracy of the best baseline, "
             f"{baseline})"]
    if not timed:
        lines.append("   (no timed runs yet: seconds come from --timing-only)")
    main_kinds = [kind for kind in ("thor",) + BASELINES if kind in best]
    table, summary = rows(best, timed, target, main_kinds)
    lines += table
    if "thor" in summary:
        for base in BASELINES:
            if base in summary:
                lines.append(ratio_line("thor", base, summary))
    variants = [kind for kind in best if is_thor(kind) and kind != "thor"]
    if variants:
        lines.append("   THOR variants (" + "; ".join(f"{kind}: {THOR_VARIANTS[kind]}" for kind in variants) + ")")
        table, more = rows(best, timed, target, variants)
        lines += table
        summary.update(more)
        for kind in variants:
            for base in ("thor",) + BASELINES:
                if base in summary:
                    lines.append(ratio_line(kind, base, summary))
    return lines


def ratio_line(kind, base, summary):
    steps, seconds, finals, cpu = summary[kind]
    base_steps, base_seconds, base_finals, base_cpu = summary[base]
    return (f"   {kind} / {base}: steps {sweeplib.ratio(steps, base_steps)}, wall seconds "
            f"{sweeplib.ratio(seconds, base_seconds)}, CPU seconds {sweeplib.ratio(cpu, base_cpu)}, "
            f"final accuracy {statistics.median(finals) - statistics.median(base_finals):+.4f}")


def plot(best, path, print_fn=print, rule="lowest"):
    """Held-out accuracy against steps and against CPU seconds (medians over the seeds) of every kind
    in ``best``, THOR's variants included; matplotlib."""
    try:
        import matplotlib
    except ImportError:
        print_fn(f"\nNo plot: matplotlib is not installed (pip install -e \".[plot]\"); {path} not written.")
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    baseline, target = target_of(best, rule) if any(kind in best for kind in BASELINES) else (None, None)
    kinds = [kind for kind in ("thor",) + BASELINES if kind in best] + [
        kind for kind in best if is_thor(kind) and kind != "thor"]
    figure, axes = plt.subplots(1, 2, figsize=(10, 3.6), squeeze=False)
    for kind in kinds:
        setting, runs = best[kind]
        label = f"{kind} {tuple(setting) if isinstance(setting, list) else setting}"
        steps = [point[0] for point in runs[0]["curve"]]
        accuracy = np.median([[point[1] for point in run["curve"]] for run in runs], axis=0)
        axes[0, 0].plot(steps, accuracy, label=label)
        seconds = np.median([[seconds_to(run, step, "cpu") for step in steps] for run in runs], axis=0)
        axes[0, 1].plot(seconds, accuracy, label=label)
    for column, unit in enumerate(("steps", "training CPU seconds (the process's, all threads)")):
        axis = axes[0, column]
        if target is not None:
            axis.axhline(target, color="grey", linestyle=":", linewidth=1)
        axis.set_xlabel(unit)
        axis.set_ylabel("held-out masked-LM accuracy")
        axis.legend(loc="lower right", fontsize=8)
    axes[0, 0].set_title(f"{WORKLOAD['name']}: accuracy vs steps (median of {len(best[kinds[0]][1])} seeds)", fontsize=9)
    axes[0, 1].set_title(f"accuracy vs CPU seconds (dotted: target, {baseline}'s {rule} final)" if baseline
                         else "accuracy vs CPU seconds (no baseline's runs: no target)", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=72)
    print_fn(f"\nPlot written to {path}")
    return True


def main(args, print_fn=print):
    """The bert_tiny workload of tools/bench_thor.py (its --full, --quick, --seeds, --plot, --log-root, --results,
    --optimizers, --thor-variant, --thor-settings, --steps, --no-timing, --timing-only, --timed-seeds)."""
    reduced, full, quick = configure(getattr(args, "workload", "bert_tiny"))
    name = WORKLOAD["name"]
    config = dict(quick if args.quick else full if args.full else reduced)
    config["sweeps"] = dict(config["sweeps"])
    if args.seeds:
        config["seeds"] = args.seeds
    if args.steps:
        config["steps"] = args.steps
    for text in args.thor_variant:
        variant, options = sweeplib.parse_variant(text)
        THOR_VARIANTS[variant] = options
    if args.thor_settings:
        config["sweeps"]["thor"] = [tuple(float(v) for v in pair.split(":")) for pair in args.thor_settings.split(",")]
    for kind in BASELINES:
        if getattr(args, f"{kind}_settings"):
            config["sweeps"][kind] = [float(v) for v in getattr(args, f"{kind}_settings").split(",")]
    kinds = ([k.strip() for k in args.optimizers.split(",")] if args.optimizers
             else list(config["sweeps"]) + [k for k in THOR_VARIANTS if k != "thor" and k not in config["sweeps"]])
    results = args.results or os.path.join(args.log_root, f"{name}_results")
    os.makedirs(results, exist_ok=True)
    os.makedirs(args.log_root, exist_ok=True)
    print_fn(f"{'Quick' if args.quick else 'Full' if args.full else 'Reduced'} run: {config['seeds']} seed(s), "
             f"sweeps {config['sweeps']}, optimizers {kinds}, THOR frequency {FREQUENCY}, {config['steps']} steps, "
             f"held-out accuracy every {config['eval_every']} steps; runs kept in {results}")
    started = time.time()
    corpus = LazyCorpus(print_fn)
    print_fn(f"\n## {name}: {config['steps']} steps of batch {BATCH} x {SEQ_LENGTH} tokens")
    if args.run_seeds:   # the first setting of each optimizer on these seeds only: no sweep, no report
        for seed in (int(s) for s in args.run_seeds.split(",")):
            for kind in kinds:
                setting = settings_for(config, kind)[0]
                run = train_once(kind, setting, seed, config, corpus, results, args.log_root)
                print_fn(f"   {kind} {setting} seed {seed}: final held-out accuracy {run['final']:.4f}")
        return None
    if not args.report_only and (args.timing_only or not args.no_timing):   # the seed-0 sweep's best settings, timed on the seeds
        chosen = sweep(dict(config, seeds=1), kinds, corpus, results, args.log_root, print_fn, timed=True)
        seeds = ([int(s) for s in args.timed_seeds.split(",")] if args.timed_seeds else range(config["seeds"]))
        time_best(chosen, config, corpus, results, args.log_root, seeds, print_fn)
        if args.timed_seeds:
            return chosen
    best = (kept_best(config, kinds, results) if args.report_only
            else sweep(config, kinds, corpus, results, args.log_root, print_fn))
    timed = stored_timings(best, results, config)
    rule = getattr(args, "target", "lowest")
    for line in report(best, timed, rule):
        print_fn(line)
    plot(best, args.plot, print_fn, rule)
    print_fn(f"\nTotal wall time {time.time() - started:.0f} s")
    return best
