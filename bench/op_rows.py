"""Which of the frame path's other ops give a row the same bits whatever the other rows are, on this device:
``python -m bench.op_rows [--rows 8] [--json F]``.

A group's tick runs each op once over all its conversations' rows (docs/batching.md §2); a conversation is exact
only if every op gives its row what the op gives that row alone (docs/batching.md §3). For each op as the networks
call it (attention over caches of different lengths, each row's cache padded to the group's capacity with its
unused keys masked; norms; softmax, logsumexp, cumulative sums, arg max; the mel's FFT; the subsampling's depthwise
conv; products of per-row matrices; reductions), at the full-size model's widths: whether every row of the op over R
rows equals the op over that row alone (with its own cache capacity), bit for bit, and else the largest difference.
The products over a group's rows are ``bench.qmv_rows``'s and tests/test_rows_kernel.py's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from voicechat import compute
from voicechat.stt.fastconformer import StridedDepthwiseConv
import mlx.core as mx


def key(i: int) -> mx.array:
    return mx.random.key(i)


def normal(shape, i: int, dtype=None) -> mx.array:
    x = mx.random.normal(shape, key=key(i))
    return x.astype(dtype or compute.speech_dtype())


def attention(rows: int, heads: int, kv_heads: int, dim: int, queries: int):
    """(together, alone): scaled dot-product attention of ``queries`` new positions per row over a cache whose row b
    holds 20 + 37 b positions; together every row's cache has the longest row's capacity, alone its own (a power of
    two), the unused keys masked as the networks mask them (a boolean mask)."""
    lengths = [20 + 37 * b for b in range(rows)]
    capacity = lambda n: 1 << (n + queries - 1).bit_length()  # noqa: E731
    most = max(capacity(n) for n in lengths)
    q = normal((rows, heads, queries, dim), 1)
    k, v = normal((rows, kv_heads, most, dim), 2), normal((rows, kv_heads, most, dim), 3)

    def run(b0: int, b1: int, cap: int) -> mx.array:
        seen = mx.arange(cap)[None, :] < mx.array([lengths[b] + queries for b in range(b0, b1)])[:, None]
        mask = seen[:, None, None, :] & (mx.arange(cap)[None, None, None, :] <= (
            mx.array(lengths[b0:b1])[:, None, None, None] + mx.arange(queries)[None, None, :, None]))
        return mx.fast.scaled_dot_product_attention(q[b0:b1], k[b0:b1, :, :cap], v[b0:b1, :, :cap],
                                                    scale=dim ** -0.5, mask=mask)

    return run(0, rows, most), [run(b, b + 1, capacity(lengths[b])) for b in range(rows)]


def per_row(fn, *inputs):
    """(together, alone) of ``fn`` over inputs whose leading axis is the rows."""
    return fn(*inputs), [fn(*(x[b:b + 1] for x in inputs)) for b in range(inputs[0].shape[0])]


def depthwise(x: mx.array) -> mx.array:
    conv = StridedDepthwiseConv(x.shape[-1])
    conv.weight = normal((x.shape[-1], 3, 3, 1), 13)
    return conv(x)


def cases(rows: int) -> dict:
    f32 = mx.float32
    return {
        "sdpa, LLM decode (32 heads, 8 kv, 128)": lambda: attention(rows, 32, 8, 128, 1),
        "sdpa, TTS step (2 rows each)": lambda: attention(2 * rows, 8, 4, 256, 1),
        "sdpa, encoder frame (8 heads, 128, 2 queries)": lambda: attention(rows, 8, 8, 128, 2),
        "rms_norm 4480 (float32)": lambda: per_row(lambda x: mx.fast.rms_norm(x, None, 1e-5),
                                                   normal((rows, 4480), 4, f32)),
        "rms_norm 1024": lambda: per_row(lambda x: mx.fast.rms_norm(x, None, 1e-6), normal((rows, 1, 1024), 5)),
        "layer_norm 1024": lambda: per_row(lambda x: mx.fast.layer_norm(x, None, None, 1e-5),
                                           normal((rows, 1, 1024), 6)),
        "softmax 131072 (float32)": lambda: per_row(lambda x: mx.softmax(x, axis=-1), normal((rows, 131072), 7, f32)),
        "logsumexp 131072 (float32)": lambda: per_row(lambda x: mx.logsumexp(x, axis=-1),
                                                      normal((rows, 131072), 8, f32)),
        "argmax 131072 (float32)": lambda: per_row(lambda x: mx.argmax(x, axis=-1), normal((rows, 131072), 9, f32)),
        "cumsum of a softmax 2048 (float32)": lambda: per_row(
            lambda x: mx.cumsum(mx.softmax(mx.sort(x, axis=-1), axis=-1), axis=-1), normal((rows, 2048), 10, f32)),
        "sum over 8 codebooks": lambda: per_row(lambda x: x.sum(axis=-2), normal((rows, 1, 8, 1024), 11)),
        "rfft 512 (float32, the mel)": lambda: per_row(lambda x: mx.abs(mx.fft.rfft(x, axis=-1)),
                                                        normal((rows, 9, 512), 12, f32)),
        "depthwise 3x3/2 as taps (the subsampling)": lambda: per_row(
            depthwise, normal((rows, 9, 33, 256), 14)),
        "per-row matrices (MoG component means)": lambda: per_row(
            lambda a, x: a @ x, normal((rows, 64, 1024), 15), normal((rows, 1024, 1), 16)),
        "SSM output, per-row state by C (float32)": lambda: per_row(
            lambda h, c: h @ c, normal((rows, 8, 16, 64, 128), 19, f32), normal((rows, 8, 1, 128, 1), 20, f32)),
        "subword attention scores, per-row q by k": lambda: per_row(
            lambda q, k: q @ k, normal((rows, 16, 4, 64), 21), normal((rows, 16, 64, 12), 22)),
        "encoder position scores, per-head weights": lambda: per_row(
            lambda x: x @ normal((8, 128, 71), 23), normal((rows, 8, 1, 128), 24)),
        "sdpa with an additive bias (the encoder)": lambda: per_row(
            lambda q, k, v, bias: mx.fast.scaled_dot_product_attention(q, k, v, scale=128 ** -0.5, mask=bias),
            normal((rows, 8, 1, 128), 25), normal((rows, 8, 71, 128), 26), normal((rows, 8, 71, 128), 27),
            normal((rows, 1, 1, 71), 28)),
        "float32 product over frames (the mel's filterbank)": lambda: per_row(
            lambda x: compute.product(x, normal((257, 128), 17, f32)), normal((rows, 9, 257), 18, f32)),
    }


def compare(together: mx.array, alone: list) -> dict:
    mx.eval(together, alone)
    a = np.array(together.astype(mx.float32) if together.dtype != mx.bool_ else together)
    worst, same = 0.0, True
    for b, row in enumerate(alone):
        r = np.array(row.astype(mx.float32) if row.dtype != mx.bool_ else row)
        mine = a[b:b + 1].reshape(r.shape) if a[b:b + 1].size == r.size else a[b:b + 1]
        same = same and np.array_equal(mine, r)  # float32 holds every bf16 value exactly
        worst = max(worst, float(np.abs(mine.astype(np.float64) - r.astype(np.float64)).max()))
    return {"rows_alone": same, "max_difference": worst}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.op_rows", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=8, help="rows at once (default 8)")
    p.add_argument("--json", help="write the results here")
    a = p.parse_args(argv)
    if a.rows < 2:
        p.error(f"--rows: 2 or more (got {a.rows})")
    print(f"device {mx.default_device()}  mlx {mx.__version__}  {a.rows} rows; each row as alone?", flush=True)
    results = {}
    for name, case in cases(a.rows).items():
        results[name] = compare(*case())
        r = results[name]
        print(f"{name:52s} {'yes' if r['rows_alone'] else 'no':>4s}  max |difference| {r['max_difference']:.3g}",
              flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"device": str(mx.default_device()), "mlx": mx.__version__,
                                            "rows": a.rows, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
