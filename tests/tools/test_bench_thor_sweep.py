"""tools/sweeplib.py and bench_thor_bert.py's bookkeeping (no training): the sweep's choice, the order of
the seeds, and the timing of intervals, against hand-worked cases."""

import os
import sys

from tests import ROOT
sys.path.insert(0, os.path.join(ROOT, "tools"))
import bench_thor_bert  # noqa: E402
import sweeplib  # noqa: E402


def test_sweep_picks_the_lowest_rank_on_seed_0_then_runs_it_on_the_other_seeds_in_rotated_order():
    finals = {("a", 1): 0.3, ("a", 2): 0.5, ("a", 3): 0.5, ("b", 10): 0.9, ("b", 20): 0.1}
    calls = []

    def train(kind, setting, seed):
        calls.append((kind, setting, seed))
        return {"final": finals[kind, setting] + seed / 1000}

    best = sweeplib.sweep_then_seeds(["a", "b"], lambda kind: [s for k, s in finals if k == kind], train,
                                     lambda run: -run["final"], seeds=3, print_fn=None)
    # a: 2 and 3 tie at 0.5; the setting's text breaks the tie ("2" < "3").
    assert best["a"][0] == 2 and best["b"][0] == 10
    assert [run["final"] for run in best["a"][1]] == [0.5, 0.501, 0.502]
    assert calls[5:] == [("b", 10, 1), ("a", 2, 1), ("a", 2, 2), ("b", 10, 2)]


def test_reach_ratio_and_median_range():
    curve = [(25, 0.1), (50, 0.29), (75, 0.31), (100, 0.4)]
    assert sweeplib.reach(curve, 0.3) == (75, 0.31) and sweeplib.reach(curve, 0.5) is None
    # a seed that did not reach counts as more steps than any that did: the median of 70, 80, never is 80,
    # not the 75 of the two that reached (which flattered the side that missed a seed)
    assert sweeplib.ratio([70, 80, None], [100, 120, 110]) == "0.73x"   # 80 / 110
    assert sweeplib.ratio([70, None, None], [100, 120, 110]).startswith("n/a (the median seed of a side")
    assert sweeplib.ratio([70, 80, 90], [100, None, None]).startswith("n/a")
    assert sweeplib.median_range([3, None, 1]) == "3 [1-not reached]"   # the median of 1, 3, never
    assert sweeplib.median_range([3, 1, 2]) == "2 [1-3]"
    assert sweeplib.median_range([None, 5, None]) == "not reached [5-not reached]"
    assert sweeplib.median_range([None]) == "not reached"


def test_intervals_holding_a_thor_refresh_and_the_first_interval_timed_as_its_kind():
    bench_thor_bert.THOR_VARIANTS["thor+f50"] = {"frequency": 50}
    try:
        # frequency 50, intervals of 25 steps: refreshes at global steps 1, 51, 101 -> intervals ending 25, 75, 125.
        assert [bench_thor_bert.holds_refresh("thor+f50", last, 25) for last in (25, 50, 75, 100, 125)] == [
            True, False, True, False, True]
        measured = {50: 1.0, 75: 3.0, 100: 1.2, 125: 5.0}   # the first interval (ends at 25) is not measured
        timed = bench_thor_bert.first_interval_timed("thor+f50", measured, 25)
    finally:
        del bench_thor_bert.THOR_VARIANTS["thor+f50"]
    assert timed[25] == 4.0   # the median of the other refresh intervals (3.0, 5.0)
    assert bench_thor_bert.seconds_to({"wall": {str(k): v for k, v in timed.items()}}, 75) == 8.0
    assert not bench_thor_bert.holds_refresh("lamb", 25, 25)
    plain = bench_thor_bert.first_interval_timed("lamb", {50: 1.0, 75: 2.0, 100: 4.0}, 25)
    assert plain[25] == 2.0
    # the recipe's frequency, 10: every 25-step interval holds a refresh
    assert all(bench_thor_bert.holds_refresh("thor", last, 25) for last in (25, 50, 75, 100))


def test_variant_patterns_stay_text_and_schedule_options_stay_out_of_the_wrapper():
    name, options = sweeplib.parse_variant("thor+noln=exclude:layer_norm|embedding,warmup:20,frequency:10")
    assert name == "thor+noln" and options == {"exclude": ["layer_norm|embedding"], "warmup": 20.0, "frequency": 10}
    bench_thor_bert.THOR_VARIANTS[name] = options
    try:
        wrapper = bench_thor_bert.optimizer_fn_for(name, (0.02, 0.1), 100)()
    finally:
        del bench_thor_bert.THOR_VARIANTS[name]
    assert wrapper.exclude == ("layer_norm|embedding",) and wrapper.frequency == 10
    # warmup went to the inner momentum's schedule: at update 0 it is 0.02 * 1/20, not the default's 1/50.
    assert abs(float(wrapper.inner_optimizer.learning_rate) - 0.02 / 20) < 1e-9


def test_the_benchmarks_first_thor_setting_is_the_tiny_recipes_schedules():
    """What the benchmark measures as "thor" at its first setting is what bert_tiny_mlm_thor.yaml runs."""
    from moxlite.recipes import builders, loader

    recipe = os.path.join(ROOT, "recipes",
                          "bert_tiny_mlm_thor.yaml")
    loaded = loader.load([recipe], [])
    plan = builders.build_plan(loaded)
    steps = loaded.recipe.run.steps
    assert steps == bench_thor_bert.REDUCED["steps"]
    wrapper = bench_thor_bert.optimizer_fn_for("thor", bench_thor_bert.REDUCED["sweeps"]["thor"][0], steps)()
    recipe_lr = builders._learning_rate(loaded, plan.settings, None)
    thor_block = loaded.recipe.optimizer.wrappers[0].params
    for step in (0, 10, 49, 50, 300, 599, 700):
        assert abs(float(recipe_lr(step)) - float(wrapper.inner_optimizer._learning_rate(step))) < 1e-9, step
    assert thor_block["frequency"] == wrapper.frequency and thor_block["block_size"] == bench_thor_bert.BLOCK_SIZE
    damping = thor_block["damping"]
    assert (damping["initial_value"], damping["end_value"], damping["total_steps"]) == (
        wrapper.damping.initial_value, wrapper.damping.end_value, wrapper.damping.total_steps)


def test_a_report_of_thor_runs_alone_lists_their_finals_and_names_the_missing_baseline():
    runs = [{"final": 0.1198, "seed": 0, "curve": [[25, 0.05], [600, 0.1198]]},
            {"final": 0.1193, "seed": 1, "curve": [[25, 0.05], [600, 0.1193]]}]
    lines = bench_thor_bert.report({"thor+w": ((0.04, 0.05), runs)}, timed={})
    assert "no baseline's runs under --results" in lines[0] and "--optimizers lamb" in lines[0]
    assert lines[1] == "   thor+w (0.04, 0.05): final held-out accuracy 0.1198 (seed 0), 0.1193 (seed 1)"


def test_a_plot_of_thor_runs_alone_is_drawn_without_a_target(tmp_path):
    """The report lists THOR's finals when no baseline ran; the plot after it must not raise either."""
    import pytest

    pytest.importorskip("matplotlib", reason="the [plot] extra is not installed")
    curve = [[25, 0.05], [50, 0.08]]
    runs = [{"final": 0.08, "seed": seed, "curve": curve, "cpu": {"25": 1.0, "50": 1.0}} for seed in (0, 1)]
    path = tmp_path / "plot.png"
    assert bench_thor_bert.plot({"thor": ((0.04, 0.05), runs)}, str(path), print_fn=lambda line: None)
    assert path.stat().st_size > 1000


def test_a_kept_run_made_under_other_schedule_defaults_is_not_reused(tmp_path):
    import json

    path = bench_thor_bert.run_path(str(tmp_path), "thor", (0.04, 0.05), 0, 600, False)
    with open(path, "w") as file:   # a run kept before the defaults changed: MindSpore's lr end, no warm-up
        json.dump({"options": {"lr_end": 0.01, "warmup": 0, "damping_end": 0.02}, "final": 0.1}, file)
    assert bench_thor_bert.stored_run(str(tmp_path), "thor", (0.04, 0.05), 0, 600, False) is None
    with open(path, "w") as file:
        json.dump({"options": bench_thor_bert.run_options("thor"), "final": 0.1}, file)
    assert bench_thor_bert.stored_run(str(tmp_path), "thor", (0.04, 0.05), 0, 600, False)["final"] == 0.1
    assert bench_thor_bert.run_options("lamb") is None


def test_the_grammar_workload_reads_its_recipe_and_schedules_thor_as_mindspore_scaled():
    """--workload grammar: Lamb's first point is grammar_mlm_lamb.yaml's own schedule, the run its steps,
    batch and model; THOR's first point is MindSpore's BERT schedules (shared/reference/thor.md) over
    those steps, refreshing every 10; configure("bert_tiny") puts the BERT-tiny constants back."""
    from moxlite.recipes import builders, loader

    recipe = os.path.join(ROOT, "recipes",
                          "grammar_mlm_lamb.yaml")
    loaded = loader.load([recipe], [])
    plan = builders.build_plan(loaded)
    before = (bench_thor_bert.SEQ_LENGTH, bench_thor_bert.BATCH, bench_thor_bert.FREQUENCY, bench_thor_bert.THOR_WARMUP)
    try:
        reduced, _, _ = bench_thor_bert.configure("grammar")
        steps = reduced["steps"]
        assert steps == loaded.recipe.run.steps == 3000 and bench_thor_bert.BATCH == loaded.recipe.run.batch_size
        assert bench_thor_bert.SEQ_LENGTH == 64 and bench_thor_bert.WORKLOAD["model"]["hidden_dim"] == 128
        assert bench_thor_bert.WORKLOAD["data"]["vocabulary"].endswith("grammar_corpus/vocab.txt")
        lamb = bench_thor_bert.optimizer_fn_for("lamb", reduced["sweeps"]["lamb"][0], steps)()
        recipe_lr = builders._learning_rate(loaded, plan.settings, None)
        for step in (0, 1000, 2999, 3000):
            assert abs(float(recipe_lr(step)) - float(lamb._learning_rate(step))) < 1e-9, step
        assert sorted(reduced["sweeps"]["lamb"]) == [0.005, 0.01, 0.02]
        thor = bench_thor_bert.optimizer_fn_for("thor", reduced["sweeps"]["thor"][0], steps)()
        assert thor.frequency == 10
        assert abs(float(thor.inner_optimizer._learning_rate(0)) - 3.4e-3) < 1e-9
        assert abs(float(thor.inner_optimizer._learning_rate(steps)) - 3.244e-5) < 1e-9
        assert (thor.damping.initial_value, thor.damping.total_steps) == (5e-2, steps)
        assert abs(thor.damping.end_value - 1e-6) < 1e-15
        assert bench_thor_bert.settings_for(reduced, "thor+bt") == [(0.04, 0.05)]
    finally:
        bench_thor_bert.configure("bert_tiny")
    assert (bench_thor_bert.SEQ_LENGTH, bench_thor_bert.BATCH, bench_thor_bert.FREQUENCY,
            bench_thor_bert.THOR_WARMUP) == before and "thor+bt" not in bench_thor_bert.THOR_VARIANTS


def test_an_inner_variant_wraps_that_optimizer_run_as_its_baseline_is():
    """inner:adamw: THOR over Keras's AdamW with the baseline's linear decay to 0 and decoupled decay
    0.01, THOR adding none; the variant's other keys (statistics) go to the wrapper."""
    name, options = sweeplib.parse_variant("thor+adamw=inner:adamw,statistics:kfac,damping_end:1")
    bench_thor_bert.THOR_VARIANTS[name] = options
    try:
        wrapper = bench_thor_bert.optimizer_fn_for(name, (1e-3, 0.05), 100)()
    finally:
        del bench_thor_bert.THOR_VARIANTS[name]
    inner = wrapper.inner_optimizer
    assert type(inner).__name__ == "AdamW" and abs(inner.weight_decay - 0.01) < 1e-12
    assert wrapper.weight_decay == 0.0 and wrapper.statistics == "kfac"
    schedule = inner._learning_rate
    assert abs(float(schedule(0)) - 1e-3) < 1e-9 and float(schedule(100)) == 0.0
    assert abs(float(wrapper.damping(99)) - 0.05) < 1e-9   # damping_end:1, constant


def test_the_median_rule_sets_the_target_at_the_baselines_median_final_and_every_thor_kind_gets_a_ratio():
    """--target median (issue 43's rule) against the default lowest, on hand-worked runs: AdamW ends at
    0.50 / 0.46 / 0.52 (median 0.50), a THOR variant reaches 0.50 at 1,700 / 1,500 / 2,000 steps and
    AdamW at 2,400 / never / 2,300, so the variant's ratio is 1,700 / 2,400."""
    def run(seed, points, final):
        curve = [[step, accuracy] for step, accuracy in points] + [[3000, final]]
        return {"seed": seed, "final": final, "curve": curve, "cpu": {str(step): 1.0 for step, _ in curve}}

    adamw = [run(0, [(2400, 0.50)], 0.50), run(1, [(2400, 0.45)], 0.46), run(2, [(2300, 0.51)], 0.52)]
    variant = [run(0, [(1700, 0.50)], 0.51), run(1, [(1500, 0.505)], 0.51), run(2, [(2000, 0.50)], 0.52)]
    best = {"adamw": (0.001, adamw), "thor+x": ((0.001, 0.05), variant)}
    assert bench_thor_bert.target_of(best, "median") == ("adamw", 0.50)
    assert bench_thor_bert.target_of(best) == ("adamw", 0.46)
    bench_thor_bert.THOR_VARIANTS["thor+x"] = {"statistics": "kfac"}
    try:
        lines = bench_thor_bert.report(best, timed={}, rule="median")
    finally:
        del bench_thor_bert.THOR_VARIANTS["thor+x"]
    assert lines[0].startswith("   target: 0.5000") and "median final accuracy of the best baseline, adamw" in lines[0]
    ratio = [line for line in lines if line.startswith("   thor+x / adamw")]
    assert ratio and "steps 0.71x" in ratio[0], lines   # 1,700 / 2,400, AdamW's seed 1 counted as never


def test_stack_timing_means_whole_cycles_and_rebuilds_cpu_seconds_to_the_target():
    """tools/time_thor_stacks.py's arithmetic, worked by hand: the mean over the steps after the skip
    (a refresh step of 5 s among nine of 1 s: 1.4 s), ratios within each round, steps x the median
    mean CPU step."""
    import pytest
    import time_thor_stacks

    seconds = {step: (5.0 if (step - 1) % 10 == 0 else 1.0) for step in range(1, 21)}
    assert abs(time_thor_stacks.mean_step_cost(seconds, 10) - 1.4) < 1e-12   # steps 11 (a refresh) to 20
    rounds = [{"adamw": {"wall": 1.0, "cpu": 2.0}, "thor": {"wall": 1.5, "cpu": 2.2}},
              {"adamw": {"wall": 2.0, "cpu": 2.0}, "thor": {"wall": 2.0, "cpu": 3.0}},
              {"adamw": {"wall": 1.0, "cpu": 1.0}, "thor": {"wall": 1.2, "cpu": 1.3}}]
    assert time_thor_stacks.round_ratios(rounds, "thor", "adamw", "wall") == pytest.approx([1.5, 1.0, 1.2])
    assert time_thor_stacks.rebuilt_seconds(100, rounds, "thor") == pytest.approx(220.0)  # 100 x the median of 2.2, 3.0, 1.3
