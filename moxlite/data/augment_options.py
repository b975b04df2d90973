"""The training-set augmentation's settings, declared once (``moxlite.data.train_augmentation.Augmentation``
and a recipe's ``input.augment`` both check against this block).

Nothing here imports TensorFlow.
"""

import dataclasses
from typing import List

from moxlite import ranges
from moxlite.declarations import Rule, setting, with_rules


def _value_range_ordered(values, image_shape):
    low, high = values["value_range"]
    if not low < high:
        return f"{values['value_range']} must be [low, high] with low < high, e.g. [0.0, 1.0] or [0.0, 255.0]"
    return None


@with_rules(Rule("value_range", _value_range_ordered))
@dataclasses.dataclass(kw_only=True)
class AugmentOptions:
    """Training-set augmentation with Keras's layers (moxlite.data.train_augmentation); 0 turns a step off."""

    rand_augment_ops: int = setting(0, "RandAugment operations per image (keras.layers.RandAugment num_ops).",
                                    valid=ranges.integer(0))
    rand_augment_magnitude: float = setting(0.5, "RandAugment strength in [0, 1] (its factor; timm's m9 is 0.9).",
                                            valid=ranges.probability())
    random_erasing: float = setting(0.0, "Probability of erasing a rectangle (keras.layers.RandomErasing factor).",
                                    valid=ranges.probability())
    mixup_alpha: float = setting(0.0, "MixUp's alpha (keras.layers.MixUp); labels become class distributions.",
                                 valid=ranges.number(minimum=0))
    cutmix_alpha: float = setting(0.0, "CutMix's alpha (keras.layers.CutMix factor).", valid=ranges.number(minimum=0))
    switch_prob: float = setting(0.5, "With MixUp and CutMix both on: probability of CutMix for a batch.",
                                 valid=ranges.probability())
    mix_batch: int = setting(64, "Consecutive samples mixed with each other.", valid=ranges.integer(2))
    value_range: List[float] = setting([0.0, 1.0], "Range of the pixel values, [low, high] with low < high.",
                                       valid=ranges.list_of(ranges.number(), length=2))
