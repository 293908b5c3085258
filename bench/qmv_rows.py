"""The engine's 4-bit product over a group's rows (``voicechat.rows_kernel``, a tensor-core CUDA kernel of our own)
against MLX's: ``python -m bench.qmv_rows [--rows 1,2,4,8,16,32,64,128] [--runs 20] [--json F]`` (needs CUDA), or
``--check-layout`` (any device).

Why (docs/batching.md §6, docs/platform.md §9): in a group's tick on the H200 the LLM's 4-bit products took 5.8 ms at
one row (MLX's vector kernel ``qmv``) and 16.1 ms at eight (its tiled ``qmm_sm80``). At the LLM's shapes, with
enough distinct weights per evaluation that none comes from the L2 cache, for each row count: ms per product ours
(the engine's choice of output tiles per warp, and each choice) and MLX's, the error of each against float32, and
whether each row is bit for bit its product alone (for ours as the engine runs it: one tile at one row).

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
from voicechat.rows_kernel import BITS, GROUP, product

SHAPES = ((4480, 22656), (10240, 4480), (4480, 15680), (15680, 4480), (5120, 4480), (4480, 131072))  # (in, out)
LAYERS_BYTES = 400e6  # distinct weights per evaluation: well past the H200's 60 MB L2 cache
TILES = (1, 2)  # tiles of 16 outputs a warp, each tried


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
    """At one shape, per row count: each way's ms per product, its error against float32, and (ours) whether each
    row is bit for bit its product alone."""
    layers = max(1, int(LAYERS_BYTES // (n * k // 2)))
    packed = [mx.quantize((mx.random.normal((n, k), key=mx.random.key(i)) * 0.02).astype(mx.bfloat16),
                          group_size=GROUP, bits=BITS) for i in range(layers)]
    mx.eval(packed)
    exact = np.array(mx.dequantize(*packed[0], group_size=GROUP, bits=BITS).astype(mx.float32))
    ways = {"mlx": lambda x, p: mx.quantized_matmul(x, *p, transpose=True, group_size=GROUP, bits=BITS),
            "ours": lambda x, p: product(x, *p),  # the engine's choice of tiles (each row alone: 1 tile)
            **{f"tiles{t}": (lambda t: lambda x, p: product(x, *p, tiles=t))(t) for t in TILES}}
    out = []
    for m in counts:
        x = mx.random.normal((m, k), key=mx.random.key(100 + m)).astype(mx.bfloat16)
        mx.eval(x)
        want = np.array(x.astype(mx.float32)) @ exact.T
        scale = float(np.abs(want).max())
        row = {"in": k, "out": n, "m": m, "layers": layers}
        for name, way in ways.items():
            got = way(x, packed[0])
            alone = [way(x[r:r + 1], packed[0]) for r in range(m)]
            mx.eval(got, alone)
            row[f"{name}_err"] = float(np.abs(np.array(got.astype(mx.float32)) - want).max()) / scale
            row[f"{name}_rows_exact"] = all(np.array_equal(bits(alone[r]), bits(got[r:r + 1])) for r in range(m))
            row[f"{name}_ms"] = 1e3 * timed(lambda: [way(x, p) for p in packed], runs) / layers
        out.append(row)
        print(f"{k:6d} -> {n:6d} {m:3d} rows, ms (error against float32; rows as alone): " + "; ".join(
            f"{name} {row[f'{name}_ms']:.3f} ({row[f'{name}_err']:.1e}; {row[f'{name}_rows_exact']})"
            for name in ways), flush=True)
    return out


def bits(a: mx.array) -> np.ndarray:
    return np.array(a.view(mx.uint16))


def main(argv=None) -> int:
    from voicechat.benchmarks.sessions import session_counts

    p = argparse.ArgumentParser(prog="python -m bench.qmv_rows", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=session_counts, default=[1, 2, 4, 8, 16, 32, 64, 128], help="row counts")
    p.add_argument("--runs", type=int, default=20, help="evaluations timed per case (default 20)")
    p.add_argument("--check-layout", action="store_true", help="only check the kernel's reading of the weights")
    p.add_argument("--json", help="write the results here")
    a = p.parse_args(argv)
    if a.runs < 1:
        p.error(f"--runs: 1 or more (got {a.runs})")
    error = check_layout()
    print(f"the kernel's reading of mx.quantize's layout against mx.dequantize: max difference {error:.3g}")
    if error > 1e-6:  # the GPU's dequantize may fuse scale * q + bias (one rounding fewer): 2.4e-7 on the H200
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
