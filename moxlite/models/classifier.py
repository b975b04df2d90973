"""A Keras classification network as a MoXing ``model_fn(inputs, mode)``.

The network is built on the first call (inside ``run``'s strategy scope) and
reused by every later call, so TRAIN, EVAL, inter-mode and EXPORT calls of
one run share the same variables.
"""

import tensorflow as tf

from moxlite.contract import ExportSpec, ModeKeys, ModelSpec


def classifier_model_fn(build_network, weight_decay=0.0, label_smoothing=0.0):
    """model_fn for ``build_network(image_shape)`` -> keras.Model mapping images to logits.

    The network is built from the shape of the first images (batch dimension
    dropped), so one model_fn serves any image size.

    loss = mean softmax cross-entropy + weight_decay * sum of squared kernel
    entries (L2, as keras.regularizers.L2 computes it);
    log_info = {loss, accuracy}; output_info = {logits, probabilities,
    classes[, labels]}; export_spec maps 'images' to probabilities and
    classes.

    Labels are class indices, or class distributions [batch, classes] (what MixUp and
    CutMix make); ``label_smoothing`` e mixes the target with the uniform distribution:
    (1 - e) * target + e / classes. The loss is computed on float32 logits whatever the
    network's compute dtype.
    """
    network = None

    def model_fn(inputs, mode):
        nonlocal network
        inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        images = inputs[0]
        if network is None:
            network = build_network(tuple(images.shape[1:]))
        logits = tf.cast(network(images, training=mode == ModeKeys.TRAIN), tf.float32)
        probabilities = tf.nn.softmax(logits)
        classes = tf.argmax(logits, axis=-1, output_type=tf.int32)
        output_info = {"logits": logits, "probabilities": probabilities, "classes": classes}
        export_spec = ExportSpec(inputs_dict={"images": images},
                                 outputs_dict={"probabilities": probabilities, "classes": classes})
        if len(inputs) < 2:
            return ModelSpec(output_info=output_info, export_spec=export_spec)
        labels = inputs[1]
        if labels.dtype.is_floating and labels.shape.rank == 2:   # soft targets
            targets = tf.cast(labels, tf.float32)
            labels = tf.argmax(targets, axis=-1, output_type=tf.int32)
        else:
            labels = tf.cast(labels, tf.int32)
            targets = tf.one_hot(labels, logits.shape[-1]) if label_smoothing else None
        output_info["labels"] = labels
        if targets is None:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        else:
            if label_smoothing:
                targets = targets * (1.0 - label_smoothing) + label_smoothing / logits.shape[-1]
            loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=targets, logits=logits))
        if weight_decay:
            kernels = [w for w in network.trainable_weights if "kernel" in w.path]
            loss += weight_decay * tf.add_n([tf.reduce_sum(tf.square(tf.cast(w.value, tf.float32))) for w in kernels])
        accuracy = tf.reduce_mean(tf.cast(tf.equal(classes, labels), tf.float32))
        return ModelSpec(loss=loss, log_info={"loss": loss, "accuracy": accuracy},
                         output_info=output_info, export_spec=export_spec)

    model_fn.network = lambda: network
    return model_fn
