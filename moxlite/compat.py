"""Every use of a private TensorFlow or Keras API in moxlite, in one place.

moxlite pins TensorFlow 2.21 and Keras 3.15. The helpers below reach into
their internals where no public API does the job; each says what it relies on
and why no public API serves, and raises ``CompatibilityError`` naming the
missing piece when a version no longer has it. tests/package/test_compat.py holds one
test per helper, so an upgrade that changes one of them fails there with that
name instead of as a wrong number somewhere in a run.
"""

import contextlib
import inspect
import types
import warnings

import tensorflow as tf

from moxlite import errors

PINNED = "TensorFlow 2.21 and Keras 3.15"


class CompatibilityError(errors.MoxliteError):
    """The installed TensorFlow or Keras lacks an internal moxlite relies on."""


def _missing(owner, attribute, purpose):
    return CompatibilityError(
        f"{owner} has no {attribute}, which moxlite uses to {purpose} (written for {PINNED}); "
        f"install those versions or update moxlite/compat.py")


# Keras's TensorFlow optimizer ----------------------------------------------------------------

def gradient_all_reduce(optimizer):
    """The optimizer's own all-reduce of gradients (``_all_reduce_sum_gradients``).

    Keras's TensorFlow optimizer sums gradients across replicas inside
    ``apply`` whenever it runs in a replica context; there is no public switch
    to hand it gradients that a wrapper has already reduced.
    """
    original = getattr(optimizer, "_all_reduce_sum_gradients", None)
    if original is None:
        raise _missing(type(optimizer).__name__, "_all_reduce_sum_gradients",
                       "skip the all-reduce of gradients a wrapper already reduced (use the TensorFlow backend)")
    return original


@contextlib.contextmanager
def gradients_already_reduced(optimizer):
    """While the body runs, ``optimizer.apply`` takes its gradients as already summed across
    replicas (its all-reduce hands them back unchanged); afterwards the optimizer object is
    as before, its own attributes and methods untouched."""
    gradient_all_reduce(optimizer)
    own = vars(optimizer)
    had, previous = "_all_reduce_sum_gradients" in own, own.get("_all_reduce_sum_gradients")
    optimizer._all_reduce_sum_gradients = list
    try:
        yield
    finally:
        if had:
            optimizer._all_reduce_sum_gradients = previous
        else:
            del optimizer._all_reduce_sum_gradients


def track_optimizer_variable(optimizer, variable):
    """Count ``variable`` among ``optimizer.variables`` (saved and restored with it).

    ``Optimizer.add_variable`` cannot create per-replica (ON_READ) or host
    variables: it takes no ``synchronization``, so such a variable is made
    by hand and registered with ``_track_variable``.
    """
    track = getattr(optimizer, "_track_variable", None)
    if track is None:
        raise _missing(type(optimizer).__name__, "_track_variable", "keep hand-made optimizer variables")
    track(variable)


def optimizer_variable_index(optimizer, variable):
    """The position of ``variable`` in the list ``optimizer`` was built on (``_get_variable_index``).

    Slots made by ``add_optimizer_variables`` are in that order. The lookup
    goes through Keras's variable key, which also finds the variable when a
    strategy hands ``update_step`` a different object standing for it.
    """
    index_of = getattr(optimizer, "_get_variable_index", None)
    if index_of is None:
        raise _missing(type(optimizer).__name__, "_get_variable_index", "find a variable's optimizer slots")
    return index_of(variable)


def optimizer_own_variables(optimizer):
    """The variables ``optimizer`` made itself (``_variables``): a wrapper's, without its inner optimizer's.

    The public ``variables`` of a moxlite wrapper adds the inner optimizer's,
    so it cannot be the source of the wrapper's own list.
    """
    if not hasattr(optimizer, "_variables"):
        raise _missing(type(optimizer).__name__, "_variables", "list a wrapper's own optimizer variables")
    return optimizer._variables


def optimizer_built_variables(optimizer):
    """The trainable variables ``optimizer`` was built on, in order (``_trainable_variables``; [] unbuilt).

    ``apply(grads)`` without variables means these; Keras has no public getter.
    """
    if not hasattr(optimizer, "_trainable_variables"):
        raise _missing(type(optimizer).__name__, "_trainable_variables", "apply gradients to the built variables")
    return optimizer._trainable_variables


def share_loss_scale_state(optimizer, source):
    """Build LossScaleOptimizer ``optimizer`` on ``source``'s scale and growth counter.

    Keras's ``LossScaleOptimizer.build`` always creates new ``step_counter``
    and ``dynamic_scale`` variables; to unscale with another optimizer's
    scale, both are taken over and the optimizer is marked built by hand.
    """
    if not source.built:
        raise CompatibilityError(f"share_loss_scale_state: build {source.name!r} first")
    for attribute in ("step_counter", "dynamic_scale"):
        if not hasattr(source, attribute):
            raise _missing(type(source).__name__, attribute, "share one dynamic loss scale between two optimizers")
        setattr(optimizer, attribute, getattr(source, attribute))
    optimizer.built = True


# Variables -------------------------------------------------------------------------------------

def backing_variable(variable):
    """The tf.Variable behind a Keras 3 variable (any other variable as is).

    Keras keeps it in ``_value``; the public ``value`` autocasts to a tensor
    under mixed precision instead of returning the variable.
    """
    import keras

    if not isinstance(variable, keras.Variable):
        return variable
    if not hasattr(variable, "_value"):
        raise _missing("keras.Variable", "_value", "find the tf.Variable a Keras layer trains")
    if variable._value is None:
        # Created inside a stateless scope, which deferred its creation: a scope that can create
        # such variables now (moxlite's ValueScope) is asked to.
        scope = keras_global_state().get_global_attribute("stateless_scope")
        create = getattr(scope, "create_deferred", None)
        if create is not None:
            create()
    return variable._value


def variable_attribute(variable, name, default=None):
    """``getattr(variable, name, default)``, without reading a distributed variable.

    A ``DistributedValues`` (a MirroredVariable) answers an attribute its class and instance
    lack (a Keras ``path``, ``_v``, ``is_sharded_variable``) from its component for the
    current replica; in cross-replica context it first reads the variable to pick one
    (``DistributedDelegate.__getattr__`` -> ``_get_cross_replica``). Inside a trace every such
    look-up added a ReadVariableOp and an Identity to the graph (executed at every step, and
    about 1.5 ms of tracing each): THOR's per-slot look-ups over a ResNet-50's variables
    added 30,000. Here such an attribute is read from the first component, which holds the
    same Python attributes and is not read.
    """
    if isinstance(variable, tf.distribute.DistributedValues):
        try:
            inspect.getattr_static(variable, name)
        except AttributeError:
            return getattr(variable.values[0], name, default)
    return getattr(variable, name, default)


def wrapped_variable(variable):
    """The variable inside a parameter server's ``AggregatingVariable`` (``_v``), or None.

    A gradient tape under ParameterServerStrategy may record either object;
    AggregatingVariable has no public accessor for the one it wraps.
    """
    return variable_attribute(variable, "_v")


def created_under_a_strategy(variable):
    """True for a variable created inside some ``tf.distribute`` strategy's scope.

    Mirrored variables are ``DistributedValues``; parameter-server ones are
    not, and only carry the private ``_distribute_strategy`` (every
    tf.Variable has that attribute: it is None outside a strategy).
    ``strategy.extended.variable_created_in_scope`` is public but asks about
    one given strategy, not any.
    """
    return isinstance(variable, tf.distribute.DistributedValues) or \
        getattr(variable, "_distribute_strategy", None) is not None


def is_variable_handle(tensor):
    """True for a resource tensor that is a variable's handle (not a lookup table's or an iterator's).

    A variable's handle carries its dtype and shape as handle data
    (``resource_variable_ops.get_eager_safe_handle_data``); other resources carry none. No
    public API tells a variable handle from another resource; moxlite asks it of the resources
    a traced model_fn captured, to find variables read through their handle alone.
    """
    if getattr(tensor, "dtype", None) != tf.resource:
        return False
    from tensorflow.python.ops import resource_variable_ops

    handle_data = getattr(resource_variable_ops, "get_eager_safe_handle_data", None)
    if handle_data is None:
        raise _missing("tensorflow.python.ops.resource_variable_ops", "get_eager_safe_handle_data",
                       "find the variables a traced model_fn reads")
    data = handle_data(tensor)
    return bool(data is not None and data.is_set and data.shape_and_type and
                data.shape_and_type[0].dtype != tf.dtypes.variant.as_datatype_enum)


def single_device_variables(device):
    """A scope in which the active strategy creates plain variables on ``device``.

    The strategy's variable creator honours ``colocate_with`` set to a
    ``SingleDevice`` (the way tf.distribute places its own host-side
    variables); ``tf.device`` alone would still mirror them.
    """
    from tensorflow.python.distribute import numpy_dataset

    if not hasattr(numpy_dataset, "SingleDevice"):
        raise _missing("tensorflow.python.distribute.numpy_dataset", "SingleDevice",
                       "keep batch_gradients accumulators in host memory (accumulate_on='cpu')")

    def single_device_creator(next_creator, **kwargs):
        kwargs["colocate_with"] = numpy_dataset.SingleDevice(device)
        return next_creator(**kwargs)

    return tf.variable_creator_scope(single_device_creator)


def learning_rate_attribute(optimizer):
    """What a Keras optimizer stores as its learning rate (``_learning_rate``), or None.

    A variable for a float rate, else the schedule or callable itself. The
    public ``learning_rate`` evaluates a schedule and, on a moxlite wrapper,
    answers for the inner optimizer, so it cannot tell which object holds what.
    """
    return getattr(optimizer, "_learning_rate", None)


def keras_auto_name_counters():
    """A copy of Keras's counters of made-up layer names (prefix -> names made so far).

    Keras keeps them in ``keras.src.backend.common.global_state`` under
    ``object_name_uids``; there is no public accessor. Empty if that module is gone.
    """
    try:
        from keras.src.backend.common import global_state
    except ImportError:
        return {}
    return dict(global_state.get_global_attribute("object_name_uids") or {})


def keras_global_state():
    """Keras's ``keras.src.backend.common.global_state`` (no public accessor for what it holds)."""
    try:
        from keras.src.backend.common import global_state
    except ImportError as error:
        raise _missing("keras.src.backend.common", "global_state",
                       "read Keras variables as values in parameter-server steps compiled by XLA") from error
    return global_state


def keras_variables_awaiting_initialization():
    """The list (Keras's own, in creation order) of Keras variables created inside a
    ``keras.StatelessScope``, whose creation Keras defers to the scope's exit
    (``uninitialized_variables`` in its global state)."""
    return keras_global_state().get_global_attribute("uninitialized_variables", [], set_to_default=True)


@contextlib.contextmanager
def outside_stateless_scope():
    """No ``keras.StatelessScope`` in force within this block (the one in force is put back)."""
    state = keras_global_state()
    scope = state.get_global_attribute("stateless_scope")
    state.set_global_attribute("stateless_scope", None)
    try:
        yield
    finally:
        state.set_global_attribute("stateless_scope", scope)


def in_keras_symbolic_scope():
    """True while Keras works out a layer's output shapes by calling it in a scratch graph
    (``compute_output_spec`` under a ``keras.SymbolicScope``), as it does when it builds a
    layer without a ``build`` of its own (a custom block) at its first call; Keras exports the
    scope's class but not the test of whether one is in force."""
    return keras_global_state().get_global_attribute("symbolic_scope") is not None


def variable_handle_in(graph, variable):
    """The tensor that stands for ``variable``'s handle inside ``graph`` (a function graph
    being traced): its capture of the handle, directly or through the function graphs around
    it; None when ``graph`` has not captured it. TensorFlow has no public map from a variable
    to its capture (``FuncGraph.captures`` and ``outer_graph`` are internal to its function graphs)."""
    handle = getattr(variable, "handle", None)
    return _captured_in(graph, handle) if handle is not None else None


def _captured_in(graph, tensor):
    if graph is None or not hasattr(graph, "captures"):
        return None
    if getattr(tensor, "graph", None) is graph:
        return tensor
    captures = graph.captures
    for outside, inside in captures:
        if outside is tensor:
            return inside
    outer = _captured_in(getattr(graph, "outer_graph", None), tensor)
    if outer is None:
        return None
    return next((inside for outside, inside in captures if outside is outer), None)


def initialize_deferred_keras_variable(variable):
    """Create now the tf.Variable of a Keras variable whose creation a stateless scope deferred
    (its ``_initializer`` kept, ``_value`` None), through the variable creators in force: what
    Keras's ``_deferred_initialize`` does, without its ``init_scope``, which would leave the
    graph being traced and with it moxlite's template (the creator that hands back model_fn's
    variables)."""
    for attribute in ("_initializer", "_initialize_with_initializer"):
        if not hasattr(variable, attribute):
            raise _missing("keras.Variable", attribute, "create a Keras variable deferred by a stateless scope")
    with outside_stateless_scope():
        variable._initialize_with_initializer(variable._initializer)
    variable._initializer = None


def new_tf1_variable_store():
    """A fresh TF1 variable store (what ``tf.compat.v1.get_variable`` looks names up in)."""
    from tensorflow.python.ops import variable_scope

    if not hasattr(variable_scope, "_VariableStore"):
        raise _missing("tensorflow.python.ops.variable_scope", "_VariableStore",
                       "give each model_fn template its own get_variable names")
    return variable_scope._VariableStore()


def tf1_variable_store_scope(store):
    """A scope in which ``tf.compat.v1.get_variable`` uses ``store`` instead of the graph's."""
    from tensorflow.python.ops import variable_scope

    if not hasattr(variable_scope, "with_variable_store"):
        raise _missing("tensorflow.python.ops.variable_scope", "with_variable_store",
                       "give each model_fn template its own get_variable names")
    return variable_scope.with_variable_store(store)


def layer_weight_variable(layer, name):
    """The variable a Keras layer keeps its ``name`` weight in (``_kernel``, ``_embeddings``), or None.

    The public ``kernel`` and ``embeddings`` properties return a tensor (the
    kernel plus the LoRA product) when LoRA is enabled, and raise before the
    layer is built.
    """
    return getattr(layer, f"_{name}", None)


def direct_sublayers(layer):
    """The layers ``layer`` holds directly, in order (Keras's ``_flatten_layers`` one level down).

    ``Layer.layers`` exists only on models, and ``_layers`` misses layers
    held in attributes.
    """
    flatten = getattr(layer, "_flatten_layers", None)
    if flatten is None:
        raise _missing(type(layer).__name__, "_flatten_layers", "list a model's layers for the precision report")
    return list(flatten(include_self=False, recursive=False))


# Keras layers ----------------------------------------------------------------------------------

def replace_layer_method(layer_class, name, method):
    """Set ``layer_class.<name>`` (e.g. ``Dense.call``, ``Layer.__call__``) to ``method``.

    Returns a function of no arguments that puts the class back exactly as it
    was (an inherited method is inherited again). moxlite's interception
    (``moxlite.training.capture.interception``) wraps ``Layer.__call__``, which every
    layer call goes through, while a run is in progress: Keras has no public
    per-call hook, and layers built inside model_fn are new objects on every
    trace, so no per-instance wrapping can reach them before they run.
    """
    if not callable(getattr(layer_class, name, None)):
        raise _missing(layer_class.__name__, f"method {name}",
                       "wrap the forward pass of its layers (per-layer precision, THOR's statistics)")
    own = vars(layer_class).get(name)
    setattr(layer_class, name, method)

    def restore():
        if own is None:
            delattr(layer_class, name)
        else:
            setattr(layer_class, name, own)
    return restore


def set_untracked_attribute(layer, name, value):
    """``layer.<name> = value`` without Keras's attribute tracking (``object.__setattr__``).

    moxlite replaces a layer's ``call`` or ``activation`` on the instance for the length of
    one call (THOR's recording): Keras's ``Layer.__setattr__`` would track the value as
    layer state (and refuse to track a plain function). Keras reads both on the instance
    at call time: ``Operation.__call__`` calls ``self.call``, and Dense, Conv2D and
    EinsumDense apply ``self.activation`` last, to the pre-activation output, which no
    public API reaches.
    """
    object.__setattr__(layer, name, value)


def delete_untracked_attribute(layer, name):
    """Remove the instance attribute ``set_untracked_attribute`` set (the class's shows again)."""
    object.__delattr__(layer, name)


# TF1 optimizers ----------------------------------------------------------------------------------

# tf.compat.v1.train class name -> (attribute of the learning rate, {hyperparameter: attribute}).
# TF1 optimizers keep their constructor arguments only in these private attributes.
TF1_OPTIMIZER_ATTRIBUTES = {
    "GradientDescentOptimizer": ("_learning_rate", {}),
    "MomentumOptimizer": ("_learning_rate", {"momentum": "_momentum", "use_nesterov": "_use_nesterov"}),
    "AdamOptimizer": ("_lr", {"beta1": "_beta1", "beta2": "_beta2", "epsilon": "_epsilon"}),
    "RMSPropOptimizer": ("_learning_rate", {"decay": "_decay", "momentum": "_momentum", "epsilon": "_epsilon",
                                            "centered": "_centered"}),
    "AdagradOptimizer": ("_learning_rate", {"initial_accumulator_value": "_initial_accumulator_value"}),
    "AdadeltaOptimizer": ("_lr", {"rho": "_rho", "epsilon": "_epsilon"}),
    "FtrlOptimizer": ("_learning_rate", {
        key: "_" + key for key in ("learning_rate_power", "initial_accumulator_value", "l1_regularization_strength",
                                   "l2_regularization_strength", "l2_shrinkage_regularization_strength", "beta")}),
}


def tf1_optimizer_settings(optimizer):
    """(learning rate, {hyperparameter: value}) a ``tf.compat.v1.train`` optimizer was made with.

    The class must be one of ``TF1_OPTIMIZER_ATTRIBUTES``.
    """
    lr_attribute, attributes = TF1_OPTIMIZER_ATTRIBUTES[type(optimizer).__name__]
    for attribute in (lr_attribute, *attributes.values()):
        if not hasattr(optimizer, attribute):
            raise _missing(type(optimizer).__name__, attribute, "translate a TF1 optimizer into a Keras one")
    return getattr(optimizer, lr_attribute), {key: getattr(optimizer, attribute) for key, attribute in attributes.items()}


# Traced functions ---------------------------------------------------------------------------------

class FlatCall:
    """Calls a concrete function with its inputs already flattened (``_call_flat``).

    A concrete function's public call binds its arguments to the signature on every call;
    with an iterator argument that took about 170 us a call here, as long as the training
    loop's whole graph at one step per call. The training loop calls one function with the
    same iterator over and over, so it flattens it once (``flatten``) and passes tensors.
    """

    def __init__(self, concrete_function):
        call_flat = getattr(concrete_function, "_call_flat", None)
        if call_flat is None:
            raise _missing("ConcreteFunction", "_call_flat", "call the training loop's traced function")
        self._call_flat = call_flat
        self._captured = concrete_function.captured_inputs

    @staticmethod
    def flatten(*args):
        """The tensors a call passes for ``args`` (an iterator becomes its resource handles)."""
        return tf.nest.flatten(args, expand_composites=True)

    def __call__(self, flat_inputs):
        return self._call_flat(flat_inputs, self._captured)


def inside_xla():
    """True while tracing a function XLA compiles (``tf.function(jit_compile=True)`` traces
    under an XLA control-flow context; no public API tells). Host-side ops (``tf.print``,
    string formatting) have no XLA kernel, so code that would add them asks this first."""
    from tensorflow.python.ops import control_flow_util

    in_xla = getattr(control_flow_util, "GraphOrParentsInXlaContext", None)
    if in_xla is None:
        raise _missing("tensorflow.python.ops.control_flow_util", "GraphOrParentsInXlaContext",
                       "leave host-side prints out of XLA-compiled steps")
    return bool(in_xla(tf.compat.v1.get_default_graph()))



# Per-device updates under a strategy (compiled Keras updates) --------------------------------

def _distribute_internals():
    from tensorflow.python.distribute import distribute_lib, distribute_utils

    for owner, name, attribute in ((distribute_lib, "distribute_lib", "UpdateContext"),
                                   (distribute_utils, "distribute_utils", "select_replica")):
        if not hasattr(owner, attribute):
            raise _missing(f"tensorflow.python.distribute.{name}", attribute,
                           "compile the optimizer's updates per device under Mirrored")
    return distribute_lib, distribute_utils


def update_devices(grads_and_vars):
    """The devices of the variables' components, in order (what ``extended.update`` walks),
    when every variable is mirrored over the same devices; else None."""
    devices = None
    for _, variable in grads_and_vars:
        components = getattr(backing_variable(variable), "values", None)
        if components is None:
            return None
        own = tuple(component.device for component in components)
        if devices is None:
            devices = own
        elif own != devices:
            return None
    return devices


def replica_component(index, value):
    """Device ``index``'s part of a per-replica or mirrored ``value`` (anything else as it is):
    what ``extended.update`` hands the update function on that device."""
    return _distribute_internals()[1].select_replica(index, value)


def variable_component(index, variable):
    """Device ``index``'s component of a mirrored (Keras or TensorFlow) variable."""
    return backing_variable(variable).values[index]


def update_context(index):
    """The context ``extended.update`` runs device ``index``'s update in: there a mirrored
    variable (an optimizer slot) reads and assigns its component on that device. No public
    API enters it outside ``extended.update``, which takes one variable at a time."""
    return _distribute_internals()[0].UpdateContext(index)

# Checkpoints -------------------------------------------------------------------------------------

class SavedStrings(tf.__internal__.tracking.Trackable):
    """A list of strings that ``tf.train.Checkpoint`` saves as one constant tensor (not restored).

    Saved under ``<name>/.ATTRIBUTES/VARIABLE_VALUE``, readable with
    ``tf.train.load_checkpoint``. A string variable would do, but cannot be made under
    MultiWorkerMirroredStrategy; saving a plain tensor needs TensorFlow's internal
    Trackable base and its ``_serialize_to_tensors`` / ``_restore_from_tensors`` hooks.
    """

    def __init__(self, strings):
        """``strings``: a list, or a callable giving the list at each save (what is known only then)."""
        self._strings = strings if callable(strings) else (list(strings) or [""])

    def _serialize_to_tensors(self):
        strings = (list(self._strings()) or [""]) if callable(self._strings) else self._strings
        with tf.device("/cpu:0"):
            return {"VARIABLE_VALUE": tf.constant(strings, dtype=tf.string)}

    def _restore_from_tensors(self, restored_tensors):
        return tf.no_op()


@contextlib.contextmanager
def iterator_reads():
    """Within the context, records ``(iterator, element)`` for every element an eager
    ``tf.data`` iterator hands out (``get_next()``, ``next(it)``), in order.

    MoXing's TF1 ``input_fn`` returns ``make_one_shot_iterator(ds).get_next()``; eagerly that
    is the first batch's tensors, and only the iterator that produced them says where the
    next batches come from. TensorFlow has no public hook on an iterator's reads: this wraps
    ``OwnedIterator._next_internal`` (the method behind both ``get_next`` and ``__next__``)
    for the duration of the context, on this thread only.
    """
    import threading

    from tensorflow.python.data.ops import iterator_ops

    owner = getattr(iterator_ops, "OwnedIterator", None)
    original = getattr(owner, "_next_internal", None)
    if original is None:
        raise _missing("tensorflow.python.data.ops.iterator_ops.OwnedIterator", "_next_internal",
                       "find the iterator behind the tensors input_fn returns")
    reads = []
    thread = threading.get_ident()

    def recorded(self):
        element = original(self)
        if threading.get_ident() == thread:
            reads.append((self, element))
        return element

    owner._next_internal = recorded
    try:
        yield reads
    finally:
        owner._next_internal = original


# AutoGraph ---------------------------------------------------------------------------------------
# moxlite's own functions are written for graph mode (tf.cond, tf.while_loop, Python logic on
# static values) and need no conversion; converting them cost most of a traced step's tracing.
# User functions moxlite calls inside a trace are converted explicitly (converted_user_function).

def _autograph_rules():
    """AutoGraph's conversion rules module (``tensorflow.python.autograph.core.config``) and its rule classes."""
    try:
        from tensorflow.python.autograph.core import config, config_lib
    except ImportError as missing:
        raise CompatibilityError(
            f"TensorFlow has no tensorflow.python.autograph.core.config ({missing}), which moxlite uses to keep "
            f"AutoGraph from converting its own functions (written for {PINNED}); install those versions or "
            f"update moxlite/compat.py") from None
    if not isinstance(getattr(config, "CONVERSION_RULES", None), tuple):
        raise _missing("tensorflow.python.autograph.core.config", "CONVERSION_RULES (a tuple of rules)",
                       "keep AutoGraph from converting its own functions")
    for name in ("DoNotConvert", "Action"):
        if not hasattr(config_lib, name):
            raise _missing("tensorflow.python.autograph.core.config_lib", name,
                           "keep AutoGraph from converting its own functions")
    return config, config_lib


def leave_unconverted(package):
    """Keep AutoGraph from converting the functions of ``package`` and its modules (idempotent).

    AutoGraph has no public setting for this: its ``CONVERSION_RULES`` (TensorFlow's own list
    that already leaves ``tensorflow``, ``keras`` and ``numpy`` alone) gains a ``DoNotConvert``
    rule, put first so that no later rule overrides it. A ``tf.function`` body is still
    converted (AutoGraph converts what it is asked to convert explicitly); the functions it
    calls in ``package`` run as written.
    """
    config, config_lib = _autograph_rules()
    if not is_left_unconverted(package):
        config.CONVERSION_RULES = (config_lib.DoNotConvert(package),) + tuple(config.CONVERSION_RULES)


def is_left_unconverted(package):
    """True when AutoGraph's first rule matching module ``package`` says not to convert it."""
    config, config_lib = _autograph_rules()
    module = types.ModuleType(package)   # a rule reads a module's name only
    for rule in config.CONVERSION_RULES:
        action = rule.get_action(module)
        if action != config_lib.Action.NONE:
            return action == config_lib.Action.DO_NOT_CONVERT
    return False


def converted_user_function(function):
    """``function`` as AutoGraph runs it when a converted caller calls it: converted inside a trace.

    moxlite's own functions are not converted (``leave_unconverted``), so a user function that
    moxlite calls while tracing (``model_fn``, an ``input_fn`` traced by a strategy, an
    augmentation or preprocessing function) would otherwise run unconverted, and its Python
    ``if``/``for`` on tensors would fail. ``tf.__internal__.autograph.tf_convert`` is the
    entry TensorFlow's own higher-order functions use (``strategy.run``, ``Dataset.map``); it
    follows the conversion status of the trace (a ``do_not_convert`` caller, a function marked
    ``tf.autograph.experimental.do_not_convert``). Executing eagerly the function is returned
    as it is, as no caller converts eager code.
    """
    if tf.executing_eagerly():
        return function
    internal = getattr(getattr(tf, "__internal__", None), "autograph", None)
    convert = getattr(internal, "tf_convert", None)
    status = getattr(internal, "control_status_ctx", None)
    if convert is None or status is None:
        raise _missing("tf.__internal__.autograph", "tf_convert or control_status_ctx",
                       "convert the user functions it calls while tracing")
    return convert(function, status())


def _leave_moxlite_unconverted():
    try:
        leave_unconverted("moxlite")
    except CompatibilityError as missing:
        # Converting moxlite's functions costs tracing time only: they do not rely on it.
        warnings.warn(f"{missing}; AutoGraph will convert moxlite's functions too (slower tracing, same results)",
                      RuntimeWarning, stacklevel=2)


_leave_moxlite_unconverted()
