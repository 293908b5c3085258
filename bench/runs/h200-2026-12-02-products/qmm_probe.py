"""4-bit products of R rows at the LLM's shapes: batched quantized_matmul, gather_qmm (one vector per row), chunks
of <= 7 rows, dequantized bf16 matmul. Times (ms per product, 20 chained per eval) and whether each row equals the
one-row product bit for bit."""
import time
import mlx.core as mx

SHAPES = [(4480, 22656), (10240, 4480), (4480, 15680), (15680, 4480), (4480, 5120), (5120, 4480), (4480, 131072)]
ROWS = [1, 2, 4, 7, 8, 16, 32, 64]
CHAIN = 20


def timed(fn, x):
    for _ in range(3):
        mx.eval([fn(x) for _ in range(CHAIN)])
    ts = []
    for _ in range(7):
        t0 = time.perf_counter()
        mx.eval([fn(x) for _ in range(CHAIN)])
        ts.append((time.perf_counter() - t0) / CHAIN * 1e3)
    ts.sort()
    return ts[len(ts) // 2]


for k, n in SHAPES:
    w = (mx.random.normal((n, k)) * 0.02).astype(mx.bfloat16)
    wq, s, b = mx.quantize(w, group_size=64, bits=4)
    wd = mx.dequantize(wq, s, b, group_size=64, bits=4).astype(mx.bfloat16)
    wq3, s3, b3 = wq[None], s[None], b[None]
    mx.eval(wq, s, b, wd, wq3, s3, b3)
    qmm = lambda x: mx.quantized_matmul(x, wq, s, b, transpose=True, group_size=64, bits=4)  # noqa
    def gather(x):
        r = x.shape[0]
        return mx.gather_qmm(x[:, None, :], wq3, s3, b3, lhs_indices=mx.arange(r, dtype=mx.uint32),
                             rhs_indices=mx.zeros((r,), mx.uint32), transpose=True, group_size=64, bits=4)[:, 0]
    def chunks(x):
        return mx.concatenate([qmm(x[i:i + 7]) for i in range(0, x.shape[0], 7)])
    dense = lambda x: x @ wd.T  # noqa
    line = []
    for r in ROWS:
        x = mx.random.normal((r, k)).astype(mx.bfloat16)
        mx.eval(x)
        one = mx.concatenate([qmm(x[i:i + 1]) for i in range(r)])
        res = {}
        for name, fn in (("qmm", qmm), ("gather", gather), ("chunk7", chunks), ("bf16", dense)):
            same = bool(mx.array_equal(fn(x), one).item())
            res[name] = f"{timed(fn, x):.3f}{'' if same else '*'}"
        line.append(f"R={r}: " + " ".join(f"{a}={v}" for a, v in res.items()))
    print(f"{k}->{n}:", " | ".join(line), flush=True)
print("(* = some row differs from its one-row product)")
