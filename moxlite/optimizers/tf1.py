"""Keras 3 optimizers that apply TF1's update formulas exactly.

A MoXing script returns ``tf.compat.v1.train.MomentumOptimizer(...)`` (or
Adam, RMSProp...) from its ``optimizer_fn``. Those objects cannot run in
moxlite's loop (they have no ``build``, no ``apply``, and know nothing of
Keras variables or of moxlite's wrappers), and Keras's namesakes compute
something else. ``tf1_adapter`` translates each TF1 instance into one of the
classes below, which keep TF1's arithmetic:

==============  ===========================================================
TF1 class       update (g: the gradient, lr: the learning rate *now*)
==============  ===========================================================
GradientDescent var -= lr * g
Momentum        accum = momentum * accum + g;  var -= lr * accum
                (Nesterov: var -= lr * (g + momentum * accum)). The raw
                gradient is accumulated and the current lr multiplies the
                whole accumulator, so a learning-rate drop takes effect at
                once; Keras's SGD folds lr into its velocity instead.
Adam            m, v as usual; var -= lr_t * m / (sqrt(v) + epsilon),
                lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t); epsilon 1e-8.
RMSProp         ms starts at 1.0 (not 0); ms = decay*ms + (1-decay)*g^2;
                mom = momentum*mom + lr*g / sqrt(ms + epsilon); var -= mom.
                Centered: the denominator is sqrt(ms - mg^2 + epsilon) with
                mg = decay*mg + (1-decay)*g. epsilon sits inside the root.
Adagrad         accum starts at initial_accumulator_value (0.1);
                accum += g^2; var -= lr * g / sqrt(accum), no epsilon.
Adadelta        accum = rho*accum + (1-rho)*g^2;
                update = sqrt(accum_update + eps) / sqrt(accum + eps) * g;
                accum_update = rho*accum_update + (1-rho)*update^2;
                var -= lr * update.
Ftrl            FTRL-proximal with TF1's l1, l2, l2_shrinkage and beta
                (beta enters as l2 + beta / (2 lr)); accum starts at
                initial_accumulator_value.
==============  ===========================================================

The formulas are those of TF's ``Apply*`` kernels as documented in
``tf.raw_ops``; tests check each against numpy and against TF1's own kernel.
Sparse gradients are applied densely: TF1's sparse kernels for Momentum,
RMSProp, Adagrad and Ftrl leave untouched rows' slots alone, these do not.
"""

import keras
from keras import ops

from moxlite import compat


class TF1Optimizer(keras.optimizers.Optimizer):
    """Base of the TF1-formula optimizers: slots declared per class, hyperparameters as floats.

    Subclasses set ``TF1_NAME`` (the tf.compat.v1.train class they stand for),
    ``HYPERPARAMETERS`` (name -> TF1 default) and ``SLOTS`` (slot name ->
    initial value, or the name of the hyperparameter holding it), and
    implement ``update_step``.
    """

    TF1_NAME = ""
    HYPERPARAMETERS = {}
    SLOTS = {}

    def __init__(self, learning_rate, name=None, **hyperparameters):
        unknown = sorted(set(hyperparameters) - set(self.HYPERPARAMETERS))
        if unknown:
            raise TypeError(f"{type(self).__name__}: unknown argument {unknown[0]!r}; "
                            f"accepted: {', '.join(self.HYPERPARAMETERS)}")
        super().__init__(learning_rate=learning_rate, name=name or f"tf1_{self.TF1_NAME.lower()}")
        for key, default in self.HYPERPARAMETERS.items():
            value = hyperparameters.get(key, default)
            setattr(self, key, value if isinstance(value, bool) else float(value))

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        for slot, initial in self._slots().items():
            value = getattr(self, initial) if isinstance(initial, str) else initial
            initializer = "zeros" if value == 0 else keras.initializers.Constant(value)
            setattr(self, f"_{slot}_slots", self.add_optimizer_variables(variables, slot, initializer))

    def _slots(self):
        return self.SLOTS

    def _slot(self, name, variable):
        return getattr(self, f"_{name}_slots")[compat.optimizer_variable_index(self, variable)]

    def _constant(self, name, variable):
        return ops.cast(getattr(self, name), variable.dtype)

    def get_config(self):
        config = super().get_config()
        config.update({key: getattr(self, key) for key in self.HYPERPARAMETERS})
        return config

    def describe(self):
        """``tf.compat.v1.train.<Class>(hyperparameters)``, for logs and --dry-run."""
        values = ", ".join(f"{key}={getattr(self, key)!r}" for key in self.HYPERPARAMETERS)
        return f"tf.compat.v1.train.{self.TF1_NAME}Optimizer({values})"


@keras.saving.register_keras_serializable(package="moxlite")
class TF1GradientDescent(TF1Optimizer):
    """TF1's GradientDescentOptimizer: var -= lr * g."""

    TF1_NAME = "GradientDescent"

    def update_step(self, gradient, variable, learning_rate):
        lr = ops.cast(learning_rate, variable.dtype)
        self.assign_sub(variable, ops.multiply(lr, ops.cast(gradient, variable.dtype)))


@keras.saving.register_keras_serializable(package="moxlite")
class TF1Momentum(TF1Optimizer):
    """TF1's MomentumOptimizer: the raw gradient is accumulated, the current lr scales the step."""

    TF1_NAME = "Momentum"
    HYPERPARAMETERS = {"momentum": 0.9, "use_nesterov": False}
    SLOTS = {"momentum": 0.0}

    def update_step(self, gradient, variable, learning_rate):
        lr = ops.cast(learning_rate, variable.dtype)
        g = ops.cast(gradient, variable.dtype)
        momentum = self._constant("momentum", variable)
        accum = self._slot("momentum", variable)
        self.assign(accum, ops.add(ops.multiply(accum, momentum), g))
        if self.use_nesterov:
            step = ops.add(g, ops.multiply(accum, momentum))
        else:
            step = accum
        self.assign_sub(variable, ops.multiply(lr, step))


@keras.saving.register_keras_serializable(package="moxlite")
class TF1Adam(TF1Optimizer):
    """TF1's AdamOptimizer (epsilon outside the root, default 1e-8; bias correction folded into lr)."""

    TF1_NAME = "Adam"
    HYPERPARAMETERS = {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8}
    SLOTS = {"m": 0.0, "v": 0.0}

    def update_step(self, gradient, variable, learning_rate):
        lr = ops.cast(learning_rate, variable.dtype)
        g = ops.cast(gradient, variable.dtype)
        beta1, beta2 = self._constant("beta1", variable), self._constant("beta2", variable)
        t = ops.cast(self.iterations + 1, variable.dtype)
        lr_t = lr * ops.sqrt(1.0 - ops.power(beta2, t)) / (1.0 - ops.power(beta1, t))
        m, v = self._slot("m", variable), self._slot("v", variable)
        self.assign(m, ops.add(ops.multiply(beta1, m), ops.multiply(1.0 - beta1, g)))
        self.assign(v, ops.add(ops.multiply(beta2, v), ops.multiply(1.0 - beta2, ops.square(g))))
        denominator = ops.add(ops.sqrt(v), self._constant("epsilon", variable))
        self.assign_sub(variable, ops.divide(ops.multiply(lr_t, m), denominator))


@keras.saving.register_keras_serializable(package="moxlite")
class TF1RMSProp(TF1Optimizer):
    """TF1's RMSPropOptimizer: mean square starts at 1, epsilon inside the root, lr inside the momentum."""

    TF1_NAME = "RMSProp"
    HYPERPARAMETERS = {"decay": 0.9, "momentum": 0.0, "epsilon": 1e-10, "centered": False}
    SLOTS = {"rms": 1.0, "momentum": 0.0, "mg": 0.0}

    def _slots(self):
        return self.SLOTS if self.centered else {k: v for k, v in self.SLOTS.items() if k != "mg"}

    def update_step(self, gradient, variable, learning_rate):
        lr = ops.cast(learning_rate, variable.dtype)
        g = ops.cast(gradient, variable.dtype)
        decay = self._constant("decay", variable)
        ms, mom = self._slot("rms", variable), self._slot("momentum", variable)
        self.assign(ms, ops.add(ops.multiply(decay, ms), ops.multiply(1.0 - decay, ops.square(g))))
        denominator = ops.add(ms, self._constant("epsilon", variable))
        if self.centered:
            mg = self._slot("mg", variable)
            self.assign(mg, ops.add(ops.multiply(decay, mg), ops.multiply(1.0 - decay, g)))
            denominator = ops.subtract(denominator, ops.square(mg))
        step = ops.divide(ops.multiply(lr, g), ops.sqrt(denominator))
        self.assign(mom, ops.add(ops.multiply(self._constant("momentum", variable), mom), step))
        self.assign_sub(variable, mom)


@keras.saving.register_keras_serializable(package="moxlite")
class TF1Adagrad(TF1Optimizer):
    """TF1's AdagradOptimizer: accumulator starts at initial_accumulator_value, no epsilon."""

    TF1_NAME = "Adagrad"
    HYPERPARAMETERS = {"initial_accumulator_value": 0.1}
    SLOTS = {"accumulator": "initial_accumulator_value"}

    def update_step(self, gradient, variable, learning_rate):
        lr = ops.cast(learning_rate, variable.dtype)
        g = ops.cast(gradient, variable.dtype)
        accum = self._slot("accumulator", variable)
        self.assign_add(accum, ops.square(g))
        self.assign_sub(variable, ops.divide(ops.multiply(lr, g), ops.sqrt(accum)))


@keras.saving.register_keras_serializable(package="moxlite")
class TF1Adadelta(TF1Optimizer):
    """TF1's AdadeltaOptimizer (TF1 default lr 0.001 multiplies the Adadelta step)."""

    TF1_NAME = "Adadelta"
    HYPERPARAMETERS = {"rho": 0.95, "epsilon": 1e-8}
    SLOTS = {"accum": 0.0, "accum_update": 0.0}

    def update_step(self, gradient, variable, learning_rate):
        lr = ops.cast(learning_rate, variable.dtype)
        g = ops.cast(gradient, variable.dtype)
        rho, epsilon = self._constant("rho", variable), self._constant("epsilon", variable)
        accum, accum_update = self._slot("accum", variable), self._slot("accum_update", variable)
        self.assign(accum, ops.add(ops.multiply(rho, accum), ops.multiply(1.0 - rho, ops.square(g))))
        update = ops.multiply(ops.sqrt(ops.add(accum_update, epsilon)) / ops.sqrt(ops.add(accum, epsilon)), g)
        self.assign(accum_update,
                    ops.add(ops.multiply(rho, accum_update), ops.multiply(1.0 - rho, ops.square(update))))
        self.assign_sub(variable, ops.multiply(lr, update))


@keras.saving.register_keras_serializable(package="moxlite")
class TF1Ftrl(TF1Optimizer):
    """TF1's FtrlOptimizer (FTRL-proximal with l1, l2, l2_shrinkage and beta)."""

    TF1_NAME = "Ftrl"
    HYPERPARAMETERS = {"learning_rate_power": -0.5, "initial_accumulator_value": 0.1,
                       "l1_regularization_strength": 0.0, "l2_regularization_strength": 0.0,
                       "l2_shrinkage_regularization_strength": 0.0, "beta": 0.0}
    SLOTS = {"accum": "initial_accumulator_value", "linear": 0.0}

    def update_step(self, gradient, variable, learning_rate):
        lr = ops.cast(learning_rate, variable.dtype)
        g = ops.cast(gradient, variable.dtype)
        power = self._constant("learning_rate_power", variable)
        l1 = self._constant("l1_regularization_strength", variable)
        l2 = self._constant("l2_regularization_strength", variable) + (
            self._constant("beta", variable) / (2.0 * ops.maximum(lr, 1e-36)))
        shrinkage = self._constant("l2_shrinkage_regularization_strength", variable)
        accum, linear = self._slot("accum", variable), self._slot("linear", variable)
        accum_new = ops.add(accum, ops.square(g))
        shrunk = ops.add(g, ops.multiply(2.0 * shrinkage, variable))
        sigma = (ops.power(accum_new, -power) - ops.power(accum, -power)) / lr
        self.assign(linear, ops.subtract(ops.add(linear, shrunk), ops.multiply(sigma, variable)))
        quadratic = ops.power(accum_new, -power) / lr + 2.0 * l2
        proximal = ops.divide(ops.subtract(ops.sign(linear) * l1, linear), quadratic)
        self.assign(variable, ops.where(ops.abs(linear) > l1, proximal, ops.zeros_like(proximal)))
        self.assign(accum, accum_new)


CLASSES = (TF1GradientDescent, TF1Momentum, TF1Adam, TF1RMSProp, TF1Adagrad, TF1Adadelta, TF1Ftrl)
