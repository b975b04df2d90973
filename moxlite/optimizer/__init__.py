"""MoXing's ``moxing.tensorflow.optimizer`` path, so ``from moxlite.optimizer import learning_rate_scheduler`` works.

moxlite's own optimizer code lives in ``moxlite.optimizers`` (plural); this
package only gives MoXing's import path.
"""

from moxlite.optimizer import learning_rate_scheduler

__all__ = ["learning_rate_scheduler"]
