"""Compiled steps (XLA): whether a step runs compiled, and the compiled updates and parameter-server steps."""
