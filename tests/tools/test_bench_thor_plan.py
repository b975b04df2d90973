"""tools/thor_plan.py (bench_thor.py --plan): factor sizes read from real Keras layers, costs against hand counts."""

import os
import sys

import keras
import pytest

from tests import ROOT
sys.path.insert(0, os.path.join(ROOT, "tools"))
import thor_plan  # noqa: E402


@pytest.mark.parametrize("equation, kernel, expected", [
    ("abc,cde->abde", (768, 12, 64), (768, 768)),   # MultiHeadAttention query/key/value
    ("abcd,cde->abe", (12, 64, 768), (768, 768)),   # its output projection
    ("ab,bc->ac", (784, 256), (784, 256)),          # a plain Dense
])
def test_einsum_factor_sizes(equation, kernel, expected):
    assert thor_plan.einsum_factor_sizes(equation, kernel) == expected


def test_attention_projections_of_a_real_keras_layer_are_768_square():
    layers, _ = thor_plan.bert_base_layers(batch_size=2, sequence_length=8, num_layers=1)
    einsum = [(layer.d_a, layer.d_g, layer.rows) for layer in layers if layer.kind == "EinsumDense"]
    assert einsum == [(768, 768, 16)] * 4
    dense = sorted((layer.d_a, layer.d_g) for layer in layers if layer.kind == "Dense")
    assert dense == [(768, 3072), (3072, 768)]
    embedding = [layer for layer in layers if layer.kind == "Embedding"][0]
    assert (embedding.d_a, embedding.d_g, embedding.diagonal_a) == (30522, 768, True)


def test_costs_of_one_dense_layer_equal_hand_counts():
    layer = thor_plan.LayerShape("dense", "Dense", d_a=784, d_g=256, rows=64)
    # 784 = 6 x 128 + 16 and 256 = 2 x 128.
    assert thor_plan.factor_entries(layer, 0) == 784 ** 2 + 256 ** 2
    assert thor_plan.factor_entries(layer, 128) == 6 * 128 ** 2 + 16 ** 2 + 2 * 128 ** 2
    full = 2 * 64 * (784 ** 2 + 256 ** 2) + 7 / 3 * (784 ** 3 + 256 ** 3)
    assert thor_plan.refresh_flops(layer, 0) == pytest.approx(full)
    blocked_inverse = 7 / 3 * (7 * 128 ** 3 + 2 * 128 ** 3)     # the 16-wide block is inverted padded to 128
    blocks_formed = 2 * 64 * (6 * 128 ** 2 + 16 ** 2 + 2 * 128 ** 2)
    assert thor_plan.refresh_flops(layer, 128) == pytest.approx(blocks_formed + blocked_inverse)
    assert thor_plan.precondition_flops(layer, 0) == 2 * 784 ** 2 * 256 + 2 * 784 * 256 ** 2
    assert thor_plan.precondition_flops(layer, 128) == 2 * 784 * 256 * (128 + 128)
    assert thor_plan.step_flops(layer) == 6 * 64 * 784 * 256


def test_resnet50_shapes_come_from_keras_applications():
    layers, parameters = thor_plan.resnet50_layers(batch_size=32)
    assert parameters == keras.applications.ResNet50(weights=None).count_params()
    assert len(layers) == 54 and sum(layer.kind == "Dense" for layer in layers) == 1
    first = layers[0]
    assert (first.kind, first.d_a, first.d_g, first.rows) == ("Conv2D 7x7", 7 * 7 * 3, 64, 32 * 112 * 112)
    assert max(layer.d_a for layer in layers) == 3 * 3 * 512
