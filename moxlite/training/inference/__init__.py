"""EVAL and PREDICT passes, and EXPORT as a SavedModel."""
