"""MoXing's ``var_scope(force_dtype=tf.float32)``: fp32 variables under fp16 compute, on Keras dtype policies.

MoXing forced the dtype of variables created in the scope and cast them to
the compute dtype when read. Keras 3 says the same thing with a dtype policy:
``mixed_float16`` keeps variables in float32 and computes in float16 (casting
each variable when the layer reads it). So ``var_scope`` sets, for the layers
created inside it, the policy whose compute dtype is the current policy's
(``use_fp16`` / the precision levels set it) and whose variable dtype is
``force_dtype``; it composes with any policy set around it and restores it
on exit. The zoo (``get_model_fn``) also reads ``forced_variable_dtype()``
when the images arrive in float16 under a float32 policy (MoXing's
``images = tf.cast(images, tf.float16)`` idiom).

Raw ``tf.compat.v1.get_variable`` calls are not covered: TF2 has no custom
getters that return a cast tensor in place of a variable.
"""

import contextlib
import threading

import keras
import tensorflow as tf

from moxlite import errors

_local = threading.local()

# (compute dtype, variable dtype) -> Keras policy name.
_POLICIES = {
    ("float32", "float32"): "float32",
    ("float16", "float16"): "float16",
    ("bfloat16", "bfloat16"): "bfloat16",
    ("float64", "float64"): "float64",
    ("float16", "float32"): "mixed_float16",
    ("bfloat16", "float32"): "mixed_bfloat16",
}


def policy_for(compute_dtype, variable_dtype):
    """The Keras dtype policy computing in ``compute_dtype`` with ``variable_dtype`` variables."""
    key = (tf.as_dtype(compute_dtype).name, tf.as_dtype(variable_dtype).name)
    if key not in _POLICIES:
        raise errors.ArgumentError(
            f"var_scope: force_dtype={key[1]} with compute dtype {key[0]} has no Keras dtype policy; "
            "force float32 variables under float16/bfloat16 compute, or the compute dtype itself")
    return keras.dtype_policies.DTypePolicy(_POLICIES[key])


def forced_variable_dtype():
    """The dtype the innermost ``var_scope`` forces, or None outside one."""
    stack = getattr(_local, "stack", ())
    return stack[-1] if stack else None


@contextlib.contextmanager
def var_scope(force_dtype=None):
    """Variables created by Keras layers in the body get dtype ``force_dtype``; compute is unchanged.

    ``force_dtype=None`` changes nothing (MoXing's default).
    """
    if force_dtype is None:
        yield
        return
    try:
        forced = tf.as_dtype(force_dtype)
    except TypeError:
        raise errors.ArgumentError(
            f"var_scope: force_dtype={errors.describe(force_dtype)} is not a dtype; use e.g. tf.float32") from None
    previous = keras.config.dtype_policy()
    policy = policy_for(previous.compute_dtype, forced)
    if not hasattr(_local, "stack"):
        _local.stack = []
    _local.stack.append(forced)
    keras.config.set_dtype_policy(policy)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)
        _local.stack.pop()
