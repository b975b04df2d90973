"""Recipe loading: merge order, --set overrides, typed values, line tracking, the schema text."""

import dataclasses

import pytest
import yaml

from moxlite import errors
from moxlite.recipes import loader, schema

BASE = """\
run:
  steps: 10
  log_dir: /tmp/moxlite-loader-test
input:
  name: synthetic
  synthetic: {image_shape: [8, 8, 1], num_classes: 3}
model:
  name: mlp
  mlp: {hidden_units: [32, 16]}
optimizer:
  name: momentum
  learning_rate: 1
  kwargs: {momentum: 0.5}
  wrappers:
    - name: lars
      ratio: 0.002
    - name: batch_gradients
      num_batches: 4
"""


@pytest.fixture
def base_file(tmp_path):
    path = tmp_path / "base.yaml"
    path.write_text(BASE)
    return str(path)


def test_later_files_override_key_by_key_and_replace_lists_whole(base_file, tmp_path):
    extra = tmp_path / "extra.yaml"
    extra.write_text("run: {steps: 20}\nmodel:\n  mlp: {hidden_units: [64]}\n")
    recipe = loader.load([base_file, str(extra)]).recipe
    assert recipe.run.steps == 20
    assert recipe.run.log_dir == "/tmp/moxlite-loader-test"  # kept from the base
    assert recipe.model.mlp.hidden_units == [64]
    assert recipe.input.synthetic.num_classes == 3


def test_overrides_apply_after_files_and_parse_as_yaml(base_file):
    recipe = loader.load([base_file], ["run.steps=7", "input.synthetic.image_shape=[4, 4, 3]",
                                       "precision.use_fp16=true", "optimizer.wrappers.1.num_batches=2",
                                       "run.checkpoint_path=null", "optimizer.learning_rate=5:0.1->0.4"]).recipe
    assert recipe.run.steps == 7
    assert recipe.input.synthetic.image_shape == [4, 4, 3]
    assert recipe.precision.use_fp16 is True
    assert recipe.optimizer.wrappers[1].params == {"num_batches": 2}
    assert recipe.run.checkpoint_path is None
    assert recipe.optimizer.learning_rate == "5:0.1->0.4"


def test_values_are_typed_and_defaults_filled(base_file):
    recipe = loader.load([base_file]).recipe
    assert recipe.optimizer.learning_rate == 1.0 and isinstance(recipe.optimizer.learning_rate, float)
    assert [w.name for w in recipe.optimizer.wrappers] == ["lars", "batch_gradients"]
    assert recipe.optimizer.wrappers[0].params == {"ratio": 0.002}
    assert recipe.run.batch_size == schema.RunSection.__dataclass_fields__["batch_size"].default
    assert recipe.distribute == schema.DistributeSection()


def test_schedule_block_becomes_a_schedule_with_its_arguments(base_file):
    recipe = loader.load([base_file], ["optimizer.learning_rate={schedule: cosine, initial_learning_rate: 0.1, "
                                       "decay_steps: 100}"]).recipe
    assert recipe.optimizer.learning_rate == schema.ScheduleBlock(
        schedule="cosine", params={"initial_learning_rate": 0.1, "decay_steps": 100})


def test_resolved_recipe_reloads_to_the_same_recipe(base_file, tmp_path):
    loaded = loader.load([base_file], ["run.steps=3"])
    resolved = tmp_path / "resolved.yaml"
    resolved.write_text(loaded.resolved_yaml())
    assert loader.load([str(resolved)]).recipe == loaded.recipe


def test_every_key_remembers_the_file_and_line_it_came_from(base_file, tmp_path):
    extra = tmp_path / "extra.yaml"
    extra.write_text("\n\nrun:\n  steps: 20\n")
    loaded = loader.load([base_file, str(extra)], ["run.batch_size=4"])
    assert str(loaded.locations.origin(("run", "steps"))) == f"{extra}:4"
    assert str(loaded.locations.origin(("run", "log_dir"))) == f"{base_file}:3"
    assert str(loaded.locations.origin(("optimizer", "wrappers", 1, "num_batches"))) == f"{base_file}:18"
    assert str(loaded.locations.origin(("run", "batch_size"))) == "--set run.batch_size=4"


@pytest.mark.parametrize("text, fragment", [
    ("run: !!python/object/apply:os.system ['touch {marker}']\n",
     "unsafe.yaml:1: run: YAML tag 'tag:yaml.org,2002:python/object/apply:os.system' is not allowed"),
    ("run:\n  log_dir: !!python/object/apply:os.system MARKER\n",
     "unsafe.yaml:2: YAML syntax error: could not determine a constructor"),
])
def test_yaml_python_tags_are_refused_and_never_run(tmp_path, text, fragment):
    marker = tmp_path / "ran"
    path = tmp_path / "unsafe.yaml"
    path.write_text(text.replace("MARKER", f"'touch {marker}'").replace("{marker}", str(marker)))
    with pytest.raises(errors.RecipeError) as raised:
        loader.load([str(path)])
    assert fragment in str(raised.value)
    assert not marker.exists()


def test_help_text_documents_every_field_with_a_description():
    text = schema.describe_schema()

    def walk(cls, prefix):
        for field in dataclasses.fields(cls):
            assert field.metadata.get("help"), f"{prefix}{field.name} has no description"
            if field.metadata.get("rest"):
                continue
            if dataclasses.is_dataclass(field.type):
                assert f"\n{prefix}{field.name}:" in text
                walk(field.type, f"{prefix}{field.name}.")
            elif field.type is not list[schema.WrapperBlock]:
                assert f"  {prefix}{field.name} (" in text, f"{prefix}{field.name} missing from --help-recipe"

    walk(schema.Recipe, "")


def test_override_may_create_a_missing_section(base_file):
    recipe = loader.load([base_file], ["distribute.num_gpus=2"]).recipe
    assert recipe.distribute.num_gpus == 2


def test_resolved_yaml_is_plain_safe_yaml(base_file):
    data = yaml.safe_load(loader.load([base_file]).resolved_yaml())
    assert data["optimizer"]["wrappers"] == [{"name": "lars", "ratio": 0.002},
                                             {"name": "batch_gradients", "num_batches": 4}]


def test_the_optimizer_section_is_checked_only_where_an_optimizer_is_built(base_file):
    bad = ["optimizer.name=momentom", "optimizer.wrappers.0.ratoi=1"]
    with pytest.raises(errors.RecipeError, match="'momentom' is not an optimizer"):
        loader.load([base_file], bad)
    loaded = loader.load([base_file], bad + ["run.mode=eval"])   # eval builds no optimizer, as before
    assert loaded.recipe.optimizer.name == "momentom"


def test_a_thor_damping_schedule_may_leave_out_the_derived_steps_per_epoch(base_file):
    damping = "{schedule: thor_damping, damping_init: 0.03, decay_rate: 0.87}"
    loaded = loader.load([base_file], [f"optimizer.wrappers=[{{name: thor, damping: {damping}}}]"])
    assert loaded.recipe.optimizer.wrappers[0].params["damping"]["schedule"] == "thor_damping"
    with pytest.raises(errors.RecipeError, match="thor: frequency=1 is out of range; expected an integer >= 2"):
        loader.load([base_file], [f"optimizer.wrappers=[{{name: thor, frequency: 1, damping: {damping}}}]"])
