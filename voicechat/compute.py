"""Compute policy, in one place: which BLAS mlx uses on Linux, and which dtype each part runs in.

Import this module before anything imports ``mlx.core``: on Linux the mlx[cpu] wheel links the netlib
reference BLAS, and an optimized BLAS must be loaded into the process first (docs/platform.md §1: 17-70x faster
float32 matmuls). float32 on CPU (bf16/f16 matmuls skip BLAS there and are 10-30x slower); on a GPU (Metal or
CUDA) the speech path runs in bfloat16 and quantized layers keep their stored scales.
"""

from __future__ import annotations

import ctypes
import os
import sys
from itertools import accumulate
from typing import Optional

_BLAS_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
)


# OpenBLAS's idle workers spin after each threaded call before they sleep, keeping a core busy that MLX's stream
# thread, the web server and a browser need; 2**4 cycles (the least OpenBLAS takes) puts them to sleep at once
# (docs/platform.md §1)
BLAS_THREAD_TIMEOUT = 4


def preload_blas() -> str | None:
    """Load an optimized BLAS with global symbols so mlx's cblas_sgemm resolves to it. Returns its path.

    ``VOICECHAT_BLAS`` names another library; ``VOICECHAT_BLAS=none`` turns the preload off.
    """
    if not sys.platform.startswith("linux"):
        return None
    if "mlx.core" in sys.modules:
        warn_if_reference_blas()
        return None
    wanted = os.environ.get("VOICECHAT_BLAS")
    if wanted == "none":
        return None
    for path in ([wanted] if wanted else _BLAS_CANDIDATES):
        if path and os.path.exists(path):
            os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", str(BLAS_THREAD_TIMEOUT))  # read when the library loads
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            return path
    return None


def warn_if_reference_blas() -> None:
    """mlx was imported before voicechat, so the preload came too late: say so unless an OpenBLAS is in the process
    anyway (LD_PRELOAD). Without it a frame is several times slower (docs/platform.md §1)."""
    try:
        with open("/proc/self/maps") as maps:
            if "libopenblas" in maps.read():
                return
    except OSError:
        return
    import warnings

    warnings.warn("mlx was imported before voicechat, so mlx uses its slow reference BLAS (float32 matmuls 17-70x "
                  "slower, docs/platform.md §1): import voicechat first", RuntimeWarning, stacklevel=3)


def keep_kernel_cache() -> None:
    """MLX's CUDA backend compiles its kernels on first use (minutes for this model on a fresh machine) and caches
    them under the system temp folder, which reboots clear: keep them in the user's cache folder instead, unless the
    user chose a place (``MLX_PTX_CACHE_DIR``). Metal ships its kernels built; this changes nothing there."""
    from pathlib import Path

    os.environ.setdefault("MLX_PTX_CACHE_DIR", str(Path.home() / ".cache" / "voicechat" / "mlx-ptx"))


BLAS = preload_blas()
keep_kernel_cache()

import mlx.core as mx  # noqa: E402  (after the preload, on purpose)

from . import rows_kernel  # noqa: E402  (it imports mlx.core)


def batch_cuda_kernels() -> None:
    """On CUDA, MLX launches its kernels in CUDA graphs of at most ``MLX_MAX_OPS_PER_BUFFER`` nodes (default 20); a
    frame is thousands of kernels, so fewer, larger graphs save host time (100 was fastest: docs/platform.md §8). The
    numbers computed do not change. Read by MLX at its first evaluation; a value the user set wins; Metal is left to
    MLX's own per-device defaults."""
    if mx.cuda.is_available():
        os.environ.setdefault("MLX_MAX_OPS_PER_BUFFER", "100")


batch_cuda_kernels()


def on_gpu() -> bool:
    return mx.default_device() == mx.gpu


def entry(x: mx.array, i: int, axis: int = 0) -> mx.array:
    """``x``'s entry ``i`` (a Python int) along ``axis``, as a view. Plain ``x[i]`` builds a gather kernel in MLX
    (0.32), and on the GPU a frame pays for every kernel (docs/platform.md §4)."""
    return mx.take(x, i, axis=axis)


def kept_where(active: mx.array, new: mx.array, old: mx.array) -> mx.array:
    """Row r of ``new`` where ``active[r]``, else row r of ``old`` unchanged (a group's rows that did not step)."""
    return mx.where(active.reshape(-1, *([1] * (new.ndim - 1))), new, old)


def speech_dtype() -> mx.Dtype:
    """Activation and weight dtype of the speech path (encoder, RNNT, EAR-TTS, codec) and the LLM activations."""
    return mx.bfloat16 if on_gpu() else mx.float32


def compile_enabled() -> bool:
    """Fuse the fixed-shape per-frame functions with ``mx.compile`` on a GPU, where a frame is bound by the number
    of kernels. On the CPU it stays off: it pays only where per-node cost dominates (small models), and a first start
    compiles every graph with the system's C++ compiler (docs/platform.md §4). ``VOICECHAT_COMPILE=1`` / ``0``
    forces it on / off."""
    forced = os.environ.get("VOICECHAT_COMPILE")
    return on_gpu() if forced is None else forced == "1"


def affine(x: mx.array, weight: mx.array, bias: Optional[mx.array]) -> mx.array:
    """``x W^T + b`` with the bias added after the product, not through ``addmm``: on CUDA, MLX runs a one-row matmul
    as a gemv kernel only when no bias comes with it (an addmm goes to cuBLAS, about twice as slow: docs/platform.md
    §8); compiled, the add joins the elementwise kernel that follows. On the CPU both are the same BLAS product."""
    y = linear(x, weight)
    return y if bias is None else y + bias


def linear(x: mx.array, weight: mx.array) -> mx.array:
    """``x @ weight^T`` for a weight stored [N, C] (a Linear's): :func:`product` of ``weight.T``. Our CUDA kernel takes
    the weight as stored, with no transpose node between (a node costs host time in every tick: docs/batching.md
    §6)."""
    if rows_kernel.serves_dense(x, weight):
        return rows_kernel.dense_product(x, weight)
    return product(x, weight.T)


def product(x: mx.array, weight: mx.array) -> mx.array:
    """``x @ weight`` for x [..., C] and weight [C, N], each conversation's rows their own product, bit for bit what
    they give alone. Where x holds the rows of several conversations ([B, T, C], B > 1: a group's rows), on the CPU
    each conversation's rows are their own product (a batched matmul over a broadcast weight): OpenBLAS rounds a
    product's row by the product's row count, in ways that differ between CPUs (docs/batching.md §3). On CUDA, MLX's
    kernels round a row by the row count whatever the grouping (cuBLAS from 2 rows), so bf16 products run our
    tensor-core kernel, one product over all the rows, each row as alone (:func:`rows_kernel.dense_product`,
    docs/platform.md §9). Metal keeps MLX's one product over the rows (docs/platform.md §10)."""
    if rows_kernel.serves_dense(x, weight.T):
        return rows_kernel.dense_product(x, weight.T)
    if x.ndim == 3 and x.shape[0] > 1 and (x.shape[1] > 1 or not on_gpu()):
        return x @ mx.broadcast_to(weight, (x.shape[0], *weight.shape))
    return x @ weight


def by_transposed(x: mx.array, rows_of_w: mx.array) -> mx.array:
    """``x @ rows_of_w^T`` over [..., M, K] and [..., N, K] (a batched product whose right operand is kept as the rows
    of its transpose). With one row per item (M = 1), MLX's CUDA matmul runs such a product as its gemv kernel, a
    warp's fixed sums per output whatever the batch's count; by a plain [..., K, N] operand it goes to cuBLAS, whose
    algorithm, and so its rounding, follows the batch's count (docs/batching.md §3)."""
    return x @ rows_of_w.swapaxes(-1, -2)


def biased_attention(q: mx.array, k: mx.array, v: mx.array, scale: float, bias: mx.array) -> mx.array:
    """softmax(q k^T scale + bias) v over [B, H, L, d] queries and [B, H, S, d] keys and values, the composition MLX
    0.32 itself runs for an attention with an additive mask on every device (its ``fast.scaled_dot_product_attention``
    falls back to it), with both products in :func:`by_transposed` form: each (item, head) of a one-query step is its
    own gemv on CUDA, so a conversation's row is the same in a group of any size (docs/batching.md §3)."""
    scores = by_transposed(q * scale, k) + bias
    return by_transposed(mx.softmax(scores, axis=-1, precise=True), mx.contiguous(v.swapaxes(-1, -2)))


def row_product(x: mx.array, weight: mx.array) -> mx.array:
    """:func:`product` of x [n, C] whose rows are n conversations' (one each: a group's transcripts)."""
    return product(x[:, None], weight)[:, 0]


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


class Derived:
    """An array computed from a weight once (and again only if the weight is replaced), kept outside the parameter
    tree. :func:`voicechat.network.prepare` fills every one at load, so none is first computed inside a compiled
    function."""

    def __init__(self):
        self.source: Optional[mx.array] = None
        self.value: Optional[mx.array] = None

    def of(self, source: mx.array, make) -> mx.array:
        if self.source is not source:
            self.source, self.value = source, make(source)
        return self.value


class Fused:
    """Several projections of the same input as one matmul (a kernel instead of several per call). At load,
    :meth:`prepare` concatenates their weights (and biases) and puts views of the joint arrays back in the layers, so
    the weights are held once and the module tree keeps the checkpoint's names. Quantized layers stay apart."""

    def __init__(self):
        self.joint: tuple = ()  # (weight, bias or None)
        self.parts: tuple = ()

    def prepare(self, layers: list) -> list[mx.array]:
        biased = ["bias" in layer for layer in layers]
        if any("scales" in layer for layer in layers) or len(set(biased)) > 1:
            return []
        weight = mx.concatenate([layer.weight for layer in layers])
        bias = mx.concatenate([layer.bias for layer in layers]) if biased[0] else None
        mx.eval(weight, bias)
        start, parts = 0, []
        for layer in layers:
            n = layer.weight.shape[0]
            layer.weight = weight[start:start + n]
            if bias is not None:
                layer.bias = bias[start:start + n]
            parts.append(layer.weight)
            start += n
        self.joint, self.parts = (weight, bias), tuple(parts)
        return [a for a in (weight, bias, *parts) if a is not None]

    def project(self, x: mx.array, layers: list) -> list[mx.array]:
        """[..., in] -> each layer's output: from the joint matrix when it is current, else layer by layer."""
        if not self.joint or any(layer.weight is not part for layer, part in zip(layers, self.parts)):
            return [layer(x) for layer in layers]
        weight, bias = self.joint
        out = affine(x, weight, bias)
        cuts = list(accumulate(layer.weight.shape[0] for layer in layers[:-1]))
        return mx.split(out, cuts, axis=-1)
