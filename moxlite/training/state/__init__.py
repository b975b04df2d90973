"""A run's state across processes: checkpoints, their keys, and resuming from them."""
