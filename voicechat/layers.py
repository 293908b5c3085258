"""Layers the speech encoder, the LLM and the codec share."""

from __future__ import annotations

from . import compute, rows_kernel
import mlx.core as mx
import mlx.nn as nn


class Linear(nn.Linear):
    """``nn.Linear`` computed by :func:`voicechat.compute.affine` (its bias added after the product, not by addmm);
    quantized, a :class:`QuantizedLinear`."""

    def __call__(self, x: mx.array) -> mx.array:
        return compute.affine(x, self["weight"], self["bias"] if "bias" in self else None)

    def to_quantized(self, group_size=None, bits=None, mode="affine", quantize_input=False) -> "QuantizedLinear":
        if quantize_input:
            raise ValueError("quantized activations are not used here")
        return QuantizedLinear.from_linear(self, group_size, bits, mode)


class QuantizedLinear(nn.QuantizedLinear):
    """``nn.QuantizedLinear`` whose input's leading axes are the rows of one product: MLX's CUDA backend runs a
    [B, 1, K] input (a group's decode step) as B one-row products, each reading the weights again, and a [B, K] one
    as one product over the B rows (docs/platform.md §9). Metal and the CPU give the same numbers either way. On CUDA
    the rows go to :mod:`voicechat.rows_kernel` (the weights read once per 32 rows, each row as alone)."""

    def __call__(self, x: mx.array) -> mx.array:
        rows = x.reshape(rows_kernel.as_rows(x.shape))
        if rows_kernel.serves(self, rows):
            y = rows_kernel.product(rows, self["weight"], self["scales"], self["biases"])
            y = y + self["bias"] if "bias" in self else y
        else:
            y = super().__call__(rows)
        return y.reshape(*x.shape[:-1], y.shape[-1])  # no node for 2-D rows (rows_kernel.as_rows)


class CausalDepthwiseConv(nn.Module):
    """``Conv1d(C, C, K, groups=C)`` over an input that already holds its K - 1 frames of left context (zeros or a
    stream's history): weight [C, K, 1] (the loader swaps torch's [C, 1, K]), optional bias. A sum of shifted
    copies: elementwise work, one fused kernel when compiled (mlx's grouped conv1d is ~10x slower on a CPU)."""

    def __init__(self, channels: int, kernel: int, bias: bool = True):
        super().__init__()
        self.weight = mx.zeros((channels, kernel, 1))
        if bias:
            self.bias = mx.zeros((channels,))
        self._taps = compute.Derived()

    def __call__(self, window: mx.array) -> mx.array:
        # [B, K - 1 + L, C] -> [B, L, C]; window[:, l:l+K] feeds output l
        taps = self.taps()
        t = window.shape[1] - len(taps) + 1
        out = window[:, 0:t] * taps[0]
        for j in range(1, len(taps)):
            out = out + window[:, j:j + t] * taps[j]
        return out + self.bias if "bias" in self else out

    def taps(self) -> list[mx.array]:
        """The K weight columns [C], each its own contiguous array, made once per loaded weight: indexing the weight
        inside a frame is a gather kernel per tap (hundreds per frame over the three networks)."""
        return self._taps.of(self.weight, lambda w: [mx.contiguous(w[:, j, 0]) for j in range(w.shape[1])])

    def prepare(self) -> list[mx.array]:
        return self.taps()
