"""Layers shared by the speech encoder, the LLM and the codec (voicechat/layers.py)."""

import numpy as np
import pytest

import mlx.core as mx
import mlx.nn as nn

from voicechat.checkpoint import fit_layout
from voicechat.benchmarks import op_histogram
from voicechat.layers import CausalDepthwiseConv, Linear, QuantizedLinear


@pytest.mark.parametrize("bias", [True, False])
def test_causal_depthwise_conv_is_torch_conv1d_with_left_padding(bias):
    """NeMo's causal depthwise convs (conformer, Mamba, codec): Conv1d(groups=C) over the input padded by k - 1 on the
    left, computed here from torch's weight layout by hand."""
    rng = np.random.default_rng(2)
    c, k, t = 3, 7, 10
    w = rng.normal(size=(c, 1, k)).astype(np.float32)  # torch depthwise Conv1d
    b = rng.normal(size=(c,)).astype(np.float32) if bias else np.zeros(c, np.float32)
    x = rng.normal(size=(1, c, t)).astype(np.float32)
    padded = np.pad(x, [(0, 0), (0, 0), (k - 1, 0)])  # NeMo: F.pad(x, [k - 1, 0])
    expected = np.stack([(padded[0, :, ti:ti + k] * w[:, 0]).sum(-1) + b for ti in range(t)], axis=-1)
    layer = CausalDepthwiseConv(c, k, bias=bias)
    layer.weight = fit_layout("w", mx.array(w), layer.weight.shape)
    if bias:
        layer.bias = mx.array(b)
    got = np.array(layer(mx.array(padded.transpose(0, 2, 1))))
    np.testing.assert_allclose(got[0], expected.T, atol=1e-5)
    assert ("bias" in layer) == bias


@pytest.mark.parametrize("bias", [True, False])
def test_linear_is_torch_linear_without_addmm(bias):
    """``Linear`` computes torch's ``x W^T + b`` (checked in float64), equals MLX's own ``nn.Linear`` bit for bit on
    the CPU, builds no AddMM node (the bias is added after the product) and still quantizes as ``nn.Linear`` does."""
    rng = np.random.default_rng(3)
    w, b = rng.normal(size=(96, 128)), rng.normal(size=(96,))
    x = rng.normal(size=(2, 1, 128))
    layer, reference = Linear(128, 96, bias=bias), nn.Linear(128, 96, bias=bias)
    for m in (layer, reference):
        m.weight = mx.array(w.astype(np.float32))
        if bias:
            m.bias = mx.array(b.astype(np.float32))
    y = layer(mx.array(x.astype(np.float32)))
    assert "AddMM" not in op_histogram(y)  # before y is evaluated: the graph that would run
    np.testing.assert_allclose(np.array(y), x @ w.T + (b if bias else 0.0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.array(y), np.array(reference(mx.array(x.astype(np.float32)))))
    parent = nn.Module()
    parent.proj = Linear(128, 96, bias=bias)
    nn.quantize(parent, group_size=64, bits=4)
    assert isinstance(parent.proj, nn.QuantizedLinear) and ("bias" in parent.proj) == bias


@pytest.mark.parametrize("bias", [True, False])
def test_quantized_linear_takes_a_groups_rows_as_one_product(bias):
    """Quantized, ``Linear`` becomes :class:`QuantizedLinear`: a [B, 1, K] decode input (a group's rows) goes to MLX as
    one [B, K] product (on CUDA a batched input is B one-row products: docs/platform.md §9), and each row's numbers are
    its own one-row product's and MLX's ``nn.QuantizedLinear``'s, bit for bit on the CPU; a prompt's [1, T, K] too."""
    rng = np.random.default_rng(4)
    parent = nn.Module()
    parent.proj = Linear(128, 96, bias=bias)
    parent.proj.weight = mx.array(rng.normal(size=(96, 128)).astype(np.float32))
    if bias:
        parent.proj.bias = mx.array(rng.normal(size=(96,)).astype(np.float32))
    reference = nn.QuantizedLinear.from_linear(parent.proj, 64, 4)
    nn.quantize(parent, group_size=64, bits=4)
    layer = parent.proj
    assert type(layer) is QuantizedLinear
    for shape in ((8, 1, 128), (1, 5, 128)):
        x = mx.array(rng.normal(size=shape).astype(np.float32))
        y = layer(x)
        assert y.shape == (*shape[:-1], 96)
        assert [n for n in op_histogram(y) if "Quantized" in n] == ["QuantizedMatmul"]
        np.testing.assert_array_equal(np.array(y), np.array(reference(x)))
        rows = np.concatenate([np.array(layer(x[i:i + 1, j:j + 1])).reshape(1, 96)
                               for i in range(shape[0]) for j in range(shape[1])])
        np.testing.assert_array_equal(np.array(y).reshape(-1, 96), rows)
