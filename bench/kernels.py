"""What one graph node costs on this device, per node, with and without ``mx.compile``:

    python -m bench.kernels [--steps 300] [--evaluations 15]

Views (reshape, transpose), an elementwise add, and a one-row bfloat16 linear layer of 1024 -> 1024 written the ways
the engine could write it (``addmm`` with its bias, matmul then add, the weight transposed per call or once, 3-D or
2-D rows), then the same at two rows (also one row at a time, as a batch of one-row products, and by ``gather_mm``),
in float32, and a 1024 -> 4096 -> 1024 feed-forward pair. Chains of the same step make the per-node cost measurable;
the numbers are microseconds per step (median of ``--evaluations``). MLX's CPU ``gather_mm`` takes float32 only, so
on a CPU that case is left out.
"""

from __future__ import annotations

import argparse
import statistics
import time

import mlx.core as mx


def chain(step, steps: int):
    def run(x):
        for _ in range(steps):
            x = step(x)
        return x
    return run


def per_step_us(fn, x, steps: int, evaluations: int) -> tuple[float, float]:
    """(graph building, evaluation) in microseconds per step of ``fn``'s chain of ``steps``."""
    for _ in range(3):
        mx.eval(fn(x))
    built, ran = [], []
    for _ in range(evaluations):
        t0 = time.perf_counter()
        y = fn(x)
        t1 = time.perf_counter()
        mx.eval(y)
        built.append(t1 - t0)
        ran.append(time.perf_counter() - t1)
    return 1e6 * statistics.median(built) / steps, 1e6 * statistics.median(ran) / steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300, help="steps of each chain (default 300)")
    p.add_argument("--evaluations", type=int, default=15, help="timed evaluations of each chain (default 15)")
    a = p.parse_args()
    bf16, f32 = mx.bfloat16, mx.float32
    row3, row2, rows = mx.zeros((1, 1, 1024), bf16), mx.zeros((1, 1024), bf16), mx.zeros((2, 1, 1024), bf16)
    w = mx.random.normal((1024, 1024)).astype(bf16)
    b = mx.zeros((1024,), bf16)
    wt = w.T
    both = mx.zeros((2,), mx.uint32)  # gather_mm: both rows against weight 0
    w4, b4 = mx.random.normal((4096, 1024)).astype(bf16), mx.zeros((4096,), bf16)
    mx.eval(row3, row2, rows, w, b, wt, w4, b4)
    cases = [
        ("reshape (a view)", lambda x: x.reshape(1, 1024, 1) if x.shape[1] == 1 else x.reshape(1, 1, 1024), row3),
        ("transpose (a view)", lambda x: x.transpose(0, 2, 1), row3),
        ("add", lambda x: x + 1.0, row3),
        ("addmm 3-D, w.T per call", lambda x: mx.addmm(b, x, w.T), row3),
        ("addmm 3-D, w.T once", lambda x: mx.addmm(b, x, wt), row3),
        ("addmm 2-D, w.T once", lambda x: mx.addmm(b, x, wt), row2),
        ("matmul + add 3-D", lambda x: x @ w.T + b, row3),
        ("matmul + add 2-D", lambda x: x @ w.T + b, row2),
        ("matmul 3-D, no bias", lambda x: x @ w.T, row3),
        ("addmm, 2 rows", lambda x: mx.addmm(b, x, w.T), rows),
        ("matmul + add, 2 rows", lambda x: x @ w.T + b, rows),
        ("matmul, 2 rows", lambda x: x @ w.T, rows),
        ("matmul, 2 rows one at a time", lambda x: mx.concatenate([x[0:1] @ w.T, x[1:2] @ w.T]), rows),
        # the same [2, 1, K] rows as a view whose row axis has stride 1: MLX's CUDA matmul then keeps the batch of 2
        # (a gemv per row) instead of folding it into a 2-row cuBLAS product
        ("matmul, 2 rows as a batch of gemvs", lambda x: mx.swapaxes(x.reshape(2, -1)[..., None], 1, 2) @ w.T, rows),
        *([("matmul, 2 rows by gather_mm", lambda x: mx.gather_mm(x, wt[None], rhs_indices=both), rows)]
          if mx.default_device() != mx.cpu else []),
        ("float32 addmm 3-D", lambda x: mx.addmm(b.astype(f32), x, w.T.astype(f32)), row3.astype(f32)),
        ("float32 matmul + add 3-D", lambda x: x @ w.T.astype(f32) + b.astype(f32), row3.astype(f32)),
        ("feed-forward pair, addmm", lambda x: mx.addmm(b, mx.addmm(b4, x, w4.T), w4), row3),
        ("feed-forward pair, matmul + add", lambda x: (x @ w4.T + b4) @ w4 + b, row3),
    ]
    print(f"device {mx.default_device()}  mlx {mx.__version__}  us per step of a {a.steps}-step chain")
    print(f"{'':34s} {'eager build':>12s} {'eval':>8s} {'compiled build':>15s} {'eval':>8s}")
    for name, step, x in cases:
        eb, ee = per_step_us(chain(step, a.steps), x, a.steps, a.evaluations)
        cb, ce = per_step_us(mx.compile(chain(step, a.steps)), x, a.steps, a.evaluations)
        print(f"{name:34s} {eb:12.2f} {ee:8.2f} {cb:15.2f} {ce:8.2f}", flush=True)


if __name__ == "__main__":
    main()
