"""Train the small digits CNN with thor(momentum) through moxlite.run, in whatever cluster the flags say.

Used by tests/test_distributed_thor.py (one process per task, started by tools/launch_local.py)
and, imported, for the single-process reference run.

    python tests/dist_scripts/train_thor.py --log_dir=/tmp/x --steps=6 --batch=16  + MoXing cluster flags
"""

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import moxlite as mox  # noqa: E402
from tests import runlib, thorlib  # noqa: E402

NUM_ROWS = 256
THOR = dict(lr=0.05, momentum=0.9, damping=0.05, frequency=3, weight_decay=5e-4)


def train(log_dir, steps, batch):
    images, labels = thorlib.small_digits(NUM_ROWS)
    return mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=thorlib.conv_model_fn("same"),
                   optimizer_fn=thorlib.thor_optimizer_fn(**THOR), run_mode=mox.ModeKeys.TRAIN,
                   batch_size=batch, log_dir=log_dir, max_number_of_steps=steps, log_every_n_steps=steps,
                   save_model_steps=steps)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--log_dir", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    args, _ = parser.parse_known_args()
    print(f"PID {os.getpid()}", flush=True)
    result = train(args.log_dir, args.steps, args.batch)
    if result is not None:  # None in a process that only served
        print("RESULT " + json.dumps({key: float(value) for key, value in result.items()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
