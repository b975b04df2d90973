"""Resume after input_fn's pipeline changed (issue 8, item 14).

The saved input position no longer fits: the run says so and resumes the
model, optimizer and step with the input restarted (weights checked against
numpy, momentum carried over), or stops with one line when
allow_input_restart is off. Both ways TensorFlow fails (at restore: a
``.map`` added; at a later batch: another shuffle buffer) are covered.
"""

import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite import errors
from tests import runlib

BATCH = 16


def _train(log_dir, input_fn, steps):
    return runlib.train(log_dir, input_fn, runlib.softmax_model_fn,
                        mox.get_optimizer_fn("momentum", 0.5, momentum=0.9), steps=steps, batch_size=BATCH)


def _numpy(images, labels, batch_indices):
    kernel, bias = np.zeros((runlib.NUM_FEATURES, runlib.NUM_CLASSES)), np.zeros(runlib.NUM_CLASSES)
    velocity_k, velocity_b = np.zeros_like(kernel), np.zeros_like(bias)
    for batch in batch_indices:
        x = images[batch * BATCH:(batch + 1) * BATCH].astype(np.float64)
        y = labels[batch * BATCH:(batch + 1) * BATCH]
        p = runlib.softmax_probabilities(x @ kernel + bias)
        p[np.arange(BATCH), y] -= 1.0
        velocity_k = 0.9 * velocity_k - 0.5 * x.T @ p / BATCH
        velocity_b = 0.9 * velocity_b - 0.5 * p.mean(axis=0)
        kernel, bias = kernel + velocity_k, bias + velocity_b
    return kernel, bias


def test_a_map_added_restarts_the_input_and_resumes_model_optimizer_and_step(tmp_path, capsys):
    images, labels = runlib.mnist_rows(160)
    plain = runlib.input_fn_for(images, labels)

    def mapped(mode):
        return plain(mode).map(lambda x, y: (x * 1.0, y))

    _train(tmp_path, plain, 4)
    assert _train(tmp_path, mapped, 7)["global_step"] == 7
    out = capsys.readouterr()
    assert ("no longer fits input_fn's pipeline" in out.out + out.err and
            "resuming model, optimizer and global step 4 with the input restarted from its beginning"
            in out.out + out.err)
    kernel, bias = runlib.checkpoint_variables(tmp_path)
    expected_kernel, expected_bias = _numpy(images, labels, [0, 1, 2, 3, 0, 1, 2])
    np.testing.assert_allclose(kernel, expected_kernel, atol=2e-5)
    np.testing.assert_allclose(bias, expected_bias, atol=2e-5)
    # The restarted input's position is what the next resume continues from.
    assert _train(tmp_path, mapped, 9)["global_step"] == 9
    np.testing.assert_allclose(runlib.checkpoint_variables(tmp_path)[0],
                               _numpy(images, labels, [0, 1, 2, 3, 0, 1, 2, 3, 4])[0], atol=2e-5)


def test_another_shuffle_buffer_is_caught_at_a_later_batch_or_stops_when_not_allowed(tmp_path, capsys):
    images, labels = runlib.mnist_rows(160)

    def shuffled(buffer):
        def input_fn(mode):
            return tf.data.Dataset.from_tensor_slices((images, labels)).shuffle(buffer, seed=1).repeat()
        return input_fn

    _train(tmp_path, shuffled(64), 4)
    before = runlib.directory_state(tmp_path)
    mox.set_flag("allow_input_restart", False)
    with pytest.raises(errors.CheckpointError, match=r"no longer fits input_fn's pipeline .*; resume with the "
                                                     r"input restarted .* by allowing it \(--allow_input_restart"):
        _train(tmp_path, shuffled(32), 12)
    after = runlib.directory_state(tmp_path)
    assert {name: after.get(name) for name in before} == before   # earlier results intact
    assert runlib.checkpoint_step(str(tmp_path)) == 4             # nothing saved past the mismatch
    mox.set_flag("allow_input_restart", True)
    assert _train(tmp_path, shuffled(32), 12)["global_step"] == 12
    out = capsys.readouterr()
    assert "with the input restarted from its beginning" in out.out + out.err
