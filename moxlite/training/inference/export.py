"""EXPORT: a versioned SavedModel that ``tf.saved_model.load`` and TF Serving can serve.

``model_fn`` is called in EXPORT mode on placeholder inputs shaped like one
batch of ``input_fn``'s data. Its ``ExportSpec.inputs_dict`` names which of
those inputs the served signature takes (other inputs, such as labels, are fed
zeros); ``outputs_dict`` names what it returns. Versions follow MoXing:
``-1`` is one more than the largest integer version present (1 when none), a
string names the directory, and an existing version is an error.

The served function is exported under two signature keys (``SIGNATURE_KEYS``): TensorFlow's
``serving_default`` and ``predict_object``, the key MoXing's exports carried and its clients
ask for (the TF-Serving client of ModelArts's MoXing MNIST example, huaweicloud/dls-example
``predict_mnist.py``, sends ``signature_name='predict_object'`` with the input ``images``).
"""

import os

import tensorflow as tf

from moxlite import errors
from moxlite.contract import ExportSpec, ModeKeys
from moxlite.training.input.replica_batches import as_model_inputs

EXPORT_SUBDIR = "model"
# One function under each key: TensorFlow's default, and MoXing's (what its clients request).
SIGNATURE_KEYS = ("serving_default", "predict_object")


def _unbatched_spec(spec):
    return tf.TensorSpec([None] + list(spec.shape[1:]), spec.dtype)


def resolve_version_dir(export_root, version):
    """The directory for ``version`` under ``export_root``, checked not to exist yet."""
    if isinstance(version, bool) or not isinstance(version, (int, str)) or version == "":
        raise errors.ExportError(
            f"ExportSpec.version={errors.describe(version)} is not valid; use -1 (next integer "
            f"version), a non-negative integer, or a directory name such as 'model'")
    if isinstance(version, int) and version < 0:
        if version != -1:
            raise errors.ExportError(
                f"ExportSpec.version={version} is not valid; use -1 for the next integer version")
        existing = [int(name) for name in (os.listdir(export_root) if os.path.isdir(export_root) else [])
                    if name.isdigit()]
        version = max(existing) + 1 if existing else 1
    path = os.path.join(export_root, str(version))
    if os.path.exists(path):
        raise errors.ExportError(
            f"ExportSpec.version={version!r}: {path} already exists; use version=-1 for the next "
            f"version, or another name")
    return path


class _Exportable(tf.Module):
    def __init__(self, variables):
        super().__init__(name="moxlite_export")
        self.model_variables = list(variables)


def export_saved_model(template, element_spec, log_dir):
    """Write the SavedModel for ``model_fn``'s EXPORT-mode ExportSpec; return its path."""
    flat_specs = [_unbatched_spec(s) for s in tf.nest.flatten(element_spec)]
    found = {}

    def probe(*flat_inputs):
        inputs = as_model_inputs(tf.nest.pack_sequence_as(element_spec, list(flat_inputs)))
        spec = template(inputs, ModeKeys.EXPORT)
        export_spec = spec.export_spec
        if not isinstance(export_spec, ExportSpec):
            raise errors.ModelFnTypeError(
                f"model_fn returned export_spec={errors.describe(export_spec)} in EXPORT mode; return "
                f"ModelSpec(export_spec=moxlite.ExportSpec(inputs_dict={{...}}, outputs_dict={{...}}))")
        positions = {}
        for key, tensor in export_spec.inputs_dict.items():
            matches = [i for i, t in enumerate(flat_inputs) if t is tensor]
            if not matches:
                raise errors.ModelFnError(
                    f"ExportSpec.inputs_dict[{key!r}] is not one of the inputs model_fn received; "
                    f"export the raw input (for example inputs[0]) and do preprocessing inside model_fn")
            positions[key] = matches[0]
        found.update(positions=positions, outputs=list(export_spec.outputs_dict), version=export_spec.version)
        return {k: tf.convert_to_tensor(v) for k, v in export_spec.outputs_dict.items()}

    # The serving function calls this trace rather than tracing model_fn a second time.
    probed = tf.function(probe).get_concrete_function(*flat_specs)
    if not found["positions"]:
        raise errors.ModelFnError("ExportSpec.inputs_dict is empty; name at least one input to serve")
    path = resolve_version_dir(os.path.join(log_dir, EXPORT_SUBDIR), found["version"])

    keys = list(found["positions"])
    signature = [tf.TensorSpec(flat_specs[found["positions"][k]].shape, flat_specs[found["positions"][k]].dtype, name=k)
                 for k in keys]

    def serve(*served):
        given = dict(zip(keys, served))
        batch = tf.shape(served[0])[0]
        flat = []
        for index, spec in enumerate(flat_specs):
            key = next((k for k in keys if found["positions"][k] == index), None)
            if key is not None:
                flat.append(given[key])
            else:
                flat.append(tf.zeros(tf.concat([[batch], tf.constant(spec.shape[1:].as_list(), tf.int32)], 0),
                                     spec.dtype))
        return probed(*flat)

    module = _Exportable(template.variables)
    module.serve = tf.function(serve, input_signature=signature)
    served = module.serve.get_concrete_function()
    tf.saved_model.save(module, path, signatures={key: served for key in SIGNATURE_KEYS})
    return path
