"""moxlite.compat: one test per private TensorFlow/Keras API moxlite relies on.

Each test checks that the pinned versions still behave as the helper
assumes, so an upgrade that changes one fails here, by name.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from moxlite import compat


def test_gradients_already_reduced_skip_the_all_reduce_only_in_the_body():
    optimizer = keras.optimizers.SGD(learning_rate=0.5)
    weight = tf.Variable([1.0, 2.0])
    optimizer.build([weight])
    before = dict(vars(optimizer))
    with compat.gradients_already_reduced(optimizer):
        assert optimizer._all_reduce_sum_gradients([(1.0, weight)]) == [(1.0, weight)]
        optimizer.apply([tf.constant([1.0, -1.0])], [weight])
    np.testing.assert_allclose(weight.numpy(), [1.0 - 0.5, 2.0 + 0.5])
    assert vars(optimizer).keys() == before.keys()
    assert all(vars(optimizer)[key] is value for key, value in before.items())


def test_an_optimizer_without_the_all_reduce_hook_is_named_in_the_error():
    class Plain:
        pass

    with pytest.raises(compat.CompatibilityError, match="Plain has no _all_reduce_sum_gradients"):
        with compat.gradients_already_reduced(Plain()):
            pass


def test_tracked_variable_is_one_of_the_optimizer_variables():
    optimizer = keras.optimizers.SGD(learning_rate=0.1)
    optimizer.build([tf.Variable([1.0])])
    extra = keras.Variable(np.zeros(3, np.float32), trainable=False, name="extra")
    compat.track_optimizer_variable(optimizer, extra)
    assert any(variable is extra for variable in optimizer.variables)


def test_shared_loss_scale_state_unscales_and_counts_on_the_source(two_device_strategy):
    del two_device_strategy  # only the logical devices; one replica context here
    weight = keras.Variable(np.array([1.0, 2.0], np.float32))
    source = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.5), initial_scale=8.0)
    source.build([weight])
    sharing = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.5), initial_scale=8.0)
    compat.share_loss_scale_state(sharing, source)
    assert sharing.built and sharing.dynamic_scale is source.dynamic_scale
    sharing.inner_optimizer.build([weight])
    sharing.apply([tf.constant([8.0, -8.0])], [weight])   # gradients of the loss scaled by 8
    np.testing.assert_allclose(weight.numpy(), [0.5, 2.5])
    assert int(source.step_counter.numpy()) == 1


def test_backing_variable_is_the_tf_variable_behind_a_keras_variable():
    variable = keras.Variable(np.array([3.0], np.float32))
    backing = compat.backing_variable(variable)
    assert isinstance(backing, tf.Variable) and not isinstance(backing, keras.Variable)
    backing.assign([4.0])
    assert float(variable.numpy()[0]) == 4.0
    plain = tf.Variable(1.0)
    assert compat.backing_variable(plain) is plain


def test_wrapped_variable_of_a_parameter_server_aggregating_variable():
    from tensorflow.python.distribute import ps_values  # the class ParameterServerStrategy creates

    inner = tf.Variable(1.0)
    aggregating = ps_values.AggregatingVariable(tf.distribute.get_strategy(), inner, tf.VariableAggregation.SUM)
    assert compat.wrapped_variable(aggregating) is inner
    assert compat.wrapped_variable(inner) is None
    assert compat.created_under_a_strategy(aggregating)


def test_created_under_a_strategy_tells_mirrored_from_plain_variables(two_device_strategy):
    with two_device_strategy.scope():
        mirrored = tf.Variable(1.0)
    assert compat.created_under_a_strategy(mirrored)
    assert not compat.created_under_a_strategy(tf.Variable(1.0))


def test_variable_attribute_of_a_mirrored_variable_adds_no_op_to_a_cross_replica_trace(two_device_strategy):
    """getattr of an attribute a MirroredVariable lacks reads it in cross-replica context (two ops
    in the graph per look-up); variable_attribute answers the same without them."""
    with two_device_strategy.scope():
        mirrored = tf.Variable(1.0)
    counts = {}

    @tf.function(autograph=False)
    def look_up():
        graph = tf.compat.v1.get_default_graph()
        before = len(graph.get_operations())
        found = (compat.variable_attribute(mirrored, "path"), compat.variable_attribute(mirrored, "_v", "none"),
                 compat.variable_attribute(mirrored, "is_sharded_variable", False),
                 compat.variable_attribute(mirrored, "name"))
        counts["ours"] = len(graph.get_operations()) - before
        before = len(graph.get_operations())
        plain = (getattr(mirrored, "path", None), getattr(mirrored, "_v", "none"),
                 getattr(mirrored, "is_sharded_variable", False), mirrored.name)
        counts["getattr"] = len(graph.get_operations()) - before
        assert found == plain == (None, "none", False, mirrored.name)
        return tf.constant(0)

    with two_device_strategy.scope():
        look_up.get_concrete_function()
    assert counts["ours"] == 0 and counts["getattr"] > 0, counts
    inner = tf.Variable(1.0)
    assert compat.variable_attribute(inner, "path") is None and compat.variable_attribute(inner, "name") == inner.name


def test_single_device_variables_are_not_mirrored(two_device_strategy):
    with two_device_strategy.scope(), compat.single_device_variables("/device:CPU:0"):
        variable = tf.Variable(np.zeros(2, np.float32))
    assert not isinstance(variable, tf.distribute.DistributedValues)
    assert variable.device.endswith("device:CPU:0")


def test_learning_rate_attribute_is_the_variable_a_float_rate_lives_in():
    optimizer = keras.optimizers.SGD(learning_rate=0.25)
    stored = compat.learning_rate_attribute(optimizer)
    assert isinstance(stored, keras.Variable)
    optimizer.learning_rate = 0.5            # the public setter writes that same variable
    assert float(stored.numpy()) == 0.5


def test_keras_auto_name_counters_count_made_up_layer_names():
    before = compat.keras_auto_name_counters()
    keras.layers.Dense(1)
    keras.layers.Dense(1)
    after = compat.keras_auto_name_counters()
    assert after.get("dense", 0) == before.get("dense", 0) + 2


def test_a_tf1_variable_store_keeps_get_variable_names_apart():
    with tf.Graph().as_default():
        first, second = compat.new_tf1_variable_store(), compat.new_tf1_variable_store()
        with compat.tf1_variable_store_scope(first):
            in_first = tf.compat.v1.get_variable("w", shape=[1])
        with compat.tf1_variable_store_scope(second):
            in_second = tf.compat.v1.get_variable("w", shape=[1])   # no "Variable w already exists"
        assert in_first is not in_second
        with compat.tf1_variable_store_scope(first), pytest.raises(ValueError, match="already exists"):
            tf.compat.v1.get_variable("w", shape=[1])


def test_layer_weight_variable_is_the_trained_kernel_and_embedding_table():
    dense, embedding = keras.layers.Dense(3), keras.layers.Embedding(5, 2)
    dense.build((None, 4))
    embedding.build((None,))
    assert compat.layer_weight_variable(dense, "kernel") is dense.kernel
    assert compat.layer_weight_variable(embedding, "embeddings") is embedding.embeddings
    assert compat.layer_weight_variable(dense, "kernel") in dense.trainable_weights


def test_direct_sublayers_are_one_level_down_in_order():
    inner = keras.Sequential([keras.layers.Dense(2, name="a"), keras.layers.Dense(2, name="b")], name="inner")
    outer = keras.Sequential([keras.Input((3,)), inner, keras.layers.Dense(1, name="c")])
    def names(layer):   # a built Sequential also holds its InputLayer
        return [child.name for child in compat.direct_sublayers(layer)
                if not isinstance(child, keras.layers.InputLayer)]

    assert names(outer) == ["inner", "c"]
    assert names(inner) == ["a", "b"]


def test_optimizer_variable_index_finds_a_variables_slots_under_a_strategy(two_device_strategy):
    with two_device_strategy.scope():
        first, second = tf.Variable([1.0]), tf.Variable([2.0, 3.0])
        optimizer = keras.optimizers.SGD(momentum=0.9)
        optimizer.build([first, second])
    assert compat.optimizer_variable_index(optimizer, second) == 1
    assert optimizer.momentums[compat.optimizer_variable_index(optimizer, first)].shape == (1,)
    seen = []

    def replica_fn():   # update_step sees the replica's component, which must map to the same slot
        seen.append(compat.optimizer_variable_index(optimizer, second))

    two_device_strategy.run(replica_fn)
    assert seen and set(seen) == {1}


def test_optimizer_own_and_built_variables_are_what_apply_and_build_use():
    optimizer = keras.optimizers.SGD(momentum=0.9)
    assert compat.optimizer_built_variables(optimizer) == []
    weights = [tf.Variable([1.0]), tf.Variable([2.0])]
    optimizer.build(weights)
    assert [id(v) for v in compat.optimizer_built_variables(optimizer)] == [id(v) for v in weights]
    assert [id(v) for v in compat.optimizer_own_variables(optimizer)] == [id(v) for v in optimizer.variables]
    optimizer.apply([tf.constant([1.0]), tf.constant([1.0])])   # no variables: the built ones
    assert float(weights[0].numpy()[0]) < 1.0


def test_replaced_layer_call_and_dunder_call_see_every_call_until_put_back():
    seen = []
    conv_call, layer_call = keras.layers.Conv2D.call, keras.layers.Layer.__call__
    assert "call" not in vars(keras.layers.Conv2D)   # inherited from the convolution base
    restore_conv = compat.replace_layer_method(
        keras.layers.Conv2D, "call", lambda layer, inputs: (seen.append("call"), conv_call(layer, inputs))[1])
    restore_layer = compat.replace_layer_method(
        keras.layers.Layer, "__call__", lambda layer, *a, **k: (seen.append("__call__"), layer_call(layer, *a, **k))[1])
    try:
        model = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Conv2D(2, 1)])
        tf.function(model)(tf.ones((1, 4, 4, 1)))
    finally:
        restore_layer()
        restore_conv()
    assert "call" in seen and "__call__" in seen
    assert "call" not in vars(keras.layers.Conv2D) and keras.layers.Conv2D.call is conv_call
    assert vars(keras.layers.Layer)["__call__"] is layer_call
    with pytest.raises(compat.CompatibilityError, match="Dense has no method forward"):
        compat.replace_layer_method(keras.layers.Dense, "forward", layer_call)


@pytest.mark.parametrize("kind", ["Dense", "Conv2D", "EinsumDense"])
def test_an_untracked_activation_sees_the_pre_activation_output(kind):
    layer, inputs = {
        "Dense": (keras.layers.Dense(3, activation="relu"), np.random.rand(2, 4)),
        "Conv2D": (keras.layers.Conv2D(3, 1, activation="relu"), np.random.rand(2, 5, 5, 4)),
        "EinsumDense": (keras.layers.EinsumDense("ab,bc->ac", output_shape=3, bias_axes="c", activation="relu"),
                        np.random.rand(2, 4)),
    }[kind]
    inputs = inputs.astype("float32")
    layer(inputs)
    kernel, bias = (np.asarray(w) for w in layer.weights)
    expected = inputs @ kernel.reshape(-1, 3)[-inputs.shape[-1]:] + bias
    seen = []
    previous = layer.activation
    compat.set_untracked_attribute(layer, "activation", lambda x: (seen.append(np.asarray(x)), x)[1])
    try:
        outputs = layer(inputs)
    finally:
        compat.set_untracked_attribute(layer, "activation", previous)
    np.testing.assert_allclose(seen[0], expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outputs, expected, rtol=1e-5, atol=1e-5)   # no relu: the replacement is all
    assert layer.activation is keras.activations.relu


def test_an_untracked_instance_call_is_what_keras_calls_and_deleting_it_restores_the_class_call():
    layer = keras.layers.Dense(2, kernel_initializer="ones")
    layer(tf.ones((1, 2)))
    seen = []
    original = layer.call
    compat.set_untracked_attribute(layer, "call", lambda inputs, *a, **k: (seen.append(inputs.shape), original(inputs))[1])
    try:
        outputs = layer(tf.ones((3, 2)))
    finally:
        compat.delete_untracked_attribute(layer, "call")
    assert seen == [tf.TensorShape((3, 2))] and outputs.shape == (3, 2)
    assert "call" not in vars(layer) and layer.call.__func__ is keras.layers.Dense.call


@pytest.mark.parametrize("name, arguments", [
    ("GradientDescentOptimizer", dict(learning_rate=0.1)),
    ("MomentumOptimizer", dict(learning_rate=0.1, momentum=0.8, use_nesterov=True)),
    ("AdamOptimizer", dict(learning_rate=0.1, beta1=0.8, beta2=0.9, epsilon=1e-3)),
    ("RMSPropOptimizer", dict(learning_rate=0.1, decay=0.8, momentum=0.5, epsilon=1e-3, centered=True)),
    ("AdagradOptimizer", dict(learning_rate=0.1, initial_accumulator_value=0.3)),
    ("AdadeltaOptimizer", dict(learning_rate=0.1, rho=0.8, epsilon=1e-3)),
    ("FtrlOptimizer", dict(learning_rate=0.1, learning_rate_power=-0.4, initial_accumulator_value=0.2,
                           l1_regularization_strength=0.01, l2_regularization_strength=0.02,
                           l2_shrinkage_regularization_strength=0.03, beta=0.04)),
])
def test_tf1_optimizer_settings_are_the_constructor_arguments(name, arguments):
    optimizer = getattr(tf.compat.v1.train, name)(**arguments)
    learning_rate, settings = compat.tf1_optimizer_settings(optimizer)
    assert {"learning_rate": learning_rate, **settings} == arguments


def test_every_tf1_optimizer_moxlite_translates_has_its_settings_listed():
    from moxlite.optimizers import tf1_adapter

    assert set(tf1_adapter._TRANSLATIONS) == set(compat.TF1_OPTIMIZER_ATTRIBUTES)


def test_saved_strings_are_written_by_a_checkpoint_and_read_back_by_its_reader(tmp_path):
    checkpoint = tf.train.Checkpoint(order=compat.SavedStrings(["dense/kernel", "dense/bias"]),
                                     step=tf.Variable(3))
    path = checkpoint.save(str(tmp_path / "ckpt"))
    reader = tf.train.load_checkpoint(path)
    assert list(reader.get_tensor("order/.ATTRIBUTES/VARIABLE_VALUE")) == [b"dense/kernel", b"dense/bias"]
    tf.train.Checkpoint(order=compat.SavedStrings(["other"]), step=tf.Variable(0)).restore(path).assert_consumed()


def test_saved_strings_from_a_callable_are_read_at_each_save(tmp_path):
    values = ["first"]
    checkpoint = tf.train.Checkpoint(setup=compat.SavedStrings(lambda: list(values)))
    first = checkpoint.save(str(tmp_path / "ckpt"))
    values[:] = ["second", "line"]
    second = checkpoint.save(str(tmp_path / "ckpt"))
    read = [list(tf.train.load_checkpoint(p).get_tensor("setup/.ATTRIBUTES/VARIABLE_VALUE")) for p in (first, second)]
    assert read == [[b"first"], [b"second", b"line"]]


@pytest.mark.parametrize("distributed", [False, True])
def test_a_flat_call_runs_the_traced_function_on_the_same_iterator(distributed, two_device_strategy):
    dataset = tf.data.Dataset.range(100).map(lambda i: tf.cast(i, tf.float32)).batch(4)
    strategy = two_device_strategy if distributed else tf.distribute.get_strategy()
    iterator = iter(strategy.experimental_distribute_dataset(dataset) if distributed else dataset)

    @tf.function
    def sums(iterator, count):
        total = tf.zeros([])
        for _ in tf.range(count):
            batch = next(iterator)
            total += tf.reduce_sum(strategy.experimental_local_results(batch)) if distributed else tf.reduce_sum(batch)
        return total

    count = tf.constant(2)
    traced = sums.get_concrete_function(iterator, count)
    call = compat.FlatCall(traced)
    flat = compat.FlatCall.flatten(iterator, count)
    # Batches 0-1, then 2-3 through the flat call, then 4-5: one iterator, advanced by both.
    assert float(traced(iterator, count)) == sum(range(8))
    assert float(call(flat)) == sum(range(8, 16))
    assert float(traced(iterator, count)) == sum(range(16, 24))


def test_iterator_reads_records_each_element_an_eager_iterator_hands_out():
    dataset = tf.data.Dataset.range(5)
    outside = iter(dataset)
    with compat.iterator_reads() as reads:
        iterator = tf.compat.v1.data.make_one_shot_iterator(dataset)
        first = iterator.get_next()
        second = next(iterator)
    next(outside)   # after the context: not recorded
    assert [(it is iterator, int(element)) for it, element in reads] == [(True, 0), (True, 1)]
    assert reads[0][1] is first and reads[1][1] is second


def test_inside_xla_is_true_only_while_tracing_a_jit_compiled_function():
    seen = {}

    def record(name):
        seen[name] = compat.inside_xla()
        return tf.constant(0.0)

    tf.function(lambda: record("plain"))()
    tf.function(lambda: record("xla"), jit_compile=True)()
    assert seen == {"plain": False, "xla": True}
    assert not compat.inside_xla()   # eagerly


def test_per_device_update_helpers_reach_each_components_own_slot(two_device_strategy):
    """What ``extended.update`` does per device, taken apart: the variables' devices, each
    device's component and value, and the update context in which a mirrored slot assigns
    only its component on that device."""
    with two_device_strategy.scope():
        weight = keras.Variable(np.zeros(2, np.float32))
        slot = tf.Variable(np.zeros(2, np.float32))
    per_replica = two_device_strategy.experimental_distribute_values_from_function(
        lambda context: tf.constant(float(context.replica_id_in_sync_group + 1)))
    devices = compat.update_devices([(None, weight), (None, slot)])
    assert devices == tuple(component.device for component in slot.values) and len(devices) == 2
    assert compat.update_devices([(None, tf.Variable(1.0))]) is None   # not mirrored
    for index in range(2):
        assert compat.variable_component(index, weight) is weight.value.values[index]
        assert float(compat.replica_component(index, per_replica)) == index + 1
        with tf.device(devices[index]), compat.update_context(index):
            slot.assign_add(tf.fill([2], float(index + 1)))
    np.testing.assert_array_equal([c.numpy() for c in slot.values], [[1.0, 1.0], [2.0, 2.0]])


def test_leave_unconverted_puts_one_do_not_convert_rule_first(monkeypatch):
    from tensorflow.python.autograph.core import config

    monkeypatch.setattr(config, "CONVERSION_RULES", tuple(config.CONVERSION_RULES))
    assert not compat.is_left_unconverted("some_user_package")
    compat.leave_unconverted("some_user_package")
    compat.leave_unconverted("some_user_package")
    assert compat.is_left_unconverted("some_user_package.module")
    assert sum("some_user_package" in str(rule) for rule in config.CONVERSION_RULES) == 1
    assert "some_user_package" in str(config.CONVERSION_RULES[0])


def test_conversion_rules_in_another_shape_are_named_in_the_error(monkeypatch):
    from tensorflow.python.autograph.core import config

    monkeypatch.setattr(config, "CONVERSION_RULES", list(config.CONVERSION_RULES))
    with pytest.raises(compat.CompatibilityError, match="CONVERSION_RULES"):
        compat.leave_unconverted("moxlite")


def test_without_the_conversion_rules_moxlite_warns_and_is_converted_as_before(monkeypatch):
    from tensorflow.python.autograph.core import config

    rules = tuple(config.CONVERSION_RULES)
    monkeypatch.delattr(config, "CONVERSION_RULES")
    with pytest.warns(RuntimeWarning, match="AutoGraph will convert moxlite's functions too"):
        compat._leave_moxlite_unconverted()
    monkeypatch.setattr(config, "CONVERSION_RULES", rules, raising=False)
    assert compat.is_left_unconverted("moxlite")


def test_a_converted_user_function_follows_the_conversion_status_of_the_trace():
    def branch(x):
        if tf.reduce_sum(x) > 0:
            return x * 2.0
        return x - 1.0

    assert compat.converted_user_function(branch) is branch   # eagerly: as it is
    with tf.Graph().as_default():   # building a graph, no converted caller: converted here
        x = -tf.ones([2])
        with pytest.raises(tf.errors.OperatorNotAllowedInGraphError):
            branch(x)
        result = compat.converted_user_function(branch)(x)
        with tf.compat.v1.Session() as session:
            np.testing.assert_allclose(session.run(result), [-2.0, -2.0])


def test_in_keras_symbolic_scope_is_true_only_while_keras_infers_a_blocks_shapes():
    seen = []

    class Block(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(2)

        def call(self, x):
            seen.append(compat.in_keras_symbolic_scope())
            return self.dense(x)

    @tf.function
    def step(x):
        return Block()(x)

    step(tf.ones([3, 4]))
    # (traced twice: the first trace creates the variables) the first call of each trace is Keras's
    assert seen[:2] == [True, False] and not compat.in_keras_symbolic_scope()


def test_variable_handle_in_is_the_capture_each_read_of_the_variable_takes():
    variable, other = tf.Variable([1.0, 2.0]), tf.Variable(3.0)
    found = {}

    @tf.function
    def step():
        graph = tf.compat.v1.get_default_graph()
        value = variable + 1.0

        def branch():
            inner = tf.compat.v1.get_default_graph()
            doubled = variable * 2.0
            handle = compat.variable_handle_in(inner, variable)
            reads = [op for op in inner.get_operations() if op.type == "ReadVariableOp"]
            found["branch"] = [op.inputs[0].name for op in reads] == [handle.name]
            return doubled

        result = tf.cond(tf.constant(True), branch, lambda: value)
        handle = compat.variable_handle_in(graph, variable)
        reads = [op for op in graph.get_operations() if op.type == "ReadVariableOp"]
        found["outer"] = [op.inputs[0].name for op in reads] == [handle.name]
        found["unread"] = compat.variable_handle_in(graph, other)
        return result

    step()
    assert found == {"branch": True, "outer": True, "unread": None}


def test_is_variable_handle_tells_a_variables_handle_from_other_resources():
    variable = tf.Variable([1.0, 2.0])
    table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(["a"], [1]), -1)
    iterator = iter(tf.data.Dataset.range(3))
    assert compat.is_variable_handle(variable.handle)
    assert not compat.is_variable_handle(table.resource_handle)
    assert not compat.is_variable_handle(iterator._iterator_resource)
    assert not compat.is_variable_handle(tf.constant(1.0))
