"""What the runner sees of model_fn: its variables, created once, and every Keras layer call."""
