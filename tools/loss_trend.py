"""Is a run's training loss still falling at its end? The slope of its last third, from its log.

    moxlite-run recipes/grammar_mlm_lamb.yaml 2>&1 | tee run.log
    python tools/loss_trend.py run.log                 # the last third of the logged steps
    python tools/loss_trend.py run.log --since 2000    # from global step 2000 on

A benchmark's target is only meaningful when the best optimizer has not stopped learning by then
(issue 32: a target set on a plateau compares nothing). This reads the training log lines moxlite
prints (``step: N(global step: G) ... loss: L``), fits a least-squares line to the loss over the
chosen steps, and prints its slope per 1,000 steps with the slope's standard error, so that a
fall within the noise of the logged losses is not read as learning.
"""

import argparse
import re
import sys

import numpy as np

LOG_LINE = re.compile(r"global step: (\d+)\).*?\bloss: ([-+0-9.eE]+|nan|inf)")


def logged_losses(lines):
    """(global steps, losses) of the training log lines, in the order logged; a step logged twice
    (a resumed run) keeps its last value."""
    by_step = {}
    for line in lines:
        match = LOG_LINE.search(line)
        if match:
            by_step[int(match.group(1))] = float(match.group(2))
    steps = sorted(by_step)
    return np.array(steps, dtype=np.float64), np.array([by_step[s] for s in steps], dtype=np.float64)


def trend(steps, losses, since=None):
    """(first step, last step, points, slope per 1,000 steps, its standard error) over the steps from
    ``since`` (default: the last third of the logged range)."""
    if since is None:
        since = steps[0] + (steps[-1] - steps[0]) * 2 / 3
    keep = steps >= since
    x, y = steps[keep], losses[keep]
    if len(x) < 3:
        raise ValueError(f"{len(x)} logged step(s) from step {since:.0f}: need 3 to fit a slope (log more often)")
    design = np.stack([x, np.ones_like(x)], axis=1)
    (slope, _), residual, _, _ = np.linalg.lstsq(design, y, rcond=None)
    residual_sum = float(residual[0]) if residual.size else 0.0
    spread = np.sum((x - x.mean()) ** 2)
    error = np.sqrt(residual_sum / (len(x) - 2) / spread)
    return x[0], x[-1], len(x), slope * 1000, error * 1000


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("log", help="a run's captured output (moxlite-run ... 2>&1 | tee run.log)")
    parser.add_argument("--since", type=float, default=None, help="first global step of the fit (default: the last third)")
    args = parser.parse_args(argv)
    with open(args.log) as file:
        steps, losses = logged_losses(file)
    if len(steps) == 0:
        print(f"loss_trend: no 'global step: N) ... loss: L' lines in {args.log}: pass the run's captured output",
              file=sys.stderr)
        return 2
    try:
        first, last, points, slope, error = trend(steps, losses, args.since)
    except ValueError as error_text:
        print(f"loss_trend: {error_text}", file=sys.stderr)
        return 2
    verdict = "falling" if slope + 2 * error < 0 else "not clearly falling (within 2 standard errors of flat or rising)"
    print(f"training loss over global steps {first:.0f}-{last:.0f} ({points} logged points): "
          f"slope {slope:+.3f} nats per 1,000 steps (standard error {error:.3f}): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
