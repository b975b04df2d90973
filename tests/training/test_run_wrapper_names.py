"""A second run() in one process finds the first one's variables under Keras wrappers (issue 33, item 7).

Bidirectional copies the layer it wraps and names the copies ``forward_<name>`` and
``backward_<name>``; the wrapped layer's name comes from Keras's process counter, so TRAIN then
EVAL in one process looked for ``forward_lstm_4`` in a checkpoint holding ``forward_lstm``.
TimeDistributed wraps the layer itself. The reference for EVAL's loss is the trained variables
themselves: the model the TRAIN run built first holds them after training.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from tests import runlib

BATCH = 8
RNG = np.random.RandomState(0)
SEQUENCES = RNG.rand(32, 5, 4).astype(np.float32)
LABELS = RNG.randint(0, 3, 32).astype(np.int32)


def input_fn(mode):
    dataset = tf.data.Dataset.from_tensor_slices((SEQUENCES, LABELS))
    return dataset.repeat() if mode == mox.ModeKeys.TRAIN else dataset


WRAPPED = {
    "bidirectional": lambda: keras.Sequential([keras.layers.Bidirectional(keras.layers.LSTM(4)),
                                               keras.layers.Dense(3)]),
    "time_distributed": lambda: keras.Sequential([keras.layers.TimeDistributed(keras.layers.Dense(4)),
                                                  keras.layers.Flatten(), keras.layers.Dense(3)]),
}


def loss_of(logits):
    return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(LABELS[:len(logits)], logits,
                                                                       from_logits=True))


def model_fn_for(build, built):
    """model_fn building the model inside (built once per call; the first one kept in ``built``)."""
    def model_fn(inputs, mode):
        sequences, labels = inputs
        net = build()
        built.append(net)
        logits = net(sequences)
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))
        return mox.ModelSpec(loss=loss, log_info={"loss": loss})
    return model_fn


def train_then_evaluate(tmp_path, train_fn, eval_fn):
    runlib.train(tmp_path, input_fn, train_fn, mox.get_optimizer_fn("sgd", learning_rate=0.5), steps=3,
                 batch_size=BATCH)
    return mox.run(input_fn=input_fn, model_fn=eval_fn, run_mode=mox.ModeKeys.EVAL, batch_size=BATCH,
                   checkpoint_path=str(tmp_path))


@pytest.mark.parametrize("wrapper", sorted(WRAPPED))
def test_eval_after_train_in_one_process_restores_a_wrapper_built_inside_model_fn(wrapper, tmp_path):
    keras.layers.LSTM(2)   # Keras's counters already moved, as after an earlier run in the process
    keras.layers.Dense(2)
    built = []
    model_fn = model_fn_for(WRAPPED[wrapper], built)
    metrics = train_then_evaluate(tmp_path, model_fn, model_fn)
    trained = built[0]   # holds the variables TRAIN updated
    np.testing.assert_allclose(metrics["loss"], float(loss_of(trained(SEQUENCES))), rtol=1e-5)


def test_eval_after_train_restores_a_bidirectional_closed_over_and_built_again(tmp_path):
    """A script that builds its model before each run: EVAL's copy has other counter names."""
    trained = WRAPPED["bidirectional"]()

    def closed_over(net):
        def model_fn(inputs, mode):
            sequences, labels = inputs
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, net(sequences),
                                                                               from_logits=True))
            return mox.ModelSpec(loss=loss, log_info={"loss": loss})
        return model_fn

    train_fn = closed_over(trained)
    mox.run(input_fn=input_fn, model_fn=train_fn, optimizer_fn=mox.get_optimizer_fn("sgd", learning_rate=0.5),
            run_mode=mox.ModeKeys.TRAIN, batch_size=BATCH, log_dir=str(tmp_path), max_number_of_steps=3)
    metrics = mox.run(input_fn=input_fn, model_fn=closed_over(WRAPPED["bidirectional"]()),
                      run_mode=mox.ModeKeys.EVAL, batch_size=BATCH, checkpoint_path=str(tmp_path))
    np.testing.assert_allclose(metrics["loss"], float(loss_of(trained(SEQUENCES))), rtol=1e-5)
