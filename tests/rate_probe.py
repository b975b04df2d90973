"""Records every learning rate a Keras optimizer reads, for tests that run a ported script as its own process.

``install(path)`` runs before the script when ``MOXLITE_TEST_RATE_LOG`` names a file (``tests/portlib.py``):
each time an optimizer reads its current learning rate (Keras reads it once per applied update),
one line ``<optimizer iterations> <rate>`` is appended to that file, from inside the traced step
too (``tf.print`` to a file). A ported script's rates can then be compared, update by update,
with what its own rate code gives in a TF1 graph session. Test-only: it wraps a private Keras
method and changes no value.
"""

import tensorflow as tf
from keras.src.optimizers import base_optimizer


def install(path):
    """From now on, every learning rate a Keras optimizer reads is appended to ``path``."""
    read_rate = base_optimizer.BaseOptimizer._get_current_learning_rate

    def recorded_rate(self):
        rate = read_rate(self)
        tf.print(self.iterations, tf.cast(rate, tf.float64), output_stream="file://" + path, summarize=-1)
        return rate

    base_optimizer.BaseOptimizer._get_current_learning_rate = recorded_rate


def read(path):
    """{optimizer iteration: rate} from a log this probe wrote (a rate read twice at one iteration once)."""
    rates = {}
    with open(path) as stream:
        for line in stream:
            iteration, rate = line.split()
            rates.setdefault(int(iteration), float(rate))
    return rates
