"""Dense bf16 products (dequantized 4-bit weights) of R rows: is each row's result the same as its one-row product,
and as the 4-bit qmv one-row product? ms per product."""
import mlx.core as mx
SHAPES = [(4480, 22656), (10240, 4480), (4480, 131072)]
for k, n in SHAPES:
    w = (mx.random.normal((n, k)) * 0.02).astype(mx.bfloat16)
    wq, s, b = mx.quantize(w, group_size=64, bits=4)
    wd = mx.dequantize(wq, s, b, group_size=64, bits=4).astype(mx.bfloat16)
    wdt = mx.contiguous(wd.T)
    mx.eval(wd, wdt)
    out = []
    for r in (1, 2, 4, 8, 16, 32, 64):
        x = mx.random.normal((r, k)).astype(mx.bfloat16)
        for name, f in (("x@wd.T", lambda v: v @ wd.T), ("x@wdT", lambda v: v @ wdt)):
            full = f(x)
            one = mx.concatenate([f(x[i:i + 1]) for i in range(r)])
            q1 = mx.concatenate([mx.quantized_matmul(x[i:i + 1], wq, s, b, group_size=64, bits=4) for i in range(r)])
            mx.eval(full, one, q1)
            d1 = mx.abs(full.astype(mx.float32) - one.astype(mx.float32)).max().item()
            dq = mx.abs(full.astype(mx.float32) - q1.astype(mx.float32)).max().item()
            out.append(f"R={r} {name}: vs one-row {d1:.3g}, vs 4-bit one-row {dq:.3g}")
    print(f"{k}->{n}:", "; ".join(out), flush=True)
