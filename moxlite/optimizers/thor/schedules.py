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
  ``end_value`` after ``total_steps``. moxlite adds an optional linear warm-up
  (not in MindSpore): with ``warmup_steps`` = w > 0 the value is multiplied by
  min(1, (step + 1) / w), laid over the decay rather than delaying it.

Values are computed in float64 and returned as float32, as MindSpore builds
its float64 table and casts it to float32.
"""

import keras
import tensorflow as tf

from moxlite import errors
from moxlite.declarations import did_you_mean
from moxlite.optimizers import recipe_tables

# MindSpore's published configurations, for recipes, docs and the benchmark's plan.
RESNET50_ASCEND = dict(lr_init=0.05803, lr_decay=4.04839, lr_end_epoch=53, decay_epochs=39,
                       damping_init=0.02714, damping_decay=0.50036, frequency=834, epochs=45)
RESNET50_GPU = dict(lr_init=0.05672, lr_decay=4.9687, lr_end_epoch=50, decay_epochs=39,
                    damping_init=0.02345, damping_decay=0.5467, frequency=834, epochs=40)
BERT_LEARNING_RATE = dict(initial_value=3.4e-3, end_value=3.244e-5, total_steps=30000, power=1.0)
BERT_DAMPING = dict(initial_value=5e-2, end_value=1e-6, total_steps=30000, power=1.0)


def _checked(schedule, **arguments):
    """The arguments as floats, checked against recipe_tables.SCHEDULES (the table the recipe
    loader checks a schedule block against); a one-line OptimizerError naming the first bad one."""
    recipe_tables.check_schedule_arguments(schedule, arguments, list(arguments))
    return {key: float(value) for key, value in arguments.items()}


class _ThorSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """What the THOR schedules share: a repr that names the schedule and its settings.

    ``NAME`` is the schedule's name in a recipe block, so ``repr`` reads as the block
    that builds it, e.g. ``thor_polynomial(initial_value=0.05, end_value=0.001,
    total_steps=1000, power=1)``: the thor wrapper's line in ``--dry-run`` (and any
    log of the wrapper's parameters) shows the settings, not an object address.
    """

    NAME = None

    def __repr__(self):
        settings = ", ".join(f"{key}={value:.6g}" if isinstance(value, float) else f"{key}={value!r}"
                             for key, value in self.get_config().items())
        return f"{self.NAME}({settings})"


def _epoch_at_end_of(step, steps_per_epoch):
    return (tf.cast(step, tf.float64) + 1.0) / steps_per_epoch


@keras.saving.register_keras_serializable(package="moxlite")
class ThorLearningRate(_ThorSchedule):
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
        values = _checked(self.NAME, lr_init=lr_init, lr_decay=lr_decay, lr_end_epoch=lr_end_epoch,
                          steps_per_epoch=steps_per_epoch, decay_epochs=decay_epochs)
        self.lr_init, self.lr_decay, self.lr_end_epoch = values["lr_init"], values["lr_decay"], values["lr_end_epoch"]
        self.steps_per_epoch, self.decay_epochs = values["steps_per_epoch"], values["decay_epochs"]

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
class ThorDamping(_ThorSchedule):
    """MindSpore's ``get_thor_damping``: damping_init * decay_rate ** (epoch / 10).

    damping_init: the damping at step 0 (ResNet-50: 0.02714 Ascend, 0.02345 GPU).
    decay_rate: the factor applied every 10 epochs (0.50036 / 0.5467).
    steps_per_epoch: steps (applied updates) per epoch, as for ``ThorLearningRate``.
    MindSpore's ``total_epochs`` argument only sizes its table (70 for ResNet-50,
    beyond any run); the formula does not depend on it, so it is not taken here.
    """

    NAME = "thor_damping"

    def __init__(self, damping_init, decay_rate, steps_per_epoch):
        values = _checked(self.NAME, damping_init=damping_init, decay_rate=decay_rate, steps_per_epoch=steps_per_epoch)
        self.damping_init, self.decay_rate = values["damping_init"], values["decay_rate"]
        self.steps_per_epoch = values["steps_per_epoch"]

    def __call__(self, step):
        epoch = _epoch_at_end_of(step, self.steps_per_epoch)
        return tf.cast(self.damping_init * tf.pow(tf.constant(self.decay_rate, tf.float64), epoch / 10.0), tf.float32)

    def get_config(self):
        return dict(damping_init=self.damping_init, decay_rate=self.decay_rate, steps_per_epoch=self.steps_per_epoch)


@keras.saving.register_keras_serializable(package="moxlite")
class ThorPolynomialDecay(_ThorSchedule):
    """MindSpore's BERT THOR schedules: polynomial decay, for the learning rate or the damping.

    initial_value: the value at step 0 (BERT: lr 3.4e-3, damping 5e-2).
    end_value: the value at ``total_steps`` and after (lr 3.244e-5, damping 1e-6).
    total_steps: steps of the decay (30,000 in MindSpore's BERT config).
    power: the power of the decay (1.0: linear).
    warmup_steps: steps of a linear warm-up laid over the decay, value * min(1, (step + 1) /
      warmup_steps); 0 (the default, MindSpore's schedules) for none. THOR over momentum on
      BERT-tiny reached a higher held-out accuracy with 50 of 600 (tools/README.md).
    """

    NAME = "thor_polynomial"

    def __init__(self, initial_value, end_value, total_steps, power=1.0, warmup_steps=0):
        values = _checked(self.NAME, initial_value=initial_value, end_value=end_value, total_steps=total_steps,
                          power=power, warmup_steps=warmup_steps)
        self.initial_value, self.end_value, self.power = values["initial_value"], values["end_value"], values["power"]
        self.total_steps, self.warmup_steps = int(values["total_steps"]), int(values["warmup_steps"])

    def __call__(self, step):
        step = tf.cast(step, tf.float64)
        remaining = tf.maximum(1.0 - step / self.total_steps, 0.0)
        value = (self.initial_value - self.end_value) * tf.pow(remaining, self.power) + self.end_value
        if self.warmup_steps:
            value *= tf.minimum((step + 1.0) / self.warmup_steps, 1.0)
        return tf.cast(tf.maximum(value, 0.0), tf.float32)

    def get_config(self):
        config = dict(initial_value=self.initial_value, end_value=self.end_value, total_steps=self.total_steps,
                      power=self.power)
        if self.warmup_steps:
            config["warmup_steps"] = self.warmup_steps
        return config


def bert_thor_learning_rate(**overrides):
    """MindSpore's BERT THOR learning rate (3.4e-3 to 3.244e-5, linear over 30,000 steps), overridable."""
    return ThorPolynomialDecay(**_overridden("bert_thor_learning_rate", BERT_LEARNING_RATE, overrides))


def bert_thor_damping(**overrides):
    """MindSpore's BERT THOR damping (5e-2 to 1e-6, linear over 30,000 steps), overridable."""
    return ThorPolynomialDecay(**_overridden("bert_thor_damping", BERT_DAMPING, overrides))


def _overridden(function, defaults, overrides):
    """``defaults`` with ``overrides``, whose names must be ThorPolynomialDecay's (a moxlite error, not TypeError)."""
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise errors.OptimizerError(f"{function}: unknown argument {unknown[0]!r}"
                                    f"{did_you_mean(unknown[0], defaults)}; accepted: {', '.join(defaults)}")
    return dict(defaults, **overrides)


# Recipe schedule kind -> class; the recipe layer reads the accepted keys from the signatures.
SCHEDULE_CLASSES = {cls.NAME: cls for cls in (ThorLearningRate, ThorDamping, ThorPolynomialDecay)}
# Keys a recipe may leave out because the run knows them.
DERIVED_FROM_RUN = ("steps_per_epoch",)
