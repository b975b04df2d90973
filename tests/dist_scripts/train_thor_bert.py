"""Train the tiny keras-hub BERT masked-LM with thor(momentum) through moxlite.run, in whatever
cluster the flags say (tests/test_distributed_thor.py; imported for the single-process run).

    python tests/dist_scripts/train_thor_bert.py --log_dir=/tmp/x --steps=3 --batch=4  + MoXing cluster flags
"""

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests import thorbertlib  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--log_dir", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    args, _ = parser.parse_known_args()
    print(f"PID {os.getpid()}", flush=True)
    result = thorbertlib.train_masked_lm(args.log_dir, args.steps, args.batch)
    if result is not None:  # None in a process that only served
        print("RESULT " + json.dumps({key: float(value) for key, value in result.items()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
