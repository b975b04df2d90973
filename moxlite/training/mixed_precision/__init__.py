"""Mixed precision: the O0-O3 levels on Keras dtype policies, and a run's precision settings."""
