"""One way to walk an optimizer stack: ``pipeline.links_of`` (on ``members_of``), links that
answer for themselves, and pipelines built once by the run.

References: the source itself (no ``isinstance`` on a link class anywhere in moxlite/, as
``tools/count_wrapper_checks.py`` counts them) and the stacks as built here.
"""

import pathlib
import subprocess
import sys

import keras

import moxlite as mox
from moxlite.optimizers import accumulation, apply_if_finite, clipping, pipeline

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_no_isinstance_check_on_a_link_class_remains_in_moxlite():
    counted = subprocess.run([sys.executable, str(ROOT / "tools" / "count_wrapper_checks.py"), str(ROOT)],
                             capture_output=True, text=True, check=True).stdout
    assert counted.strip().splitlines()[-1] == "total: 0", counted


def _stack(num_batches=2):
    base = mox.get_optimizer_fn("momentum", 0.1, momentum=0.9)()
    return mox.get_optimizer_wrapper_fn("batch_gradients", lambda: base, num_batches=num_batches)(), base


def test_members_and_links_of_a_stack_under_a_keras_loss_scale_optimizer():
    stack, base = _stack()
    outer = keras.optimizers.LossScaleOptimizer(stack)
    assert pipeline.members_of(outer) == [outer, stack, base]
    assert pipeline.links_of(stack) == ([stack], base)
    assert pipeline.links_of(outer) == ([], outer)   # Keras's wrapper applies the stack itself
    assert pipeline.looked_through(outer) is stack
    assert pipeline.handles_overflow(outer) and not pipeline.handles_overflow(stack)


def test_the_pipeline_that_applies_an_accumulated_update_keeps_the_runs_clip_and_guard():
    stack, base = _stack()
    clip, guard = clipping.clipping_link(1.0, "global_norm"), apply_if_finite.ApplyIfFinite()
    run_pipeline = pipeline.Pipeline(stack, clip=clip, guard=guard)
    plan = accumulation.accumulation_of(stack)
    assert (plan.num_batches, plan.apply_optimizer) == (2, base)
    applying = run_pipeline.applying(plan)
    # What the asynchronous loop applies the mean with: the guard on top, clipping below it.
    assert applying.optimizer is base and applying.links == (guard, clip)
