"""Input the way MoXing scripts give it: an iterator's get_next(), ready batches, a generator.

MoXing's Getting Started passes no batch_size and returns
``make_one_shot_iterator(ds).get_next()`` over ready batches. TRAIN then runs until the
data ends and EVAL covers every sample. Each form below is checked against numpy: the
weights after every batch the data holds, the accuracy over every sample. What moxlite
cannot read the batch structure of stops with one line. It never trains on one batch.
"""

import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite import errors
from tests import runlib

BATCH, NUM = 20, 100   # five batches


@pytest.fixture(scope="module")
def data():
    return runlib.mnist_rows(NUM)


def _train(input_fn, log_dir, **kwargs):
    return runlib.train(log_dir, input_fn, runlib.softmax_model_fn, mox.get_optimizer_fn("sgd", 0.5),
                        steps=10 ** 9, **kwargs)


def _evaluate(input_fn, log_dir, **kwargs):
    return mox.run(input_fn=input_fn, model_fn=runlib.softmax_model_fn, run_mode=mox.ModeKeys.EVAL,
                   log_dir=str(log_dir), **kwargs)


def _check_trained_on_every_batch(log_dir, images, labels, result):
    kernel, bias = runlib.numpy_softmax_regression(images, labels, BATCH, NUM // BATCH, 0.5)
    assert result["global_step"] == NUM // BATCH
    saved = list(runlib.checkpoint_by_name(str(log_dir)).values())
    np.testing.assert_allclose(saved[0], kernel, atol=2e-5)
    np.testing.assert_allclose(saved[1], bias, atol=2e-5)
    return kernel, bias


def _batches(images, labels):
    return tf.data.Dataset.from_tensor_slices((images, labels)).batch(BATCH)


def test_get_next_of_ready_batches_without_batch_size_trains_to_the_end_and_evaluates_all(tmp_path, data):
    images, labels = data

    def input_fn(mode):
        return tf.compat.v1.data.make_one_shot_iterator(_batches(images, labels)).get_next()

    kernel, bias = _check_trained_on_every_batch(tmp_path, images, labels, _train(input_fn, tmp_path))
    metrics = _evaluate(input_fn, tmp_path)
    assert metrics["num_samples"] == NUM
    expected = np.mean((images @ kernel + bias).argmax(axis=1) == labels)
    assert metrics["accuracy"] == pytest.approx(expected, abs=1e-6)


def test_a_generator_is_read_once_in_its_own_order_through_get_next(tmp_path, data):
    images, labels = data
    served = []   # a stateful source, like mnist.train.next_batch: each read moves it on

    def input_fn(mode):
        def gen():
            for _ in range(NUM // BATCH):
                start = len(served) * BATCH % NUM
                served.append(start)
                yield images[start:start + BATCH], labels[start:start + BATCH]

        ds = tf.data.Dataset.from_generator(gen, output_signature=(
            tf.TensorSpec([None, 784], tf.float32), tf.TensorSpec([None], tf.int32)))
        x, y = tf.compat.v1.data.make_one_shot_iterator(ds).get_next()
        return x, y

    _check_trained_on_every_batch(tmp_path, images, labels, _train(input_fn, tmp_path))
    assert served == [0, 20, 40, 60, 80]   # input_fn ran once; its first batch was not lost


def test_ready_batches_and_a_generator_dataset_without_batch_size(tmp_path, data):
    images, labels = data
    result = _train(lambda mode: _batches(images, labels), tmp_path / "batched")
    _check_trained_on_every_batch(tmp_path / "batched", images, labels, result)

    def gen():
        for start in range(0, NUM, BATCH):
            yield images[start:start + BATCH], labels[start:start + BATCH]

    def generated(mode):
        return tf.data.Dataset.from_generator(gen, output_signature=(
            tf.TensorSpec([None, 784], tf.float32), tf.TensorSpec([None], tf.int32)))

    result = _train(generated, tmp_path / "generated")
    _check_trained_on_every_batch(tmp_path / "generated", images, labels, result)
    assert _evaluate(generated, tmp_path / "generated")["num_samples"] == NUM


def test_get_next_of_samples_is_batched_by_batch_size(tmp_path, data):
    images, labels = data

    def input_fn(mode):
        samples = tf.data.Dataset.from_tensor_slices((images, labels))
        return tf.compat.v1.data.make_one_shot_iterator(samples).get_next()

    result = _train(input_fn, tmp_path, batch_size=BATCH)
    _check_trained_on_every_batch(tmp_path, images, labels, result)


def test_chosen_features_of_a_dict_element(tmp_path, data):
    images, labels = data

    def input_fn(mode):
        features = tf.data.Dataset.from_tensor_slices({"id": np.arange(NUM), "image": images, "label": labels})
        element = tf.compat.v1.data.make_one_shot_iterator(features.batch(BATCH)).get_next()
        return element["image"], element["label"]

    _check_trained_on_every_batch(tmp_path, images, labels, _train(input_fn, tmp_path))


def test_tensors_computed_from_get_next_are_refused_in_one_line(tmp_path, data):
    images, labels = data

    def input_fn(mode):
        x, y = tf.compat.v1.data.make_one_shot_iterator(_batches(images, labels)).get_next()
        return x * 2.0, y

    with pytest.raises(errors.ArgumentError) as caught:
        _train(input_fn, tmp_path / "run")
    message = str(caught.value)
    assert "\n" not in message
    assert "only 1 of the 2 returned tensors are" in message and "dataset.map" in message
    assert not (tmp_path / "run").exists()

    def computed(mode):
        x, _ = tf.compat.v1.data.make_one_shot_iterator(_batches(images, labels)).get_next()
        return x, tf.zeros([BATCH], tf.int32)

    with pytest.raises(errors.ArgumentError, match="computed from the element get_next"):
        _train(lambda mode: tuple(t + 0 for t in computed(mode)), tmp_path / "run")


def test_without_batch_size_samples_are_refused_in_one_line(tmp_path, data):
    images, labels = data
    with pytest.raises(errors.ArgumentError, match=r"has no batch_size to batch them by; pass batch_size"):
        _train(lambda mode: (images, labels), tmp_path / "arrays")
    scalars = lambda mode: tf.data.Dataset.from_tensor_slices((images, labels))  # noqa: E731
    with pytest.raises(errors.ArgumentError, match=r"component of shape \(\), which has no batch dimension"):
        _train(scalars, tmp_path / "samples")
    uneven = lambda mode: tf.data.Dataset.from_tensors((images[:BATCH], labels[:BATCH // 2]))  # noqa: E731
    with pytest.raises(errors.ArgumentError, match=r"have different first dimensions \[10, 20\]"):
        _train(uneven, tmp_path / "uneven")
    assert not any((tmp_path / name).exists() for name in ("arrays", "samples", "uneven"))


def test_interleaved_evaluation_of_get_next_input_covers_every_sample_each_time(tmp_path, data):
    """inter_mode=EVAL reads input_fn anew for each evaluation: a one-shot iterator is read once."""
    images, labels = data

    def input_fn(mode):
        if mode == mox.ModeKeys.TRAIN:
            return _batches(images, labels).repeat()
        return tf.compat.v1.data.make_one_shot_iterator(_batches(images[:60], labels[:60])).get_next()

    mox.run(input_fn=input_fn, model_fn=runlib.softmax_model_fn, optimizer_fn=mox.get_optimizer_fn("sgd", 0.5),
            run_mode=mox.ModeKeys.TRAIN, inter_mode=mox.ModeKeys.EVAL, log_dir=str(tmp_path),
            max_number_of_steps=4, save_model_steps=2)
    from tests.training.test_run_logs import read_scalars

    evaluated = read_scalars(str(tmp_path / "eval"))["accuracy"]
    assert sorted(evaluated) == [2, 4]
    for step in (2, 4):
        kernel, bias = runlib.numpy_softmax_regression(images, labels, BATCH, step, 0.5)
        expected = np.mean((images[:60] @ kernel + bias).argmax(axis=1) == labels[:60])
        assert evaluated[step] == pytest.approx(expected, abs=1e-6)


def test_fetch_strategy_fn_of_moxings_signature_is_refused_in_one_line(tmp_path, data):
    images, labels = data
    with pytest.raises(errors.ArgumentError, match=r"^fetch_strategy_fn=.* is not supported .*; drop it$"):
        _train(lambda mode: _batches(images, labels), tmp_path / "run", fetch_strategy_fn=lambda: None)
    assert not (tmp_path / "run").exists()
    # MoXing's positional order: export_model, then fetch_strategy_fn, then save_model_steps.
    import inspect

    parameters = list(inspect.signature(mox.run).parameters)
    assert parameters[parameters.index("export_model"):parameters.index("export_model") + 3] == [
        "export_model", "fetch_strategy_fn", "save_model_steps"]


def test_get_next_inside_a_traced_input_fn_is_refused_not_taken_as_the_data():
    """A parameter-server worker traces input_fn: there get_next() is one symbolic batch."""
    from moxlite.training.input.replica_batches import call_input_fn

    def input_fn(mode):
        return tf.compat.v1.data.make_one_shot_iterator(tf.data.Dataset.range(8).batch(2)).get_next()

    traced = tf.function(lambda: call_input_fn(input_fn, mox.ModeKeys.TRAIN, batch_size=2).cardinality(),
                         autograph=False)
    with pytest.raises(errors.ArgumentError, match=r"read a tf.data iterator in mode TRAIN while traced .*"
                                                   r"return the tf.data.Dataset itself$"):
        traced()


def test_ready_batches_without_batch_size_on_two_replicas_make_a_global_batch_of_two(tmp_path, data):
    """Each replica takes one element: 10 batches of 10 are 5 steps of a global batch of 20."""
    mox.set_flag("num_gpus", 2)
    images, labels = data

    def input_fn(mode):
        batches = tf.data.Dataset.from_tensor_slices((images, labels)).batch(BATCH // 2)
        return tf.compat.v1.data.make_one_shot_iterator(batches).get_next()

    _check_trained_on_every_batch(tmp_path, images, labels, _train(input_fn, tmp_path))


def test_get_next_of_samples_of_unknown_shape_loses_no_sample_to_building_the_model(tmp_path, data):
    """Shapes unknown until read: the model is built on the sample get_next() already read."""
    images, labels = data

    def input_fn(mode):
        def gen():
            yield from zip(images, labels)

        samples = tf.data.Dataset.from_generator(gen, output_signature=(
            tf.TensorSpec([None], tf.float32), tf.TensorSpec([], tf.int32)))
        return tf.compat.v1.data.make_one_shot_iterator(samples).get_next()

    def model_fn(inputs, mode):
        images, labels = inputs
        images = tf.ensure_shape(images, [None, runlib.NUM_FEATURES])
        return runlib.softmax_model_fn([images, labels], mode)

    result = mox.run(input_fn=input_fn, model_fn=model_fn, optimizer_fn=mox.get_optimizer_fn("sgd", 0.5),
                     run_mode=mox.ModeKeys.TRAIN, log_dir=str(tmp_path), batch_size=BATCH,
                     max_number_of_steps=10 ** 9)
    _check_trained_on_every_batch(tmp_path, images, labels, result)


def test_arrays_returned_after_reading_an_iterator_are_still_the_whole_data(tmp_path, data):
    images, labels = data

    def input_fn(mode):
        assert sum(1 for _ in _batches(images, labels)) == NUM // BATCH   # the script looks at its data first
        return images, labels

    _check_trained_on_every_batch(tmp_path, images, labels, _train(input_fn, tmp_path, batch_size=BATCH))
