"""Calling ``model_fn`` many times while creating its variables once.

``model_fn`` is called once to build (eagerly, in the strategy's scope) and
then again in every traced step, on every replica, and once per mode. MoXing
users write it in three styles: closing over a Keras model built elsewhere,
constructing Keras layers inside the body, or calling
``tf.compat.v1.get_variable`` inside the body. The last two would create new
variables on every call. A variable creator scope hands every later call the
variables of the first call, in creation order, so all three styles share one
set of variables. A later call that asks for a variable the first call did not
create (or one of another shape) is a model_fn bug and fails loudly.
"""

import contextlib
import dataclasses
import weakref

import tensorflow as tf

from moxlite import compat, errors, graph_collections
from moxlite.distribute import averaged_state, prebuilt
from moxlite.contract import ExportSpec, ModelSpec
from moxlite.training.mixed_precision import levels
from moxlite.training.capture import interception, traced_variables
from moxlite.training.state import checkpoint_keys
from moxlite.training.calling import call_with_accepted_kwargs


def _shape_of(kwargs):
    shape = kwargs.get("shape")
    if shape is not None:
        return tf.TensorShape(shape)
    initial_value = kwargs.get("initial_value")
    if callable(initial_value):
        return None
    try:
        return tf.TensorShape(getattr(initial_value, "shape", None))
    except (TypeError, ValueError):
        return None


class SharedVariablesModelFn:
    """``model_fn`` with variables created on the first call and reused after."""

    def __init__(self, model_fn):
        self._model_fn = model_fn
        self._variables = []
        self._external_variables = []
        self._built = False
        self._made_up_names = {}
        self._paths = {}    # id of a variable -> the Keras path of the Keras variable around it
        self._names_by_identity = None
        self._stores = weakref.WeakKeyDictionary()
        self._state_kept = None   # the build call's _StateKept, which the creator tells of new variables
        # The last moxlite error raised inside a traced call: AutoGraph re-raises it wrapped in
        # its own StagingError, and run() unwraps it so the user sees our one-line message.
        self.last_error = None

    @property
    def variables(self):
        """Every variable model_fn uses: those it created, in creation order, then those of
        objects it closes over (style 1, a Keras model built before ``run``)."""
        return self._variables + self._external_variables

    def checkpoint_keys(self):
        """({stable name: variable} for ``variables``, names shared by several variables);
        see ``moxlite.training.state.checkpoint_keys``."""
        return checkpoint_keys.keyed(self.variables, self._made_up_names, self._paths)

    def stable_name(self, variable):
        """``variable``'s checkpoint key (it, a component of it or the Keras variable around it),
        or None for a variable model_fn does not use: the names THOR's include/exclude match."""
        if self._names_by_identity is None:
            if not self._built:
                return None
            names = {}
            for key, known in self.checkpoint_keys()[0].items():
                for identity in _identities(known):
                    names[identity] = key
            self._names_by_identity = names
        variable = _backing_variable(variable)
        for identity in _identities(variable):
            if identity in self._names_by_identity:
                return self._names_by_identity[identity]
        return None

    def slot_order(self, variables):
        """``variables`` (trainable ones, shards counted apart) in the order of their checkpoint
        keys: the order optimizers are given, so slots are saved by name, not creation order."""
        keys_by_id = {}
        for key, variable in self.checkpoint_keys()[0].items():
            if _is_sharded(variable):
                for index, shard in enumerate(variable.variables):
                    keys_by_id[id(shard)] = f"{key}/part_{index:05d}"
            else:
                keys_by_id[id(variable)] = key
        return checkpoint_keys.in_key_order(variables, keys_by_id)

    @property
    def external_variables(self):
        """Variables model_fn uses but did not create."""
        return list(self._external_variables)

    def build(self, inputs, mode, **kwargs):
        """First call: create the variables and find the ones model_fn uses but did not create.

        The variables model_fn uses but did not create (a Keras model built before ``run`` and
        closed over, reached by name, through a dict, a helper or a method) are those a traced
        call reads or assigns (``traced_variables``), BatchNorm's moving statistics included;
        a gradient tape over the first call adds any trainable one that only the eager call read.
        A later build (another mode) adds what it finds to what earlier builds found.
        """
        names_before = checkpoint_keys.keras_name_counters()
        seen, state = _LayersSeen(), _StateKept()
        self._state_kept = state
        try:
            with tf.GradientTape() as tape, interception.intercepting(seen), interception.intercepting(state):
                spec = self(inputs, mode, **kwargs)
        finally:
            self._state_kept = None
        state.restore()
        counters_after = checkpoint_keys.keras_name_counters()
        self._made_up_names = checkpoint_keys.made_up_names(names_before, counters_after)
        self._paths = seen.variable_paths()
        self._names_by_identity = None
        traced = traced_variables.read_by(lambda structure: self(structure, mode, **kwargs), inputs)
        _refuse_unreported(traced, mode)
        known = set()
        for variable in self._variables:
            known.update(_identities(variable))
        external = []
        for variable in list(self._external_variables) + list(traced.variables) + list(tape.watched_variables()):
            variable = prebuilt.container_of(variable) or variable   # made in strategy_scope(): the mirrored one
            if id(variable) not in known:
                known.update(_identities(variable))
                external.append(variable)
        self._external_variables = external
        names = [checkpoint_keys.candidate_name(v, self._paths) for v in self.variables]
        self._made_up_names = checkpoint_keys.made_up_before(names, counters_after, self._made_up_names)
        return spec

    @property
    def trainable_variables(self):
        """Trainable variables model_fn created; a variable sharded across parameter servers
        (a ShardedVariable, which has no ``trainable``) counts as its shards, the variables
        that gradients and optimizer updates address."""
        found = []
        for variable in self._variables:
            found.extend(variable.variables if _is_sharded(variable) else [variable])
        return [v for v in found if v.trainable]

    @property
    def built(self):
        return self._built

    def __call__(self, inputs, mode, **kwargs):
        """Run model_fn(inputs, mode) and check that it returned a ModelSpec."""
        with self._reuse_scope(), graph_collections.model_fn_scope():
            spec = call_with_accepted_kwargs(self._model_fn, inputs, mode, **kwargs)
        self._built = True
        if not isinstance(spec, ModelSpec):
            raise errors.ModelFnTypeError(
                f"model_fn returned {errors.describe(spec)}; it must return "
                f"moxlite.ModelSpec(loss=..., log_info=...)")
        # Inside a run at a mixed level what model_fn returns reaches moxlite in float32. Outside
        # one, or at O0, a model_fn that casts to float16 itself (MoXing's idiom) is left alone.
        return in_float32(spec) if levels.mixed_level_in_force() else spec

    @contextlib.contextmanager
    def _reuse_scope(self):
        cursor = [0]

        def creator(next_creator, **kwargs):
            if not self._built:
                variable = next_creator(**averaged_state.with_replica_mean(kwargs))
                self._variables.append(variable)
                if self._state_kept is not None:
                    self._state_kept.keep(variable)
                return variable
            return self._reuse(cursor, kwargs)

        with compat.tf1_variable_store_scope(self._variable_store()), \
                tf.variable_creator_scope(creator):
            yield

    def _variable_store(self):
        """This template's TF1 variable store for the graph being built.

        The default store is a collection of the global graph, which traced steps inherit, so
        get_variable names of an earlier run() (or template) in the process would collide
        ("Variable W already exists"). One store per graph and template: the replicas of one
        traced step share it (MirroredStrategy asks replica 1 to reuse replica 0's variables).
        """
        graph = tf.compat.v1.get_default_graph()
        if graph not in self._stores:
            self._stores[graph] = compat.new_tf1_variable_store()
        return self._stores[graph]

    def _reuse(self, cursor, kwargs):
        try:
            return self._reused_variable(cursor, kwargs)
        except errors.MoxliteError as error:
            self.last_error = error
            raise

    def _reused_variable(self, cursor, kwargs):
        index = cursor[0]
        name = kwargs.get("name") or "<unnamed>"
        if index >= len(self._variables):
            raise errors.ModelFnError(
                f"model_fn created variable {name!r} on a later call that its first call did not "
                f"create ({len(self._variables)} variables then); model_fn must create the same "
                f"variables, in the same order, on every call and in every mode")
        variable = self._variables[index]
        shape = _shape_of(kwargs)
        if shape is not None and shape.rank is not None and not shape.is_compatible_with(variable.shape):
            raise errors.ModelFnError(
                f"model_fn asked for variable {name!r} of shape {shape} on a later call where its "
                f"first call created {variable.name!r} of shape {variable.shape}; model_fn must "
                f"create the same variables, in the same order, on every call")
        cursor[0] = index + 1
        return variable


def _float32(value):
    """A float16/bfloat16 tensor as float32; anything else as it is."""
    if tf.is_tensor(value) and value.dtype in (tf.float16, tf.bfloat16):
        return tf.cast(value, tf.float32)
    return value


def in_float32(spec):
    """``spec`` with its half-precision loss, log_info, output_info and export outputs in float32.

    What model_fn hands moxlite is float32 at every mixed precision level (MindSpore's O2/O3
    cast a network's outputs back to float32): logged and averaged values, PREDICT's outputs and the
    exported SavedModel's signature do not depend on the level. Export inputs stay as given.
    """
    def cast(structure):
        return None if structure is None else tf.nest.map_structure(_float32, structure)

    changes = {"loss": cast(spec.loss), "log_info": cast(spec.log_info), "output_info": cast(spec.output_info)}
    if isinstance(spec.export_spec, ExportSpec) and spec.export_spec.outputs_dict is not None:
        changes["export_spec"] = dataclasses.replace(spec.export_spec,
                                                     outputs_dict=cast(spec.export_spec.outputs_dict))
    return dataclasses.replace(spec, **changes)


class _StateKept:
    """An interception handler that keeps the non-trainable state of every layer the build
    call reaches (and of every variable it creates) as it was before, and puts it back after.

    The build call runs ``model_fn`` on zeros, in TRAIN mode for a TRAIN run: a BatchNorm
    called with ``training=True`` would take one update from that batch of zeros (moving
    variance 1 -> momentum), a dropout layer would advance its seed. That call is moxlite's,
    not a training step, so it leaves no trace on the model's state: a pretrained model closed
    over keeps its statistics, and a resumed or fresh run starts from the state TF1's graph
    construction would have left. Trainable weights are moved only by optimizers, never here.
    """

    def __init__(self):
        self._kept = {}

    def keep(self, variable):
        variable = _backing_variable(variable)
        if variable is None or id(variable) in self._kept:   # (a Keras variable not created yet)
            return
        if _is_sharded(variable):
            for shard in variable.variables:
                self.keep(shard)
            return
        if not getattr(variable, "trainable", True):
            with tf.init_scope():   # eagerly, also from Keras's shape-inference scratch graph
                self._kept[id(variable)] = (variable, tf.identity(variable.read_value()))

    def around(self, call, args, kwargs, proceed):
        for weight in call.layer.weights:   # built already (closed over): as it is before its first call
            self.keep(weight)
        return proceed(args, kwargs)

    def restore(self):
        with tf.init_scope():
            for variable, value in self._kept.values():
                variable.assign(value)


class _LayersSeen:
    """An interception handler that notes the layers model_fn calls (sub-layers included)."""

    def __init__(self):
        self.layers = {}

    def around(self, call, args, kwargs, proceed):
        self.layers.setdefault(id(call.layer), call.layer)
        return proceed(args, kwargs)

    def variable_paths(self):
        """{id of a variable (and of its components): the Keras path of the variable around it}.

        A layer's Keras path (``block0/attention/query/kernel``) names every variable of a
        composite layer apart, where TensorFlow names all of them after the outer layer.
        """
        paths = {}
        for layer in self.layers.values():
            for weight in layer.weights:
                path = getattr(weight, "path", None)
                if path:
                    for identity in _identities(_backing_variable(weight)):
                        paths.setdefault(identity, path)
        return paths


def _is_sharded(variable):
    """True for a variable that ParameterServerStrategy's partitioner split into shards."""
    return bool(compat.variable_attribute(variable, "is_sharded_variable", False))


def _identities(variable):
    """ids of a variable and of what it wraps: the per-replica components of a mirrored
    variable, the variable inside a parameter server's AggregatingVariable (a gradient tape
    may record either), the shards of a variable sharded across parameter servers."""
    if _is_sharded(variable):
        return {id(variable)}.union(*(_identities(shard) for shard in variable.variables))
    wrapped = list(getattr(variable, "values", ()))
    inner = compat.wrapped_variable(variable)
    if inner is not None:
        wrapped.append(inner)
    return {id(variable)} | {id(component) for component in wrapped}


def _refuse_unreported(traced, mode):
    """A variable the trace reads only through its handle cannot be saved: an error now, not a
    checkpoint that silently lacks it."""
    if traced.unreported:
        raise errors.ModelFnError(
            f"model_fn reads {len(traced.unreported)} variable(s) in {mode} mode through their resource handle "
            f"alone (a raw op on variable.handle), so moxlite cannot checkpoint, restore or export them; "
            f"read the variable itself (variable.value(), tf.identity(variable), a Keras layer)")


def _backing_variable(variable):
    """The tf.Variable behind a Keras 3 variable (or the variable itself)."""
    return compat.backing_variable(variable)
