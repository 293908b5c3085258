"""Layers the speech encoder, the LLM and the codec share."""

from __future__ import annotations

from . import compute  # noqa: F401  (BLAS preload before mlx)
import mlx.core as mx
import mlx.nn as nn


class CausalDepthwiseConv(nn.Module):
    """``Conv1d(C, C, K, groups=C)`` over an input that already holds its K - 1 frames of left context (zeros or a
    stream's history): weight [C, K, 1] (the loader swaps torch's [C, 1, K]), optional bias. A sum of shifted
    copies: elementwise work, one fused kernel when compiled (mlx's grouped conv1d is ~10x slower on a CPU)."""

    def __init__(self, channels: int, kernel: int, bias: bool = True):
        super().__init__()
        self.weight = mx.zeros((channels, kernel, 1))
        if bias:
            self.bias = mx.zeros((channels,))

    def __call__(self, window: mx.array) -> mx.array:
        # [B, K - 1 + L, C] -> [B, L, C]; window[:, l:l+K] feeds output l
        k = self.weight.shape[1]
        t = window.shape[1] - k + 1
        taps = self.weight[:, :, 0].T  # [K, C]
        out = window[:, 0:t] * taps[0]
        for j in range(1, k):
            out = out + window[:, j:j + t] * taps[j]
        return out + self.bias if "bias" in self else out
