"""The runner: ``run`` and the loops, checkpoints, logs and exports behind it."""
