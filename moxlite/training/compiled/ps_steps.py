"""Parameter-server steps compiled by XLA: forward and backward on values read on the worker.

A ``tf.function(jit_compile=True)`` on a worker cannot read a variable that lives on a
parameter server: its first call fails with ``InvalidArgumentError: Trying to access
resource ... located in device /job:ps/...``. So the worker's step (``ValueStep``) reads
the value of every variable model_fn uses first, uncompiled; runs model_fn, the loss, its
gradients and THOR's layer records compiled by XLA on those values; then, uncompiled again,
assigns the values model_fn updated (BatchNorm's moving statistics, a dropout seed) and
applies the gradients through the optimizer stack, exactly as without XLA. What the stack
reads before model_fn (the loss scale, THOR's "refresh now?") is read outside too
(``TrainStep.step_reads``).

model_fn computes on the values under a ``ValueScope``, a ``keras.StatelessScope`` whose
mapping goes by the tf.Variable behind each Keras variable (model_fn's template hands the
same tf.Variables to the new Keras layers of every call): Keras variables read as the
values, their ``assign`` records a new value, and the gradient tape differentiates the
values (``watch_values``, ``differentiated``). Keras defers the creation of a variable made
inside a stateless scope (a layer built inside model_fn); the scope creates such variables
on their first use, in creation order, through the template, so that they get model_fn's
variables.

A variable read that is not a Keras variable's (``tf.compat.v1.get_variable``, a plain
``tf.Variable``, the global step read in model_fn) stays a read of the parameter server's
variable inside the XLA function; the trace is searched for such reads (captured resource
handles) before anything runs, and the step then goes without XLA, with one line naming them.
"""

import threading

import keras
import tensorflow as tf

from moxlite import compat, errors
from moxlite.training.compiled import jit_choice

_active = threading.local()   # the ValueScope in force on this thread, if any


def _identities(variable):
    """ids of ``variable`` and of what it wraps (a parameter server's AggregatingVariable
    wraps the variable a tape or a read may name)."""
    found = {id(variable)}
    inner = compat.wrapped_variable(variable)
    if inner is not None:
        found.add(id(inner))
    return found


def watch_values(tape):
    """Inside a ``ValueScope``: ``tape`` watches the values standing for the variables."""
    scope = getattr(_active, "scope", None)
    if scope is not None:
        tape.watch(scope.values)


def differentiated(variables):
    """What a gradient tape differentiates for ``variables``: the variables themselves, or
    inside a ``ValueScope`` the values that stand for them."""
    scope = getattr(_active, "scope", None)
    if scope is None:
        return list(variables)
    return [scope.value_of(variable) for variable in variables]


class ValueScope(keras.StatelessScope):
    """Keras variables backed by ``variables`` read as ``values`` (see the module docstring)."""

    def __init__(self, variables, values):
        super().__init__(collect_losses=True, initialize_variables=False)
        self.variables = list(variables)
        self.values = list(values)
        self.updated = {}             # index in ``variables`` -> the value model_fn assigned last
        self.unmapped_updates = []    # names of variables model_fn assigned that are not ours
        self._index = {}
        for index, variable in enumerate(self.variables):
            for identity in _identities(variable):
                self._index.setdefault(identity, index)
        self._deferred_from = 0
        self._outer = None

    def __enter__(self):
        self._deferred_from = len(compat.keras_variables_awaiting_initialization())
        self._outer = getattr(_active, "scope", None)
        _active.scope = self
        return super().__enter__()

    def __exit__(self, *exc_info):
        _active.scope = self._outer
        return super().__exit__(*exc_info)

    def _index_of(self, variable):
        if isinstance(variable, keras.Variable):
            variable = compat.backing_variable(variable)   # which creates it first, if deferred
        for identity in _identities(variable):
            if identity in self._index:
                return self._index[identity]
        return None

    def create_deferred(self):
        """Create, in creation order, the Keras variables Keras deferred inside this scope
        (``compat.backing_variable`` asks for it when it meets one)."""
        awaiting = compat.keras_variables_awaiting_initialization()
        created = awaiting[self._deferred_from:]
        del awaiting[self._deferred_from:]
        for variable in created:
            if getattr(variable, "_value", None) is None:
                compat.initialize_deferred_keras_variable(variable)

    def value_of(self, variable):
        """The value standing for ``variable`` (one of ``variables``, or a Keras variable
        around one); the variable itself when it is not one of them."""
        index = self._index_of(variable)
        return variable if index is None else self.values[index]

    # keras.StatelessScope's interface: what Keras variables read, what their assign records.

    def get_current_value(self, variable):
        index = self._index_of(variable)
        return None if index is None else self.values[index]

    def add_update(self, update):
        variable, value = update
        index = self._index_of(variable)
        if index is None:
            self.unmapped_updates.append(getattr(variable, "path", None) or getattr(variable, "name", "?"))
            return
        self.values[index] = value
        self.updated[index] = value


class _OnValues(jit_choice.Compiled):
    """The XLA function of one replica's forward and backward on values; its refusal also
    names the variables its trace still reads on the parameter servers."""

    def __init__(self, function, variables):
        super().__init__(function)
        self._variables = variables

    def refusal(self, *args):
        try:
            reason = super().refusal(*args)
        except (ValueError, TypeError, errors.MoxliteError) as error:
            # Keras refuses a variable created in a stateless scope without an initializer; a
            # genuine model_fn error is raised again by the plain trace that follows.
            return f"model_fn cannot run on values read on the worker ({type(error).__name__}: " \
                   f"{str(error).splitlines()[0] if str(error) else ''})"
        if reason is not None:
            return reason
        concrete = self._xla.get_concrete_function(*tf.nest.flatten(args, expand_composites=True))
        captured = [tensor for tensor in concrete.captured_inputs if tensor.dtype == tf.resource]
        if captured:
            return ("model_fn reads variables that are not Keras variables (tf.compat.v1.get_variable, a plain "
                    f"tf.Variable), which XLA on a worker cannot read on the parameter servers: "
                    f"{_names_of(captured, self._variables)}")
        return None


def _names_of(handles, variables):
    """The names of the variables whose resource handles are ``handles`` (those unknown counted)."""
    by_handle = {}
    for variable in variables:
        for candidate in (variable, compat.wrapped_variable(variable)):
            handle = getattr(candidate, "handle", None) if candidate is not None else None
            if handle is not None:
                by_handle.setdefault(id(handle), variable.name)
    names = sorted({by_handle[id(handle)] for handle in handles if id(handle) in by_handle})
    unknown = sum(1 for handle in handles if id(handle) not in by_handle)
    if unknown:
        names.append(f"{unknown} other variable(s)")
    return ", ".join(names)


class ValueStep:
    """The replica step of the asynchronous trainer with its forward and backward compiled on
    values (see the module docstring). ``replica_step(batch)`` stands for ``train_step(batch)``,
    ``gradients`` for ``train_step._gradients`` in ``TrainStep.accumulated``. The first trace
    checks the compiled function; if XLA cannot take it, ``refused`` says why and the step is
    traced without XLA."""

    def __init__(self, train_step):
        self.train_step = train_step
        self.variables = list(train_step.template.variables)
        self.refused = None
        self._compiled = {}   # one per replica of a worker
        sharded = [variable.name for variable in self.variables if compat.variable_attribute(variable, "is_sharded_variable", False)]
        if sharded:
            self.refused = (f"variables sharded across parameter servers ({', '.join(sharded)}), which the "
                            f"compiled step does not read as values")

    def replica_step(self, batch):
        if self.refused is not None:
            return self.train_step(batch)
        return self.train_step(batch, gradients=self.gradients)

    def gradients(self, batch, summarise=False):
        """(spec, gradient lists, step inputs) of ``batch``: the values read here, model_fn and
        its gradients compiled on them, then model_fn's assignments made here."""
        if self.refused is not None:
            return self.train_step._gradients(batch, summarise)
        values = [variable.read_value() for variable in self.variables]
        scales, policy = self.train_step.step_reads(summarise)
        scales = [tf.convert_to_tensor(scale, tf.float32) for scale in scales]
        fixed_policy = None if tf.is_tensor(policy) else policy
        collecting = (policy,) if tf.is_tensor(policy) else ()

        def on_values(batch, values, scales, collecting):
            scope = ValueScope(self.variables, values)
            with scope:
                reads = (scales, collecting[0] if collecting else fixed_policy)
                spec, gradient_lists, step_inputs = self.train_step.compiled_gradients(batch, summarise, reads)
            if scope.unmapped_updates:
                raise errors.ModelFnError(f"model_fn assigns variables that are not its own: "
                                          f"{', '.join(scope.unmapped_updates)}")
            return spec, gradient_lists, step_inputs, dict(scope.updated)

        args = (batch, values, scales, collecting)
        replica = tf.distribute.get_replica_context()
        key = int(tf.get_static_value(replica.replica_id_in_sync_group)) if replica is not None else 0
        key = (key, summarise)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = _OnValues(on_values, self.variables)
            self.refused = compiled.refusal(*args)
            if self.refused is not None:
                self.train_step.template.last_error = None   # the plain trace reports model_fn's own errors
                return self.train_step._gradients(batch, summarise)
            self._compiled[key] = compiled
        spec, gradient_lists, step_inputs, assigned = compiled(*args)
        for index, value in assigned.items():
            self.variables[index].assign(value)
        return spec, gradient_lists, step_inputs
