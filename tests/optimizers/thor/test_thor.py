"""THOR through moxlite.run against numpy references of its update (thor.md's formulas)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import moxlite as mox
from moxlite.optimizers.thor import factors
from tests import runlib, thorlib

BATCH = 16


def _train(log_dir, model_fn, inputs, labels, optimizer_fn, steps, batch=BATCH):
    return runlib.train(log_dir, runlib.input_fn_for(inputs, labels), model_fn, optimizer_fn, steps=steps,
                        batch_size=batch, log_every_n_steps=100)


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_conv_and_dense_updates_equal_numpy_over_refresh_and_stale_steps(tmp_path, padding):
    """7 steps at frequency 3: refreshes at updates 0, 3, 6, stale inverses in between;
    64-blocks: the Dense A factor (d_in 108 same, 75 valid) is inverted as two diagonal blocks."""
    images, labels = thorlib.small_digits(BATCH * 7)
    settings = dict(lr=0.05, momentum=0.9, damping=0.05, frequency=3, block_size=64, weight_decay=5e-4)
    optimizer_fn = thorlib.thor_optimizer_fn(**settings)
    start = thorlib.initial_conv_weights(padding)
    _train(tmp_path / "thor", thorlib.conv_model_fn(padding), images, labels, optimizer_fn, 7)
    trained = thorlib.model_variables(tmp_path / "thor")
    expected = thorlib.numpy_thor_conv(images, labels, start, BATCH, 7, padding=padding, **settings)
    assert not np.allclose(start[2], trained[2], atol=1e-3)
    for got, want in zip(trained, expected):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_embedding_update_equals_numpy(tmp_path):
    images, labels = thorlib.small_digits(BATCH * 5)
    tokens = thorlib.tokens_of(images)
    settings = dict(lr=0.1, momentum=0.9, damping=0.03, frequency=2)
    _train(tmp_path / "thor", thorlib.embedding_model_fn, tokens, labels,
           thorlib.thor_optimizer_fn(block_size=0, **settings), 5)
    start = thorlib.initial_embedding_weights()
    trained = thorlib.model_variables(tmp_path / "thor")
    expected = thorlib.numpy_thor_embedding(tokens, labels, start, BATCH, 5, **settings)
    assert not np.allclose(start[0], trained[0], atol=1e-3)
    for got, want in zip(trained, expected):
        np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("padding,strides,dilation,kernel", [
    ("same", 2, 1, (5, 3)), ("valid", 2, 1, (5, 3)), ("same", 1, 2, (3, 3)), ("valid", 1, 1, (1, 1))])
def test_im2col_rows_times_reshaped_kernel_equal_the_conv2d_output(padding, strides, dilation, kernel):
    images, _ = thorlib.small_digits(4)
    x = tf.constant(np.stack([images, images[::-1]], -1).reshape(4, thorlib.SIDE, thorlib.SIDE, 2))
    layer = keras.layers.Conv2D(3, kernel, strides=strides, padding=padding, dilation_rate=dilation,
                                use_bias=False)
    out = layer(x)
    record = type("Record", (), {"layer": layer, "kernel": layer.kernel, "kind": "Conv2D", "probe": out})()
    geometry, reason = factors.geometry_of(record)
    assert reason is None and geometry.spatial == out.shape[1] * out.shape[2]
    rows = factors.im2col(x, geometry.conv)
    product = rows @ tf.reshape(layer.kernel, [geometry.d_in, geometry.d_out])
    np.testing.assert_allclose(product.numpy().reshape(out.shape), out.numpy(), atol=1e-5)
    if dilation == 1:
        numpy_rows, _ = thorlib.numpy_im2col(x.numpy(), kernel[0], strides, padding) if kernel[0] == kernel[1] \
            else (rows.numpy(), None)
        np.testing.assert_allclose(rows.numpy(), numpy_rows, atol=1e-6)


def _conv_run(log_dir, optimizer_fn, batch, steps, images, labels):
    _train(log_dir, thorlib.conv_model_fn("same"), images, labels, optimizer_fn, steps, batch=batch)
    return thorlib.model_variables(log_dir)


def test_two_devices_at_b_equal_one_device_at_2b(tmp_path):
    images, labels = thorlib.small_digits(BATCH * 2 * 5)
    optimizer_fn = thorlib.thor_optimizer_fn(damping=0.05, frequency=2, weight_decay=5e-4)
    one = _conv_run(tmp_path / "one", optimizer_fn, 2 * BATCH, 5, images, labels)
    mox.set_flag("num_gpus", 2)
    two = _conv_run(tmp_path / "two", optimizer_fn, BATCH, 5, images, labels)
    for a, b in zip(one, two):
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("num_gpus", [2])
def test_batch_gradients_above_thor_n_micro_batches_equal_one_big_batch(tmp_path, num_gpus):
    """batch_gradients(thor(momentum)) at B, N=3 equals thor(momentum) at 3B: the refresh's
    factors are accumulated over the 3 micro-batches."""
    images, labels = thorlib.small_digits(BATCH * 3 * 4)
    thor = dict(damping=0.05, frequency=2, weight_decay=5e-4)

    def accumulated():
        opt = thorlib.thor_optimizer_fn(**thor)()
        return mox.get_optimizer_wrapper_fn("batch_gradients", opt, num_batches=3)()

    big = _conv_run(tmp_path / "big", thorlib.thor_optimizer_fn(**thor), 3 * BATCH, 4, images, labels)
    mox.set_flag("num_gpus", num_gpus)
    small = _conv_run(tmp_path / "small", accumulated, BATCH // num_gpus, 12, images, labels)
    for a, b in zip(big, small):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_interrupted_and_resumed_equals_uninterrupted(tmp_path):
    """Stopped at step 4 of 6 (mid-interval, frequency 3): steps 4 and 5 need the restored
    inverses of the refresh at step 3, and the restored counter to know they are stale."""
    images, labels = thorlib.small_digits(BATCH * 6)
    optimizer_fn = thorlib.thor_optimizer_fn(damping=0.05, frequency=3)
    straight = _conv_run(tmp_path / "straight", optimizer_fn, BATCH, 6, images, labels)
    _conv_run(tmp_path / "resumed", optimizer_fn, BATCH, 4, images, labels)
    resumed = _conv_run(tmp_path / "resumed", optimizer_fn, BATCH, 6, images, labels)
    for a, b in zip(straight, resumed):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_resumed_in_the_middle_of_a_learning_rate_warm_up_equals_uninterrupted(tmp_path):
    """thor_polynomial's warm-up is a function of the run's global step: stopped at step 3 of a
    5-step warm-up, the resumed run must go on from 4/5 of the lr, not start the warm-up again."""
    from moxlite.optimizers.thor.schedules import ThorPolynomialDecay

    images, labels = thorlib.small_digits(BATCH * 6)
    optimizer_fn = thorlib.thor_optimizer_fn(lr=ThorPolynomialDecay(0.05, 0.005, 6, warmup_steps=5),
                                             damping=ThorPolynomialDecay(0.05, 0.001, 6), frequency=2)
    straight = _conv_run(tmp_path / "straight", optimizer_fn, BATCH, 6, images, labels)
    _conv_run(tmp_path / "resumed", optimizer_fn, BATCH, 3, images, labels)
    resumed = _conv_run(tmp_path / "resumed", optimizer_fn, BATCH, 6, images, labels)
    for a, b in zip(straight, resumed):
        np.testing.assert_allclose(a, b, atol=1e-6)
    # the warm-up changes the weights well beyond the tolerance, so a resume that restarted it would show
    no_warmup = thorlib.thor_optimizer_fn(lr=ThorPolynomialDecay(0.05, 0.005, 6),
                                          damping=ThorPolynomialDecay(0.05, 0.001, 6), frequency=2)
    plain = _conv_run(tmp_path / "no_warmup", no_warmup, BATCH, 6, images, labels)
    assert any(np.abs(a - b).max() > 1e-3 for a, b in zip(straight, plain))


def _optimizer_state(log_dir):
    reader = tf.train.load_checkpoint(str(log_dir))
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()
            if key.startswith("optimizer/") and key.endswith("VARIABLE_VALUE")}


def test_undamped_singular_factors_never_reach_the_weights_as_nan(tmp_path):
    """damping 0 on 144-pixel digits whose border pixels are always 0: A is singular, float32
    Cholesky gives NaN; the guard retries (float64, then more damping) and counts it."""
    images, labels = thorlib.small_digits(BATCH * 6)
    images[:, :thorlib.SIDE] = 0.0                     # a constant row of pixels: exactly singular
    _conv_run(tmp_path / "thor", thorlib.thor_optimizer_fn(damping=0.0, frequency=2, block_size=0),
              BATCH, 6, images, labels)
    for weight in thorlib.model_variables(tmp_path / "thor"):
        assert np.all(np.isfinite(weight))
    state = _optimizer_state(tmp_path / "thor")
    assert all(np.all(np.isfinite(v)) for v in state.values())
    assert state["optimizer/_retries/.ATTRIBUTES/VARIABLE_VALUE"] > 0


def test_guarded_inverse_keeps_the_previous_inverse_when_every_attempt_fails():
    from moxlite.optimizers.thor import inverse as thor_inverse

    previous = tf.eye(3)[None] * 7.0
    spd = tf.constant([[[2.0, 1.0, 0.0], [1.0, 2.0, 0.0], [0.0, 0.0, 1.0]]])
    inverse, level = thor_inverse.guarded_inverse(spd, 0.5, previous)
    np.testing.assert_allclose(inverse[0] @ (spd[0] + 0.5 * tf.eye(3)), np.eye(3), atol=1e-5)
    assert int(level) == 0
    broken = spd + tf.constant(np.nan, shape=[1, 3, 3])
    inverse, level = thor_inverse.guarded_inverse(broken, 0.5, previous)
    np.testing.assert_array_equal(inverse.numpy(), previous.numpy())
    assert int(level) == 2
    singular = tf.constant([[[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]])
    inverse, level = thor_inverse.guarded_inverse(singular, 0.0, previous)
    assert int(level) == 1 and np.all(np.isfinite(inverse.numpy()))


def test_fp16_dynamic_loss_scaling_factors_finite_overflow_steps_skip_the_refresh(tmp_path):
    """fp16 compute with a dynamic loss scale starting at 1e6: the first steps overflow (the scale
    halves each time) and the loss-scale optimizer skips them; THOR drops their statistics and refreshes on
    the first update that applies."""
    images, labels = thorlib.small_digits(BATCH * 12)
    mox.set_flag("use_fp16", True)
    mox.set_flag("loss_scale", "dynamic:1e6")   # a fixed scale never halves (issue 11)
    _conv_run(tmp_path / "thor", thorlib.thor_optimizer_fn(damping=0.05, frequency=3), BATCH, 12, images, labels)
    state = _optimizer_state(tmp_path / "thor")
    for weight in thorlib.model_variables(tmp_path / "thor"):
        assert np.all(np.isfinite(weight))
    assert all(np.all(np.isfinite(v)) for v in state.values())
    updates = int(next(v for k, v in state.items() if k.endswith("/_updates/.ATTRIBUTES/VARIABLE_VALUE")))
    dropped = int(next(v for k, v in state.items() if k.endswith("/_dropped/.ATTRIBUTES/VARIABLE_VALUE")))
    assert 0 < updates < 12                   # overflow steps applied no update
    # The overflows all come first (the scale halves until it fits), while the first refresh is
    # pending: every one of them had its statistics dropped.
    assert dropped == 12 - updates
    inverses = [v for v in state.values() if v.ndim == 3]
    assert inverses and not all(np.allclose(v, np.eye(v.shape[-1])) for v in inverses)


def test_loss_scaling_is_taken_out_of_the_factors_exactly(tmp_path):
    """A fixed loss scale of 1024 (float32 compute) changes nothing: G is unscaled exactly."""
    images, labels = thorlib.small_digits(BATCH * 3)
    optimizer_fn = thorlib.thor_optimizer_fn(damping=0.05, frequency=2)
    plain = _conv_run(tmp_path / "plain", optimizer_fn, BATCH, 3, images, labels)
    mox.set_flag("loss_scale", "1024")
    scaled = _conv_run(tmp_path / "scaled", optimizer_fn, BATCH, 3, images, labels)
    for a, b in zip(plain, scaled):
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("keras_loss_scale", [False, True])
def test_thor_over_sgd_equals_numpy(tmp_path, keras_loss_scale):
    """Also inside a Keras LossScaleOptimizer (a power-of-two scale: exact in float32), which
    applies the stack itself: THOR still gets each step's records for its refreshes."""
    images, labels = thorlib.small_digits(BATCH * 4)
    settings = dict(damping=0.05, frequency=2, block_size=0, weight_decay=0.0)

    def optimizer_fn():
        opt = mox.get_optimizer_fn("sgd", learning_rate=0.05)()
        stack = mox.get_optimizer_wrapper_fn("thor", opt, **settings)()
        return keras.optimizers.LossScaleOptimizer(stack) if keras_loss_scale else stack

    trained = _conv_run(tmp_path / "thor", optimizer_fn, BATCH, 4, images, labels)
    expected = thorlib.numpy_thor_conv(images, labels, thorlib.initial_conv_weights("same"), BATCH, 4, lr=0.05,
                                       momentum=0.0, padding="same", **settings)
    for got, want in zip(trained, expected):
        np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("stack", ["thor(adam)", "lars(thor(momentum))", "thor(lars(momentum))"])
def test_stacks_train_and_precondition(tmp_path, stack, capsys):
    images, labels = thorlib.small_digits(BATCH * 8)

    def optimizer_fn():
        if "adam" in stack:
            return mox.get_optimizer_wrapper_fn("thor", mox.get_optimizer_fn("adam", learning_rate=1e-2),
                                                damping=0.05, frequency=2)()
        # LARS moves each weight by about lr * ratio of its norm per step.
        inner = mox.get_optimizer_fn("momentum", learning_rate=0.05 if stack.startswith("lars") else 0.5,
                                     momentum=0.9)
        if stack.startswith("lars"):
            return mox.get_optimizer_wrapper_fn(
                "lars", mox.get_optimizer_wrapper_fn("thor", inner, damping=0.05, frequency=2), ratio=0.1)()
        return mox.get_optimizer_wrapper_fn(
            "thor", mox.get_optimizer_wrapper_fn("lars", inner, ratio=0.1), damping=0.05, frequency=2)()

    _train(tmp_path / "run", thorlib.conv_model_fn("same"), images, labels, optimizer_fn, 8)
    assert "thor: preconditioning 2 layer(s)" in capsys.readouterr().out
    start = thorlib.initial_conv_weights("same")
    trained = thorlib.model_variables(tmp_path / "run")
    for before, after in zip(start, trained):
        assert np.all(np.isfinite(after)) and not np.allclose(before, after)
    assert thorlib.numpy_conv_loss(trained, images, labels) < thorlib.numpy_conv_loss(start, images, labels) - 0.1


def _dense_model_fn(shared=False, einsum=False):
    def model_fn(inputs, mode):
        x, y = inputs
        init = keras.initializers.GlorotUniform(seed=2)
        if einsum:
            layer = keras.layers.EinsumDense("ab,bc->ac", output_shape=10, bias_axes="c", kernel_initializer=init)
        else:
            layer = keras.layers.Dense(10, kernel_initializer=init)
        if shared:   # one layer called on each half of the batch: its two records are summed
            half = tf.shape(x)[0] // 2
            logits = tf.concat([layer(x[:half]), layer(x[half:])], 0)
        else:
            logits = layer(x)
        return runlib.spec_for(x, y, logits)
    return model_fn


@pytest.mark.parametrize("variant", [{"shared": True}, {"einsum": True}])
def test_shared_layer_and_einsum_dense_precondition_like_one_dense_call(tmp_path, variant):
    images, labels = thorlib.small_digits(BATCH * 4)
    optimizer_fn = thorlib.thor_optimizer_fn(damping=0.05, frequency=2)
    _train(tmp_path / "dense", _dense_model_fn(), images, labels, optimizer_fn, 4)
    _train(tmp_path / "variant", _dense_model_fn(**variant), images, labels, optimizer_fn, 4)
    for a, b in zip(thorlib.model_variables(tmp_path / "dense"), thorlib.model_variables(tmp_path / "variant")):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_transformer_block_preconditions_attention_projections_and_layer_norm(tmp_path, capsys):
    images, labels = thorlib.small_digits(BATCH * 6)
    tokens = thorlib.tokens_of(images)

    def model_fn(inputs, mode):
        t, y = inputs
        e = keras.layers.Embedding(16, 8, embeddings_initializer=keras.initializers.RandomNormal(seed=4))(t)
        attended = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, seed=5)(e, e)
        h = keras.layers.LayerNormalization()(e + attended)
        logits = keras.layers.Dense(10, kernel_initializer=keras.initializers.GlorotUniform(seed=2))(
            tf.reduce_mean(h, axis=1))
        loss = runlib.cross_entropy(logits, y)
        return mox.ModelSpec(loss=loss, log_info={"loss": loss})

    _train(tmp_path / "run", model_fn, tokens, labels, thorlib.thor_optimizer_fn(damping=0.05, frequency=2), 3)
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if "thor: preconditioning" in l)
    assert "thor: preconditioning 7 layer(s)" in line, line     # embedding, q, k, v, output, layer norm, dense
    assert line.count("EinsumDense: A 8x8, G 8x8") == 4, line
    assert "LayerNormalization: diagonal rule" in line and "Embedding: A diag 16, G 8x8" in line
    for weight in thorlib.model_variables(tmp_path / "run"):
        assert np.all(np.isfinite(weight))


def test_damping_schedule_and_exclude_pattern_equal_numpy(tmp_path):
    """damping as a callable of the step (read at each refresh), and the conv layer excluded by
    pattern: it gets the plain gradient (plus weight decay), the Dense kernel is preconditioned."""
    images, labels = thorlib.small_digits(BATCH * 5)
    settings = dict(lr=0.05, momentum=0.9, frequency=2, block_size=0, weight_decay=5e-4)

    def damping(step):
        return 0.1 * 0.5 ** (tf.cast(step, tf.float32) / 2.0)

    optimizer_fn = thorlib.thor_optimizer_fn(damping=damping, exclude=["conv2d"], **settings)
    trained = _conv_run(tmp_path / "thor", optimizer_fn, BATCH, 5, images, labels)
    expected = thorlib.numpy_thor_conv(images, labels, thorlib.initial_conv_weights("same"), BATCH, 5,
                                       damping=lambda step: 0.1 * 0.5 ** (step / 2.0), padding="same",
                                       preconditioned=("dense",), **settings)
    for got, want in zip(trained, expected):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_layer_norm_follows_mindspores_diagonal_rule(tmp_path):
    """One sgd step (lr 1): plain gives -g; thor, preconditioning only the LayerNormalization,
    gives -g / (g^2 / N + sqrt(damping)) on gamma and beta, N the batch size."""
    images, labels = thorlib.small_digits(BATCH)

    def model_fn(inputs, mode):
        x, y = inputs
        h = keras.layers.Dense(8, kernel_initializer=keras.initializers.GlorotUniform(seed=1))(x)
        h = keras.layers.LayerNormalization(gamma_initializer=keras.initializers.RandomUniform(0.5, 1.5, seed=6))(h)
        logits = keras.layers.Dense(10, kernel_initializer=keras.initializers.GlorotUniform(seed=2))(h)
        return runlib.spec_for(x, y, logits)

    def sgd(thor=None):
        def optimizer_fn():
            opt = mox.get_optimizer_fn("sgd", learning_rate=1.0)()
            return mox.get_optimizer_wrapper_fn("thor", opt, **thor)() if thor else opt
        return optimizer_fn

    _train(tmp_path / "plain", model_fn, images, labels, sgd(), 1)
    _train(tmp_path / "thor", model_fn, images, labels,
           sgd(dict(damping=0.01, frequency=2, include=["layer_normalization"])), 1)
    plain, thor = thorlib.model_variables(tmp_path / "plain"), thorlib.model_variables(tmp_path / "thor")
    start_gamma = np.asarray(keras.initializers.RandomUniform(0.5, 1.5, seed=6)((8,)))
    for start, index in ((start_gamma, 2), (np.zeros(8, np.float32), 3)):
        gradient = start - plain[index]
        expected = start - gradient / (gradient ** 2 / BATCH + np.sqrt(0.01))
        np.testing.assert_allclose(thor[index], expected, atol=1e-5)
    np.testing.assert_allclose(thor[0], plain[0], atol=1e-6)      # the Dense kernels: not included


def test_all_factors_cross_replicas_in_one_reduction_per_trace(tmp_path, monkeypatch):
    """On 2 devices, the refresh's factors of both layers (4 matrices, 2 row counts) travel in one
    reduce_to call, made in cross-replica context; the only other reduction is the gradients'."""
    import traceback

    from tensorflow.python.distribute import distribute_lib

    calls = []
    for name in ("reduce_to", "batch_reduce_to", "all_reduce"):
        owner = distribute_lib.ReplicaContext if name == "all_reduce" else distribute_lib.StrategyExtendedV2
        original = getattr(owner, name)

        def spy(self, *args, _name=name, _original=original, **kwargs):
            # AutoGraph runs converted copies of thor's functions (tf___collect, ...): match by name.
            names = [f.name for f in traceback.extract_stack()]
            where = next((n for n in reversed(names) if n.endswith(("_collect", "_apply_in_cross_replica_context",
                                                                   "_local_sums"))), None)
            calls.append((_name, where))
            return _original(self, *args, **kwargs)
        monkeypatch.setattr(owner, name, spy)
    images, labels = thorlib.small_digits(BATCH * 2 * 3)
    mox.set_flag("num_gpus", 2)
    _conv_run(tmp_path / "two", thorlib.thor_optimizer_fn(damping=0.05, frequency=2), BATCH, 3, images, labels)
    from_thor = [call for call in calls if call[1] is not None]
    collects = [call for call in from_thor if call[1].endswith("_collect")]
    assert collects and all(name == "reduce_to" for name, _ in collects)
    assert len(collects) == len([call for call in from_thor if call[0] == "batch_reduce_to"])  # one each per trace
    assert not [call for call in calls if call[0] == "all_reduce" and call[1] is not None]


def test_the_training_loop_is_traced_once_with_the_layers_state_created_before(tmp_path, monkeypatch):
    """THOR's per-layer factors and inverses exist before the loop is traced: a tf.function whose
    first trace creates variables is traced a second time, which would double the tracing of every
    THOR run (model_fn forward and backward, on each replica, in both branches of the refresh).
    The loop body (one ``_one_step`` call) is traced once, and the run still refreshes."""
    from moxlite.training.trainers import sync_trainer

    traced = []
    original = sync_trainer.SyncTrainer._one_step

    def counted(self, *args, **kwargs):
        traced.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(sync_trainer.SyncTrainer, "_one_step", counted)
    images, labels = thorlib.small_digits(BATCH * 3)
    settings = dict(lr=0.05, momentum=0.9, damping=0.05, frequency=2, block_size=64, weight_decay=5e-4)
    trained = _conv_run(tmp_path / "thor", thorlib.thor_optimizer_fn(**settings), BATCH, 3, images, labels)
    assert len(traced) == 1
    expected = thorlib.numpy_thor_conv(images, labels, thorlib.initial_conv_weights("same"), BATCH, 3, padding="same",
                                       **settings)
    for got, want in zip(trained, expected):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_parameters_are_checked_and_a_schedule_round_trips_through_get_config():
    from moxlite import errors
    from moxlite.optimizers.thor.preconditioner import THOR

    momentum = mox.get_optimizer_fn("momentum", learning_rate=0.1, momentum=0.9)
    for bad, message in ((dict(frequency=1), "frequency=1 is out of range; expected an integer >= 2"),
                         (dict(damping=-1), "damping=-1 is out of range"),
                         (dict(block_size=-2), "block_size=-2 is out of range"),
                         (dict(loss_reduction="avg"), "loss_reduction='avg' is out of range")):
        with pytest.raises(errors.OptimizerError, match=message):
            mox.get_optimizer_wrapper_fn("thor", momentum, **bad)
    schedule = keras.optimizers.schedules.ExponentialDecay(0.05, 10, 0.5)
    optimizer = mox.get_optimizer_wrapper_fn("thor", momentum, damping=schedule, frequency=5, exclude=["x"])()
    again = THOR.from_config(optimizer.get_config())
    assert (again.frequency, again.exclude) == (5, ("x",))
    assert float(again.damping(20)) == pytest.approx(0.0125)


def test_a_keras_model_closed_over_trains_as_layers_built_inside_model_fn(tmp_path, capsys):
    """Style 1 (a Sequential built before run, closed over by model_fn) is found and preconditioned
    exactly like the same layers built inside model_fn."""
    images, labels = thorlib.small_digits(BATCH * 4)
    optimizer_fn = thorlib.thor_optimizer_fn(damping=0.05, frequency=2, weight_decay=5e-4)
    inside = _conv_run(tmp_path / "inside", optimizer_fn, BATCH, 4, images, labels)
    model = keras.Sequential([
        keras.layers.Input((thorlib.SIDE * thorlib.SIDE,)),
        keras.layers.Reshape((thorlib.SIDE, thorlib.SIDE, 1)),
        keras.layers.Conv2D(thorlib.FILTERS, thorlib.KERNEL, strides=2, padding="same", activation="relu",
                            kernel_initializer=keras.initializers.GlorotUniform(seed=1),
                            bias_initializer=keras.initializers.RandomUniform(-0.1, 0.1, seed=3)),
        keras.layers.Flatten(),
        keras.layers.Dense(10, kernel_initializer=keras.initializers.GlorotUniform(seed=2))])

    def model_fn(inputs, mode):
        x, y = inputs
        return runlib.spec_for(x, y, model(x))

    _train(tmp_path / "closed", model_fn, images, labels, optimizer_fn, 4)
    assert "thor: preconditioning 2 layer(s)" in capsys.readouterr().out
    for a, b in zip(inside, thorlib.model_variables(tmp_path / "closed")):
        np.testing.assert_allclose(a, b, atol=1e-5)
