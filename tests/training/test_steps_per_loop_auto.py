"""``steps_per_loop="auto"`` (the default) against ``steps_per_loop=1``.

Auto runs each traced call up to the next step at which the host has work, so
a run must be the one-step run exactly: the same weights bit for bit in every
checkpoint, the same checkpoints, log lines, hook calls and summaries, the same
end of a finite input and the same non-finite stop. Each case also checks that
auto really ran several steps per call, so it cannot pass by running one.
The bound that keeps calls short in time is checked with a fake clock.
"""

import glob
import logging
import os
import re

import numpy as np
import pytest
import keras
import tensorflow as tf

import moxlite as mox
from moxlite import errors, logs
from moxlite.training.trainers import sync_trainer as loop_lib
from moxlite.training import controller
from moxlite.training.trainers import nonfinite
from tests import runlib

BATCH = 20


class _Lines(logging.Handler):
    """moxlite's log lines, with the throughput (a timing) taken out."""

    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(re.sub(r"sample/sec: [\d.]+", "sample/sec: -", record.getMessage()))


def _scalars(log_dir):
    """[(directory, step, tag, value)] of every summary in ``log_dir`` (and ``eval/``) but the throughput."""
    found = []
    for path in glob.glob(os.path.join(log_dir, "**", "events.out.tfevents.*"), recursive=True):
        where = os.path.relpath(os.path.dirname(path), log_dir)   # "." or "eval"
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag != "sample_per_sec":
                    found.append((where, event.step, value.tag, tf.make_ndarray(value.tensor).tobytes()))
    return sorted(found)


def _checkpoints(log_dir):
    """{checkpoint file name: [variable values]} of every checkpoint kept in ``log_dir``."""
    state = tf.train.get_checkpoint_state(log_dir)
    kept = {}
    for path in state.all_model_checkpoint_paths if state else []:
        reader = tf.train.load_checkpoint(path)
        kept[os.path.basename(path)] = {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()
                                        if key.startswith(("model/", "global_step"))}
    return kept


class _Probe(keras.layers.Layer):
    """A scalar weight whose gradient is NaN in a step that holds a marked sample.

    Non-finite by construction: the NaN comes from the custom gradient, not from how a CPU's
    kernels carry NaN (a NaN input through ReLU is NaN on some instruction sets, 0 on others).
    The forward pass reads the weight through ``where(is_finite)``, so once an update makes it
    NaN the loss stays finite and only the check of the weights can see it.
    """

    def build(self, input_shape):
        self.value = self.add_weight(shape=(), initializer="zeros", name="value")

    def call(self, logits, marked):
        any_marked = tf.reduce_any(marked)

        @tf.custom_gradient
        def read(value):
            def gradient(upstream):
                return tf.where(any_marked, tf.constant(np.nan, upstream.dtype), upstream)
            return tf.where(tf.math.is_finite(value), value, tf.zeros_like(value)), gradient

        return logits + read(tf.convert_to_tensor(self.value))


MARK = -1.0   # a pixel value MNIST never has ([0, 1]): the sample that makes the gradient NaN


def _mlp_with_poisoned_gradients(inputs, mode):
    """runlib's seeded MLP; a step with a marked sample has a NaN gradient and a finite loss."""
    images, labels = inputs
    hidden = keras.layers.Dense(32, activation="relu",
                                kernel_initializer=keras.initializers.GlorotUniform(seed=1))(images)
    logits = keras.layers.Dense(runlib.NUM_CLASSES,
                                kernel_initializer=keras.initializers.GlorotUniform(seed=2))(hidden)
    logits = _Probe(name="probe")(logits, tf.reduce_any(tf.equal(images, MARK), axis=1))
    return runlib.spec_for(images, labels, logits)


def _run(log_dir, steps_per_loop, monkeypatch, images, labels, num_gpus=1, repeat=True, **kwargs):
    """Train the seeded MLP; return what the host saw: lines, hook calls, steps per call, result."""
    mox.set_flag("num_gpus", num_gpus)
    calls, hooked = [], []
    original = loop_lib.SyncTrainer.run_steps

    def counted(loop, num_steps, check_state=False, summary_since=None):
        done, values = original(loop, num_steps, check_state, summary_since)
        calls.append(done)
        return done, values

    monkeypatch.setattr(loop_lib.SyncTrainer, "run_steps", counted)
    # No time bound here (the tests below check it with a fake clock): auto's calls then grow
    # 1, 2, 4, ... steps up to the next boundary, the same on a loaded machine.
    monkeypatch.setattr(controller, "AUTO_CALL_SECONDS", 1e9)

    def model_fn(inputs, mode):
        spec = _mlp_with_poisoned_gradients(inputs, mode)
        spec.hooks = [lambda step, values: hooked.append((step, float(values["loss"])))]
        return spec

    def input_fn(mode):
        if mode == mox.ModeKeys.EVAL:   # interleaved evaluation: one pass over 100 samples
            return tf.data.Dataset.from_tensor_slices((images[:100], labels[:100]))
        dataset = tf.data.Dataset.from_tensor_slices((images, labels))
        return dataset.repeat() if repeat is True else dataset.repeat(repeat)

    lines = _Lines()
    logs.get_logger().addHandler(lines)
    error = None
    try:
        arguments = dict(input_fn=input_fn, model_fn=model_fn, run_mode=mox.ModeKeys.TRAIN,
                         optimizer_fn=mox.get_optimizer_fn("momentum", 0.2, momentum=0.9),
                         batch_size=BATCH // num_gpus, log_dir=str(log_dir), log_every_n_steps=5,
                         save_summary_steps=7, save_model_steps=6, keep_checkpoint_max=100,
                         steps_per_loop=steps_per_loop)
        arguments.update(kwargs)
        result = mox.run(**arguments)
    except nonfinite.NonFiniteError as stop:
        result, error = None, str(stop).replace(str(log_dir), "<log_dir>")
    finally:
        logs.get_logger().removeHandler(lines)
    lines = [line.replace(str(log_dir), "<log_dir>") for line in lines.lines]
    return dict(lines=lines, hooked=hooked, calls=calls, result=result, error=error)


def _assert_same_run(tmp_path, monkeypatch, images, labels, **kwargs):
    one = _run(tmp_path / "one", 1, monkeypatch, images, labels, **kwargs)
    auto = _run(tmp_path / "auto", "auto", monkeypatch, images, labels, **kwargs)
    assert max(auto["calls"]) > 1 and len(auto["calls"]) < len(one["calls"]), auto["calls"]
    for key in ("lines", "hooked", "result", "error"):
        # assert_equal counts two NaNs as equal, where == never does.
        np.testing.assert_equal(auto[key], one[key], err_msg=key)
    one_kept, auto_kept = _checkpoints(str(tmp_path / "one")), _checkpoints(str(tmp_path / "auto"))
    assert list(auto_kept) == list(one_kept) and one_kept
    for name in one_kept:
        assert auto_kept[name].keys() == one_kept[name].keys()
        for key, value in one_kept[name].items():
            np.testing.assert_array_equal(auto_kept[name][key], value, err_msg=f"{name} {key}")
    assert _scalars(str(tmp_path / "auto")) == _scalars(str(tmp_path / "one"))
    return one, auto


@pytest.mark.parametrize("num_gpus", [1, 2])
def test_auto_equals_one_step_per_call(tmp_path, monkeypatch, num_gpus):
    images, labels = runlib.mnist_rows(400)
    one, _ = _assert_same_run(tmp_path, monkeypatch, images, labels, num_gpus=num_gpus,
                              max_number_of_steps=44)
    assert one["result"]["global_step"] == 44 and len(one["hooked"]) == 8 + 1  # 8 log lines, the end


def test_auto_equals_one_step_per_call_with_interleaved_evaluation(tmp_path, monkeypatch):
    images, labels = runlib.mnist_rows(400)
    one, _ = _assert_same_run(tmp_path, monkeypatch, images, labels, max_number_of_steps=20,
                              inter_mode=mox.ModeKeys.EVAL)
    evaluated = [line for line in one["lines"] if "VALIDATION METRICS" in line]
    assert len(evaluated) == 4, one["lines"]   # after the checkpoints of steps 6, 12, 18 and 20
    assert {where for where, *_ in _scalars(str(tmp_path / "one"))} == {".", "eval"}


def test_auto_equals_one_step_per_call_when_a_finite_input_ends_inside_a_call(tmp_path, monkeypatch):
    images, labels = runlib.mnist_rows(400)    # 20 batches an epoch, 3 epochs: the end at step 60
    one, auto = _assert_same_run(tmp_path, monkeypatch, images, labels, repeat=3, log_every_n_steps=7,
                                 save_model_steps=8)
    assert "Input ended at global step 60" in one["lines"]
    assert one["result"]["global_step"] == 60
    assert auto["calls"][-1] == 4, auto["calls"]   # asked 56 -> 63 (the next log line), got 4


# The two non-finite tests mark samples whose gradient is NaN by construction
# (_mlp_with_poisoned_gradients): their loss stays finite on every CPU and either grappler setting.
def test_auto_stops_at_the_same_non_finite_step(tmp_path, monkeypatch):
    images, labels = runlib.mnist_rows(400)
    images[16 * BATCH + 3, 5] = MARK   # global step 17 meets it, inside auto's call 15 -> 18
    one, _ = _assert_same_run(tmp_path, monkeypatch, images, labels, max_number_of_steps=40)
    # The marked sample's loss is finite, the first layer's gradient is not. The weights are checked before the next report (step 18's
    # checkpoint), the one before at step 15's log line.
    assert one["error"].startswith("non-finite loss or gradient after global step 15 and by step 18: the loss "
                                   "stayed finite"), one["error"]
    assert "model.ckpt-12" in one["error"]


def test_auto_skips_and_reports_the_same_non_finite_steps(tmp_path, monkeypatch):
    mox.set_flag("nonfinite_policy", "skip")
    images, labels = runlib.mnist_rows(400)
    for batch in (8, 9, 12, 17):
        images[batch * BATCH + 3, 5] = MARK
    one, auto = _assert_same_run(tmp_path, monkeypatch, images, labels, max_number_of_steps=24)
    skipped = [line for line in one["lines"] if line.startswith("Skipped")]
    assert [line.split(" (loss")[0] for line in skipped] == [
        "Skipped 1 non-finite step(s) up to global step 9", "Skipped 1 non-finite step(s) up to global step 10",
        "Skipped 1 non-finite step(s) up to global step 13", "Skipped 1 non-finite step(s) up to global step 18"]
    assert skipped[1].endswith("2 in a row, 2 in all (nonfinite_policy=skip)")
    # Step 13 is skipped inside auto's call that ends on step 14's summary: the rest of the
    # call still writes it (the summaries are compared with one step per call above).
    assert (".", 14, "loss") in {row[:3] for row in _scalars(str(tmp_path / "auto"))}


# ---- the bound in time, with a fake clock and a fake loop --------------------------------------


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class _TimedLoop:
    """Steps that take ``seconds_per_step`` on a fake clock; the first call also 'traces'."""

    def __init__(self, clock, seconds_per_step, trace_seconds=5.0):
        self.clock, self.seconds_per_step, self.trace_seconds = clock, seconds_per_step, trace_seconds
        self.calls = []

    def run_steps(self, num_steps, check_state=False, summary_since=None):
        self.clock.now += num_steps * self.seconds_per_step + (self.trace_seconds if not self.calls else 0.0)
        self.calls.append(num_steps)
        return num_steps, {}


def test_the_auto_bound_keeps_each_call_near_a_second_and_adapts_to_slower_steps(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(controller, "clock", clock)
    loop = _TimedLoop(clock, seconds_per_step=2 ** -7)   # exact in binary: 128 steps a second
    cadence = controller.Cadence("auto", log_every_n_steps=0, save_summary_steps=0)
    controller.train(loop, 0, 2000, cadence, None, None, global_batch_size=1)
    assert sum(loop.calls) == 2000
    # Tracing made the first call slow: one step, then doubling up to about 1 s of steps.
    assert loop.calls[:9] == [1, 1, 2, 4, 8, 16, 32, 64, 128] and max(loop.calls) == 128
    # Steps 32x slower: the next call is bounded at once.
    bound = controller.CallBound()
    bound.steps = 128
    bound.start()
    clock.now += 128 * 0.25
    bound.record(128)
    assert bound.steps == 4


def test_save_model_secs_shortens_the_auto_bound_and_workers_get_a_fixed_one():
    assert controller.call_bound(controller.Cadence("auto", save_model_secs=3)).seconds == pytest.approx(0.3)
    assert controller.call_bound(controller.Cadence("auto", save_model_secs=600)).seconds == controller.AUTO_CALL_SECONDS
    fixed = controller.call_bound(controller.Cadence("auto", auto_max_steps=10))
    fixed.start()
    fixed.record(10)
    assert fixed.steps == 10
    assert controller.call_bound(controller.Cadence(7)) is None


@pytest.mark.parametrize("value", [0, -1, "fast", 2.5, True])
def test_a_bad_steps_per_loop_is_one_line_naming_auto(tmp_path, value):
    images, labels = runlib.mnist_rows(40)
    with pytest.raises(errors.ArgumentError, match=r"^steps_per_loop=.* is not valid; pass a positive "
                                                          r"integer or 'auto' \(the default\)$"):
        mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=runlib.softmax_model_fn,
                optimizer_fn=mox.get_optimizer_fn("sgd", 0.1), run_mode=mox.ModeKeys.TRAIN, batch_size=BATCH,
                log_dir=str(tmp_path), steps_per_loop=value)


def test_the_flag_defaults_to_auto_and_reads_integers():
    assert mox.get_flag("steps_per_loop") == "auto"
    mox.set_flag("steps_per_loop", "12")
    assert mox.get_flag("steps_per_loop") == 12
    with pytest.raises(errors.ArgumentError, match="neither a positive integer nor 'auto'"):
        mox.set_flag("steps_per_loop", "fast")


def test_a_recipe_takes_auto_by_default_an_integer_or_auto_and_refuses_anything_else():
    from moxlite.recipes import loader

    data = {"run": {"log_dir": "/tmp/moxlite-auto-test", "steps": 5}, "input": {"name": "synthetic"},
            "model": {"name": "mlp"}, "optimizer": {"name": "sgd", "learning_rate": 0.1}}
    assert loader.load([], data=data).recipe.run.steps_per_loop == "auto"
    assert loader.load([], ["run.steps_per_loop=25"], data=data).recipe.run.steps_per_loop == 25
    assert loader.load([], ["run.steps_per_loop=auto"], data=data).recipe.run.steps_per_loop == "auto"
    for bad in ("fast", "0"):
        with pytest.raises(errors.RecipeError, match="steps_per_loop.*must be a positive integer or 'auto'"):
            loader.load([], [f"run.steps_per_loop={bad}"], data=data)


@pytest.mark.slow   # a real parameter-server cluster on loopback
def test_under_parameter_servers_auto_keeps_every_log_line_and_checkpoint_on_its_step(launches, tmp_path):
    """Auto under parameter servers: the coordinator schedules steps up to the next host event
    (the same bound in time); async results vary run to run, but the host's steps must not."""
    from tests import distlib

    run = launches(["--workers=2", "--ps=1", "--async"],
                   ["python", distlib.script("train_mnist.py"), f"--log_dir={tmp_path}", "--steps=30", "--batch=16",
                    "--model=softmax", "--log_every=4", "--save_steps=12"], timeout=150)
    assert run.wait() == 0, run.output()
    logged = [int(m) for m in re.findall(r"step: (\d+)\(global step", run.output())]
    assert logged == list(range(4, 61, 4)), logged          # 2 workers x 30 steps, a line every 4
    saved = sorted(int(name.split("-")[1].split(".")[0]) for name in os.listdir(tmp_path) if name.endswith(".index"))
    assert saved == [12, 24, 36, 48, 60], saved
