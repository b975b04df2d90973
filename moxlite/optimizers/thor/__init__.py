"""THOR, MindSpore's second-order optimizer: the preconditioner and its factors, inverses, damping, refresh and schedules."""
