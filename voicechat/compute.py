"""Compute policy, in one place: which BLAS mlx uses on Linux, and which dtype each part runs in.

Import this module before anything imports ``mlx.core``: on Linux the mlx[cpu] wheel links the netlib
reference BLAS, and an optimized BLAS must be loaded into the process first (ECOSYSTEM.md §1.3: 17-70x faster
float32 matmuls). float32 on CPU (bf16/f16 matmuls skip BLAS there and are 10-30x slower); on a GPU (Metal or
CUDA) the speech path runs in bfloat16 and quantized layers keep their stored scales.
"""

from __future__ import annotations

import ctypes
import os
import sys

_BLAS_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
)


def preload_blas() -> str | None:
    """Load an optimized BLAS with global symbols so mlx's cblas_sgemm resolves to it. Returns its path.

    ``VOICECHAT_BLAS`` names another library; ``VOICECHAT_BLAS=none`` turns the preload off.
    """
    if not sys.platform.startswith("linux") or "mlx.core" in sys.modules:
        return None
    wanted = os.environ.get("VOICECHAT_BLAS")
    if wanted == "none":
        return None
    for path in ([wanted] if wanted else _BLAS_CANDIDATES):
        if path and os.path.exists(path):
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            return path
    return None


BLAS = preload_blas()

import mlx.core as mx  # noqa: E402  (after the preload, on purpose)


def on_gpu() -> bool:
    return mx.default_device() == mx.gpu


def speech_dtype() -> mx.Dtype:
    """Activation and weight dtype of the speech path (encoder, RNNT, EAR-TTS, codec) and the LLM activations."""
    return mx.bfloat16 if on_gpu() else mx.float32


def compile_enabled() -> bool:
    """Fuse the fixed-shape per-frame functions with ``mx.compile`` on a GPU, where a frame is bound by the number
    of kernels (GPU.md); on the CPU the compiled graphs measured slower (LLM step 206 vs 154 ms, medium checkpoint).
    ``VOICECHAT_COMPILE=1`` / ``0`` forces it on / off."""
    forced = os.environ.get("VOICECHAT_COMPILE")
    return on_gpu() if forced is None else forced == "1"


class CompiledFunctions:
    """Per-frame functions by key, compiled on first use when :func:`compile_enabled` and kept. The weights they read
    are captured as constants (no per-call flattening of the module tree): the model is loaded once and its weights
    never change afterwards. A plain object: not part of any parameter tree."""

    def __init__(self):
        self.functions: dict = {}

    def get(self, key, fn):
        if key not in self.functions:
            self.functions[key] = mx.compile(fn) if compile_enabled() else fn
        return self.functions[key]
