"""Every stack order the README documents, through moxlite.run, against a numpy pipeline.

The rule under test: a stack is a pipeline read outermost first. Each wrapper transforms the
gradient it receives and hands the result to the one it wraps; ``x(y(opt))`` applies x, then
y, then opt. The run's own links sit above the user's stack (loss scaling), and
``gradient_clip`` goes directly below the lowest ``batch_gradients`` or ``thor`` (at the top
of the user's stack without either).

The numpy side is written from the formulas (thor.md; LARS as the README states it; Keras's
SGD and Adam updates), one class per link, composed the same way. The model is one Dense
layer (softmax regression on 12x12 digits, a seeded non-zero kernel) so THOR's factors are
A = X'X / rows and G = D'D / rows with D the per-sample output gradients.
"""

import keras
import numpy as np
import pytest

import moxlite as mox
from tests import runlib, thorlib

BATCH = 8
LR = 0.05
DAMPING = 0.05
FREQUENCY = 2
RATIO = 0.1
LARS_DECAY = 1e-4
NUM_BATCHES = 2


def _initializers():
    return keras.initializers.GlorotUniform(seed=2), keras.initializers.RandomUniform(-0.1, 0.1, seed=3)


def _initial_weights():
    """The seeded initial weights of _model_fn (a seeded Keras initializer draws the same values)."""
    kernel, bias = _initializers()
    return {"kernel": np.asarray(kernel((thorlib.SIDE ** 2, 10))).astype(np.float64),
            "bias": np.asarray(bias((10,))).astype(np.float64)}


def _model_fn(inputs, mode):
    x, y = inputs
    kernel, bias = _initializers()
    logits = keras.layers.Dense(10, kernel_initializer=kernel, bias_initializer=bias)(x)
    return runlib.spec_for(x, y, logits)


# ---- numpy links: __call__(params, grads, rest) hands the transformed gradient to rest -------

class NpSGD:
    """Keras's SGD: v = momentum*v - lr*g; w += v."""

    def __init__(self, momentum=0.0):
        self.momentum, self.velocity = momentum, {}

    def __call__(self, params, grads):
        for key, gradient in grads.items():
            self.velocity[key] = self.momentum * self.velocity.get(key, 0.0) - LR * gradient
            params[key] += self.velocity[key]


class NpAdam:
    """Keras's Adam: m, v moving moments; w -= lr*sqrt(1-b2^t)/(1-b1^t) * m/(sqrt(v)+eps)."""

    def __init__(self, lr=1e-2, beta_1=0.9, beta_2=0.999, epsilon=1e-7):
        self.lr, self.beta_1, self.beta_2, self.epsilon = lr, beta_1, beta_2, epsilon
        self.m, self.v, self.t = {}, {}, 0

    def __call__(self, params, grads):
        self.t += 1
        alpha = self.lr * np.sqrt(1 - self.beta_2 ** self.t) / (1 - self.beta_1 ** self.t)
        for key, g in grads.items():
            self.m[key] = self.m.get(key, 0.0) + (g - self.m.get(key, 0.0)) * (1 - self.beta_1)
            self.v[key] = self.v.get(key, 0.0) + (g * g - self.v.get(key, 0.0)) * (1 - self.beta_2)
            params[key] -= alpha * self.m[key] / (np.sqrt(self.v[key]) + self.epsilon)


class NpLARS:
    """trust = ratio*||w|| / (||g|| + wd*||w||) (1 when a norm is 0); hands trust*(g + wd*w); bias excluded."""

    def __call__(self, params, grads, rest):
        out = dict(grads)
        w, g = params["kernel"], grads["kernel"]
        w_norm, g_norm = np.linalg.norm(w), np.linalg.norm(g)
        trust = RATIO * w_norm / (g_norm + LARS_DECAY * w_norm) if w_norm > 0 and g_norm > 0 else 1.0
        out["kernel"] = trust * (g + LARS_DECAY * w)
        rest(params, out)


class NpTHOR:
    """A^-1 . grad . G^-1 on the kernel (full inverses, sqrt(damping) on both factors), refreshed on
    its updates 0, FREQUENCY, ...; under an accumulating link above, from all that update's
    micro-batches."""

    def __init__(self):
        self.updates, self.inverses, self.step_sums, self.accumulated = 0, None, None, None

    def observe(self, x, per_sample, micro_batches):
        sums = (x.T @ x, per_sample.T @ per_sample, len(x))
        if micro_batches == 1:
            self.step_sums = sums
        elif self.updates % FREQUENCY == 0:
            self.accumulated = sums if self.accumulated is None else tuple(a + b for a, b in zip(self.accumulated, sums))

    def __call__(self, params, grads, rest):
        if self.updates % FREQUENCY == 0:
            a, g, rows = self.accumulated if self.accumulated is not None else self.step_sums
            damping = np.sqrt(DAMPING)
            self.inverses = (np.linalg.inv(a / rows + damping * np.eye(len(a))),
                             np.linalg.inv(g / rows + damping * np.eye(len(g))))
            self.accumulated = None
        out = dict(grads)
        out["kernel"] = self.inverses[0] @ grads["kernel"] @ self.inverses[1]
        rest(params, out)
        self.updates += 1


class NpBatchGradients:
    """Sum NUM_BATCHES micro-batch gradients; hand their mean down on every NUM_BATCHES-th step."""

    apply_every = NUM_BATCHES

    def __init__(self):
        self.count, self.sums = 0, None

    def __call__(self, params, grads, rest):
        self.sums = dict(grads) if self.sums is None else {k: self.sums[k] + grads[k] for k in grads}
        self.count += 1
        if self.count % NUM_BATCHES == 0:
            rest(params, {k: v / NUM_BATCHES for k, v in self.sums.items()})
            self.sums = None


class NpClip:
    """g_i * t / max(t, ||(g_1, ..., g_n)||)."""

    def __init__(self, threshold):
        self.threshold = threshold

    def __call__(self, params, grads, rest):
        norm = np.sqrt(sum(np.sum(g * g) for g in grads.values()))
        rest(params, {k: g * self.threshold / max(self.threshold, norm) for k, g in grads.items()})


def numpy_pipeline(links, base, images, labels, steps):
    """The weights after ``steps`` steps through ``links`` (outermost first) and ``base``."""
    params = _initial_weights()

    def rest_from(index):
        if index == len(links):
            return base
        return lambda params, grads: links[index](params, grads, rest_from(index + 1))

    for step in range(steps):
        index = np.arange(step * BATCH, (step + 1) * BATCH) % len(labels)
        x, y = images[index].astype(np.float64), labels[index]
        d_logits = thorlib.softmax_cross_entropy_grad(x @ params["kernel"] + params["bias"], y)
        micro_batches = 1
        for link in links:
            if hasattr(link, "observe"):
                link.observe(x, d_logits * BATCH, micro_batches)   # per-sample: the loss is a mean
            micro_batches *= getattr(link, "apply_every", 1)
        rest_from(0)(params, {"kernel": x.T @ d_logits, "bias": d_logits.sum(0)})
    return params


# ---- the moxlite stacks ---------------------------------------------------------------------

def _thor(inner):
    return mox.get_optimizer_wrapper_fn("thor", inner, damping=DAMPING, frequency=FREQUENCY, block_size=0)


def _lars(inner):
    return mox.get_optimizer_wrapper_fn("lars", inner, ratio=RATIO, weight_decay=LARS_DECAY)


def _batch_gradients(inner):
    return mox.get_optimizer_wrapper_fn("batch_gradients", inner, num_batches=NUM_BATCHES)


def _sgd():
    return mox.get_optimizer_fn("sgd", learning_rate=LR)


def _momentum():
    return mox.get_optimizer_fn("momentum", learning_rate=LR, momentum=0.9)


def _adam():
    return mox.get_optimizer_fn("adam", learning_rate=1e-2)


# name: (moxlite optimizer_fn, numpy links outermost first, numpy base, flags)
STACKS = {
    "batch_gradients(lars(momentum))": (lambda: _batch_gradients(_lars(_momentum())),
                                        lambda: [NpBatchGradients(), NpLARS()], lambda: NpSGD(0.9), {}),
    "thor(sgd)": (lambda: _thor(_sgd()), lambda: [NpTHOR()], lambda: NpSGD(), {}),
    "thor(momentum)": (lambda: _thor(_momentum()), lambda: [NpTHOR()], lambda: NpSGD(0.9), {}),
    "thor(adam)": (lambda: _thor(_adam()), lambda: [NpTHOR()], NpAdam, {}),
    # lars first: thor preconditions the LARS-scaled gradient.
    "lars(thor(momentum))": (lambda: _lars(_thor(_momentum())), lambda: [NpLARS(), NpTHOR()],
                             lambda: NpSGD(0.9), {}),
    # thor first: LARS scales the preconditioned gradient.
    "thor(lars(momentum))": (lambda: _thor(_lars(_momentum())), lambda: [NpTHOR(), NpLARS()],
                             lambda: NpSGD(0.9), {}),
    # accumulation first: a refresh's factors cover every micro-batch of its update.
    "batch_gradients(thor(momentum))": (lambda: _batch_gradients(_thor(_momentum())),
                                        lambda: [NpBatchGradients(), NpTHOR()], lambda: NpSGD(0.9), {}),
    # thor first: every micro-batch is preconditioned and counts as a thor update.
    "thor(batch_gradients(momentum))": (lambda: _thor(_batch_gradients(_momentum())),
                                        lambda: [NpTHOR(), NpBatchGradients()], lambda: NpSGD(0.9), {}),
    # loss scaling around the whole stack: the scale is divided out of gradients and factors.
    "loss_scale(thor(momentum))": (lambda: _thor(_momentum()), lambda: [NpTHOR()], lambda: NpSGD(0.9),
                                   {"loss_scale": "1024"}),
    # clipping below thor: the preconditioned gradient is clipped (MindSpore's order).
    "thor(momentum), gradient_clip": (lambda: _thor(_momentum()), lambda: [NpTHOR(), NpClip(0.05)],
                                      lambda: NpSGD(0.9), {"gradient_clip": 0.05}),
    # directly below the lowest thor, above what thor wraps.
    "thor(lars(momentum)), gradient_clip": (lambda: _thor(_lars(_momentum())),
                                            lambda: [NpTHOR(), NpClip(0.05), NpLARS()], lambda: NpSGD(0.9),
                                            {"gradient_clip": 0.05}),
    # below the lowest batch_gradients when it is under thor: the accumulated mean is clipped.
    "lars(thor(batch_gradients(momentum))), gradient_clip": (
        lambda: _lars(_thor(_batch_gradients(_momentum()))),
        lambda: [NpLARS(), NpTHOR(), NpBatchGradients(), NpClip(0.05)], lambda: NpSGD(0.9),
        {"gradient_clip": 0.05}),
}

STEPS = 6


@pytest.mark.parametrize("name", list(STACKS))
def test_stack_order_equals_the_numpy_pipeline(tmp_path, name):
    optimizer_fn, links, base, flag_values = STACKS[name]
    images, labels = thorlib.small_digits(BATCH * STEPS)
    for flag, value in flag_values.items():
        mox.set_flag(flag, value)
    mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=_model_fn, optimizer_fn=optimizer_fn(),
            run_mode=mox.ModeKeys.TRAIN, batch_size=BATCH, log_dir=str(tmp_path), max_number_of_steps=STEPS,
            log_every_n_steps=100)
    kernel, bias = runlib.checkpoint_variables(tmp_path)
    expected = numpy_pipeline(links(), base(), images, labels, STEPS)
    start = _initial_weights()
    assert not np.allclose(kernel, start["kernel"], atol=1e-4)
    np.testing.assert_allclose(kernel, expected["kernel"], atol=2e-5)
    np.testing.assert_allclose(bias, expected["bias"], atol=2e-5)


def test_the_clip_threshold_bites_under_thor():
    """The clipped references differ from the unclipped ones, so the clipping tests can fail."""
    images, labels = thorlib.small_digits(BATCH * STEPS)
    plain = numpy_pipeline([NpTHOR()], NpSGD(0.9), images, labels, STEPS)
    clipped = numpy_pipeline([NpTHOR(), NpClip(0.05)], NpSGD(0.9), images, labels, STEPS)
    raw_clipped = numpy_pipeline([NpClip(0.05), NpTHOR()], NpSGD(0.9), images, labels, STEPS)
    assert not np.allclose(plain["kernel"], clipped["kernel"], atol=1e-3)
    assert not np.allclose(raw_clipped["kernel"], clipped["kernel"], atol=1e-3)
