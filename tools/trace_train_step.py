"""The path of one TRAIN step from moxlite.run() to apply_gradients, files and frames.

    PYTHONPATH=$PWD python tools/trace_train_step.py plain   run() to the Keras optimizer's apply_gradients
    PYTHONPATH=$PWD python tools/trace_train_step.py stack   thor(sgd) with gradient_clip=1: run() to the
                                                             innermost Keras optimizer's apply

The first call of the patched method records the frames above it, while the loop traces its
step (a one-step run of a one-Dense model; the trace is the step's Python path).
Frames of autograph-converted functions are named after the function they convert (found
through the frame's ``self``, or by a unique name in moxlite/).
"""
import glob
import inspect
import os
import re
import sys
import tempfile

import keras
import numpy as np
import tensorflow as tf

import moxlite as mox

tf.config.run_functions_eagerly(True)
which = sys.argv[1] if len(sys.argv) > 1 else "plain"
root = os.path.dirname(os.path.dirname(mox.__file__))
seen = []

def where(frame):
    code = frame.f_code
    name = code.co_name
    if "__autograph_generated" in code.co_filename:
        # A converted function is tf__<name>; a function nested in one keeps its name.
        name = name[4:] if name.startswith("tf__") else name
        owner = frame.f_locals.get("self")
        if owner is not None:
            for cls in type(owner).__mro__:
                if name in vars(cls):
                    function = inspect.unwrap(vars(cls)[name])
                    function = getattr(function, "python_function", function)
                    try:
                        return (inspect.getsourcefile(function), inspect.getsourcelines(function)[1],
                                f"{cls.__name__}.{name} [autograph]")
                    except TypeError:
                        break
        places = [(p, n) for p, n in DEFS.get(name, [])]
        if len(places) == 1:
            return places[0][0], places[0][1], f"{name} [autograph]"
    return code.co_filename, frame.f_lineno, name

DEFS = {}
for path in glob.glob(os.path.join(root, "moxlite", "**", "*.py"), recursive=True):
    for number, line in enumerate(open(path), 1):
        match = re.match(r"\s*def (\w+)\(", line)
        if match:
            DEFS.setdefault(match.group(1), []).append((path, number))

def capture(original):
    def patched(self, *args, **kwargs):
        if not seen:
            frames, frame = [], sys._getframe(1)
            while frame is not None:
                frames.append(where(frame))
                frame = frame.f_back
            seen.append(frames[::-1] + [(inspect.getsourcefile(original), 0, f"{type(self).__name__}.{original.__name__}")])
        return original(self, *args, **kwargs)
    return patched

if which == "stack":
    keras.optimizers.SGD.apply = capture(keras.optimizers.SGD.apply)
else:
    keras.optimizers.Optimizer.apply_gradients = capture(keras.optimizers.Optimizer.apply_gradients)

x = np.random.RandomState(0).rand(8, 4).astype("float32")
y = (x.sum(1) > 2).astype("int32")

def input_fn(mode):
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat()

def model_fn(inputs, mode):
    images, labels = inputs
    logits = keras.layers.Dense(2)(images)
    loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))
    return mox.ModelSpec(loss=loss, log_info={"loss": loss})

opt = mox.get_optimizer_fn("sgd", learning_rate=0.1)
if which == "stack":
    opt = mox.get_optimizer_wrapper_fn("thor", opt, frequency=2)
    mox.set_flag("gradient_clip", 1.0)
mox.run(input_fn=input_fn, model_fn=model_fn, optimizer_fn=opt, run_mode=mox.ModeKeys.TRAIN,
        batch_size=4, log_dir=tempfile.mkdtemp(), max_number_of_steps=1)
frames = seen[0]
start = max(i for i, f in enumerate(frames) if f[2] == "run" and f[0].startswith(root))
frames = frames[start:]

def short(path):
    return path[len(root) + 1:] if path.startswith(root) else "<" + path.split("site-packages/")[-1] + ">"

ours = [f for f in frames if f[0].startswith(root)]
for path, line, name in ours:
    print(f"{short(path)}:{line} {name}")
print(f"moxlite frames: {len(ours)} in {len({f[0] for f in ours})} files "
      f"(all frames, TensorFlow's and Keras's included: {len(frames)} in {len({f[0] for f in frames})} files)")
