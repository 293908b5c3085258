"""Which op of a group's real tick gives a row other bits than the op over that row alone, on this device:
``VOICECHAT_COMPILE=0 python -m bench.op_trace --model M [--rows 8] [--ticks 3] [--json F]``.

``bench.op_rows`` tries each op of the frame path at shapes of its own; this one watches the ops as a group's steady
tick calls them (R conversations past their prompts, ``bench.rows.steady_group``), at their real shapes: each call of
MLX's convs, attention, norms, softmax, reductions over the last axis, FFT and matmul (``@``) whose first axis is
more than one row is run again for each row alone (the other inputs sliced alike where they have the same rows, else
as they are), and every call whose row differs from its run alone is reported with its shapes and largest difference.
Our own kernels (``voicechat.rows_kernel``) are not watched: tests/test_rows_kernel.py checks them. Run with
``VOICECHAT_COMPILE=0``: a compiled function's inputs are not values that can be sliced and evaluated.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from voicechat import load
import mlx.core as mx

WATCHED = ((mx, "conv1d"), (mx, "conv2d"), (mx, "softmax"), (mx, "logsumexp"), (mx, "argmax"), (mx, "argmin"),
           (mx, "cumsum"), (mx, "sum"), (mx.fft, "rfft"), (mx.fast, "scaled_dot_product_attention"),
           (mx.fast, "rms_norm"), (mx.fast, "layer_norm"))


class Trace:
    """The watched ops, each wrapped while ``on``; ``found``: (op, shapes) -> [calls, calls that differed, worst]."""

    def __init__(self):
        self.on, self.found, self.inside = False, {}, False

    def wrap(self, name: str, op):
        def watched(*args, **kwargs):
            out = op(*args, **kwargs)
            if self.on and not self.inside:
                self.inside = True  # the check's own calls are not watched
                try:
                    self.check(name, op, args, kwargs, out)
                finally:
                    self.inside = False
            return out
        return watched

    def check(self, name: str, op, args, kwargs, out) -> None:
        x = args[0]
        if not isinstance(x, mx.array) or x.ndim < 2 or x.shape[0] < 2 or not isinstance(out, mx.array):
            return
        if out.ndim == 0 or out.shape[0] != x.shape[0]:
            return  # a reduction over the rows themselves: no row of its own
        rows = x.shape[0]

        def part(a, b):
            return a[b:b + 1] if isinstance(a, mx.array) and a.ndim == x.ndim and a.shape[0] == rows else a

        alone = [op(*(part(a, b) for a in args), **{k: part(v, b) for k, v in kwargs.items()}) for b in range(rows)]
        together = out
        mx.eval(together, alone)
        key = (name, tuple(tuple(a.shape) for a in args if isinstance(a, mx.array)), str(x.dtype))
        entry = self.found.setdefault(key, [0, 0, 0.0])
        entry[0] += 1
        got = np.array(together.astype(mx.float32) if together.dtype != mx.bool_ else together)
        want = np.concatenate([np.array(a.astype(mx.float32) if a.dtype != mx.bool_ else a) for a in alone])
        if not np.array_equal(got.reshape(want.shape), want):
            entry[1] += 1
            entry[2] = max(entry[2], float(np.abs(got.reshape(want.shape).astype(np.float64) - want).max()))


def install(trace: Trace) -> None:
    for module, name in WATCHED:
        setattr(module, name, trace.wrap(name, getattr(module, name)))
    matmul = mx.array.__matmul__
    mx.array.__matmul__ = trace.wrap("matmul", matmul)


def main(argv=None) -> int:
    from bench.rows import steady_group
    from voicechat.timeline import admission

    p = argparse.ArgumentParser(prog="python -m bench.op_trace", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    for name, default, text in (("--rows", 8, "conversations in the group"), ("--ticks", 3, "steady ticks watched")):
        p.add_argument(name, type=int, default=default, help=f"{text} (default {default})")
    p.add_argument("--json", help="write the results here")
    a = p.parse_args(argv)
    if a.rows < 2 or a.ticks < 1:
        p.error(f"--rows: 2 or more (got {a.rows}); --ticks: 1 or more (got {a.ticks})")
    model = load(a.model)
    admission.MEMORY_SHARE = 1.0  # a few dozen positions each (bench.rows does the same)
    trace = Trace()
    install(trace)
    group, sessions, tick = steady_group(model, a.rows, a.ticks + 2)
    trace.on = True
    for _ in range(a.ticks):
        tick()
    trace.on = False
    for s in sessions:
        s.close()
    print(f"model {a.model}  device {mx.default_device()}  mlx {mx.__version__}  {a.rows} rows, {a.ticks} ticks")
    print(f"{'op':30s} {'calls':>5s} {'differ':>6s} {'max |diff|':>10s}  shapes")
    report = []
    for (name, shapes, dtype), (calls, differ, worst) in sorted(trace.found.items(), key=lambda kv: -kv[1][1]):
        report.append({"op": name, "shapes": shapes, "dtype": dtype, "calls": calls, "differ": differ,
                       "max_difference": worst})
        print(f"{name:30s} {calls:5d} {differ:6d} {worst:10.3g}  {dtype} {shapes}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"model": a.model, "device": str(mx.default_device()),
                                            "mlx": mx.__version__, "rows": a.rows, "ops": report}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
