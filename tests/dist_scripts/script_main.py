"""What the training scripts under tests/dist_scripts share: their command line and what they print.

Each script is started once per task by tools/launch_local.py, with the MoXing cluster flags
after its own (``parse_known_args`` leaves those to moxlite), and prints two lines the tests
read: "PID <pid>" first (so a test can find the process), and "RESULT {json}" at the end, from
a process that trained (a parameter server or an idle task returns None and prints nothing).
"""

import argparse
import json
import os


def parse_arguments(add_own=None):
    """The script's arguments: --log_dir, --steps and --batch, plus those ``add_own(parser)`` adds."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--log_dir", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    if add_own is not None:
        add_own(parser)
    arguments, _ = parser.parse_known_args()
    print(f"PID {os.getpid()}", flush=True)
    return arguments


def print_result(result):
    """One line "RESULT {json}" of ``result``'s values as floats, or nothing when ``result`` is None."""
    if result is not None:
        print("RESULT " + json.dumps({key: float(value) for key, value in result.items()}), flush=True)
