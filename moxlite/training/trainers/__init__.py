"""The trainers: the synchronous and asynchronous loops, their per-replica steps, stops and non-finite checks."""
