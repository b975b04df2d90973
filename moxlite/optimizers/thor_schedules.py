"""THOR's learning-rate and damping schedules, as Keras schedules of the step.

MindSpore trains THOR with schedules of its own, precomputed there as one
value per step; here each is a ``keras.optimizers.schedules.LearningRateSchedule``
evaluated at the step, so it can be given

- as ``learning_rate=`` to ``get_optimizer_fn`` (inside ``moxlite.run`` it then
  reads the run's exact global step, counted in applied updates, like every
  Keras schedule: see ``moxlite.optimizers.schedules``);
- as ``damping=`` to the ``thor`` wrapper (a callable of the step);
- from a recipe, as a schedule block ``{schedule: thor, lr_init: ..., ...}``.

The formulas, with e = (step + 1) / steps_per_epoch (the epoch reached at the
end of step ``step``, counted from 0):

- ``ThorLearningRate`` (MindSpore's ``get_thor_lr``):
  lr = lr_init * (1 - e / lr_end_epoch) ** lr_decay, halved once e >= decay_epochs
  and halved again once e >= decay_epochs + 1. It reaches 0 at e = lr_end_epoch
  and stays 0 after (MindSpore's table simply ends there).
- ``ThorDamping`` (``get_thor_damping``): damping = damping_init * decay_rate ** (e / 10).
- ``ThorPolynomialDecay`` (the BERT variants ``get_bert_thor_lr`` and
  ``get_bert_thor_damping``): polynomial decay without warm-up from
  ``initial_value`` to ``end_value`` over ``total_steps``, here at the step itself
  (not step + 1): value = (initial - end) * (1 - step / total_steps) ** power + end,
  ``end_value`` after ``total_steps``.

Values are computed in float64 and returned as float32, as MindSpore builds
its float64 table and casts it to float32.
"""

import math

import keras
import tensorflow as tf

from moxlite import errors

# MindSpore's published configurations, for recipes, docs and the benchmark's plan.
RESNET50_ASCEND = dict(lr_init=0.05803, lr_decay=4.04839, lr_end_epoch=53, decay_epochs=39,
                       damping_init=0.02714, damping_decay=0.50036, frequency=834, epochs=45)
RESNET50_GPU = dict(lr_init=0.05672, lr_decay=4.9687, lr_end_epoch=50, decay_epochs=39,
                    damping_init=0.02345, damping_decay=0.5467, frequency=834, epochs=40)
BERT_LEARNING_RATE = dict(initial_value=3.4e-3, end_value=3.244e-5, total_steps=30000, power=1.0)
BERT_DAMPING = dict(initial_value=5e-2, end_value=1e-6, total_steps=30000, power=1.0)


def _number(schedule, name, value, minimum=None, above=None, integer=False):
    """``value`` as a float (or int), or a one-line OptimizerError naming the argument and the range."""
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not float(value).is_integer()):
        raise errors.OptimizerError(f"{schedule}: {name}={errors.describe(value)} is not {kind}; give {kind}"
                                    + (f" > {above:g}" if above is not None else f" >= {minimum:g}" if minimum is not None else ""))
    value = float(value)
    if not math.isfinite(value):
        raise errors.OptimizerError(f"{schedule}: {name}={value!r} must be finite")
    if above is not None and not value > above:
        raise errors.OptimizerError(f"{schedule}: {name}={value:g} must be > {above:g}")
    if minimum is not None and value < minimum:
        raise errors.OptimizerError(f"{schedule}: {name}={value:g} must be >= {minimum:g}")
    return int(value) if integer else value


def _epoch_at_end_of(step, steps_per_epoch):
    return (tf.cast(step, tf.float64) + 1.0) / steps_per_epoch


@keras.saving.register_keras_serializable(package="moxlite")
class ThorLearningRate(keras.optimizers.schedules.LearningRateSchedule):
    """MindSpore's ``get_thor_lr``: a power decay to 0 at ``lr_end_epoch``, halved twice near the end.

    lr_init: the learning rate at step 0 (before the decay of its first step).
    lr_decay: the power of the decay (MindSpore's ResNet-50: 4.04839 Ascend, 4.9687 GPU).
    lr_end_epoch: the epoch at which the learning rate reaches 0 (53 / 50); it
        may exceed the epochs trained (45 / 40), as in MindSpore's configs.
    steps_per_epoch: steps (applied updates) per epoch, MindSpore's dataset size:
        1,281,167 // (32 x 8) = 5004 for ImageNet at 32 per device on 8 devices.
    decay_epochs: the epoch from which the value is halved (and halved again one
        epoch later); MindSpore's ResNet-50 uses 39, its default is 100.
    """

    NAME = "thor"

    def __init__(self, lr_init, lr_decay, lr_end_epoch, steps_per_epoch, decay_epochs=100):
        self.lr_init = _number(self.NAME, "lr_init", lr_init, above=0)
        self.lr_decay = _number(self.NAME, "lr_decay", lr_decay, minimum=0)
        self.lr_end_epoch = _number(self.NAME, "lr_end_epoch", lr_end_epoch, above=0)
        self.steps_per_epoch = _number(self.NAME, "steps_per_epoch", steps_per_epoch, above=0)
        self.decay_epochs = _number(self.NAME, "decay_epochs", decay_epochs, minimum=0)

    def __call__(self, step):
        epoch = _epoch_at_end_of(step, self.steps_per_epoch)
        remaining = tf.maximum(1.0 - epoch / self.lr_end_epoch, 0.0)
        value = self.lr_init * tf.pow(remaining, self.lr_decay)
        value = tf.where(epoch >= self.decay_epochs, 0.5 * value, value)
        value = tf.where(epoch >= self.decay_epochs + 1.0, 0.5 * value, value)
        return tf.cast(value, tf.float32)

    def get_config(self):
        return dict(lr_init=self.lr_init, lr_decay=self.lr_decay, lr_end_epoch=self.lr_end_epoch,
                    steps_per_epoch=self.steps_per_epoch, decay_epochs=self.decay_epochs)


@keras.saving.register_keras_serializable(package="moxlite")
class ThorDamping(keras.optimizers.schedules.LearningRateSchedule):
    """MindSpore's ``get_thor_damping``: damping_init * decay_rate ** (epoch / 10).

    damping_init: the damping at step 0 (ResNet-50: 0.02714 Ascend, 0.02345 GPU).
    decay_rate: the factor applied every 10 epochs (0.50036 / 0.5467).
    steps_per_epoch: steps (applied updates) per epoch, as for ``ThorLearningRate``.
    MindSpore's ``total_epochs`` argument only sizes its table (70 for ResNet-50,
    beyond any run); the formula does not depend on it, so it is not taken here.
    """

    NAME = "thor_damping"

    def __init__(self, damping_init, decay_rate, steps_per_epoch):
        self.damping_init = _number(self.NAME, "damping_init", damping_init, above=0)
        self.decay_rate = _number(self.NAME, "decay_rate", decay_rate, above=0)
        self.steps_per_epoch = _number(self.NAME, "steps_per_epoch", steps_per_epoch, above=0)

    def __call__(self, step):
        epoch = _epoch_at_end_of(step, self.steps_per_epoch)
        return tf.cast(self.damping_init * tf.pow(tf.constant(self.decay_rate, tf.float64), epoch / 10.0), tf.float32)

    def get_config(self):
        return dict(damping_init=self.damping_init, decay_rate=self.decay_rate, steps_per_epoch=self.steps_per_epoch)


@keras.saving.register_keras_serializable(package="moxlite")
class ThorPolynomialDecay(keras.optimizers.schedules.LearningRateSchedule):
    """MindSpore's BERT THOR schedules: polynomial decay, no warm-up, for the learning rate or the damping.

    initial_value: the value at step 0 (BERT: lr 3.4e-3, damping 5e-2).
    end_value: the value at ``total_steps`` and after (lr 3.244e-5, damping 1e-6).
    total_steps: steps of the decay (30,000 in MindSpore's BERT config).
    power: the power of the decay (1.0: linear).
    """

    NAME = "thor_polynomial"

    def __init__(self, initial_value, end_value, total_steps, power=1.0):
        self.initial_value = _number(self.NAME, "initial_value", initial_value, above=0)
        self.end_value = _number(self.NAME, "end_value", end_value, minimum=0)
        self.total_steps = _number(self.NAME, "total_steps", total_steps, above=0, integer=True)
        self.power = _number(self.NAME, "power", power, minimum=0)

    def __call__(self, step):
        remaining = tf.maximum(1.0 - tf.cast(step, tf.float64) / self.total_steps, 0.0)
        value = (self.initial_value - self.end_value) * tf.pow(remaining, self.power) + self.end_value
        return tf.cast(tf.maximum(value, 0.0), tf.float32)

    def get_config(self):
        return dict(initial_value=self.initial_value, end_value=self.end_value, total_steps=self.total_steps,
                    power=self.power)


def bert_thor_learning_rate(**overrides):
    """MindSpore's BERT THOR learning rate (3.4e-3 to 3.244e-5, linear over 30,000 steps), overridable."""
    return ThorPolynomialDecay(**dict(BERT_LEARNING_RATE, **overrides))


def bert_thor_damping(**overrides):
    """MindSpore's BERT THOR damping (5e-2 to 1e-6, linear over 30,000 steps), overridable."""
    return ThorPolynomialDecay(**dict(BERT_DAMPING, **overrides))


# Recipe schedule kind -> class; the recipe layer reads the accepted keys from the signatures.
SCHEDULE_CLASSES = {cls.NAME: cls for cls in (ThorLearningRate, ThorDamping, ThorPolynomialDecay)}
# Keys a recipe may leave out because the run knows them.
DERIVED_FROM_RUN = ("steps_per_epoch",)
