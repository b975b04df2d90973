"""What the THOR benchmarks (bench_thor.py's digits, bench_thor_bert.py's BERT-tiny) share.

The sweep then the seeds: each optimizer is tried at every setting of its sweep on seed 0,
the best setting (by the benchmark's own ranking) is then run on the other seeds, the
order of the optimizers rotated seed by seed. Also: the step at which a curve first reaches
a target, the median-and-range text of the tables, the ratio of two medians, and THOR
variants named on the command line (``--thor-variant NAME=key:value,...``).

Importable as ``sweeplib`` from the scripts in tools/ (Python puts the script's folder first
on the path); it imports nothing heavy, so a test can load it on its own.
"""

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


def median_range(values, form="{:.0f}"):
    """'median [min-max]' of the values that are not None, or 'not reached' when none is."""
    values = [v for v in values if v is not None]
    if not values:
        return "not reached"
    return f"{form.format(statistics.median(values))} [{form.format(min(values))}-{form.format(max(values))}]"


def ratio(values, base):
    """The median of ``values`` over the median of ``base`` (None entries left out), as '0.62x'."""
    values, base = [v for v in values if v is not None], [v for v in base if v is not None]
    if not values or not base:
        return "n/a (a side did not reach the target)"
    return f"{statistics.median(values) / statistics.median(base):.2f}x"


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
