"""``moxlite.run``: MoXing's entry point on TF2/Keras 3. Set-up and dispatch.

``run`` turns its arguments into a RunConfig (``config``), checks that a mode
other than TRAIN has a trained model, builds this process's distribution
set-up, builds the run's ``task.Task`` (its input, model_fn's variables, each mode's
step) and hands it to a job: ``training_job.TrainingJob`` for TRAIN,
``inference_job.InferenceJob`` for EVAL, PREDICT and EXPORT. Every check that
can fail on user input runs before anything is written to ``log_dir``.
"""

import dataclasses

from moxlite import distribute, errors, flags, logs, process_exit
from moxlite.contract import ModeKeys
from moxlite.file import training_cache
from moxlite.training.state import checkpoints
from moxlite.training.capture import interception
from moxlite.training.mixed_precision import settings
from moxlite.training import config as config_lib
from moxlite.training.inference_job import InferenceJob
from moxlite.training.task import Task
from moxlite.training.training_job import TrainingJob


def run(input_fn=None, output_fn=None, model_fn=None, optimizer_fn=None, run_mode="invalid",
        inter_mode=None, batch_size=None, auto_batch=True, log_dir=None, max_number_of_steps=0,
        checkpoint_path=None, log_every_n_steps=10, output_every_n_steps=0, save_summary_steps=100,
        save_model_secs=None, export_model=False, fetch_strategy_fn=None, save_model_steps=None,
        steps_per_loop=None, keep_checkpoint_max=None, jit_compile=None):
    """Train, evaluate, predict or export ``model_fn`` on ``input_fn``'s data.

    MoXing's arguments and defaults (see README); moxlite adds ``steps_per_loop`` (steps per
    traced call, default the ``steps_per_loop`` flag) and ``keep_checkpoint_max``. MoXing's
    ``fetch_strategy_fn`` is refused unless None. ``jit_compile``: "auto" (the default, the
    ``jit_compile`` flag), True or False: whether the train step is compiled by XLA (see
    ``moxlite.training.compiled.jit_choice``).
    ``batch_size`` is per replica; the global batch is batch_size x replicas.

    Returns: TRAIN, a dict of the last step's log values plus ``global_step``; EVAL, the
    averaged log_info dict (plus ``global_step``); PREDICT, outputs not handed to ``output_fn``;
    EXPORT, the SavedModel path.
    """
    if fetch_strategy_fn is not None:   # in MoXing's signature, undocumented, and TF1-session specific
        raise errors.ArgumentError(
            f"fetch_strategy_fn={errors.describe(fetch_strategy_fn)} is not supported (MoXing's documentation "
            f"gives it no meaning, and moxlite has no session fetches); drop it")
    if training_cache.needs_local_cache(locals()):  # s3:// / obs:// log_dir: run in a local cache
        return training_cache.run_through_local_cache(run, locals())
    _tell_unheeded_flags()
    return _run_checked(config_lib.from_run_arguments(locals()))


_told_flags = set()


def _tell_unheeded_flags():
    """A warning line, once per process, for each command-line flag meant for moxlite that it will
    not read (``flags.unheeded_command_line_flags``): a second run() in the process says nothing new."""
    for line in flags.unheeded_command_line_flags():
        if line not in _told_flags:
            _told_flags.add(line)
            logs.get_logger().warning(line)


def run_config(config):
    """``run`` of a RunConfig built by the caller (a recipe): the same run, no flag read or set."""
    if training_cache.needs_local_cache({"log_dir": config.log_dir, "checkpoint_path": config.checkpoint_path}):
        def run_locally(log_dir=None, checkpoint_path=None):
            return _run_checked(dataclasses.replace(config, log_dir=log_dir, checkpoint_path=checkpoint_path))

        return training_cache.run_through_local_cache(
            run_locally, {"log_dir": config.log_dir, "checkpoint_path": config.checkpoint_path})
    return _run_checked(config)


def _run_checked(config):
    process_exit.freeze_at_exit()   # a process that trains ends without a collector walk over TensorFlow
    mode = config.run_mode
    missing = mode != ModeKeys.TRAIN and checkpoints.missing_trained_model(config.log_dir, config.checkpoint_path)
    if missing:
        raise errors.CheckpointError(
            f"run_mode={mode} {missing}; train first or pass checkpoint_path=<dir of a TRAIN run>")
    # Only training is distributed across processes; the other modes run on this process's devices.
    setup = distribute.setup(local_only=(mode != ModeKeys.TRAIN), get_flag=config.distribution.get_flag)
    if setup.serves_only:
        setup.serve_forever()
        return None
    task = Task(config, setup)   # what every mode builds first: input, model_fn's variables, steps
    job = TrainingJob(task) if mode == ModeKeys.TRAIN else InferenceJob(task)
    try:
        # Stable names for what intercepts layers (THOR's include/exclude); the level's policies.
        with interception.stable_names_scope(task.stable_name), settings.compute_policy(config.precision):
            return job.execute()
    except errors.MoxliteError:
        raise
    except Exception as error:  # a moxlite error raised inside a traced function comes back wrapped
        if task.last_error is not None:
            raise task.last_error from None
        raise error
