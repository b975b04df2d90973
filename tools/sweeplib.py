"""What the THOR benchmarks (bench_thor.py's digits, bench_thor_bert.py's BERT-tiny) share.

The sweep then the seeds: each optimizer is tried at every setting of its sweep on seed 0,
the best setting (by the benchmark's own ranking) is then run on the other seeds, the
order of the optimizers rotated seed by seed. Also: the step at which a curve first reaches
a target, the median-and-range text of the tables, the ratio of two medians, and THOR
variants named on the command line (``--thor-variant NAME=key:value,...``).

Importable as ``sweeplib`` from the scripts in tools/ (Python puts the script's folder first
on the path); it imports nothing heavy, so a test can load it on its own.
"""

import math
import statistics


def rotated(items, by):
    """``items`` rotated left by ``by`` (the order in which a seed runs the optimizers)."""
    items = list(items)
    by %= len(items)
    return items[by:] + items[:by]


def sweep_then_seeds(kinds, settings_of, train, rank, seeds, print_fn=print, describe=None):
    """{kind: (best setting, [run of seed 0, run of seed 1, ...])}.

    settings_of(kind): the settings swept on seed 0. train(kind, setting, seed): one run.
    rank(run): a sort key, the smallest is best (ties: the setting's text, so the choice is
    reproducible). describe(kind, setting, run): the sweep line to print, or None.
    """
    best = {}
    for kind in kinds:
        tried = []
        for setting in settings_of(kind):
            run = train(kind, setting, 0)
            if describe is not None:
                print_fn(describe(kind, setting, run))
            tried.append((rank(run), str(setting), setting, run))
        tried.sort(key=lambda t: t[:2])
        best[kind] = (tried[0][2], [tried[0][3]])
    for seed in range(1, seeds):
        for kind in rotated(kinds, seed):
            best[kind][1].append(train(kind, best[kind][0], seed))
    return best


def reach(curve, target):
    """The first (step, seconds, ...) point of ``curve`` whose last entry (the accuracy) is >= target, or None."""
    for point in curve:
        if point[-1] >= target:
            return point
    return None


def censored_median(values):
    """The median with None (a seed that did not reach the target) counted as more than any value, so
    leaving a seed out never flatters a side; infinity when the median seed did not reach it."""
    return statistics.median([math.inf if v is None else v for v in values])


def median_range(values, form="{:.0f}"):
    """'median [min-max]' over every seed, None counted as not reached; 'not reached' when the median is."""
    reached = [v for v in values if v is not None]
    median = censored_median(values) if values else math.inf
    if math.isinf(median):
        return "not reached" if not reached else f"not reached [{form.format(min(reached))}-not reached]"
    top = "not reached" if len(reached) < len(values) else form.format(max(reached))
    return f"{form.format(median)} [{form.format(min(reached))}-{top}]"


def ratio(values, base):
    """The median of ``values`` over the median of ``base``, as '0.62x', each over every seed (a seed that
    did not reach the target counts as more than any that did): 'n/a' when a side's median seed did not."""
    if not values or not base:
        return "n/a (no runs)"
    value, reference = censored_median(values), censored_median(base)
    if math.isinf(value) or math.isinf(reference):
        return "n/a (the median seed of a side did not reach the target, or was not timed)"
    return f"{value / reference:.2f}x"


# Variant keys whose value is a regular expression (thor's include/exclude), kept as text.
PATTERN_KEYS = ("include", "exclude")


def parse_variant(text):
    """``NAME=key:value,key:value`` -> (NAME, {key: value}); values are numbers, true/false or words."""
    name, _, body = text.partition("=")
    options = {}
    for item in filter(None, body.split(",")):
        key, _, value = item.partition(":")
        if key in PATTERN_KEYS:   # one regular expression ("a|b" for two), as the wrapper's list of one
            options[key] = [value]
        elif value.lower() in ("true", "false"):
            options[key] = value.lower() == "true"
        else:
            try:
                number = float(value)
                options[key] = int(number) if key == "frequency" else (bool(number) if key == "pi_damping"
                                                                         else number)
            except ValueError:
                options[key] = value
    if not name.startswith("thor"):
        raise SystemExit(f"--thor-variant {text!r}: the name must start with 'thor' (e.g. thor+pi=pi_damping:1)")
    return name, options
