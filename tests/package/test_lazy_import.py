"""The package face is lazy: the CLI's help and recipe checks import no TensorFlow.

Each check runs in a fresh interpreter (this test process has TensorFlow
loaded already) and reports which packages outside the standard library the
import plus the CLI calls added to ``sys.modules``, beyond PyYAML and absl's
flags (the two light dependencies the CLI reads recipes and flags with). That
list being ``["moxlite"]`` is what made these calls take a fraction of a second
(TensorFlow alone takes seconds to import), and unlike a wall-clock bound it
does not depend on how loaded the machine is. The subprocess timeout only
bounds a hang.
"""

import json
import os
import subprocess
import sys

import pytest
import yaml

import moxlite

from tests import ROOT as REPO

CASES_PATH = os.path.join(REPO, "tests", "bad_recipes", "cases.yaml")
with open(CASES_PATH, encoding="utf-8") as _handle:
    CASES = yaml.safe_load(_handle)
# Every bad recipe is rejected before TensorFlow is imported, except those whose own
# module imports it (the reference is checked by importing the module it names) and those
# naming Keras layers (checked against Keras, not a copy of its list).
_KERAS_LAYERS = "keep_fp32's names are checked against keras.layers itself, which imports TensorFlow"
NEEDS_TENSORFLOW = {"model_function_missing_in_a_module_that_imports_tensorflow":
                    "moxlite.models.classifier, the module it names, imports TensorFlow",
                    "keep_fp32_unknown_name_suggests_the_nearest": _KERAS_LAYERS,
                    "keep_fp32_base_layer_class_is_refused": _KERAS_LAYERS,
                    "keep_fp32_unknown_name_without_a_near_one": _KERAS_LAYERS,
                    "unknown_optimizer_argument": "the optimizer's arguments are read from its Keras class"}
TENSORFLOW_FREE_CASES = [case["name"] for case in CASES if case["name"] not in NEEDS_TENSORFLOW]
# The light packages (about a tenth of a CPU second to import each) that some rejections
# import, and why; any other package reaching sys.modules fails the test.
LIGHT_PACKAGES = {"numpy": "reference_is_not_a_function imports moxlite.data.mnist, the module it names",
                  "fsspec": "text_vocabulary_missing looks for the vocabulary through moxlite.file "
                            "(local or object storage)"}
# A fresh interpreter that hangs (not one that is merely slow on a loaded machine) fails the test.
HANG_SECONDS = 300

PROBE = r"""
import contextlib, io, json, sys
import absl.flags, yaml
before = set(sys.modules)
from moxlite.recipes import cli
codes = []
for arguments in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            codes.append(cli.main(arguments))
        except SystemExit as done:
            codes.append(done.code)
from absl import flags
# added: the top-level packages, outside the standard library, that the import and the calls brought in
# (more of absl or yaml, e.g. absl.logging, is not a package added).
def packages(names):
    return {name.split(".")[0] for name in names}
added = packages(sys.modules) - packages(before) - set(sys.stdlib_module_names)
print(json.dumps({"codes": codes, "moxing_flags_defined": "num_gpus" in flags.FLAGS, "added": sorted(added),
                  "loaded": sorted(name for name in ("tensorflow", "keras") if name in sys.modules)}))
"""


def probe(arguments_list):
    environ = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    finished = subprocess.run([sys.executable, "-c", PROBE, json.dumps(arguments_list)], cwd=REPO, env=environ,
                              capture_output=True, text=True, timeout=HANG_SECONDS, check=True)
    return json.loads(finished.stdout.strip().splitlines()[-1])


def bad_recipe_arguments(tmp_path, name):
    case = next(case for case in CASES if case["name"] == name)
    path = tmp_path / f"{name}.yaml"
    path.write_text(case["recipe"].replace("LOG_DIR", str(tmp_path / "logs")))
    arguments = [str(path)]
    for override in case.get("set", []):
        arguments += ["--set", override]
    return arguments


@pytest.mark.parametrize("arguments", [["--help"], ["--help-recipe"]], ids=["help", "help_recipe"])
def test_help_imports_no_package_beyond_yaml_and_absl(arguments):
    result = probe([arguments])
    assert result["codes"] == [0]
    assert result["loaded"] == []
    assert result["moxing_flags_defined"]
    assert result["added"] == ["moxlite"], result


def test_bad_recipes_are_rejected_without_importing_tensorflow(tmp_path):
    assert len(TENSORFLOW_FREE_CASES) == len(CASES) - len(NEEDS_TENSORFLOW)
    result = probe([bad_recipe_arguments(tmp_path, name) for name in TENSORFLOW_FREE_CASES])
    assert result["codes"] == [2] * len(TENSORFLOW_FREE_CASES)
    assert result["loaded"] == []
    assert set(result["added"]) <= {"moxlite", *LIGHT_PACKAGES}, result
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("name", sorted(NEEDS_TENSORFLOW))
def test_the_cases_listed_as_needing_tensorflow_still_do(tmp_path, name):
    # When one no longer imports TensorFlow, move it out of NEEDS_TENSORFLOW (and fix the README's count).
    result = probe([bad_recipe_arguments(tmp_path, name)])
    assert result["codes"] == [2]
    assert "tensorflow" in result["loaded"], NEEDS_TENSORFLOW[name]
    assert "tensorflow" in result["added"], result   # the check of the added packages sees a heavy one


def test_every_exported_name_resolves_to_its_target():
    for name in moxlite.__all__:
        assert getattr(moxlite, name) is not None, name
        assert name in dir(moxlite)
    from moxlite.training.run import run
    assert moxlite.run is run


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'rnu'"):
        moxlite.rnu  # noqa: B018


def test_a_subpackage_is_imported_on_first_access():
    # As when moxlite/__init__.py imported the runner eagerly: moxlite.optimizers works after import moxlite.
    environ = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    code = "import moxlite; assert callable(moxlite.optimizers.get_optimizer_fn); print('ok')"
    finished = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=environ, capture_output=True,
                              text=True, timeout=120)
    assert finished.stdout.strip().splitlines()[-1:] == ["ok"], finished.stderr[-2000:]
