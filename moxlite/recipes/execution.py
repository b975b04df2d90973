"""Carry out a Plan: the dry-run report, the resolved recipe in log_dir, the run itself.

Kept apart from the CLI's argument parsing so that tests and scripts can run
a recipe in-process (``execute(build_plan(load([...])))``).
"""

import dataclasses
import os

from moxlite import errors
from moxlite.contract import ModeKeys
from moxlite.recipes import builders, schema


def prepare_distribution(loaded):
    """This process's distribution set-up, built before the plan: MultiWorkerMirroredStrategy must
    be configured before any TensorFlow op runs, and a CPU split into logical devices before the
    runtime starts, while building the plan may run ops (a schedule's first values are checked by
    evaluating it). ``run`` later gets the same set-up back from ``moxlite.distribute.setup``.
    """
    from moxlite import distribute
    from moxlite.training.config import Distribution

    settings = builders.settings_of(loaded.recipe)
    builders.cluster_view(loaded, settings)   # a strategy the flags contradict is refused first
    try:
        return distribute.setup(local_only=loaded.recipe.run.mode.upper() != ModeKeys.TRAIN,
                                get_flag=Distribution.of(settings.__getitem__).get_flag)
    except errors.UserInputError as error:
        raise loaded.error(("distribute",), str(error)) from None


def probe_optimizer(plan):
    """Build the optimizer stack once, so a bad value fails now rather than inside the run.

    Returns the stack description (outermost first) or None when the run
    trains nothing. Keras optimizers create no variables until they are
    built, so the probe leaves no state behind.
    """
    if plan.optimizer_fn is None:
        return None
    from moxlite import context, optimizers

    import tensorflow as tf

    facts = plan.facts
    run_context = context.RunContext(
        global_step=tf.Variable(0, dtype=tf.int64, trainable=False),
        global_batch_size=facts.global_batch, num_samples=facts.num_samples,
        num_replicas=facts.replicas_in_sync,
        num_workers=facts.num_workers, sync_replicas=plan.settings["sync_replicas"])
    try:
        with context.activate(run_context):
            optimizer = optimizers.tf1_adapter.call_optimizer_fn(plan.optimizer_fn)
    except errors.UserInputError as error:
        raise builders.optimizer_error(plan.loaded, error) from None
    # Wrappers as the optimizers package describes them (every parameter, defaults
    # included); the base optimizer as the recipe wrote it, since a resolved
    # learning-rate schedule prints as a nested config.
    wrappers = optimizers.describe_stack(optimizer)[:-1]
    base = builders.optimizer_stack_lines(plan.loaded)[-1]
    return wrappers + [f"{base} -> keras.optimizers.{type(optimizers.wrapper.innermost(optimizer)).__name__}"]


def check_trained_model(plan):
    """Eval, predict and export need a checkpoint: say so before log_dir is written to."""
    from moxlite.file import training_cache
    from moxlite.training.state import checkpoints

    run = plan.loaded.recipe.run
    missing = run.mode != "train" and checkpoints.missing_trained_model(
        run.log_dir, run.checkpoint_path, "run.", exists=training_cache.has_checkpoint)
    if missing:
        raise plan.loaded.error(("run", "mode"), f"{run.mode!r} {missing}; train first (--mode train) or set "
                                                 f"run.checkpoint_path to a trained run's log_dir")


def dry_run_report(plan):
    """What ``--dry-run`` prints: resolved recipe, optimizer stack, strategy, batches, steps per epoch."""
    facts = plan.facts
    lines = [f"# Resolved recipe ({', '.join(plan.loaded.sources)})", plan.loaded.resolved_yaml().rstrip(), ""]
    stack = probe_optimizer(plan)
    if stack:
        lines.append("Optimizer stack (outermost to innermost):")
        lines += [f"  {index + 1}. {line}" for index, line in enumerate(stack)]
    else:
        lines.append(f"Optimizer: none (run.mode is {plan.loaded.recipe.run.mode})")
    replicas = facts.replicas
    lines.append(f"Strategy: {facts.strategy}")
    lines.append(f"Cluster from: {facts.cluster_source}")
    lines.append(f"Replicas: {replicas} ({facts.num_workers} worker(s) x {facts.devices_per_worker} device(s))")
    batch = (f"Batch: per replica {facts.per_replica_batch}, global {facts.global_batch} "
             f"({facts.per_replica_batch} x {replicas} replicas)")
    if facts.accumulation > 1:
        batch += (f", per update {facts.update_batch} (global x {facts.accumulation} "
                  f"micro-batches accumulated by batch_gradients)")
    lines.append(batch)
    if facts.steps_per_epoch is not None:
        lines.append(f"Steps per epoch: {facts.steps_per_epoch} "
                     f"(ceil({facts.num_samples} samples / global batch {facts.global_batch}))")
    else:
        lines.append("Steps per epoch: unknown (set the data set's num_samples or input.num_samples)")
    from moxlite.recipes.precision_report import layer_dtype_lines
    lines += layer_dtype_lines(plan)
    lines.append("Dry run: the recipe is valid; nothing was trained and nothing was written.")
    return "\n".join(lines)


def write_resolved_recipe(plan, file_name="recipe.yaml"):
    """Write the fully resolved recipe to ``log_dir/file_name`` (the run's own reproducible copy).

    An earlier run's different record is kept, renamed to the next free
    ``recipe.<n>.yaml`` (1 is the oldest); an identical one (a resumed run) is left as is.
    Through ``mox.file``, so an ``s3://`` / ``obs://`` log_dir works the same.
    """
    from moxlite import file as mox_file
    from moxlite.file.storage import join

    log_dir = plan.loaded.recipe.run.log_dir
    mox_file.make_dirs(log_dir)
    path = join(log_dir, file_name)
    text = (f"# Resolved by moxlite-run from: {', '.join(plan.loaded.sources)}\n"
            + plan.loaded.resolved_yaml())
    if mox_file.exists(path):
        if mox_file.read(path) == text:
            return path
        stem, extension = os.path.splitext(file_name)
        number = 1
        while mox_file.exists(join(log_dir, f"{stem}.{number}{extension}")):
            number += 1
        mox_file.rename(path, join(log_dir, f"{stem}.{number}{extension}"))
    mox_file.write(path, text)
    return path


def _is_chief(settings):
    return settings["job_name"] in ("", "worker", "chief") and (settings["job_name"] == "chief"
                                                                or settings["task_index"] == 0)


def execute(plan, print_fn=print, on_training_started=None):
    """Set the seed, run the plan's RunConfig, then (train mode) evaluate; returns the final metrics dict or None.

    on_training_started: called once when the training run has passed its checks and restored
        its state (the CLI writes log_dir/recipe.yaml then); not called in other modes.
    """
    import keras

    from moxlite import context
    from moxlite.training.run import run_config

    if plan.seed is not None:
        keras.utils.set_random_seed(plan.seed)
    config = plan.config()
    if plan.eval_arguments is not None and schema.is_reference(plan.loaded.recipe.model.name):
        # The user's model_fn is called in EVAL before training, so a spec EVAL cannot use fails first.
        config = dataclasses.replace(config, evaluation_follows=True)
    evaluated = []   # the training's evaluation of its last step (inter_mode: eval)
    with context.on_training_started(on_training_started or (lambda: None)), \
            context.on_final_evaluation(evaluated.append):
        result = run_config(config)
    mode = config.run_mode
    if mode == ModeKeys.PREDICT and isinstance(config.output_fn, builders.PredictionTally):
        print_fn(f"[RESULT] {config.output_fn.summary()}")
        return None
    if mode == ModeKeys.EVAL:
        print_fn(result_line(result, "evaluation"))
        return result
    if mode == ModeKeys.EXPORT:
        print_fn(f"[RESULT] exported SavedModel to {result}")
        return None
    if plan.eval_arguments is not None and _is_chief(plan.settings):
        # One final evaluation: the training's own when it evaluated the whole split at its last step.
        whole_split = not plan.eval_arguments.get("max_number_of_steps")
        metrics = evaluated[-1] if evaluated and whole_split else run_config(plan.config(eval_after_train=True))
        print_fn(result_line(metrics, "evaluation on the held-out split after training"))
        return metrics
    return result if isinstance(result, dict) else None


def result_line(metrics, what):
    """``[RESULT] accuracy: 0.9630  loss: 0.1212  (evaluation ..., 1000 samples, step 600)``, accuracy first."""
    if not isinstance(metrics, dict) or not metrics:
        return f"[RESULT] {what}: no metrics"
    counts = {key: metrics[key] for key in ("num_samples", "global_step") if key in metrics}
    keys = sorted((k for k in metrics if k not in counts), key=lambda k: (k != "accuracy", k))
    values = "  ".join(f"{key}: {float(metrics[key]):.4f}" for key in keys)
    detail = "".join(f", {int(counts[key])} samples" if key == "num_samples" else f", step {int(counts[key])}"
                     for key in counts)
    return f"[RESULT] {values}  ({what}{detail})"
