"""Train on the bundled MNIST sample through moxlite.run, in whatever cluster the flags say.

Used by the end-to-end distributed tests (one process per task, started by
tools/launch_local.py) and, imported, for the single-process reference run.

    python tests/dist_scripts/train_mnist.py --log_dir=/tmp/x --steps=20 --batch=16 [--model=mlp|softmax|tf1]
        [--save_steps=10] [--optimizer=sgd|momentum|momentum_lars] [--num_batches=1] [--nan_row=N]
        + MoXing cluster flags

``--optimizer=momentum_lars`` trains with momentum -> lars; ``--num_batches=N`` (N > 1) adds
batch_gradients(N) outermost: momentum -> lars -> batch_gradients. ``--optimizer=tf1_step_rate``: a TF1
GradientDescentOptimizer on a piecewise rate of the global step. ``--model=tf1``: softmax
regression on ``tf.compat.v1.get_variable`` variables (TF1 style, no Keras variable).
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


import moxlite as mox  # noqa: E402
from tests import runlib  # noqa: E402
from tests.dist_scripts import script_main  # noqa: E402

NUM_ROWS = 512
LEARNING_RATE = 0.1
MOMENTUM = 0.9
LARS_RATIO = 0.01


def tf1_step_rate_fn():
    """MoXing's TF1 idiom: a rate built from the global step inside optimizer_fn."""
    import tensorflow as tf

    step = tf.compat.v1.train.get_or_create_global_step()
    return tf.compat.v1.train.GradientDescentOptimizer(
        tf.compat.v1.train.piecewise_constant(step, [3, 6], [0.3, 0.1, 0.02]))


def optimizer_fn_for(optimizer="sgd", num_batches=1):
    """The optimizer factory ``--optimizer`` and ``--num_batches`` ask for."""
    if optimizer == "tf1_step_rate":
        optimizer_fn = tf1_step_rate_fn
    elif optimizer == "sgd":
        optimizer_fn = mox.get_optimizer_fn("sgd", LEARNING_RATE)
    elif optimizer == "momentum":
        optimizer_fn = mox.get_optimizer_fn("momentum", LEARNING_RATE, momentum=MOMENTUM)
    else:
        optimizer_fn = mox.get_optimizer_wrapper_fn(
            "lars", mox.get_optimizer_fn("momentum", LEARNING_RATE, momentum=MOMENTUM), ratio=LARS_RATIO)
    if num_batches > 1:
        optimizer_fn = mox.get_optimizer_wrapper_fn("batch_gradients", optimizer_fn, num_batches=num_batches)
    return optimizer_fn


def train(log_dir, steps, batch, model="mlp", save_steps=10, log_every=5, optimizer="sgd", num_batches=1,
          nan_row=None, summary_steps=10):
    images, labels = runlib.mnist_rows(NUM_ROWS)
    if nan_row is not None:   # a NaN in one sample: the loss of the step that reads it is NaN
        images[nan_row, 0] = float("nan")
    input_fn = runlib.input_fn_for(images, labels)
    model_fn = {"mlp": runlib.mlp_model_fn, "softmax": runlib.softmax_model_fn, "tf1": runlib.get_variable_softmax_model_fn("softmax_w", "softmax_b")}[model]
    return mox.run(input_fn=input_fn, model_fn=model_fn,
                   optimizer_fn=optimizer_fn_for(optimizer, num_batches),
                   run_mode=mox.ModeKeys.TRAIN, batch_size=batch, log_dir=log_dir,
                   max_number_of_steps=steps, log_every_n_steps=log_every,
                   save_model_steps=save_steps, save_summary_steps=summary_steps)


def add_own_arguments(parser):
    parser.add_argument("--model", default="mlp", choices=["mlp", "softmax", "tf1"])
    parser.add_argument("--save_steps", type=int, default=10)
    parser.add_argument("--log_every", type=int, default=5)
    parser.add_argument("--optimizer", default="sgd", choices=["sgd", "momentum", "momentum_lars", "tf1_step_rate"])
    parser.add_argument("--num_batches", type=int, default=1)
    parser.add_argument("--nan_row", type=int, default=None)


def main():
    args = script_main.parse_arguments(add_own_arguments)
    script_main.print_result(train(args.log_dir, args.steps, args.batch, args.model, args.save_steps, args.log_every,
                                   args.optimizer, args.num_batches, args.nan_row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
