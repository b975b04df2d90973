"""A model closed over by ``model_fn`` and reached along different Python paths (issue 33, item 1).

``model_fn_through(path, net)`` calls ``net`` named directly, through a dict, a helper
function, a method of an object or a module attribute; only the first names it in
``model_fn``'s closure. Outputs and losses are the same whatever the path, so a run on one
path is the reference for the others.
"""

import types

import keras
import numpy as np
import tensorflow as tf

import moxlite as mox

PATHS = ("named", "dict", "helper", "method", "module_attribute")


def _caller(path, net):
    """A function (x, training) -> net's output, reaching ``net`` along ``path``."""
    if path == "named":
        return lambda x, training: net(x, training=training)
    if path == "dict":
        models = {"net": net}
        return lambda x, training: models["net"](x, training=training)
    if path == "helper":
        def forward(x, training):
            return net(x, training=training)
        return forward
    if path == "method":
        class Classifier:
            def __init__(self, network):
                self.network = network

            def logits(self, x, training):
                return self.network(x, training=training)
        return Classifier(net).logits
    if path == "module_attribute":
        nets = types.ModuleType("nets")
        nets.net = net
        return lambda x, training: nets.net(x, training=training)
    raise ValueError(path)


def model_fn_through(path, net):
    """A classification model_fn whose model_fn body never names ``net`` unless path is 'named'."""
    call = _caller(path, net)
    if path == "named":
        def model_fn(inputs, mode):
            images, labels = inputs
            return spec_for(images, labels, net(images, training=mode == mox.ModeKeys.TRAIN))
        return model_fn

    def model_fn(inputs, mode):
        images, labels = inputs
        return spec_for(images, labels, call(images, mode == mox.ModeKeys.TRAIN))
    return model_fn


def spec_for(images, labels, logits):
    loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))
    return mox.ModelSpec(loss=loss, log_info={"loss": loss}, output_info={"logits": logits},
                         export_spec=mox.ExportSpec(inputs_dict={"images": images}, outputs_dict={"logits": logits}))


def data(count, shape, num_classes, seed=0):
    """Inputs away from zero mean and unit variance, so that moving statistics move."""
    rng = np.random.RandomState(seed)
    images = (3.0 + 2.0 * rng.randn(count, *shape)).astype(np.float32)
    return images, rng.randint(0, num_classes, count).astype(np.int32)


def input_fn_for(images, labels):
    def input_fn(mode):
        dataset = tf.data.Dataset.from_tensor_slices((images, labels))
        return dataset.repeat() if mode == mox.ModeKeys.TRAIN else dataset
    return input_fn


def predicted_logits(input_fn, model_fn, checkpoint_path, batch_size):
    """PREDICT's logits over the whole input, in order."""
    calls = []
    mox.run(input_fn=input_fn, model_fn=model_fn, run_mode=mox.ModeKeys.PREDICT, batch_size=batch_size,
            checkpoint_path=checkpoint_path, output_fn=calls.append)
    return np.concatenate([output["logits"] for call in calls for output in call])


def moving_statistics(by_name):
    """{key: value} of the BatchNorm moving statistics among a checkpoint's {key: value}."""
    return {key: value for key, value in by_name.items() if "moving_" in key}
