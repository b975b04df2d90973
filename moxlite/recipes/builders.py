"""Turn a checked recipe into the ``RunConfig`` of ``moxlite.run``.

Data flows one way: recipe -> Plan (settings + run arguments + facts) -> RunConfig -> run.
The recipe's distribute, precision and run settings carry MoXing's flag names, but
they go into the RunConfig as fields: running a recipe sets no flag.
Building a Plan resolves every built-in name and every module:function
reference, checks the optimizer stack and the data-set options, and writes
nothing, so a recipe that fails here leaves ``log_dir`` untouched.
"""

import dataclasses
import inspect
import math
from typing import Any, Callable, Dict, List, Optional

from moxlite import declarations, errors, run_settings
from moxlite.contract import ExportKeys, ModeKeys
from moxlite.optimizers import recipe_tables
from moxlite.recipes import references, schema
from moxlite.recipes.loader import LoadedRecipe

RUN_MODES = {"train": ModeKeys.TRAIN, "eval": ModeKeys.EVAL, "predict": ModeKeys.PREDICT, "export": ModeKeys.EXPORT}


@dataclasses.dataclass
class BatchFacts:
    """How samples are spread over replicas and steps (MoXing's definitions).

    replicas = devices_per_worker x num_workers; replicas_in_sync is that in
    synchronous training and devices_per_worker in asynchronous training;
    global_batch = per_replica_batch x replicas;
    update_batch = global_batch x the num_batches of every batch_gradients
    wrapper (samples behind one applied update); steps_per_epoch =
    ceil(num_samples / global_batch).
    """

    per_replica_batch: int
    devices_per_worker: int
    num_workers: int
    replicas: int
    replicas_in_sync: int
    global_batch: int
    accumulation: int
    update_batch: int
    num_samples: Optional[int]
    steps_per_epoch: Optional[int]
    strategy: str
    cluster_source: str = ""


@dataclasses.dataclass
class Plan:
    """Everything needed to run a recipe, built without side effects."""

    loaded: LoadedRecipe
    settings: Dict[str, Any]       # the recipe's value of each setting of moxlite.run_settings (no flag set)
    run_arguments: Dict[str, Any]
    make_model_fn: Callable[[], Callable]
    eval_arguments: Optional[Dict[str, Any]]
    facts: BatchFacts
    optimizer_fn: Optional[Callable]
    seed: Optional[int]

    def arguments(self, eval_after_train=False):
        """Keyword arguments of one ``moxlite.run`` call, with a fresh model_fn."""
        arguments = dict(self.eval_arguments if eval_after_train else self.run_arguments)
        arguments["model_fn"] = self.make_model_fn()
        return arguments

    def config(self, eval_after_train=False):
        """The RunConfig of one run: ``arguments(...)`` with the recipe's settings, no flag read."""
        from moxlite.training import config

        return config.from_run_arguments(self.arguments(eval_after_train), settings=self.settings)


def build_plan(loaded: LoadedRecipe) -> Plan:
    """The Plan of a checked recipe, or a located RecipeError."""
    recipe = loaded.recipe
    settings = settings_of(recipe)
    # The cluster first: under Slurm the resolver hands this task its GPUs in CUDA_VISIBLE_DEVICES,
    # which only counts before TensorFlow's runtime starts (building the input may start it).
    cluster_view(loaded, settings)
    input_fn, data_facts = _build_input(loaded)
    # The training input repeats, so run() cannot count an epoch; the setting tells it.
    settings["num_samples"] = data_facts.get("num_samples") or 0
    make_model_fn = _build_model(loaded, data_facts)
    training = recipe.run.mode == "train"
    optimizer_fn = _build_optimizer_fn(loaded, settings, data_facts.get("num_samples")) if training else None
    facts = batch_facts(loaded, settings, data_facts.get("num_samples"))
    output_fn = _resolve(loaded, ("run", "output_fn"), recipe.run.output_fn) if recipe.run.output_fn else None
    run = recipe.run
    common = dict(
        input_fn=input_fn, batch_size=run.batch_size, auto_batch=True, log_dir=run.log_dir,
        log_every_n_steps=run.log_every_n_steps, save_summary_steps=run.save_summary_steps,
        steps_per_loop=run.steps_per_loop, keep_checkpoint_max=run.keep_checkpoint_max,
    )
    if training:
        common["jit_compile"] = run.jit_compile
    mode = RUN_MODES[run.mode]
    if mode == ModeKeys.PREDICT and output_fn is None:
        output_fn = PredictionTally()
    run_arguments = dict(
        common, output_fn=output_fn, optimizer_fn=optimizer_fn, run_mode=mode,
        inter_mode=ModeKeys.EVAL if run.inter_mode == "eval" else None,
        max_number_of_steps=run.steps if training else run.eval_steps,
        checkpoint_path=run.checkpoint_path, output_every_n_steps=run.output_every_n_steps,
        save_model_secs=run.save_model_secs, save_model_steps=run.save_model_steps,
        export_model=ExportKeys.TF_SERVING if run.export_model or mode == ModeKeys.EXPORT else False,
    )
    eval_arguments = None
    if training and run.evaluate:
        eval_arguments = dict(common, run_mode=ModeKeys.EVAL, max_number_of_steps=run.eval_steps)
    return Plan(loaded=loaded, settings=settings, run_arguments=run_arguments, make_model_fn=make_model_fn,
                eval_arguments=eval_arguments, facts=facts, optimizer_fn=optimizer_fn, seed=run.seed)


# ----------------------------------------------------------------- settings

def settings_of(recipe: schema.Recipe) -> Dict[str, Any]:
    """The recipe's value of every setting of moxlite.run_settings that a run reads, typed as
    declared (every one, so that neither an earlier run nor a script's flags leak into it); they
    become RunConfig fields, and no flag is set."""
    values = {name: getattr(section, name) for section in (recipe.distribute, recipe.run, recipe.precision)
              for name in _declared_names(type(section))}
    values["sync_replicas"] = recipe.distribute.sync_replicas and recipe.distribute.strategy != "parameter_server"
    return values


def _declared_names(section):
    """The keys of a recipe section that are settings of moxlite.run_settings (not run()'s arguments)."""
    return [field.name for field in dataclasses.fields(section)
            if section in run_settings.BLOCKS or declarations.declared_in(field) in run_settings.BLOCKS]


# ----------------------------------------------------------------- input

def _resolve(loaded, path, reference):
    try:
        return references.resolve(reference)
    except references.UnresolvedReference as error:
        raise loaded.error(path, str(error)) from None


def _build_input(loaded):
    """input_fn(mode) and what is known about the data: image_shape, num_classes, num_samples; for the
    masked-LM data sets also vocab_size, seq_length, max_predictions, next_sentence and ``text``
    (their ``TextFacts``)."""
    section = loaded.recipe.input
    if schema.is_reference(section.name):
        function = _resolve(loaded, ("input", "name"), section.name)
        _check_kwargs(loaded, ("input", "kwargs"), function, section.kwargs)
        _check_call(loaded, ("input", "name"), "input_fn", function, section.kwargs)
        if section.kwargs:
            kwargs = dict(section.kwargs)

            def input_fn(mode):
                return function(mode, **kwargs)
        else:
            input_fn = function
        return input_fn, {"num_samples": section.num_samples}
    from moxlite.data import datasets  # imports TensorFlow: only once the recipe is checked

    options = dataclasses.asdict(getattr(section, section.name))
    seed = loaded.recipe.run.seed or 0
    try:
        data = datasets.build(section.name, options, epochs=section.epochs,
                              shuffle_buffer=section.shuffle_buffer, seed=seed)
    except datasets.DataOptionError as error:
        raise loaded.error(("input", section.name, error.option), error.detail) from None
    num_samples = section.num_samples if section.num_samples is not None else data.num_samples
    from moxlite.data import train_augmentation as augment

    augmentation = augment.Augmentation(**dataclasses.asdict(section.augment), seed=seed)
    facts = {"num_samples": num_samples, "image_shape": data.image_shape, "num_classes": data.num_classes,
             "allow_single_class": bool(options.get("allow_single_class"))}
    text_facts = getattr(data, "text", None)
    if text_facts is not None:   # a masked-LM data set: what the model's embeddings and head need
        facts.update(text=text_facts, vocab_size=text_facts.vocab_size, seq_length=text_facts.seq_length,
                     max_predictions=text_facts.max_predictions, next_sentence=text_facts.next_sentence)
    return augment.augmented_input_fn(data.input_fn, data.num_classes, augmentation), facts


def _check_kwargs(loaded, path, function, kwargs):
    rejected = references.rejected_kwargs(function, list(kwargs))
    if rejected:
        name = getattr(function, "__name__", "the function")
        raise loaded.error(path + (rejected[0],), f"{name}() takes no keyword argument {rejected[0]!r}; "
                                                  f"accepted: {_parameter_names(function)}")


def _check_call(loaded, path, kind, function, kwargs):
    """The recipe's function must take moxlite's positional call (``validation.USER_FUNCTION_CALLS``)
    with the recipe's kwargs bound: checked here, on the function the recipe names, since the run
    only sees the wrapper that binds them."""
    from moxlite.training import validation

    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):   # a builtin or C callable: nothing to read; the call will tell
        return
    positional = validation.USER_FUNCTION_CALLS[kind]
    given = {key: None for key in validation.USER_FUNCTION_KEYWORDS[kind] if key in signature.parameters}
    try:
        signature.bind(*positional, **given, **kwargs)
        return
    except TypeError:
        pass
    bound = f" with kwargs {', '.join(kwargs)}" if kwargs else ""
    declared = ", ".join([*positional, *kwargs])
    raise loaded.error(path, f"{getattr(loaded.recipe, path[0]).name}{signature} cannot be called as "
                             f"{kind}({', '.join(positional)}){bound}; declare "
                             f"def {getattr(function, '__name__', kind)}({declared})")


def _parameter_names(function):
    try:
        return ", ".join(inspect.signature(function).parameters) or "none"
    except (TypeError, ValueError):
        return "unknown"


# ----------------------------------------------------------------- model

def _build_model(loaded, data_facts):
    """A factory of fresh model_fn's (one per run call, so each builds its network in its own scope)."""
    section = loaded.recipe.model
    if schema.is_reference(section.name):
        function = _resolve(loaded, ("model", "name"), section.name)
        _check_kwargs(loaded, ("model", "kwargs"), function, section.kwargs)
        _check_call(loaded, ("model", "name"), "model_fn", function, section.kwargs)
        if not section.kwargs:
            return lambda: function
        kwargs = dict(section.kwargs)

        def make_user_model_fn():
            def model_fn(inputs, mode):
                return function(inputs, mode, **kwargs)
            return model_fn
        return make_user_model_fn
    if section.name in schema.BERT_MODEL_NAMES:
        return _build_bert_model(loaded, data_facts)
    num_classes = section.num_classes or data_facts.get("num_classes")
    if num_classes is None:
        raise loaded.error(("model", "num_classes"), f"required for the built-in model {section.name!r} "
                                                     f"with your own input_fn (the data set's class count)")
    options = dataclasses.asdict(getattr(section, section.name))
    from moxlite import models

    single_class = bool(data_facts.get("allow_single_class"))
    return lambda: models.build_model_fn(section.name, num_classes, weight_decay=section.weight_decay,
                                         label_smoothing=section.label_smoothing,
                                         allow_single_class=single_class, **options)


def _build_bert_model(loaded, data_facts):
    """A factory of BERT pre-training model_fn's; the vocabulary is the block's, else the data set's."""
    section = loaded.recipe.model
    options = dataclasses.asdict(getattr(section, section.name))
    if options["vocabulary_size"] is None:
        options["vocabulary_size"] = data_facts.get("vocab_size")   # a masked-LM data set's vocabulary
    if options["vocabulary_size"] is None:
        raise loaded.error(("model", section.name, "vocabulary_size"),
                           "required: this data set has no vocabulary of its own; give the model's vocabulary size")
    length = data_facts.get("seq_length")
    if length is not None and length > options["max_sequence_length"]:
        raise loaded.error(("model", section.name, "max_sequence_length"),
                           f"{options['max_sequence_length']} is shorter than the data's seq_length {length}; "
                           f"raise it, or lower the data set's seq_length")
    if section.num_classes is not None:
        raise loaded.error(("model", "num_classes"), f"{section.num_classes}: {section.name} predicts tokens, not "
                                                     f"classes; drop num_classes")
    from moxlite import models

    return lambda: models.build_bert_model_fn(section.name, weight_decay=section.weight_decay, **options)


# ----------------------------------------------------------------- optimizer

def _build_optimizer_fn(loaded, settings=None, num_samples=None):
    """optimizer_fn(): the base optimizer, then each wrapper around the previous one (innermost first).

    Names and parameters were checked by the loader (recipes.loader, against
    moxlite.optimizers.recipe_tables); settings and num_samples let THOR's schedules derive
    their steps_per_epoch.
    """
    from moxlite import optimizers
    from moxlite.optimizers import schedules

    section = loaded.recipe.optimizer
    if schema.is_reference(section.name):
        base_fn = _resolve(loaded, ("optimizer", "name"), section.name)
    else:
        check_optimizer_arguments(loaded)
        learning_rate = _learning_rate(loaded, settings, num_samples)
        try:
            schedules.check_learning_rate(learning_rate)
        except errors.UserInputError as error:
            raise loaded.error(("optimizer", "learning_rate"), str(error)) from None
        try:
            base_fn = optimizers.get_optimizer_fn(section.name, learning_rate, **section.kwargs)
        except errors.UserInputError as error:
            raise optimizer_error(loaded, error) from None
    optimizer_fn = base_fn
    for index, wrapper in enumerate(section.wrappers):
        path = ("optimizer", "wrappers", index)
        params = dict(wrapper.params)
        if isinstance(params.get("damping"), dict):
            params["damping"] = _schedule(loaded, path + ("damping",), params["damping"], settings, num_samples)
        try:
            # Each factory wraps the previous one: the stack is built innermost first when called.
            optimizer_fn = optimizers.get_optimizer_wrapper_fn(wrapper.name, optimizer_fn, **params)
        except errors.UserInputError as error:
            named = [key for key in wrapper.params if f" {key}=" in str(error)]
            raise loaded.error(path + tuple(named[:1]), str(error)) from None
    return optimizer_fn


def check_optimizer_arguments(loaded):
    """Each of optimizer.kwargs is an argument of the named optimizer's Keras class (read from the
    class itself) or one of its MoXing spellings; else a located error with the nearest."""
    section = loaded.recipe.optimizer
    accepted = recipe_tables.accepted_arguments(section.name)
    for key in section.kwargs:
        if key not in accepted:
            raise loaded.error(("optimizer", "kwargs", key),
                               f"{section.name} takes no argument {key!r}"
                               f"{declarations.did_you_mean(key, list(accepted))}; accepted: {', '.join(accepted)}")


def optimizer_error(loaded, error):
    """The RecipeError of a mistake the optimizer (or Keras, building it) found: located at the
    argument of optimizer.kwargs it names, with the value as written, else at the optimizer."""
    kwargs = loaded.recipe.optimizer.kwargs
    named = [key for key in kwargs if key in str(error)]
    if not named:
        return loaded.error(("optimizer",), str(error))
    return loaded.error(("optimizer", "kwargs", named[0]), f"{errors.describe(kwargs[named[0]])}: {error}")


def _learning_rate(loaded, settings=None, num_samples=None):
    """A float, MoXing's epoch string, or a Keras (or THOR) schedule built from a schedule block."""
    value = loaded.recipe.optimizer.learning_rate
    if not isinstance(value, schema.ScheduleBlock):
        return value
    return _schedule(loaded, ("optimizer", "learning_rate"), dict(value.params, schedule=value.schedule),
                     settings, num_samples)


def _schedule(loaded, path, block, settings, num_samples):
    """The schedule a block ``{schedule: <kind>, <its arguments>}`` names (checked by loader.check_schedule)."""
    import keras

    from moxlite.optimizers.thor import schedules as thor_schedules

    params = dict(block)
    kind = params.pop("schedule")
    schedule = recipe_tables.SCHEDULES[kind]
    if schedule.owner == recipe_tables.THOR_SCHEDULES:
        schedule_class = thor_schedules.SCHEDULE_CLASSES[kind]
    else:
        schedule_class = getattr(keras.optimizers.schedules, schedule.owner)
    if "steps_per_epoch" in schedule.derived_from_run and "steps_per_epoch" not in params:
        params["steps_per_epoch"] = _updates_per_epoch(loaded, path, kind, settings, num_samples)
    try:
        return schedule_class(**params)
    except errors.UserInputError as error:
        raise loaded.error(path, str(error)) from None
    except (TypeError, ValueError) as error:
        raise loaded.error(path, f"schedule {kind!r}: {error}") from None


def _updates_per_epoch(loaded, path, kind, settings, num_samples):
    """Applied updates in one epoch, as MindSpore counts them: samples // samples per update."""
    if not num_samples or settings is None:
        raise loaded.error(path + ("steps_per_epoch",), f"schedule {kind!r} needs steps_per_epoch, and the number of "
                                                        f"training samples is unknown; set it, or input.num_samples")
    facts = batch_facts(loaded, settings, num_samples)
    return max(num_samples // facts.update_batch, 1)


def optimizer_stack_lines(loaded):
    """The optimizer stack, outermost first, with every parameter (defaults filled in)."""
    from moxlite import optimizers

    section = loaded.recipe.optimizer
    lines = []
    for wrapper in reversed(section.wrappers):
        params = {name: default for name, (default, _) in optimizers.wrapper_parameters(wrapper.name).items()}
        params.update(wrapper.params)
        lines.append(f"{wrapper.name}({_format_params(params)})")
    learning_rate = section.learning_rate
    if isinstance(learning_rate, schema.ScheduleBlock):
        learning_rate = f"{learning_rate.schedule}({_format_params(learning_rate.params)})"
    lines.append(f"{section.name}({_format_params(dict(learning_rate=learning_rate, **section.kwargs))})")
    return lines


def _format_params(params):
    return ", ".join(f"{key}={value!r}" for key, value in params.items())


# ----------------------------------------------------------------- batches and strategy

def cluster_view(loaded, settings):
    """The ClusterView the recipe's settings (and TF_CONFIG) describe, via moxlite.distribute.resolve."""
    from moxlite import distribute

    def get_flag(name):
        return run_settings.flag_text(name, settings[name])

    try:
        view = distribute.resolve(get_flag=get_flag)
    except errors.UserInputError as error:
        raise loaded.error(("distribute",), str(error)) from None
    wanted = loaded.recipe.distribute.strategy
    if wanted != "auto" and view.kind not in STRATEGY_KINDS[wanted]:
        raise loaded.error(("distribute", "strategy"), f"{wanted!r}, but the flags describe a {view.kind} run; "
                                                       f"fix the hosts/tpu flags or use strategy: auto")
    return view


# recipe strategy -> the ClusterView kinds it allows
STRATEGY_KINDS = {"mirrored": ("mirrored", "default"), "multi_worker": ("multi_worker_mirrored",),
                  "parameter_server": ("parameter_server",), "tpu": ("tpu",)}

_KIND_NAMES = {"default": "default strategy (one device)", "mirrored": "MirroredStrategy",
               "multi_worker_mirrored": "MultiWorkerMirroredStrategy",
               "parameter_server": "ParameterServerStrategy (asynchronous)", "tpu": "TPUStrategy"}


def batch_facts(loaded, settings, num_samples):
    """Replicas, global and per-update batch and steps per epoch, from the recipe's settings."""
    recipe = loaded.recipe
    view = cluster_view(loaded, settings)
    devices = view.num_gpus   # the flag's, or under Slurm each task's share of its node's GPUs
    replicas = devices * view.num_workers
    in_sync = replicas if view.sync_replicas else devices
    global_batch = recipe.run.batch_size * replicas
    accumulation = 1
    for wrapper in recipe.optimizer.wrappers:
        if wrapper.name == "batch_gradients":
            accumulation *= int(wrapper.params.get("num_batches", _default_num_batches()))
    steps = math.ceil(num_samples / global_batch) if num_samples else None
    strategy = f"{_KIND_NAMES.get(view.kind, view.kind)}: {view.num_workers} worker(s) x {devices} device(s)"
    strategy += f", {in_sync} replica(s) in sync per step"
    if view.jobs.get("ps"):
        strategy += f", {len(view.jobs['ps'])} parameter server(s)"
    if view.tpu:
        strategy += f", TPU {view.tpu!r}"
    if view.jobs:
        strategy += f"; this process: {view.role} (task {view.task_index})"
    return BatchFacts(per_replica_batch=recipe.run.batch_size, devices_per_worker=devices,
                      num_workers=view.num_workers, replicas=replicas, replicas_in_sync=in_sync,
                      global_batch=global_batch, accumulation=accumulation,
                      update_batch=global_batch * accumulation, num_samples=num_samples, steps_per_epoch=steps,
                      strategy=strategy, cluster_source=_source_line(view))


def _source_line(view):
    """Where the cluster came from, for ``--dry-run`` ("the Slurm job step (...), 2 task(s): worker:0 at h:8888, ...")."""
    from moxlite.distribute import cluster

    line = cluster.SOURCE_NAMES[view.source]
    tasks = [f"{job}:{index} at {host}" for job, hosts in view.jobs.items() for index, host in enumerate(hosts)]
    if tasks:
        shown = ", ".join(tasks[:4]) + (f", ... ({len(tasks) - 4} more)" if len(tasks) > 4 else "")
        line += f", {len(tasks)} task(s): {shown}"
    return line


def _default_num_batches():
    from moxlite import optimizers

    return optimizers.wrapper_parameters("batch_gradients")["num_batches"][0]


# ----------------------------------------------------------------- predict output

class PredictionTally:
    """The default output_fn of predict: counts predictions and, with labels, correct ones."""

    def __init__(self):
        self.count = 0
        self.correct = 0
        self.labelled = 0

    def __call__(self, outputs: List[dict]):
        for output in outputs:
            classes = output.get("classes")
            if classes is None:
                continue
            self.count += len(classes)
            if "labels" in output:
                self.labelled += len(classes)
                self.correct += int((classes == output["labels"]).sum())

    def summary(self):
        text = f"predicted {self.count} samples"
        if self.labelled:
            text += f"; accuracy against the labels: {self.correct / self.labelled:.4f}"
        return text
