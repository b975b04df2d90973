"""The recipe schema: every key a recipe may hold, its type, default and meaning.

This module is the one place where the recipe format is documented.
``moxlite-run --help-recipe`` prints it from the dataclasses below, so the
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
import math
from typing import Any, Dict, List, Optional, Union

from moxlite import ranges

# The names recipes may use for built-ins. The implementations live in
# moxlite.data.datasets and moxlite.models; the names are listed here so that
# a recipe is checked without importing TensorFlow.
DATASET_NAMES = ("mnist", "synthetic", "tfrecord", "image_folder", "text", "bert_tfrecord", "bert_synthetic")
# The data sets of masked-LM examples (dicts of token ids, moxlite.data.text_datasets), not images.
TEXT_DATASET_NAMES = ("text", "bert_tfrecord", "bert_synthetic")
MNIST_IMAGE_SHAPE = (28, 28, 1)   # the other built-ins take theirs from their options
MODEL_NAMES = ("mlp", "lenet", "resnet50", "small_resnet", "swin_tiny", "vit_tiny", "bert_tiny", "bert_base",
               "bert_large")
# The built-in models that read images (a text data set gives them none).
IMAGE_MODEL_NAMES = ("mlp", "lenet", "resnet50", "small_resnet", "swin_tiny", "vit_tiny")
BERT_MODEL_NAMES = ("bert_tiny", "bert_base", "bert_large")   # masked-LM pre-training: no num_classes
AMP_LEVELS = ("", "O0", "O1", "O2", "O3")
RUN_MODES = ("train", "eval", "predict", "export")
STRATEGIES = ("auto", "mirrored", "multi_worker", "parameter_server", "tpu")
# moxlite.distribute.cluster.CLUSTER_SOURCES (tests/optimizers/test_recipe_tables.py keeps them equal).
CLUSTER_SOURCES = ("auto", "flags", "tf_config", "slurm", "single")

# Schedule name -> keras.optimizers.schedules class name. The accepted
# parameters are read from the class signature when a recipe is checked.
SCHEDULES = {
    "piecewise_constant": "PiecewiseConstantDecay",
    "cosine": "CosineDecay",
    "cosine_restarts": "CosineDecayRestarts",
    "exponential": "ExponentialDecay",
    "polynomial": "PolynomialDecay",
    "inverse_time": "InverseTimeDecay",
}
# THOR's schedules (moxlite.optimizers.thor.schedules), for the learning rate
# and for the thor wrapper's damping; steps_per_epoch may be left out (derived
# from the run: training samples // samples per applied update).
THOR_SCHEDULES = {
    "thor": "lr_init, lr_decay, lr_end_epoch, decay_epochs (MindSpore's get_thor_lr)",
    "thor_damping": "damping_init, decay_rate (get_thor_damping)",
    "thor_polynomial": "initial_value, end_value, total_steps, power, warmup_steps (the BERT lr and damping)",
}

# Schedule name -> (required arguments, optional arguments), in the order of the class's
# signature (Keras 3.15's, and moxlite.optimizers.thor.schedules'), so that a schedule block
# is checked without importing TensorFlow; tests/optimizers/test_recipe_tables.py compares them with the
# signatures. steps_per_epoch of THOR's schedules is derived from the run when left out.
SCHEDULE_ARGUMENTS = {
    "piecewise_constant": (("boundaries", "values"), ()),
    "cosine": (("initial_learning_rate", "decay_steps"), ("alpha", "warmup_target", "warmup_steps")),
    "cosine_restarts": (("initial_learning_rate", "first_decay_steps"), ("t_mul", "m_mul", "alpha")),
    "exponential": (("initial_learning_rate", "decay_steps", "decay_rate"), ("staircase",)),
    "polynomial": (("initial_learning_rate", "decay_steps"), ("end_learning_rate", "power", "cycle")),
    "inverse_time": (("initial_learning_rate", "decay_steps", "decay_rate"), ("staircase",)),
    "thor": (("lr_init", "lr_decay", "lr_end_epoch", "steps_per_epoch"), ("decay_epochs",)),
    "thor_damping": (("damping_init", "decay_rate", "steps_per_epoch"), ()),
    "thor_polynomial": (("initial_value", "end_value", "total_steps"), ("power", "warmup_steps")),
}

REQUIRED = dataclasses.MISSING


def setting(default, help_text, choices=None, valid=None):
    """A recipe field: its default, a one-line description, allowed values and accepted range.

    ``default=REQUIRED`` makes the key mandatory. Lists and dicts are copied
    per instance. ``valid`` is a ``moxlite.ranges.Range``: the recipe loader and the
    Python API (``check_values``) both check a value against it; null passes where
    the key's type allows null.
    """
    metadata = {"help": help_text, "choices": choices, "valid": valid}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=metadata)
    if dataclasses.is_dataclass(default):
        return dataclasses.field(default_factory=type(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def options_block(options_class):
    """A built-in's options block: its defaults, described by the first line of its docstring."""
    return setting(options_class(), options_class.__doc__.splitlines()[0])


def with_options_blocks(**blocks):
    """Class decorator: one options block per built-in, declared after the class's own fields.

    ``@with_options_blocks(mnist=MnistOptions)`` adds the field ``mnist: MnistOptions``
    holding MnistOptions' defaults (apply it below ``@dataclasses.dataclass``).
    """
    def add_blocks(cls):
        for name, options_class in blocks.items():
            cls.__annotations__[name] = options_class
            setattr(cls, name, options_block(options_class))
        return cls
    return add_blocks


def with_defaults(**defaults):
    """Class decorator: other defaults for fields a dataclass inherits, keeping their help and choices.

    A family of built-ins declares the options they share once, in a base
    class, and each member states only its own values:
    ``@with_defaults(patch_size=16)`` (apply it below ``@dataclasses.dataclass``).
    """
    def set_defaults(cls):
        # The class is not a dataclass yet, so its fields are still the base's.
        inherited = {field.name: field for field in dataclasses.fields(cls)}
        for name, default in defaults.items():
            if name not in inherited:
                raise TypeError(f"{cls.__name__}: with_defaults names {name!r}, which no base class declares")
            field = inherited[name]
            cls.__annotations__[name] = field.type
            setattr(cls, name, setting(default, field.metadata["help"], field.metadata["choices"],
                                       field.metadata.get("valid")))
        return cls
    return set_defaults


def params_field(help_text):
    """A field that collects every key of its mapping not declared as a field.

    Used where the accepted keys depend on another key's value (a wrapper's
    parameters depend on its name); they are checked once the name is known.
    """
    return dataclasses.field(default_factory=dict, metadata={"help": help_text, "choices": None, "rest": True})


# ----------------------------------------------------------------- run

@dataclasses.dataclass(kw_only=True)
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
    keep_checkpoint_max: int = setting(5, "Checkpoints kept in log_dir.")
    nonfinite_policy: str = setting("stop", "At a non-finite loss or gradient: stop (nothing saved, the last finite checkpoint kept) or skip the step.", ("stop", "skip"))
    allow_input_restart: bool = setting(True, "Resume with the input restarted when the saved input position no longer fits the input pipeline (false: stop).")
    max_consecutive_nonfinite: int = setting(10, "With nonfinite_policy: skip, stop after this many non-finite steps in a row.",
                                             valid=ranges.integer(1))
    steps_per_loop: Union[int, str] = setting("auto", "Training steps run inside one traced call; 'auto' runs each call up to the next log line, summary, checkpoint or the end (bounded to about a second).")
    jit_compile: Union[bool, str] = setting("auto", "Compile the train step with XLA: auto (time both after tracing, keep the faster), true or false.", ("auto", True, False))
    export_model: bool = setting(False, "Export a SavedModel for serving (ExportKeys.TF_SERVING) after the run.")
    inter_mode: Optional[str] = setting(None, "A second mode run interleaved with the main one (e.g. eval during train).", ("eval",))
    output_every_n_steps: int = setting(0, "Call output_fn every this many steps (predict).")
    output_fn: Optional[str] = setting(None, "'package.module:function' called with the outputs; default prints a prediction count.")
    evaluate: bool = setting(True, "After train, evaluate on the held-out split and print the accuracy.")
    eval_steps: int = setting(0, "Steps of the evaluation; 0 evaluates the whole held-out split.")
    seed: Optional[int] = setting(0, "Seed for Python, NumPy and TensorFlow (keras.utils.set_random_seed); null leaves them unseeded.")
    checkpoint_exclude_patterns: List[str] = setting([], "Variable-name patterns not restored from checkpoint_path.")
    trainable_exclude_patterns: List[str] = setting([], "Variable-name patterns left out of training.")


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
class AugmentOptions:
    """Training-set augmentation with Keras's layers (moxlite.data.train_augmentation); 0 turns a step off."""

    rand_augment_ops: int = setting(0, "RandAugment operations per image (keras.layers.RandAugment num_ops).",
                                    valid=ranges.integer(0))
    rand_augment_magnitude: float = setting(0.5, "RandAugment strength in [0, 1] (its factor; timm's m9 is 0.9).",
                                            valid=ranges.probability())
    random_erasing: float = setting(0.0, "Probability of erasing a rectangle (keras.layers.RandomErasing factor).",
                                    valid=ranges.probability())
    mixup_alpha: float = setting(0.0, "MixUp's alpha (keras.layers.MixUp); labels become class distributions.",
                                 valid=ranges.number(minimum=0))
    cutmix_alpha: float = setting(0.0, "CutMix's alpha (keras.layers.CutMix factor).", valid=ranges.number(minimum=0))
    switch_prob: float = setting(0.5, "With MixUp and CutMix both on: probability of CutMix for a batch.",
                                 valid=ranges.probability())
    mix_batch: int = setting(64, "Consecutive samples mixed with each other.", valid=ranges.integer(2))
    value_range: List[float] = setting([0.0, 1.0], "Range of the pixel values, [low, high] with low < high.",
                                       valid=ranges.list_of(ranges.number(), length=2))


@dataclasses.dataclass(kw_only=True)
class MaskedLMOptions:
    """The masking options every masked-LM data set that masks its own sequences takes."""

    seq_length: int = setting(128, "Tokens per sequence, [CLS] and [SEP] included (at most the model's max_sequence_length).",
                              valid=ranges.integer(3))
    mask_rate: float = setting(0.15, "Share of the tokens predicted (BERT's 0.15); 80% of them become [MASK], 10% a random token, 10% stay.",
                               valid=ranges.number(above=0, below=1))
    max_predictions: int = setting(20, "Most predictions per sequence (BERT's max_predictions_per_seq); at most seq_length - 2.",
                                   valid=ranges.integer(1))


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
class MlpOptions:
    """A multi-layer perceptron on the flattened image."""

    hidden_units: List[int] = setting([128], "Units of each hidden layer.",
                                      valid=ranges.list_of(ranges.integer(1), min_length=0))
    activation: str = setting("relu", "Activation of the hidden layers (a Keras activation name).")
    dropout: float = setting(0.0, "Dropout rate after each hidden layer.", valid=ranges.fraction())


@dataclasses.dataclass(kw_only=True)
class LenetOptions:
    """A LeNet-style CNN: conv-pool blocks, then a dense layer."""

    filters: List[int] = setting([32, 64], "Filters of each 5x5 convolution (each followed by 2x2 max-pooling).",
                                 valid=ranges.list_of(ranges.integer(1)))
    kernel_size: int = setting(5, "Side of the convolution kernels.", valid=ranges.integer(1))
    dense_units: int = setting(256, "Units of the dense layer before the classifier.", valid=ranges.integer(1))
    dropout: float = setting(0.0, "Dropout rate before the classifier.", valid=ranges.fraction())


@dataclasses.dataclass(kw_only=True)
class Resnet50Options:
    """ResNet-50 from keras.applications, randomly initialised (weights=None)."""

    pooling: str = setting("avg", "Pooling before the classifier.", ("avg", "max"))


@dataclasses.dataclass(kw_only=True)
class SmallResnetOptions:
    """A CIFAR-style ResNet for small (e.g. 32x32) images: depth = 6n + 2 (He et al. 2016)."""

    depth: int = setting(20, "Layers; 6n + 2 (20, 32, 44, 56, 110).",
                         valid=ranges.Range("6n + 2 with n >= 1 (20, 32, 44, 56, 110)",
                                            lambda v: ranges.is_integer(v) and v >= 8 and (v - 2) % 6 == 0,
                                            lambda v: f"{ranges.describe(v)} must be 6n + 2"))
    base_width: int = setting(16, "Filters of the first stage (doubled at each of the three stages).",
                              valid=ranges.integer(1))


@dataclasses.dataclass(kw_only=True)
class VisionTransformerOptions:
    """The options every built-in vision transformer takes; each model states its sizes with with_defaults."""

    # No size defaults here: a model that does not state its own fails when this module is imported.
    patch_size: int = setting(REQUIRED, "Side of the square patches; it divides the image's height and width.",
                              valid=ranges.integer(1))
    mlp_ratio: float = setting(4.0, "MLP width over the channels.", valid=ranges.number(above=0))
    drop_path: float = setting(REQUIRED, "Stochastic-depth rate of the last block (linear from 0).",
                               valid=ranges.fraction())


@dataclasses.dataclass(kw_only=True)
@with_defaults(patch_size=4, drop_path=0.2)
class SwinTinyOptions(VisionTransformerOptions):
    """Swin Transformer, Swin-T sizes by default (moxlite.models.vision_transformers.swin)."""

    embed_dim: int = setting(96, "Channels of the first stage (doubled at each patch merging).",
                             valid=ranges.integer(1))
    depths: List[int] = setting([2, 2, 6, 2], "Blocks per stage.", valid=ranges.list_of(ranges.integer(1)))
    num_heads: List[int] = setting([3, 6, 12, 24], "Attention heads per stage (one per stage; each divides its "
                                   "stage's channels).", valid=ranges.list_of(ranges.integer(1)))
    window_size: int = setting(7, "Side of the attention windows (each stage's tokens must be a multiple of it).",
                               valid=ranges.integer(1))


@dataclasses.dataclass(kw_only=True)
@with_defaults(patch_size=16, drop_path=0.1)
class VitTinyOptions(VisionTransformerOptions):
    """Vision Transformer, ViT-Ti sizes by default (moxlite.models.vision_transformers.vit)."""

    embed_dim: int = setting(192, "Token channels.", valid=ranges.integer(1))
    depth: int = setting(12, "Transformer blocks.", valid=ranges.integer(1))
    num_heads: int = setting(3, "Attention heads (they divide embed_dim).", valid=ranges.integer(1))


@dataclasses.dataclass(kw_only=True)
class BertOptions:
    """The options of every built-in BERT (moxlite.models.bert); each size states its own with with_defaults."""

    # No size defaults here: a size that does not state its own fails when this module is imported.
    vocabulary_size: Optional[int] = setting(REQUIRED, "Tokens in the vocabulary; null takes the data set's.",
                                             valid=ranges.integer(1))
    num_layers: int = setting(REQUIRED, "Transformer layers of the encoder.", valid=ranges.integer(1))
    num_heads: int = setting(REQUIRED, "Attention heads (they divide hidden_dim).", valid=ranges.integer(1))
    hidden_dim: int = setting(REQUIRED, "Width of the encoder.", valid=ranges.integer(1))
    intermediate_dim: int = setting(REQUIRED, "Width of the feed-forward layers.", valid=ranges.integer(1))
    max_sequence_length: int = setting(REQUIRED, "Longest sequence (position embeddings); the data's sequence "
                                       "length may not exceed it.", valid=ranges.integer(1))
    dropout: float = setting(0.1, "Dropout rate of the encoder (BERT's 0.1).", valid=ranges.fraction())


@dataclasses.dataclass(kw_only=True)
@with_defaults(vocabulary_size=None, num_layers=2, num_heads=2, hidden_dim=64, intermediate_dim=256,
               max_sequence_length=128)
class BertTinyOptions(BertOptions):
    """A 2-layer BERT (hidden 64, 2 heads), for tests and the bundled corpus."""


@dataclasses.dataclass(kw_only=True)
@with_defaults(vocabulary_size=30522, num_layers=12, num_heads=12, hidden_dim=768, intermediate_dim=3072,
               max_sequence_length=512)
class BertBaseOptions(BertOptions):
    """BERT-base (Devlin et al. 2018): 12 layers, hidden 768, 12 heads, 110M parameters."""


@dataclasses.dataclass(kw_only=True)
@with_defaults(vocabulary_size=30522, num_layers=24, num_heads=16, hidden_dim=1024, intermediate_dim=4096,
               max_sequence_length=512)
class BertLargeOptions(BertOptions):
    """BERT-large (Devlin et al. 2018): 24 layers, hidden 1024, 16 heads, 340M parameters."""


@dataclasses.dataclass(kw_only=True)
@with_options_blocks(mlp=MlpOptions, lenet=LenetOptions, resnet50=Resnet50Options, small_resnet=SmallResnetOptions,
                     swin_tiny=SwinTinyOptions, vit_tiny=VitTinyOptions, bert_tiny=BertTinyOptions,
                     bert_base=BertBaseOptions, bert_large=BertLargeOptions)
class ModelSection:
    """The model: model_fn(inputs, mode) returning a ModelSpec."""

    name: str = setting(REQUIRED, "A built-in model, or 'package.module:function' naming your model_fn(inputs, mode).", MODEL_NAMES)
    kwargs: Dict[str, Any] = setting({}, "Keyword arguments for your model_fn (only with a module:function name).")
    num_classes: Optional[int] = setting(None, "Classes of a built-in classifier; null takes the data set's "
                                         "(BERT models have none).",
                                         valid=ranges.integer(2))
    weight_decay: float = setting(0.0, "L2 penalty on the kernels of a built-in model, added to the loss.",
                                  valid=ranges.number(minimum=0))
    label_smoothing: float = setting(0.0, "Label smoothing of a built-in model's cross-entropy.",
                                     valid=ranges.fraction())


# ----------------------------------------------------------------- optimizer

@dataclasses.dataclass(kw_only=True)
class ScheduleBlock:
    """A Keras learning-rate schedule; its parameters are the class's arguments."""

    schedule: str = setting(REQUIRED, "Schedule kind (keras.optimizers.schedules, or THOR's).", tuple(SCHEDULES) + tuple(THOR_SCHEDULES))
    params: Dict[str, Any] = params_field("The schedule's arguments, e.g. initial_learning_rate, decay_steps; "
                                          + "; ".join(f"{kind}: {keys}" for kind, keys in THOR_SCHEDULES.items())
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
class DistributeSection:
    """Replicas and cluster: MoXing's distribution flags."""

    strategy: str = setting("auto", "auto derives the strategy from the flags below, as MoXing did.", STRATEGIES)
    num_gpus: int = setting(1, "Local devices (replicas) per worker; >1 on CPU splits it into logical devices.")
    sync_replicas: bool = setting(True, "Synchronous data parallelism (true) or asynchronous parameter-server training (false).")
    job_name: str = setting("", "This task's job: 'worker', 'ps' or 'chief' ('' for one process).", ("", "worker", "ps", "chief"))
    task_index: int = setting(0, "This task's index within its job; worker 0 is the chief.")
    ps_hosts: List[str] = setting([], "host:port of each parameter server.")
    worker_hosts: List[str] = setting([], "host:port of each worker.")
    chief_hosts: str = setting("", "host:port of the coordinator in asynchronous mode ('' picks a free port).")
    tpu: str = setting("", "TPU name or grpc:// address; selects TPUStrategy.")
    cluster: str = setting("auto", "Where the cluster comes from: auto (the hosts above if set, else TF_CONFIG, else the Slurm job step srun started, else one process), flags, tf_config, slurm or single.", CLUSTER_SOURCES)
    log_first_clone: bool = setting(True, "Log the first replica's log_info (true) or the mean over replicas (false).")


# Keras 3.15's layer classes (keras.layers), for precision.keep_fp32 without importing Keras;
# tests/optimizers/test_recipe_tables.py compares the list with keras.layers. "Layer" itself is left out: it is
# the base of every layer, so keeping it would keep the whole network in float32. "GELU" names
# an Activation layer computing GELU (moxlite.training.mixed_precision.levels).
KERAS_LAYER_NAMES = (
    "Activation", "ActivityRegularization", "AdaptiveAveragePooling1D", "AdaptiveAveragePooling2D",
    "AdaptiveAveragePooling3D", "AdaptiveMaxPooling1D", "AdaptiveMaxPooling2D", "AdaptiveMaxPooling3D", "Add",
    "AdditiveAttention", "AlphaDropout", "Attention", "AugMix", "AutoContrast", "Average", "AveragePooling1D",
    "AveragePooling2D", "AveragePooling3D", "AvgPool1D", "AvgPool2D", "AvgPool3D", "BatchNormalization",
    "Bidirectional", "CategoryEncoding", "CenterCrop", "Concatenate", "ContrastLimitedAdaptiveHistogramEqualization",
    "Conv1D", "Conv1DTranspose", "Conv2D", "Conv2DTranspose", "Conv3D", "Conv3DTranspose", "ConvLSTM1D",
    "ConvLSTM2D", "ConvLSTM3D", "Convolution1D", "Convolution1DTranspose", "Convolution2D",
    "Convolution2DTranspose", "Convolution3D", "Convolution3DTranspose", "Cropping1D", "Cropping2D", "Cropping3D",
    "CutMix", "Dense", "DepthwiseConv1D", "DepthwiseConv2D", "Discretization", "Dot", "Dropout", "ELU",
    "EinsumDense", "Embedding", "Equalization", "Flatten", "FlaxLayer", "GRU", "GRUCell", "GaussianDropout",
    "GaussianNoise", "GlobalAveragePooling1D", "GlobalAveragePooling2D", "GlobalAveragePooling3D",
    "GlobalAvgPool1D", "GlobalAvgPool2D", "GlobalAvgPool3D", "GlobalMaxPool1D", "GlobalMaxPool2D",
    "GlobalMaxPool3D", "GlobalMaxPooling1D", "GlobalMaxPooling2D", "GlobalMaxPooling3D", "GroupNormalization",
    "GroupQueryAttention", "HashedCrossing", "Hashing", "Identity", "InputLayer", "IntegerLookup", "JaxLayer",
    "LSTM", "LSTMCell", "Lambda", "LayerNormalization", "LeakyReLU", "Masking", "MaxNumBoundingBoxes",
    "MaxPool1D", "MaxPool2D", "MaxPool3D", "MaxPooling1D", "MaxPooling2D", "MaxPooling3D", "Maximum",
    "MelSpectrogram", "Minimum", "MixUp", "MultiHeadAttention", "Multiply", "Normalization", "PReLU", "Permute",
    "Pipeline", "RMSNormalization", "RNN", "RandAugment", "RandomBrightness", "RandomColorDegeneration",
    "RandomColorJitter", "RandomContrast", "RandomCrop", "RandomElasticTransform", "RandomErasing", "RandomFlip",
    "RandomGaussianBlur", "RandomGrayscale", "RandomHue", "RandomInvert", "RandomPerspective",
    "RandomPosterization", "RandomRotation", "RandomSaturation", "RandomSharpness", "RandomShear",
    "RandomTranslation", "RandomZoom", "ReLU", "RepeatVector", "Rescaling", "Reshape", "Resizing",
    "ReversibleEmbedding", "STFTSpectrogram", "SeparableConv1D", "SeparableConv2D", "SeparableConvolution1D",
    "SeparableConvolution2D", "SimpleRNN", "SimpleRNNCell", "Softmax", "Solarization", "SpatialDropout1D",
    "SpatialDropout2D", "SpatialDropout3D", "SpectralNormalization", "StackedRNNCells", "StringLookup",
    "Subtract", "TFSMLayer", "TextVectorization", "TimeDistributed", "TorchModuleWrapper", "UnitNormalization",
    "UpSampling1D", "UpSampling2D", "UpSampling3D", "Wrapper", "ZeroPadding1D", "ZeroPadding2D", "ZeroPadding3D",
)
KEEP_FP32_NAMES = KERAS_LAYER_NAMES + ("GELU",)


def nearest_layer_name(name):
    """The name of KEEP_FP32_NAMES nearest to ``name`` (a prefix match first: 'Layernorm'), or None."""
    import difflib

    name = str(name).strip()
    lowered = {candidate.lower(): candidate for candidate in KEEP_FP32_NAMES}
    prefixed = [c for c in KEEP_FP32_NAMES if c.lower().startswith(name.lower())] if name else []
    near = prefixed[:1] or [lowered[m] for m in difflib.get_close_matches(name.lower(), list(lowered), n=1)]
    return near[0] if near else None


def _is_loss_scale(value):
    from moxlite import flags   # the one reading of the value (recipes and the --loss_scale flag)

    try:
        flags.parse_loss_scale(value)
    except ValueError:
        return False
    return True


@dataclasses.dataclass(kw_only=True)
class PrecisionSection:
    """Numeric precision and gradient clipping flags."""

    amp_level: str = setting("", "O0 float32, O1 mixed with the keep_fp32 list, O2 all but BatchNorm, O3 all ('' is O0, or O3 with use_fp16).", AMP_LEVELS)
    compute_dtype: str = setting("float16", "Compute dtype of O1-O3; bfloat16 needs no loss scaling.", ("float16", "bfloat16"))
    keep_fp32: Optional[List[str]] = setting(None, "Keras layer classes computed in float32 (null: the level's list; O1's is Softmax, LayerNormalization, BatchNormalization, GroupNormalization, GELU).",
                                             valid=ranges.names_in(KEEP_FP32_NAMES, "Keras layer class names (or GELU)",
                                                                   "a Keras layer class name", nearest_layer_name))
    keep_batchnorm_fp32: Optional[bool] = setting(None, "Keep BatchNormalization in float32 (null: the level's default, O2 true, O3 false).")
    use_fp16: bool = setting(False, "Alias of amp_level O3 with compute_dtype float16.")
    loss_scale: Union[float, str] = setting(0, "0 (off; dynamic with float16), a fixed number that never changes, or 'dynamic'.",
                                            valid=ranges.Range("0 (off), a finite number > 0, 'dynamic' or "
                                                               "'dynamic:<start>' (start > 0)", _is_loss_scale))
    drop_overflow_update: bool = setting(True, "Skip a step whose gradients overflow; false (fixed scale only) applies it.")
    gradient_clip: float = setting(0.0, "Clip threshold; 0 disables clipping.", valid=ranges.number(minimum=0))
    gradient_clip_type: str = setting("global_norm", "How gradients are clipped.", ("global_norm", "norm"))


@dataclasses.dataclass(kw_only=True)
class Recipe:
    """A whole recipe."""

    description: str = setting("", "What this recipe reproduces (free text).")
    run: RunSection = setting(REQUIRED, RunSection.__doc__)
    input: InputSection = setting(REQUIRED, InputSection.__doc__)
    model: ModelSection = setting(REQUIRED, ModelSection.__doc__)
    optimizer: OptimizerSection = setting(OptimizerSection(), OptimizerSection.__doc__)
    distribute: DistributeSection = setting(DistributeSection(), DistributeSection.__doc__)
    precision: PrecisionSection = setting(PrecisionSection(), PrecisionSection.__doc__)


# ----------------------------------------------------------------- rules across keys

@dataclasses.dataclass(frozen=True)
class Rule:
    """A rule between keys of one block: ``problem(values, image_shape)`` is None or a message about ``key``.

    ``values`` maps the block's keys to their values; ``image_shape`` is [height, width,
    channels] when known (rules with ``needs_image`` are skipped when it is not). A message
    starts with the value of ``key``, so that it reads after 'dotted.key: ' and after 'key='.
    """

    key: str
    problem: Any
    needs_image: bool = False


def _heads_divide_embed_dim(values, image_shape):
    if values["embed_dim"] % values["num_heads"]:
        return (f"{values['num_heads']} does not divide embed_dim={values['embed_dim']}; use a divisor of it "
                f"(each head gets embed_dim / num_heads channels)")
    return None


def _patch_divides_image(values, image_shape):
    patch, (height, width) = values["patch_size"], image_shape[:2]
    if height % patch or width % patch:
        return (f"{patch} does not divide the {height}x{width} images; use a patch side that divides both "
                f"(e.g. {_common_divisor_hint(height, width)})")
    return None


def _common_divisor_hint(height, width):
    divisors = [d for d in range(2, min(height, width) + 1) if height % d == 0 and width % d == 0]
    return ", ".join(str(d) for d in divisors[:4]) or "1"


def _stage_lengths_agree(values, image_shape):
    if len(values["depths"]) != len(values["num_heads"]):
        return (f"{values['num_heads']} has {len(values['num_heads'])} stages, depths {values['depths']} has "
                f"{len(values['depths'])}; give one head count per stage")
    return None


def _stage_heads_divide_channels(values, image_shape):
    for stage, heads in enumerate(values["num_heads"]):
        channels = values["embed_dim"] * 2 ** stage
        if channels % heads:
            return (f"{values['num_heads']}: stage {stage} has {channels} channels (embed_dim x 2^{stage}), which "
                    f"{heads} heads do not divide; use a divisor of each stage's channels")
    return None


def _swin_stages(values, image_shape):
    """(stage, token height, token width) of each stage: tokens halve at each patch merging."""
    height, width = image_shape[0] // values["patch_size"], image_shape[1] // values["patch_size"]
    for stage in range(len(values["depths"])):
        yield stage, height, width
        height, width = height // 2, width // 2


def _swin_tokens_merge(values, image_shape):
    last = len(values["depths"]) - 1
    for stage, height, width in _swin_stages(values, image_shape):
        if stage < last and (height % 2 or width % 2):
            side = values["patch_size"] * 2 ** last
            return (f"{values['patch_size']} gives {height}x{width} tokens at stage {stage} of "
                    f"{image_shape[0]}x{image_shape[1]} images, which patch merging cannot halve; use images "
                    f"whose sides are multiples of patch_size x 2^{last} = {side}, or fewer stages")
    return None


def _swin_windows_fit(values, image_shape):
    for stage, height, width in _swin_stages(values, image_shape):
        window = min(values["window_size"], height, width)
        if height % window or width % window:
            return (f"{values['window_size']} does not fit stage {stage}'s {height}x{width} tokens (the window, "
                    f"{window}, must divide both); choose a window_size that divides every stage's tokens")
    return None


def _value_range_ordered(values, image_shape):
    low, high = values["value_range"]
    if not low < high:
        return f"{values['value_range']} must be [low, high] with low < high, e.g. [0.0, 1.0] or [0.0, 255.0]"
    return None


def _predictions_fit_sequence(values, image_shape):
    from moxlite.data import text_checks, sources   # both free of TensorFlow

    try:
        text_checks.check_masking(values["seq_length"], values["mask_rate"], values["max_predictions"])
    except sources.DataOptionError as problem:
        return problem.detail if problem.option == "max_predictions" else None
    return None


def _fp16_with_float32_level(values, image_shape):
    if values["use_fp16"] and str(values["amp_level"]).strip().upper() == "O0":
        return ("True asks for float16 but amp_level O0 for float32; drop one of them "
                "(use_fp16 is an alias of amp_level O3 with compute_dtype float16)")
    if values["use_fp16"] and values["compute_dtype"] != "float16":
        return (f"True asks for float16 but compute_dtype is {values['compute_dtype']!r}; use amp_level with "
                f"compute_dtype {values['compute_dtype']!r} instead of use_fp16")
    return None


def _no_drop_needs_fixed_scale(values, image_shape):
    if values["drop_overflow_update"] or not _is_loss_scale(values["loss_scale"]):
        return None
    from moxlite import flags

    scale = flags.parse_loss_scale(values["loss_scale"])
    if scale is None or str(scale).startswith("dynamic"):
        return (f"False needs a fixed loss_scale (a number); with loss_scale {values['loss_scale']!r} "
                f"overflowing steps are always dropped")
    return None


def _bert_heads_divide_width(values, image_shape):
    if values["hidden_dim"] % values["num_heads"]:
        return f"{values['num_heads']} does not divide hidden_dim {values['hidden_dim']}; choose heads that divide it"
    return None


RULES = {
    BertTinyOptions: (Rule("num_heads", _bert_heads_divide_width),),
    BertBaseOptions: (Rule("num_heads", _bert_heads_divide_width),),
    BertLargeOptions: (Rule("num_heads", _bert_heads_divide_width),),
    VitTinyOptions: (Rule("num_heads", _heads_divide_embed_dim),
                     Rule("patch_size", _patch_divides_image, needs_image=True)),
    SwinTinyOptions: (Rule("num_heads", _stage_lengths_agree), Rule("num_heads", _stage_heads_divide_channels),
                      Rule("patch_size", _patch_divides_image, needs_image=True),
                      Rule("patch_size", _swin_tokens_merge, needs_image=True),
                      Rule("window_size", _swin_windows_fit, needs_image=True)),
    AugmentOptions: (Rule("value_range", _value_range_ordered),),
    TextOptions: (Rule("max_predictions", _predictions_fit_sequence),),
    BertSyntheticOptions: (Rule("max_predictions", _predictions_fit_sequence),),
    PrecisionSection: (Rule("use_fp16", _fp16_with_float32_level),
                       Rule("drop_overflow_update", _no_drop_needs_fixed_scale)),
}


def model_options_class(name):
    """The options block of built-in model ``name`` (one of MODEL_NAMES), e.g. VitTinyOptions."""
    return {field.name: field.type for field in dataclasses.fields(ModelSection)}[name]


def field_range(cls, name):
    """The declared Range of key ``name`` of block ``cls`` (None when it has none)."""
    return cls.__dataclass_fields__[name].metadata.get("valid")


def check_values(cls, values, image_shape=None):
    """(key, message) of the first value of block ``cls`` outside its declared range or breaking a rule; else None.

    ``values`` maps keys of ``cls`` to values (keys left out take the defaults for the
    rules). The recipe loader and the Python API call this, so both read the one
    declaration: the ``valid`` of each ``setting`` and the block's ``RULES``.
    """
    for field in dataclasses.fields(cls):
        valid = field.metadata.get("valid")
        if valid is None or field.name not in values or values[field.name] is None:
            continue
        problem = valid.problem(values[field.name])
        if problem:
            return field.name, problem
    complete = {**_defaults(cls), **values}
    for rule in RULES.get(cls, ()):
        if rule.needs_image and image_shape is None:
            continue
        problem = rule.problem(complete, image_shape)
        if problem:
            return rule.key, problem
    return None


def option_defaults(cls):
    """The default of every key of block ``cls`` (e.g. a BERT size's encoder sizes)."""
    return _defaults(cls)


def _defaults(cls):
    result = {}
    for field in dataclasses.fields(cls):
        if field.default is not dataclasses.MISSING:
            result[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            result[field.name] = field.default_factory()
    return result


def ranged_keys():
    """The dotted recipe keys with a declared range: a ``valid`` Range, ``choices``, or a rule about them.

    Wrapper parameters and schedule arguments (moxlite.optimizers.recipe_tables) are counted as
    ``optimizer.wrappers[].<wrapper>.<key>`` and ``<schedule block>.<kind>.<argument>``.
    """
    from moxlite.optimizers import recipe_tables as catalog

    keys = []
    _ranged(Recipe, "", keys)
    keys += [f"optimizer.wrappers[].{name}.{key}" for name, table in catalog.WRAPPER_PARAMETERS.items()
             for key in table]
    keys += [f"schedule.{kind}.{key}" for kind, table in catalog.SCHEDULE_PARAMETERS.items() for key in table]
    return keys


def _ranged(cls, prefix, keys):
    ruled = {rule.key for rule in RULES.get(cls, ())}
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


def type_name(annotation):
    """A short readable name of a field type, e.g. 'list of int' or 'number or string'."""
    origin = getattr(annotation, "__origin__", None)
    args = getattr(annotation, "__args__", ())
    if origin is Union:
        parts = [type_name(a) for a in args if a is not type(None)]
        text = " or ".join(parts)
        return text + " or null" if type(None) in args else text
    if origin in (list, List):
        return f"list of {type_name(args[0])}"
    if origin in (dict, Dict):
        return "mapping"
    if dataclasses.is_dataclass(annotation):
        return "mapping"
    return {int: "integer", float: "number", str: "string", bool: "boolean", Any: "any"}.get(annotation, str(annotation))


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
