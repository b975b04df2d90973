"""numpy references for TF1's optimizer formulas (tf.raw_ops Apply* kernels), one per optimizer.

``NumpyTF1(name, **hyperparameters).step(weights, grads, lr)`` updates a list of
float64 arrays in place the way ``tf.compat.v1.train.<name>Optimizer`` would
with learning rate ``lr`` at this step. Written from the documented formulas,
independently of ``moxlite.optimizers.tf1``.
"""

import numpy as np

DEFAULTS = {
    "GradientDescent": {},
    "Momentum": {"momentum": 0.9, "use_nesterov": False},
    "Adam": {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8},
    "RMSProp": {"decay": 0.9, "momentum": 0.0, "epsilon": 1e-10, "centered": False},
    "Adagrad": {"initial_accumulator_value": 0.1},
    "Adadelta": {"rho": 0.95, "epsilon": 1e-8},
    "Ftrl": {"learning_rate_power": -0.5, "initial_accumulator_value": 0.1, "l1_regularization_strength": 0.0,
             "l2_regularization_strength": 0.0, "l2_shrinkage_regularization_strength": 0.0, "beta": 0.0},
}


class NumpyTF1:
    def __init__(self, name, **hyperparameters):
        self.name = name
        self.h = dict(DEFAULTS[name], **hyperparameters)
        self.state = None
        self.t = 0

    def _init_state(self, w):
        h = self.h
        if self.name == "RMSProp":
            return {"ms": np.ones_like(w), "mom": np.zeros_like(w), "mg": np.zeros_like(w)}
        if self.name in ("Adagrad", "Ftrl"):
            return {"accum": np.full_like(w, h["initial_accumulator_value"]), "linear": np.zeros_like(w)}
        return {"a": np.zeros_like(w), "b": np.zeros_like(w)}

    def step(self, weights, grads, lr):
        if self.state is None:
            self.state = [self._init_state(w) for w in weights]
        self.t += 1
        for index, (w, g) in enumerate(zip(weights, grads)):
            weights[index] = getattr(self, "_" + self.name.lower())(w, np.asarray(g, np.float64), lr,
                                                                    self.state[index])
        return weights

    def _gradientdescent(self, w, g, lr, s):
        return w - lr * g

    def _momentum(self, w, g, lr, s):
        mu = self.h["momentum"]
        s["a"] = mu * s["a"] + g
        if self.h["use_nesterov"]:
            return w - lr * g - lr * mu * s["a"]
        return w - lr * s["a"]

    def _adam(self, w, g, lr, s):
        b1, b2, eps = self.h["beta1"], self.h["beta2"], self.h["epsilon"]
        s["a"] = b1 * s["a"] + (1 - b1) * g
        s["b"] = b2 * s["b"] + (1 - b2) * g * g
        lr_t = lr * np.sqrt(1 - b2 ** self.t) / (1 - b1 ** self.t)
        return w - lr_t * s["a"] / (np.sqrt(s["b"]) + eps)

    def _rmsprop(self, w, g, lr, s):
        rho, mu, eps = self.h["decay"], self.h["momentum"], self.h["epsilon"]
        s["ms"] = rho * s["ms"] + (1 - rho) * g * g
        denominator = s["ms"] + eps
        if self.h["centered"]:
            s["mg"] = rho * s["mg"] + (1 - rho) * g
            denominator = denominator - s["mg"] ** 2
        s["mom"] = mu * s["mom"] + lr * g / np.sqrt(denominator)
        return w - s["mom"]

    def _adagrad(self, w, g, lr, s):
        s["accum"] = s["accum"] + g * g
        return w - lr * g / np.sqrt(s["accum"])

    def _adadelta(self, w, g, lr, s):
        rho, eps = self.h["rho"], self.h["epsilon"]
        s["a"] = rho * s["a"] + (1 - rho) * g * g
        update = np.sqrt(s["b"] + eps) / np.sqrt(s["a"] + eps) * g
        s["b"] = rho * s["b"] + (1 - rho) * update * update
        return w - lr * update

    def _ftrl(self, w, g, lr, s):
        h = self.h
        p, l1 = h["learning_rate_power"], h["l1_regularization_strength"]
        l2 = h["l2_regularization_strength"] + h["beta"] / (2 * lr)
        accum_new = s["accum"] + g * g
        g_shrunk = g + 2 * h["l2_shrinkage_regularization_strength"] * w
        s["linear"] = s["linear"] + g_shrunk - (accum_new ** -p - s["accum"] ** -p) / lr * w
        quadratic = accum_new ** -p / lr + 2 * l2
        s["accum"] = accum_new
        return np.where(np.abs(s["linear"]) > l1, (np.sign(s["linear"]) * l1 - s["linear"]) / quadratic, 0.0)
