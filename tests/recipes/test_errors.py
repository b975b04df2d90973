"""Every bad recipe in tests/bad_recipes/cases.yaml fails with its one-line message and exit code 2.

Each case also proves that nothing was written: its log_dir is never created.
"""

import os

import pytest
import yaml

from moxlite.recipes import cli
from tests import ROOT

CASES_PATH = os.path.join(ROOT, "tests", "bad_recipes", "cases.yaml")
with open(CASES_PATH, encoding="utf-8") as _handle:
    CASES = yaml.safe_load(_handle)


def run_cli(capsys, arguments):
    code = cli.main(arguments)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_table_holds_at_least_25_distinct_cases():
    names = [case["name"] for case in CASES]
    assert len(names) >= 25 and len(set(names)) == len(names)


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_bad_recipe_prints_one_located_line_and_exits_2(case, tmp_path, capsys):
    log_dir = tmp_path / "logs"
    recipe_path = tmp_path / f"{case['name']}.yaml"
    recipe_path.write_text(case["recipe"].replace("LOG_DIR", str(log_dir)))
    arguments = [str(recipe_path)]
    for override in case.get("set", []):
        arguments += ["--set", override]

    code, out, err = run_cli(capsys, arguments)

    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    message = lines[0]
    assert message.startswith("moxlite-run: error: ")
    assert case["expect"] in message
    if "line" in case:
        assert f"{recipe_path}:{case['line']}: " in message
    assert "Traceback" not in err
    assert not log_dir.exists()


def test_missing_recipe_file_is_reported_with_its_path(tmp_path, capsys):
    missing = tmp_path / "absent.yaml"
    code, _, err = run_cli(capsys, [str(missing)])
    assert code == 2
    assert err.strip() == f"moxlite-run: error: {missing}: cannot read the recipe: No such file or directory"


def test_debug_flag_raises_the_error_with_its_traceback(tmp_path):
    recipe_path = tmp_path / "bad.yaml"
    recipe_path.write_text(CASES[0]["recipe"].replace("LOG_DIR", str(tmp_path / "logs")))
    from moxlite import errors

    with pytest.raises(errors.RecipeError, match="did you mean 'optimizer'"):
        cli.main([str(recipe_path), "--debug"])


def test_error_in_a_later_file_names_that_file_and_its_line(tmp_path, capsys):
    base = tmp_path / "base.yaml"
    base.write_text(CASES[1]["recipe"].replace("step: 5", "steps: 5").replace("LOG_DIR", str(tmp_path / "logs")))
    extra = tmp_path / "extra.yaml"
    extra.write_text("run:\n  batch_size: 8\n  seeed: 3\n")
    code, _, err = run_cli(capsys, [str(base), str(extra)])
    assert code == 2
    assert f"{extra}:3: run.seeed: unknown key (did you mean 'seed'?)" in err


# ----------------------------------------------------------------- numbers as YAML 1.2 writes them

def _write_mnist_recipe(tmp_path, learning_rate="0.01"):
    path = tmp_path / "recipe.yaml"
    path.write_text(f"run: {{steps: 5, log_dir: {tmp_path / 'logs'}}}\ninput: {{name: mnist}}\nmodel: {{name: mlp}}\n"
                    f"optimizer: {{name: momentum, learning_rate: {learning_rate}}}\n")
    return str(path)


def test_numbers_with_an_exponent_are_numbers_in_a_recipe_and_in_set(tmp_path):
    from moxlite.recipes import loader

    loaded = loader.load([_write_mnist_recipe(tmp_path, "1e-3")],
                         ["run.steps=1.0e4", "precision.gradient_clip=1e-3", "optimizer.kwargs.momentum=9e-1",
                          "run.save_model_steps=2E2"])
    recipe = loaded.recipe
    assert recipe.optimizer.learning_rate == 0.001 and type(recipe.optimizer.learning_rate) is float
    assert recipe.run.steps == 10000 and type(recipe.run.steps) is int
    assert recipe.run.save_model_steps == 200 and type(recipe.run.save_model_steps) is int
    assert recipe.precision.gradient_clip == 0.001 and type(recipe.precision.gradient_clip) is float
    assert recipe.optimizer.kwargs == {"momentum": 0.9} and type(recipe.optimizer.kwargs["momentum"]) is float
    # The resolved recipe (recipe.yaml, --dry-run) holds plain numbers.
    assert yaml.safe_load(loaded.resolved_yaml())["optimizer"]["kwargs"] == {"momentum": 0.9}


def test_words_that_look_like_exponents_stay_strings():
    from moxlite.recipes import loader

    assert [loader.load_yaml_value(text) for text in ("1e", "e5", "'1e-3'", "1e-3x")] == ["1e", "e5", "1e-3", "1e-3x"]
    assert [type(loader.load_yaml_value(text)) for text in ("10", "0.5", ".inf")] == [int, float, float]
