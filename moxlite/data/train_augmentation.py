"""Training-set augmentation with Keras's own layers: RandAugment, RandomErasing, MixUp, CutMix.

The Swin recipe's pipeline (timm's order): per sample RandAugment, then random
erasing; per batch, MixUp or CutMix (one of the two, chosen per batch with
``switch_prob``), which turn the labels into class distributions. The batch for
mixing is ``mix_batch`` consecutive samples, after which the stream is unbatched
again, so ``run``'s own batching is unchanged. Only the TRAIN input is augmented.
"""

import dataclasses
from typing import Sequence

import keras
import tensorflow as tf

from moxlite.contract import ModeKeys


@dataclasses.dataclass
class Augmentation:
    """What to apply; 0 turns a step off."""

    rand_augment_ops: int = 0          # RandAugment operations per image
    rand_augment_magnitude: float = 0.5  # RandAugment factor in [0, 1] (timm's m9 is 0.9)
    random_erasing: float = 0.0        # probability of erasing a rectangle of an image
    mixup_alpha: float = 0.0           # MixUp's Beta(alpha, alpha)
    cutmix_alpha: float = 0.0          # CutMix's Beta(alpha, alpha)
    switch_prob: float = 0.5           # with both on: probability of CutMix rather than MixUp per batch
    mix_batch: int = 64                # samples mixed together
    value_range: Sequence[float] = (0.0, 1.0)
    seed: int = 0

    def __post_init__(self):
        # The one declaration of these settings (ranges and rules), which a recipe's input.augment is too.
        from moxlite import errors
        from moxlite.data.augment_options import AugmentOptions
        from moxlite.declarations import check_values

        values = {key: value for key, value in dataclasses.asdict(self).items() if key != "seed"}
        found = check_values(AugmentOptions, values)
        if found:
            raise errors.ArgumentError(f"Augmentation: {found[0]}={found[1]}")

    @property
    def active(self):
        return bool(self.rand_augment_ops or self.random_erasing or self.mixup_alpha or self.cutmix_alpha)

    @property
    def mixes(self):
        return bool(self.mixup_alpha or self.cutmix_alpha)


def augmented_input_fn(input_fn, num_classes, augmentation: Augmentation):
    """``input_fn`` whose TRAIN samples are augmented (labels one-hot when mixed)."""
    if not augmentation.active:
        return input_fn
    value_range = tuple(float(v) for v in augmentation.value_range)
    seed = augmentation.seed
    per_image = []
    if augmentation.rand_augment_ops:
        per_image.append(keras.layers.RandAugment(
            value_range=value_range, num_ops=augmentation.rand_augment_ops,
            factor=augmentation.rand_augment_magnitude, seed=seed, dtype="float32"))
    if augmentation.random_erasing:
        per_image.append(keras.layers.RandomErasing(
            factor=augmentation.random_erasing, value_range=value_range, seed=seed + 1, dtype="float32"))
    mixup = keras.layers.MixUp(alpha=augmentation.mixup_alpha, seed=seed + 2, dtype="float32") \
        if augmentation.mixup_alpha else None
    cutmix = keras.layers.CutMix(factor=augmentation.cutmix_alpha, seed=seed + 3, dtype="float32") \
        if augmentation.cutmix_alpha else None
    switch = tf.random.Generator.from_seed(seed + 4) if mixup and cutmix else None

    def augment_batch(images, labels):
        images = tf.cast(images, tf.float32)
        for layer in per_image:
            images = layer(images, training=True)
        if not augmentation.mixes:
            return images, labels
        data = {"images": images, "labels": tf.one_hot(tf.cast(labels, tf.int32), num_classes)}
        if mixup and cutmix:
            use_cutmix = switch.uniform([]) < augmentation.switch_prob
            data = tf.cond(use_cutmix, lambda: cutmix(data, training=True), lambda: mixup(data, training=True))
        else:
            data = (mixup or cutmix)(data, training=True)
        return data["images"], data["labels"]

    def wrapped(mode):
        dataset = input_fn(mode)
        if mode != ModeKeys.TRAIN:
            return dataset
        return (dataset.batch(augmentation.mix_batch, drop_remainder=True)
                .map(augment_batch, num_parallel_calls=tf.data.AUTOTUNE)
                .unbatch())

    return wrapped
