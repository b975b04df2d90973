"""Train a tiny keras-hub BERT built BEFORE run() inside moxlite.strategy_scope(), in whatever cluster the flags say.

Used by tests/models/test_bert_training.py (one process per task, started by tools/launch_local.py)
and, imported, for the single-process reference run at the global batch.

    python tests/dist_scripts/train_bert.py --log_dir=/tmp/x --steps=3 --batch=4  + MoXing cluster flags
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import moxlite as mox  # noqa: E402
from tests import bertlib  # noqa: E402
from tests.dist_scripts import script_main  # noqa: E402

NUM_SAMPLES = 32


def train(log_dir, steps, batch):
    import keras

    from moxlite.models import bert

    with mox.strategy_scope():
        backbone = bertlib.tiny_backbone(seed=0)
    keras.utils.set_random_seed(7)   # the heads, made inside model_fn
    model_fn = bert.bert_model_fn(backbone=backbone)
    return mox.run(input_fn=bertlib.input_fn_for(bertlib.pretraining_arrays(NUM_SAMPLES)), model_fn=model_fn,
                   optimizer_fn=mox.get_optimizer_fn("momentum", learning_rate=0.1, momentum=0.9),
                   run_mode=mox.ModeKeys.TRAIN, batch_size=batch, log_dir=log_dir, max_number_of_steps=steps,
                   log_every_n_steps=steps)


def main():
    args = script_main.parse_arguments()
    script_main.print_result(train(args.log_dir, args.steps, args.batch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
