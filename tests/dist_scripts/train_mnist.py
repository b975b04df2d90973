"""Train on the bundled MNIST sample through moxlite.run, in whatever cluster the flags say.

Used by the end-to-end distributed tests (one process per task, started by
tools/launch_local.py) and, imported, for the single-process reference run.

    python tests/dist_scripts/train_mnist.py --log_dir=/tmp/x --steps=20 --batch=16 [--model=mlp|softmax]
        [--save_steps=10]  + MoXing cluster flags
"""

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import tensorflow as tf  # noqa: E402

import moxlite as mox  # noqa: E402
from tests import runlib  # noqa: E402

NUM_ROWS = 512
LEARNING_RATE = 0.1


def train(log_dir, steps, batch, model="mlp", save_steps=10, log_every=5):
    images, labels = runlib.mnist_rows(NUM_ROWS)
    input_fn = runlib.input_fn_for(images, labels)
    model_fn = runlib.mlp_model_fn if model == "mlp" else runlib.softmax_model_fn
    return mox.run(input_fn=input_fn, model_fn=model_fn,
                   optimizer_fn=mox.get_optimizer_fn("sgd", LEARNING_RATE),
                   run_mode=mox.ModeKeys.TRAIN, batch_size=batch, log_dir=log_dir,
                   max_number_of_steps=steps, log_every_n_steps=log_every,
                   save_model_steps=save_steps)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--log_dir", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--model", default="mlp", choices=["mlp", "softmax"])
    parser.add_argument("--save_steps", type=int, default=10)
    args, _ = parser.parse_known_args()
    print(f"PID {os.getpid()}", flush=True)
    result = train(args.log_dir, args.steps, args.batch, args.model, args.save_steps)
    if result is not None:  # None in a process that only served
        print("RESULT " + json.dumps({key: float(value) for key, value in result.items()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
