"""Data that ships with moxlite and built-in input functions."""
