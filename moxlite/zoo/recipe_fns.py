"""A zoo classifier for recipes: ``input_fn`` and ``model_fn`` that a recipe names by reference.

    input:
      name: moxlite.zoo.recipe_fns:raw_folder_input_fn
      kwargs: {base_dir: /data/flowers, model_name: resnet_v1_50}
      num_samples: 3670
    model:
      name: moxlite.zoo.recipe_fns:classifier_model_fn
      kwargs: {model_name: resnet_v1_50, num_classes: 5, weight_decay: 0.0001}

They are the two halves of MoXing's fine-tuning script (see
``tests/moxing_ports/resnet_finetune_raw.py``) as reusable functions.
"""

import tensorflow as tf

from moxlite import graph_collections
from moxlite.contract import ExportSpec, ModeKeys, ModelSpec
from moxlite.data.zoo_preprocessing import get_data_augmentation_fn
from moxlite.data.raw_images import ImageClassificationRawDataset, ImageClassificationRawMetadata
from moxlite.zoo.network import REGULARIZATION_LOSSES, get_model_fn


def raw_folder_input_fn(mode, base_dir, model_name, image_size=None, num_epochs=None, eval_dir=None):
    """Images of ``base_dir/<class>/`` with ``model_name``'s standard augmentation for ``mode``.

    TRAIN shuffles and repeats ``num_epochs`` times (forever when None); other modes read
    ``eval_dir`` (default: base_dir) once, in order.
    """
    training = mode == ModeKeys.TRAIN
    augmentation_fn = get_data_augmentation_fn(model_name, mode, output_height=image_size, output_width=image_size)
    metadata = ImageClassificationRawMetadata(base_dir if training or not eval_dir else eval_dir)
    dataset = ImageClassificationRawDataset(metadata, num_epochs=num_epochs if training else 1, shuffle=training,
                                            augmentation_fn=augmentation_fn)
    return dataset.get(["image", "label"])


def classifier_model_fn(inputs, mode, model_name, num_classes, weight_decay=0.0, weights=None):
    """Cross-entropy plus the zoo's weight decay; logs loss and accuracy, exports the logits."""
    images, labels = inputs
    logits, _ = get_model_fn(model_name, mode, num_classes, weight_decay=weight_decay, weights=weights)(images)
    logits = tf.cast(logits, tf.float32)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    regularization = graph_collections.get_collection(REGULARIZATION_LOSSES)
    if regularization:
        loss = loss + tf.cast(tf.add_n(regularization), tf.float32)
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1, output_type=labels.dtype), labels), tf.float32))
    return ModelSpec(loss=loss, log_info={"loss": loss, "accuracy": accuracy},
                     output_info={"logits": logits},
                     export_spec=ExportSpec(inputs_dict={"images": images}, outputs_dict={"logits": logits}))
