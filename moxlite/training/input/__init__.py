"""From input_fn to per-replica batches, and what an iterator-read input is made of."""
