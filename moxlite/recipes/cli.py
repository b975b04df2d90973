"""``moxlite-run recipe.yaml [more.yaml ...] [--set key=value ...] [--mode M] [--dry-run]``.

Reads and checks the recipe (files merged in order, then the overrides),
builds the flags and the arguments of ``moxlite.run``, writes the resolved
recipe to ``log_dir/recipe.yaml`` and runs. In train mode it then evaluates
on the held-out split and prints a final ``[RESULT]`` line with the accuracy.

A user mistake (moxlite.errors.UserInputError, from the recipe or from the
run) prints one line and exits with code 2; ``--debug`` shows the traceback.
Nothing is written before the whole recipe has been checked.

TensorFlow's C++ start-up log is kept off the first screen: ``TF_CPP_MIN_LOG_LEVEL``
is set to 3 unless the user set it, and the lines TensorFlow's libraries write
before their logging honours it are filtered by the same level
(``moxlite.logs.quiet_tensorflow_startup``, ``tensorflow_load_filtered``).
"""

import argparse
import contextlib
import dataclasses
import os
import signal
import sys

from moxlite import declarations, errors, logs, run_settings
from moxlite.recipes import loader, schema

RECIPE_FILE_NAME = "recipe.yaml"


def _parser(listing_cluster_flags=False):
    """The command line's parser; the cluster flags are listed by --help but left out of the parsing
    (argparse would take ``--num_gpu=2`` for ``--num_gpus``), cluster_flag_overrides reads them."""
    parser = argparse.ArgumentParser(
        prog="moxlite-run",
        description="Run a moxlite recipe: train, evaluate, predict or export as the YAML says.",
        epilog="Recipe keys: moxlite-run --help-recipe", add_help=listing_cluster_flags)
    if not listing_cluster_flags:
        parser.add_argument("-h", "--help", action=_HelpWithClusterFlags, nargs=0,
                            help="show this help message and exit")
    parser.add_argument("recipes", nargs="*", metavar="recipe.yaml",
                        help="recipe files, merged in order (later files override earlier ones)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="dotted.key=value",
                        help="override one key after the files; the value is read as YAML (repeatable)")
    parser.add_argument("--mode", choices=schema.RUN_MODES, help="override run.mode")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the recipe, print the resolved recipe, optimizer stack, strategy and batches; "
                             "train nothing and write nothing")
    parser.add_argument("--help-recipe", action="store_true", help="print every recipe key with its default and meaning")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    if listing_cluster_flags:
        cluster = parser.add_argument_group(
            "MoXing's cluster flags", "written --name=value after the recipe files, each the recipe key "
                                      "distribute.<name> (so one command line serves every task of a cluster)")
        for name in CLUSTER_FLAGS:
            cluster.add_argument(f"--{name}", metavar=CLUSTER_FLAG_VALUES[name], help=FLAG_HELP[name])
    return parser


class _HelpWithClusterFlags(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        _parser(listing_cluster_flags=True).print_help()
        parser.exit()


def main(argv=None):
    """Entry point of ``moxlite-run`` and ``python -m moxlite``; returns the exit code."""
    logs.quiet_tensorflow_startup()   # before anything imports TensorFlow
    return _main_returning(argv)


# MoXing's cluster flags, accepted after the recipe files so that one command line works for
# every task of a cluster (tools/launch_local.py appends them); each becomes a
# distribute.<name> override applied after the --set ones.
CLUSTER_FLAGS = tuple(field.name for field in dataclasses.fields(run_settings.DistributeOptions)
                      if field.name != "log_first_clone")
CLUSTER_FLAG_VALUES = {"num_gpus": "N", "sync_replicas": "true|false", "job_name": "worker|ps|chief",
                       "task_index": "I", "ps_hosts": "host:port,...", "worker_hosts": "host:port,...",
                       "chief_hosts": "host:port", "tpu": "NAME", "cluster": "|".join(run_settings.CLUSTER_SOURCES)}
FLAG_HELP = {field.name: field.metadata["help"] for field in dataclasses.fields(run_settings.DistributeOptions)}
_OWN_OPTIONS = ("set", "mode", "dry-run", "help-recipe", "debug", "help")


def cluster_flag_overrides(extra):
    """The ``distribute.<name>=<value>`` overrides (loader.Override's, each naming the argument as
    written) of MoXing flags such as ``--ps_hosts=h:1,h:2``.

    Raises RecipeError naming the argument for anything that is not one of CLUSTER_FLAGS, with
    the nearest option or flag, or the ``--set`` that sets a recipe key of that name.
    """
    overrides = []
    for argument in extra:
        name, has_value, value = argument[2:].partition("=") if argument.startswith("--") else ("", "", "")
        if not has_value and name.startswith("no") and name[2:] == "sync_replicas":
            name, value, has_value = "sync_replicas", "false", "="
        if name not in CLUSTER_FLAGS:
            raise errors.RecipeError(
                f"command line: unrecognized argument {argument!r}{_hint(name, value)}; after the recipe files "
                f"moxlite-run takes --set, --mode, --dry-run, --debug and MoXing's cluster flags "
                f"({', '.join('--' + f for f in CLUSTER_FLAGS)})")
        if not has_value:
            value = "true" if name == "sync_replicas" else ""
        if name in ("ps_hosts", "worker_hosts"):
            hosts = [h.strip() for h in value.split(",") if h.strip()]
            value = "[" + ", ".join(f'"{h}"' for h in hosts) + "]"
        elif name in ("job_name", "chief_hosts", "tpu", "cluster"):
            value = f'"{value}"'
        overrides.append(loader.Override(f"distribute.{name}={value}", argument))
    return overrides


def _hint(name, value):
    """' (did you mean --num_gpus?)' for a near miss of an option or cluster flag; for the name of a
    recipe key (``--steps=100``), the ``--set`` that sets it; '' otherwise."""
    if not name:
        return ""
    near = declarations.did_you_mean(name, CLUSTER_FLAGS + ("nosync_replicas",) + _OWN_OPTIONS, cutoff=0.8,
                                     quote=lambda option: "--" + option)
    if near:
        return near
    keys = [key for key in schema.leaf_keys() if key.rsplit(".", 1)[-1] == name]
    # A section's own key (run.steps) before an option block's (input.synthetic.num_samples).
    keys.sort(key=lambda key: (key.count("."), not key.startswith("run.")))
    if keys:
        return f" (the recipe key {keys[0]} is set with --set {keys[0]}={value or '...'})"
    return ""


def _main_returning(argv):
    arguments, extra = _parser().parse_known_args(argv)
    if arguments.help_recipe:
        print(schema.describe_schema())
        return 0
    if not arguments.recipes:
        _parser().error("give at least one recipe file, e.g. moxlite-run recipes/mnist_mlp.yaml")
    # Like `python -m`, let recipes reference modules in the current directory.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        arguments.overrides = list(arguments.overrides) + cluster_flag_overrides(extra)
        with _terminate_as_exception():
            return _main(arguments)
    except (KeyboardInterrupt, _Terminated) as interrupt:
        # A training run has saved a checkpoint and said where before this reaches us.
        name, code = ("SIGTERM", 143) if isinstance(interrupt, _Terminated) else ("SIGINT", 130)
        print(f"moxlite-run: stopped by {name}", file=sys.stderr)
        return code
    except errors.UserInputError as error:
        if arguments.debug:
            raise
        print(f"moxlite-run: error: {error}", file=sys.stderr)
        return error.exit_code


class _Terminated(Exception):
    """SIGTERM, raised in the main thread so that moxlite-run ends with exit code 143."""


@contextlib.contextmanager
def _terminate_as_exception():
    def terminated(_signum, _frame):
        raise _Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, terminated)
    except ValueError:   # not the main thread: leave SIGTERM as it is
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(arguments):
    overrides = list(arguments.overrides)
    if arguments.mode:
        overrides.append(f"run.mode={arguments.mode}")
    loaded = loader.load(arguments.recipes, overrides)
    with logs.tensorflow_load_filtered():   # a referenced module may import TensorFlow
        loader.resolve_references(loaded)
        import tensorflow  # noqa: F401  (here, so that its start-up lines are filtered)
        from moxlite.recipes import builders, execution

    if arguments.dry_run:
        print(execution.dry_run_report(builders.build_plan(loaded)))
        return 0
    setup = execution.prepare_distribution(loaded)
    if setup.serves_only:   # a ps (or asynchronous worker) task: serve the cluster, train nothing
        setup.serve_forever()
        return 0
    plan = builders.build_plan(loaded)
    execution.probe_optimizer(plan)
    execution.check_trained_model(plan)
    from moxlite.training.validation import check_log_dir

    check_log_dir(plan.loaded.recipe.run.log_dir, errors.RecipeError)
    # The record is written once the run has started, so a run that fails its checks
    # leaves the record of the run whose checkpoints are in log_dir as it was.
    record = (lambda: execution.write_resolved_recipe(plan, RECIPE_FILE_NAME)) if setup.is_chief else None
    execution.execute(plan, on_training_started=record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
