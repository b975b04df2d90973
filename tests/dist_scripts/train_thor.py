"""Train the small digits CNN with thor(momentum) through moxlite.run, in whatever cluster the flags say.

Used by tests/distribute/test_thor.py (one process per task, started by tools/launch_local.py)
and, imported, for the single-process reference run.

    python tests/dist_scripts/train_thor.py --log_dir=/tmp/x --steps=6 --batch=16  + MoXing cluster flags

Options: --damping_decay=R (damping 0.05 * R^step, a schedule), --num_batches=N
(batch_gradients(thor(momentum)) over N micro-batches), --groups=M (the input is M
groups of --batch rows, each worker reading them in its own random order, so one batch is
one group: a refresh's factors tell which batch they came from), --steps_per_loop.
The result adds ``traces``: how many times the training loop's body (a trainer's ``_one_step``)
was traced in this process.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import moxlite as mox  # noqa: E402
from tests import runlib, thorlib  # noqa: E402
from tests.dist_scripts import script_main  # noqa: E402

NUM_ROWS = 256
THOR = dict(lr=0.05, momentum=0.9, damping=0.05, frequency=3, weight_decay=5e-4)


def decaying_damping(rate):
    """damping = THOR's 0.05 * rate^step, a schedule of the step."""
    def damping(step):
        import tensorflow as tf

        return THOR["damping"] * tf.pow(rate, tf.cast(step, tf.float32))
    return damping


def optimizer_fn_for(num_batches=1, damping=None, frequency=None, thor=True):
    settings = dict(THOR, damping=damping if damping is not None else THOR["damping"],
                    frequency=frequency or THOR["frequency"])
    if thor:
        thor_fn = thorlib.thor_optimizer_fn(**settings)
    else:   # the same momentum without THOR
        thor_fn = mox.get_optimizer_fn("momentum", learning_rate=settings["lr"], momentum=settings["momentum"])
    if num_batches == 1:
        return thor_fn
    return lambda: mox.get_optimizer_wrapper_fn("batch_gradients", thor_fn(), num_batches=num_batches)()


def grouped_input_fn(images, labels, groups, batch):
    """``groups`` groups of ``batch`` rows; each pass over them in a new random order (unseeded:
    every worker its own), so every batch of ``batch`` rows is exactly one group."""
    import tensorflow as tf

    def input_fn(mode):
        dataset = tf.data.Dataset.from_tensor_slices((images[:groups * batch].reshape(groups, batch, -1),
                                                      labels[:groups * batch].reshape(groups, batch)))
        return dataset.shuffle(groups).repeat().unbatch()
    return input_fn


def train(log_dir, steps, batch, num_batches=1, damping=None, groups=0, steps_per_loop=1, save_every=None,
          frequency=None, thor=True):
    images, labels = thorlib.small_digits(NUM_ROWS)
    input_fn = grouped_input_fn(images, labels, groups, batch) if groups else runlib.input_fn_for(images, labels)
    save_every = save_every or steps
    return mox.run(input_fn=input_fn, model_fn=thorlib.conv_model_fn("same"),
                   optimizer_fn=optimizer_fn_for(num_batches, damping, frequency, thor), run_mode=mox.ModeKeys.TRAIN,
                   batch_size=batch, log_dir=log_dir, max_number_of_steps=steps, log_every_n_steps=save_every,
                   save_model_steps=save_every, steps_per_loop=steps_per_loop, keep_checkpoint_max=20)


def add_own_arguments(parser):
    parser.add_argument("--num_batches", type=int, default=1)
    parser.add_argument("--damping_decay", type=float, default=None, help="damping = 0.05 * this^step")
    parser.add_argument("--groups", type=int, default=0)
    parser.add_argument("--steps_per_loop", type=int, default=1)
    parser.add_argument("--save_every", type=int, default=None)
    parser.add_argument("--frequency", type=int, default=None)


def counting_traces():
    """Count the traces of both trainers' loop body from now on; returns the list that grows."""
    from moxlite.training.trainers import async_trainer
    from moxlite.training.trainers import sync_trainer

    traces = []

    def counting(original):
        def counted(self, *args, **kwargs):
            traces.append(type(self).__name__)
            return original(self, *args, **kwargs)
        return counted

    for trainer in (sync_trainer.SyncTrainer, async_trainer.AsyncTrainer):
        trainer._one_step = counting(trainer._one_step)
    return traces


def main():
    args = script_main.parse_arguments(add_own_arguments)
    traces = counting_traces()
    result = train(args.log_dir, args.steps, args.batch, args.num_batches,
                   decaying_damping(args.damping_decay) if args.damping_decay else None, args.groups,
                   args.steps_per_loop, args.save_every, args.frequency)
    script_main.print_result(None if result is None else dict(result, traces=len(traces)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
