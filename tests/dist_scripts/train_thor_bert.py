"""Train the tiny keras-hub BERT masked-LM with thor(momentum) through moxlite.run, in whatever
cluster the flags say (tests/distribute/test_thor.py; imported for the single-process run).

    python tests/dist_scripts/train_thor_bert.py --log_dir=/tmp/x --steps=3 --batch=4  + MoXing cluster flags
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests import thorbertlib  # noqa: E402
from tests.dist_scripts import script_main  # noqa: E402


def main():
    args = script_main.parse_arguments()
    script_main.print_result(thorbertlib.train_masked_lm(args.log_dir, args.steps, args.batch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
