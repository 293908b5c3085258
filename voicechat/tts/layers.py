"""Layers shared by the EAR-TTS networks (Gemma-3 backbone, T5Gemma char encoder, MoG head), docs/model.md §2.5.1."""

from __future__ import annotations


from .. import compute
import mlx.core as mx
import mlx.nn as nn

from ..layers import Linear


class RMSNorm(nn.Module):
    """Gemma's offset RMSNorm: ``x * rsqrt(mean(x^2) + eps) * (1 + weight)``; the stored weight is centred on 0."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = mx.zeros((dim,))
        self._scale = compute.Derived()

    def __call__(self, x: mx.array) -> mx.array:
        return mx.fast.rms_norm(x, self.scale(), self.eps)

    def scale(self) -> mx.array:
        """1 + weight, computed once per loaded weight (not once per call: a kernel less per norm and frame)."""
        return self._scale.of(self.weight, lambda w: 1.0 + w)

    def prepare(self) -> list[mx.array]:
        return [self.scale()]


class GatedMLP(nn.Module):
    """``down(gelu_tanh(gate(x)) * up(x))``, no biases (NeMo ``MLP``, Gemma3MLP, T5GemmaMLP)."""

    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.gate_proj = Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = Linear(intermediate_size, hidden_size, bias=False)
        self._fused = compute.Fused()

    def __call__(self, x: mx.array) -> mx.array:
        gate, up = self._fused.project(x, [self.gate_proj, self.up_proj])
        return self.down_proj(nn.gelu_approx(gate) * up)

    def prepare(self) -> list[mx.array]:
        return self._fused.prepare([self.gate_proj, self.up_proj])


class MLPLayer(nn.Module):
    """Residual MLP block of the MoG head: ``x + post_norm(mlp(pre_norm(x)))``."""

    def __init__(self, hidden_size: int, intermediate_size: int, eps: float = 1e-6):
        super().__init__()
        self.pre_norm = RMSNorm(hidden_size, eps)
        self.mlp = GatedMLP(hidden_size, intermediate_size)
        self.post_norm = RMSNorm(hidden_size, eps)

    def __call__(self, x: mx.array) -> mx.array:
        return x + self.post_norm(self.mlp(self.pre_norm(x)))


def split_heads(x: mx.array, num_heads: int) -> mx.array:
    """[B, T, N * D] -> [B, N, T, D]"""
    b, t, _ = x.shape
    return x.reshape(b, t, num_heads, -1).transpose(0, 2, 1, 3)


def merge_heads(x: mx.array) -> mx.array:
    """[B, N, T, D] -> [B, T, N * D]"""
    b, n, t, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, t, n * d)


def rope(x: mx.array, base: float, offset: int = 0) -> mx.array:
    """Rotate-half RoPE over the whole head dim, positions ``offset ..``: [B, N, T, D] -> same."""
    return mx.fast.rope(x, x.shape[-1], traditional=False, base=base, scale=1.0, offset=offset)
