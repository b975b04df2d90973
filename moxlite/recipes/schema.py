"""The recipe schema: every key a recipe may hold, its type, default and meaning.

The sections below nest the settings declared beside the runner (MoXing's flags in
``moxlite.run_settings``, the precision, model and augmentation blocks) and declare the keys
only a recipe has. ``moxlite-run --help-recipe`` prints it from the dataclasses, so the
description a user reads is the one the loader enforces.

A recipe has six sections that map one-to-one onto ``moxlite.run``'s
arguments and MoXing's flags:

- ``run``: run mode, steps, batch, log_dir and the checkpoint/summary cadence
  (arguments of ``run``);
- ``input``: a built-in data set and its options, or a ``module:function``
  reference to the user's ``input_fn(mode)``;
- ``model``: a built-in model and its options, or a reference to ``model_fn``;
- ``optimizer``: name, learning rate (number, MoXing string or schedule block),
  optimizer kwargs and the ordered ``wrappers`` list (innermost first);
- ``distribute``: the strategy and the cluster flags;
- ``precision``: the mixed-precision level, keep-lists, loss-scale and gradient-clipping flags.

Built-in choices are one-of blocks, as in TF Model Garden: ``input.name``
picks a data set and the block of the same name (``input.synthetic``) holds
its options; blocks of the data sets not picked are checked but unused, so
``--set input.name=synthetic`` switches a recipe to synthetic data without
removing its other block.

Nothing here imports TensorFlow: validation and ``--help-recipe`` stay fast.
"""

import dataclasses
from typing import Any, Dict, List, Optional, Union

from moxlite import ranges
from moxlite.data.augment_options import AugmentOptions
from moxlite.declarations import (REQUIRED, Rule, params_field, rules_of, setting, type_name, with_options_blocks,
                                  with_rules, with_settings_of)
from moxlite.models import options as model_options
from moxlite.optimizers import recipe_tables
from moxlite.run_settings import DistributeOptions, RunOptions
from moxlite.training.mixed_precision.options import PrecisionOptions

# The names recipes may use for built-ins. The implementations live in
# moxlite.data.datasets and moxlite.models; the names are listed here so that
# a recipe is checked without importing TensorFlow.
DATASET_NAMES = ("mnist", "synthetic", "tfrecord", "image_folder", "text", "bert_tfrecord", "bert_synthetic")
# The data sets of masked-LM examples (dicts of token ids, moxlite.data.text_datasets), not images.
TEXT_DATASET_NAMES = ("text", "bert_tfrecord", "bert_synthetic")
MNIST_IMAGE_SHAPE = (28, 28, 1)   # the other built-ins take theirs from their options
MODEL_NAMES = model_options.MODEL_NAMES
IMAGE_MODEL_NAMES = model_options.IMAGE_MODEL_NAMES
BERT_MODEL_NAMES = model_options.BERT_MODEL_NAMES
RUN_MODES = ("train", "eval", "predict", "export")
STRATEGIES = ("auto", "mirrored", "multi_worker", "parameter_server", "tpu")

# ----------------------------------------------------------------- run

@dataclasses.dataclass(kw_only=True)
@with_settings_of(RunOptions)
class RunSection:
    """How to run: the arguments of moxlite.run."""

    mode: str = setting("train", "Run mode (run_mode); --mode overrides it.", RUN_MODES)
    steps: int = setting(0, "max_number_of_steps: steps of this worker; 0 lets the data decide.")
    batch_size: int = setting(32, "Per-replica batch size; global batch = batch_size x replicas.")
    log_dir: str = setting(REQUIRED, "Directory for checkpoints, summaries, exports and the resolved recipe.yaml.")
    checkpoint_path: Optional[str] = setting(None, "Checkpoint to start from when log_dir has none.")
    log_every_n_steps: int = setting(10, "Print a log line every this many steps.")
    save_summary_steps: int = setting(100, "Write summaries every this many steps.")
    save_model_secs: Optional[int] = setting(None, "Save a checkpoint every this many seconds (wins over save_model_steps).")
    save_model_steps: Optional[int] = setting(None, "Save a checkpoint every this many steps.")
    export_model: bool = setting(False, "Export a SavedModel for serving (ExportKeys.TF_SERVING) after the run.")
    inter_mode: Optional[str] = setting(None, "A second mode run interleaved with the main one (e.g. eval during train).", ("eval",))
    output_every_n_steps: int = setting(0, "Call output_fn every this many steps (predict).")
    output_fn: Optional[str] = setting(None, "'package.module:function' called with the outputs; default prints a prediction count.")
    evaluate: bool = setting(True, "After train, evaluate on the held-out split and print the accuracy.")
    eval_steps: int = setting(0, "Steps of the evaluation; 0 evaluates the whole held-out split.")
    seed: Optional[int] = setting(0, "Seed for Python, NumPy and TensorFlow (keras.utils.set_random_seed); null leaves them unseeded.")


# ----------------------------------------------------------------- input

@dataclasses.dataclass(kw_only=True)
class MnistOptions:
    """The 5,000 MNIST digits bundled with moxlite (moxlite.data.mnist.split)."""

    validation_fraction: float = setting(0.2, "Share of the digits held out for evaluation.")
    split_seed: int = setting(0, "Seed of the fixed train/validation shuffle.")


@dataclasses.dataclass(kw_only=True)
class SyntheticOptions:
    """Generated images and labels of any shape and class count.

    Each class has a fixed random prototype; a sample is its class prototype
    times ``signal`` plus unit Gaussian noise, so models can learn it
    (``signal: 0`` gives pure noise for benchmarks).
    """

    image_shape: List[int] = setting([28, 28, 1], "Shape of one image, [height, width, channels].")
    num_classes: int = setting(10, "Number of classes.")
    num_samples: int = setting(1024, "Training samples in one epoch.")
    eval_samples: int = setting(256, "Held-out samples for evaluation.")
    signal: float = setting(1.0, "Scale of the class prototype added to the noise; 0 for pure noise.",
                            valid=ranges.number())
    seed: int = setting(0, "Seed of the prototypes and the noise.")


@dataclasses.dataclass(kw_only=True)
class TFRecordOptions:
    """TFRecord files of tf.train.Example records (the ImageNet layout by default)."""

    train_files: List[str] = setting([], "Glob patterns of the training files.")
    eval_files: List[str] = setting([], "Glob patterns of the evaluation files.")
    image_shape: List[int] = setting([224, 224, 3], "Images are decoded, resized to [height, width] and given this many channels.",
                                     valid=ranges.list_of(ranges.integer(1), length=3))
    num_classes: int = setting(1000, "Number of classes.", valid=ranges.integer(1))
    num_samples: Optional[int] = setting(None, "Training samples in one epoch, for steps per epoch and epoch-based learning rates (null: unknown).",
                                         valid=ranges.integer(1))
    image_key: str = setting("image/encoded", "Feature holding the encoded image.")
    label_key: str = setting("image/class/label", "Feature holding the integer label.")
    image_format: str = setting("encoded", "'encoded' (JPEG/PNG bytes) or 'raw' (uint8 bytes of image_shape).", ("encoded", "raw"))
    label_offset: int = setting(0, "Added to every label (-1 for ImageNet files whose labels start at 1).")
    allow_single_class: bool = setting(False, "Accept num_classes below 2 (a one-class data set is otherwise an error).")


@dataclasses.dataclass(kw_only=True)
class ImageFolderOptions:
    """A folder with one sub-folder of images per class (class index = sorted folder order)."""

    train_dir: str = setting("", "Folder of training images, one sub-folder per class.")
    eval_dir: str = setting("", "Folder of evaluation images with the same class sub-folders.")
    image_shape: List[int] = setting([224, 224, 3], "Images are decoded, resized to [height, width] and given this many channels.",
                                     valid=ranges.list_of(ranges.integer(1), length=3))
    allow_single_class: bool = setting(False, "Accept a train_dir with one class folder (otherwise an error).")


@dataclasses.dataclass(kw_only=True)
class MaskedLMOptions:
    """The masking options every masked-LM data set that masks its own sequences takes."""

    seq_length: int = setting(128, "Tokens per sequence, [CLS] and [SEP] included (at most the model's max_sequence_length).",
                              valid=ranges.integer(3))
    mask_rate: float = setting(0.15, "Share of the tokens predicted (BERT's 0.15); 80% of them become [MASK], 10% a random token, 10% stay.",
                               valid=ranges.number(above=0, below=1))
    max_predictions: int = setting(20, "Most predictions per sequence (BERT's max_predictions_per_seq); at most seq_length - 2.",
                                   valid=ranges.integer(1))


def _predictions_fit_sequence(values, image_shape):
    from moxlite.data import text_checks, sources   # both free of TensorFlow

    try:
        text_checks.check_masking(values["seq_length"], values["mask_rate"], values["max_predictions"])
    except sources.DataOptionError as problem:
        return problem.detail if problem.option == "max_predictions" else None
    return None


@with_rules(Rule("max_predictions", _predictions_fit_sequence))
@dataclasses.dataclass(kw_only=True)
class TextOptions(MaskedLMOptions):
    """Files of text lines, WordPiece-tokenized, packed into sequences and masked (moxlite.data.text_datasets)."""

    train_files: List[str] = setting([], "Glob patterns of the training text files (local or obs://), a sentence or paragraph a line; empty: the bundled corpus (Python's docstrings).")
    eval_files: List[str] = setting([], "Glob patterns of the held-out text files (for masked-LM accuracy); empty with empty train_files: the bundled held-out split.")
    vocabulary: Optional[str] = setting(None, "A WordPiece vocabulary file (BERT's vocab.txt, one token a line); null: the bundled corpus's, or one learned from train_files and cached.")
    vocab_size: int = setting(6000, "Tokens of a vocabulary learned from train_files (a target: a small corpus gives fewer).",
                              valid=ranges.integer(6))
    lowercase: bool = setting(True, "Lower-case and strip accents before WordPiece (BERT's uncased models).")
    cache_dir: Optional[str] = setting(None, "Folder of learned vocabularies (null: $MOXLITE_CACHE_DIR/vocabularies or ~/.cache/moxlite/vocabularies).")
    num_samples: Optional[int] = setting(None, "Training sequences in one epoch (null: counted by one pass over train_files).",
                                         valid=ranges.integer(1))


@dataclasses.dataclass(kw_only=True)
class BertTFRecordOptions:
    """TFRecord files in BERT's pre-training schema (create_pretraining_data.py; MindSpore's run_pretrain.py reads them)."""

    train_files: List[str] = setting([], "Glob patterns of the training TFRecord files.")
    eval_files: List[str] = setting([], "Glob patterns of the held-out TFRecord files.")
    vocab_size: int = setting(30522, "Tokens of the vocabulary the files were written with (BERT's uncased: 30522).",
                              valid=ranges.integer(6))
    seq_length: Optional[int] = setting(None, "Tokens per sequence in the files (null: read from the first record).",
                                        valid=ranges.integer(3))
    max_predictions: Optional[int] = setting(None, "Predictions per sequence in the files (null: read from the first record).",
                                             valid=ranges.integer(1))
    num_samples: Optional[int] = setting(None, "Training records in one epoch, for steps per epoch and epoch-based schedules (null: unknown).",
                                         valid=ranges.integer(1))


@with_rules(Rule("max_predictions", _predictions_fit_sequence))
@dataclasses.dataclass(kw_only=True)
class BertSyntheticOptions(MaskedLMOptions):
    """Random token sequences of a vocabulary of any size, masked as text is (shortened BERT recipes and benchmarks)."""

    vocab_size: int = setting(30522, "Tokens of the vocabulary; ids 0-4 are [PAD], [UNK], [CLS], [SEP], [MASK].",
                              valid=ranges.integer(6))
    num_samples: int = setting(1024, "Training sequences in one epoch.", valid=ranges.integer(1))
    eval_samples: int = setting(256, "Held-out sequences.", valid=ranges.integer(1))
    next_sentence: bool = setting(False, "Add a random 0/1 next_sentence_labels [1] (for a next-sentence head).")
    seed: int = setting(0, "Seed of the tokens and the masks.")


@dataclasses.dataclass(kw_only=True)
@with_options_blocks(mnist=MnistOptions, synthetic=SyntheticOptions, tfrecord=TFRecordOptions,
                     image_folder=ImageFolderOptions, text=TextOptions, bert_tfrecord=BertTFRecordOptions,
                     bert_synthetic=BertSyntheticOptions, augment=AugmentOptions)
class InputSection:
    """Where samples come from: input_fn(mode) yields (image, label) samples, or masked-LM dicts (text data sets)."""

    name: str = setting(REQUIRED, "A built-in data set, or 'package.module:function' naming your input_fn(mode).", DATASET_NAMES)
    kwargs: Dict[str, Any] = setting({}, "Keyword arguments for your input_fn (only with a module:function name).")
    num_samples: Optional[int] = setting(None, "Training samples per epoch for your input_fn (built-ins know theirs).")
    epochs: Optional[int] = setting(None, "Passes over the training set; null repeats until run.steps.")
    shuffle_buffer: int = setting(10000, "Samples in the shuffle buffer of the training set; 0 disables shuffling.")


# ----------------------------------------------------------------- model

@dataclasses.dataclass(kw_only=True)
@with_options_blocks(**model_options.OPTIONS)
@with_settings_of(model_options.ClassifierArguments)
class ModelSection:
    """The model: model_fn(inputs, mode) returning a ModelSpec."""

    name: str = setting(REQUIRED, "A built-in model, or 'package.module:function' naming your model_fn(inputs, mode).", MODEL_NAMES)
    kwargs: Dict[str, Any] = setting({}, "Keyword arguments for your model_fn (only with a module:function name).")


# ----------------------------------------------------------------- optimizer

@dataclasses.dataclass(kw_only=True)
class ScheduleBlock:
    """A Keras learning-rate schedule; its parameters are the class's arguments."""

    schedule: str = setting(REQUIRED, "Schedule kind (keras.optimizers.schedules, or THOR's).",
                            tuple(recipe_tables.SCHEDULES))
    params: Dict[str, Any] = params_field("The schedule's arguments, e.g. initial_learning_rate, decay_steps; "
                                          + "; ".join(f"{kind}: {schedule.about}"
                                                      for kind, schedule in recipe_tables.SCHEDULES.items()
                                                      if schedule.about)
                                          + "; steps_per_epoch of thor and thor_damping defaults to the run's.")


@dataclasses.dataclass(kw_only=True)
class WrapperBlock:
    """One optimizer wrapper; its other keys are the wrapper's parameters."""

    name: str = setting(REQUIRED, "Wrapper name (moxlite.optimizers.WRAPPER_NAMES), e.g. lars, batch_gradients.")
    params: Dict[str, Any] = params_field("The wrapper's parameters, e.g. ratio, num_batches.")


@dataclasses.dataclass(kw_only=True)
class OptimizerSection:
    """The optimizer: get_optimizer_fn(name, learning_rate, **kwargs) wrapped innermost first."""

    name: Optional[str] = setting(None, "Optimizer name (momentum, sgd, adam, ...) or 'package.module:function' naming your optimizer_fn; required to train.")
    learning_rate: Union[float, str, ScheduleBlock] = setting(0.01, "A number, MoXing's 'epoch:lr' string ('5:0.1->0.4,10:0.4') or a schedule block.")
    kwargs: Dict[str, Any] = setting({}, "Keyword arguments of the optimizer (momentum: 0.9, ...).")
    wrappers: List[WrapperBlock] = setting([], "Wrappers applied in order, innermost first (e.g. lars, then batch_gradients).")


# ----------------------------------------------------------------- distribute and precision

@dataclasses.dataclass(kw_only=True)
@with_settings_of(DistributeOptions)
class DistributeSection:
    """Replicas and cluster: MoXing's distribution flags."""

    strategy: str = setting("auto", "auto derives the strategy from the flags below, as MoXing did.", STRATEGIES)


@dataclasses.dataclass(kw_only=True)
class Recipe:
    """A whole recipe."""

    description: str = setting("", "What this recipe reproduces (free text).")
    run: RunSection = setting(REQUIRED, RunSection.__doc__)
    input: InputSection = setting(REQUIRED, InputSection.__doc__)
    model: ModelSection = setting(REQUIRED, ModelSection.__doc__)
    optimizer: OptimizerSection = setting(OptimizerSection(), OptimizerSection.__doc__)
    distribute: DistributeSection = setting(DistributeSection(), DistributeSection.__doc__)
    precision: PrecisionOptions = setting(PrecisionOptions(), PrecisionOptions.__doc__)


def model_options_class(name):
    """The options block of built-in model ``name`` (one of MODEL_NAMES), e.g. VitTinyOptions."""
    return model_options.OPTIONS[name]


def ranged_keys():
    """The dotted recipe keys with a declared range: a ``valid`` Range, ``choices``, or a rule about them.

    Wrapper parameters and schedule arguments (moxlite.optimizers.recipe_tables) are counted as
    ``optimizer.wrappers[].<wrapper>.<key>`` and ``<schedule block>.<kind>.<argument>``.
    """
    keys = []
    _ranged(Recipe, "", keys)
    keys += [f"optimizer.wrappers[].{name}.{key}" for name, table in recipe_tables.WRAPPER_PARAMETERS.items()
             for key in table]
    keys += [f"schedule.{kind}.{key}" for kind, schedule in recipe_tables.SCHEDULES.items()
             for key in schedule.arguments]
    return keys


def _ranged(cls, prefix, keys):
    ruled = {rule.key for rule in rules_of(cls)}
    for field in dataclasses.fields(cls):
        if dataclasses.is_dataclass(field.type):
            _ranged(field.type, prefix + field.name + ".", keys)
        elif field.metadata.get("valid") or field.metadata.get("choices") or field.name in ruled:
            keys.append(prefix + field.name)


def leaf_keys():
    """Every dotted recipe key that holds a value (not a block), wrapper and schedule parameters left out."""
    keys = []

    def walk(cls, prefix):
        for field in dataclasses.fields(cls):
            if dataclasses.is_dataclass(field.type):
                walk(field.type, prefix + field.name + ".")
            elif not field.metadata.get("rest"):
                keys.append(prefix + field.name)

    walk(Recipe, "")
    return keys


def is_reference(name):
    """True when ``name`` is a 'package.module:function' reference rather than a built-in."""
    return isinstance(name, str) and ":" in name


def describe_schema():
    """The schema as text: one line per key with its type, default and meaning."""
    lines = [
        "A recipe is a YAML mapping with these keys. Built-in blocks (input.mnist, model.mlp, ...)",
        "hold the options of the built-in of the same name. Several files merge in order, later",
        "ones overriding earlier ones; then each --set dotted.key=value applies (values are YAML).",
        "",
    ]
    _describe_class(Recipe, "", lines)
    return "\n".join(lines)


def _describe_class(cls, prefix, lines):
    for field in dataclasses.fields(cls):
        key = prefix + field.name
        help_text = field.metadata.get("help", "")
        if field.metadata.get("rest"):
            lines.append(f"  {prefix}<other keys>: {help_text}")
            continue
        if dataclasses.is_dataclass(field.type):
            lines.append(f"{key}:  {help_text.strip().splitlines()[0]}")
            _describe_class(field.type, key + ".", lines)
            continue
        if field.default is not dataclasses.MISSING:
            default = "default " + _yaml_text(field.default)
        elif field.default_factory is not dataclasses.MISSING:
            default = "default " + _yaml_text(field.default_factory())
        else:
            default = "required"
        choices = field.metadata.get("choices")
        allowed = f" One of: {', '.join(repr(c) for c in choices)}." if choices else ""
        if field.type is List[WrapperBlock]:
            lines.append(f"  {key} ({type_name(field.type).replace('WrapperBlock', 'wrapper')}, {default}): {help_text}")
            lines.append(f"    each wrapper: name (required): {WrapperBlock.__dataclass_fields__['name'].metadata['help']}")
            lines.append("                  <other keys>: the wrapper's parameters, e.g. ratio, num_batches.")
            lines.append("                  thor's damping: a number or a schedule block, e.g. {schedule: thor_damping, "
                         "damping_init: 0.03, decay_rate: 0.5}.")
            continue
        lines.append(f"  {key} ({_short_type(field.type)}, {default}): {help_text}{allowed}")
        if field.type == Union[float, str, ScheduleBlock]:
            for block_field in dataclasses.fields(ScheduleBlock):
                block_choices = block_field.metadata.get("choices")
                block_allowed = f" One of: {', '.join(repr(c) for c in block_choices)}." if block_choices else ""
                lines.append(f"    schedule block: {block_field.name if not block_field.metadata.get('rest') else '<other keys>'}: "
                             f"{block_field.metadata['help']}{block_allowed}")


def _yaml_text(value):
    """A default as it would be written in YAML: null, true, 0.2, [28, 28, 1], 'train'."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_yaml_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml_text(v)}" for k, v in value.items()) + "}"
    return str(value)


def _short_type(annotation):
    if annotation == Union[float, str, ScheduleBlock]:
        return "number, string or schedule block {schedule: <kind>, <its arguments>}"
    return type_name(annotation)
