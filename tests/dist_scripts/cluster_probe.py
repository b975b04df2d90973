"""Form a real cluster through moxlite.distribute.setup() and prove it works.

Synchronous: every worker contributes (task_index + 1) and all-reduces it;
the sum must be n(n+1)/2. Asynchronous: the coordinator schedules 200
increments of a plain tf.Variable on the workers; the ps must end at 200.
Prints one line "RESULT {json}" from every process that trains.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

from moxlite import distribute  # noqa: E402

INCREMENTS = 200


def main():
    setup = distribute.setup()
    print(setup.describe(), flush=True)
    if setup.serves_only:
        setup.serve_forever()
        return 0
    result = {"kind": setup.kind, "role": setup.role, "task_index": setup.task_index,
              "is_chief": setup.is_chief, "num_workers": setup.num_workers,
              "num_replicas_in_sync": setup.num_replicas_in_sync}
    strategy = setup.strategy
    if setup.coordinator is not None:
        with strategy.scope():
            # A plain tf.Variable: its assign_add is atomic on the ps.
            counter = tf.Variable(0, dtype=tf.int64)

        @tf.function
        def increment():
            counter.assign_add(1)

        for _ in range(INCREMENTS):
            setup.coordinator.schedule(increment)
        setup.coordinator.join()
        result["counter"] = int(counter.numpy())
    else:
        contribution = float(setup.view.task_index + 1)
        value = strategy.run(lambda: tf.constant(contribution))
        result["sum"] = float(strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None).numpy())
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
