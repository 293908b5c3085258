"""A 4-bit product over a few rows that reads each weight once, as a CUDA kernel of our own, against MLX's:
``python -m bench.qmv_rows [--rows 1,2,4,8,16,32] [--runs 20] [--json F]`` (needs CUDA), or ``--check-layout`` (any
device).

Why (docs/batching.md §6, docs/platform.md §9): in a group's tick on the H200 the LLM's 4-bit products took 5.8 ms at
one row (MLX's vector kernel ``qmv``) and 16.1 ms at eight (its tiled ``qmm_sm80``), the largest part of what a tick
of 8 rows adds. This kernel (``mx.fast.cuda_kernel``, compiled by MLX at first use per row count) computes
``x [R, K] @ W^T`` for MLX's affine 4-bit layout (``mx.quantize``: each uint32 holds 8 consecutive weights of a row,
the first in the lowest 4 bits; a scale and a bias per group of 64; ``w = scale * q + bias``) with each weight read
once for all R rows: a block of 8 warps stages a chunk of 512 columns of every row of x in shared memory, each warp
computes O outputs, each lane 16 weights of a chunk per output and R float sums, summed across the warp at the end.
A row's sums run in the same order whatever R is and whatever the other rows hold, so each row is bit for bit what
it is alone (the property a group needs: docs/batching.md §3), which the probe checks.

Not used by the engine: this is the probe that tells whether it should be (its speed against ``qmv`` at 1 row and
``qmm_sm80`` at 8 or more, at the LLM's shapes, with enough distinct weights per evaluation that none comes from the
L2 cache). Written 2026-12-03 without a GPU: its first run on one is its first test.

``--check-layout`` checks, on any device, that the kernel's reading of the packed weights (written out in numpy the
same way) gives what ``mx.dequantize`` gives.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import mlx.core as mx

from bench.rows import timed

GROUP = 64
BITS = 4
KC = 512  # columns of x staged per chunk (a multiple of the group, 16 weights per lane of a warp)
WARPS = 8
SHAPES = ((4480, 22656), (10240, 4480), (4480, 15680), (15680, 4480), (5120, 4480), (4480, 131072))  # (in, out)
LAYERS_BYTES = 400e6  # distinct weights per evaluation: well past the H200's 60 MB L2 cache

SOURCE = """
    const int K = x_shape[1];
    const int N = w_shape[0];
    const int G = K / GS;
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int n0 = (blockIdx.x * WARPS + warp) * O;
    __shared__ __align__(16) __nv_bfloat16 xs[R * KC];
    float acc[O][R];
    #pragma unroll
    for (int o = 0; o < O; ++o) {
        #pragma unroll
        for (int r = 0; r < R; ++r) acc[o][r] = 0.0f;
    }
    for (int k0 = 0; k0 < K; k0 += KC) {
        const int kc = min(KC, K - k0);
        const int per_row = kc / 8;  // 16-byte pieces of a row's chunk
        __syncthreads();
        for (int i = threadIdx.x; i < R * per_row; i += blockDim.x) {
            const int r = i / per_row, c = i % per_row;
            reinterpret_cast<uint4*>(xs + r * KC)[c] = reinterpret_cast<const uint4*>(x + (size_t)r * K + k0)[c];
        }
        __syncthreads();
        const int jj = lane * 16;
        if (jj < kc) {
            const int j = k0 + jj;
            #pragma unroll
            for (int o = 0; o < O; ++o) {
                const int n = n0 + o;
                if (n < N) {
                    const uint2 q = *reinterpret_cast<const uint2*>(w + (size_t)n * (K / 8) + j / 8);
                    const float s = __bfloat162float(scales[(size_t)n * G + j / GS]);
                    const float b = __bfloat162float(biases[(size_t)n * G + j / GS]);
                    float wf[16];
                    #pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        wf[i] = s * (float)((q.x >> (4 * i)) & 0xF) + b;
                        wf[8 + i] = s * (float)((q.y >> (4 * i)) & 0xF) + b;
                    }
                    #pragma unroll
                    for (int r = 0; r < R; ++r) {
                        const __nv_bfloat162* xr = reinterpret_cast<const __nv_bfloat162*>(xs + r * KC + jj);
                        float sum = acc[o][r];
                        #pragma unroll
                        for (int i = 0; i < 8; ++i) {
                            const float2 v = __bfloat1622float2(xr[i]);
                            sum = fmaf(wf[2 * i], v.x, sum);
                            sum = fmaf(wf[2 * i + 1], v.y, sum);
                        }
                        acc[o][r] = sum;
                    }
                }
            }
        }
    }
    #pragma unroll
    for (int o = 0; o < O; ++o) {
        const int n = n0 + o;
        #pragma unroll
        for (int r = 0; r < R; ++r) {
            float v = acc[o][r];
            #pragma unroll
            for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffff, v, off);
            if (lane == 0 && n < N) out[(size_t)r * N + n] = __float2bfloat16(v);
        }
    }
"""

_KERNEL = []


def outputs_per_warp(rows: int) -> int:
    """O: outputs a warp computes, so that a lane holds about 32 sums (O x R) whatever R is."""
    return max(1, min(4, 32 // rows))


def rows_product(x: mx.array, w: mx.array, scales: mx.array, biases: mx.array) -> mx.array:
    """x [R, K] bf16 (R <= 32, K a multiple of 64) @ the 4-bit W [N, K] (``mx.quantize``'s w, scales, biases) ^T."""
    if not _KERNEL:
        _KERNEL.append(mx.fast.cuda_kernel(name="rows_qmv", input_names=["x", "w", "scales", "biases"],
                                           output_names=["out"], source=SOURCE))
    rows, n = x.shape[0], w.shape[0]
    o = outputs_per_warp(rows)
    blocks = -(-n // (WARPS * o))
    return _KERNEL[0](inputs=[x, w, scales, biases],
                      template=[("R", rows), ("O", o), ("GS", GROUP), ("KC", KC), ("WARPS", WARPS)],
                      grid=(blocks * WARPS * 32, 1, 1), threadgroup=(WARPS * 32, 1, 1),
                      output_shapes=[(rows, n)], output_dtypes=[mx.bfloat16])[0]


def unpacked(w: np.ndarray, scales: np.ndarray, biases: np.ndarray) -> np.ndarray:
    """The kernel's reading of the packed weights, in numpy: weight j of row n is bits 4*(j % 8) of word j // 8."""
    shifts = np.arange(8, dtype=np.uint32) * BITS
    q = ((w[:, :, None] >> shifts) & 0xF).reshape(w.shape[0], -1).astype(np.float32)
    s = np.repeat(scales.astype(np.float32), GROUP, axis=1)
    b = np.repeat(biases.astype(np.float32), GROUP, axis=1)
    return s * q + b


def check_layout() -> float:
    """max |the kernel's reading - mx.dequantize| over a random matrix (0 when the layout is read right)."""
    wt = mx.random.normal((48, 4 * GROUP), key=mx.random.key(1))
    w, scales, biases = mx.quantize(wt, group_size=GROUP, bits=BITS)
    want = np.array(mx.dequantize(w, scales, biases, group_size=GROUP, bits=BITS))
    got = unpacked(np.array(w), np.array(scales), np.array(biases))
    return float(np.abs(got - want).max())


def probe_shape(k: int, n: int, counts: list[int], runs: int) -> list[dict]:
    """At one shape: errors against float32, each row against its product alone, and ms per product both ways."""
    layers = max(1, int(LAYERS_BYTES // (n * k // 2)))
    packed = [mx.quantize((mx.random.normal((n, k), key=mx.random.key(i)) * 0.02).astype(mx.bfloat16),
                          group_size=GROUP, bits=BITS) for i in range(layers)]
    mx.eval(packed)
    exact = np.array(mx.dequantize(*packed[0], group_size=GROUP, bits=BITS).astype(mx.float32))
    out = []
    for m in counts:
        x = mx.random.normal((m, k), key=mx.random.key(100 + m)).astype(mx.bfloat16)
        mx.eval(x)
        want = np.array(x.astype(mx.float32)) @ exact.T
        ours = rows_product(x, *packed[0])
        theirs = mx.quantized_matmul(x, *packed[0], transpose=True, group_size=GROUP, bits=BITS)
        alone = [rows_product(x[r:r + 1], *packed[0]) for r in range(m)]
        mx.eval(ours, theirs, alone)
        scale = float(np.abs(want).max())
        ours_np, theirs_np = np.array(ours.astype(mx.float32)), np.array(theirs.astype(mx.float32))
        row_exact = all(np.array_equal(np.array(alone[r]), np.array(ours[r:r + 1])) for r in range(m))
        t_ours = timed(lambda: [rows_product(x, *p) for p in packed], runs) / layers
        t_mlx = timed(lambda: [mx.quantized_matmul(x, *p, transpose=True, group_size=GROUP, bits=BITS)
                               for p in packed], runs) / layers
        out.append({"in": k, "out": n, "m": m, "layers": layers, "ours_ms": 1e3 * t_ours, "mlx_ms": 1e3 * t_mlx,
                    "ours_err": float(np.abs(ours_np - want).max()) / scale,
                    "mlx_err": float(np.abs(theirs_np - want).max()) / scale, "rows_exact": row_exact})
        r = out[-1]
        print(f"{k:6d} -> {n:6d} {m:3d} rows: ours {r['ours_ms']:.3f} ms, mlx {r['mlx_ms']:.3f} ms; error against "
              f"float32 {r['ours_err']:.2e} / {r['mlx_err']:.2e}; each row as alone: {row_exact}", flush=True)
    return out


def main(argv=None) -> int:
    from voicechat.benchmarks.sessions import session_counts

    p = argparse.ArgumentParser(prog="python -m bench.qmv_rows", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=session_counts, default=[1, 2, 4, 8, 16, 32], help="row counts (at most 32)")
    p.add_argument("--runs", type=int, default=20, help="evaluations timed per case (default 20)")
    p.add_argument("--check-layout", action="store_true", help="only check the kernel's reading of the weights")
    p.add_argument("--json", help="write the results here")
    a = p.parse_args(argv)
    if max(a.rows) > 32 or a.runs < 1:
        p.error(f"--rows: at most 32 (got {max(a.rows)}); --runs: 1 or more (got {a.runs})")
    error = check_layout()
    print(f"the kernel's reading of mx.quantize's layout against mx.dequantize: max difference {error:.3g}")
    if error:
        return 1
    if a.check_layout:
        return 0
    if not mx.cuda.is_available():
        p.error("the kernel needs MLX's CUDA backend (use --check-layout elsewhere)")
    results = [row for k, n in SHAPES for row in probe_shape(k, n, a.rows, a.runs)]
    if a.json:
        Path(a.json).write_text(json.dumps({"mlx": mx.__version__, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
