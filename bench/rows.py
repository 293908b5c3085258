"""Each network's part of a group's steady tick at R rows: ``python -m bench.rows --model M [--rows 1,8,32]
[--runs 30] [--qmm] [--json F]``.

For each R, a :class:`~voicechat.timeline.loop.SessionGroup` of R conversations on the ``speech`` workload
(voicechat/benchmarks/sessions.py's prompts of different lengths, each its own seed), ticked until every one is past
its prompt. Then ``--runs`` whole ticks (each conversation's 80 ms pushed, one ``group.step()``: build, evaluation and
the host's reading), and ``--runs`` profiled ticks: the group's own tick with each part evaluated on its own as it
is built (``TickClock``: perception's steady frame over R rows, the RNNT's first joint calls, the LLM decode with
both heads, the text sampling, the TTS backbone step over 2R rows, the MoG code generation, the codec decoder's
frame over R rows), so the parts are the tick's own calls, not a copy of them. Prints median and p90 ms of each and
the graph nodes of each part (of the first profiled tick; each part's inputs evaluated before it), and the host side
of the whole ticks (HOST): the pushes, the build (Python before the graph is handed to MLX), the queueing
(``mx.async_eval``: on a CPU the whole evaluation), the wait for the tick's outputs and the finish (reading them and
each conversation's ``Session._finish_row``).

``--qmm``: then ``mx.quantized_matmul`` (4-bit, group 64, bf16) at each of the LLM's matrix shapes (its Linear
layers as the checkpoint's config builds them) for M = 1 .. 64 rows, against the same product with the weights
dequantized to bf16 (a plain matmul): ms per product, ``QMM_LAYERS`` distinct matrices per evaluation so that no
weight is read from a cache another product filled.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import mlx.core as mx
import mlx.nn as nn

from voicechat import compute, load, rows_kernel
from voicechat.benchmarks import count_ops
from voicechat.benchmarks.frame import speech_script
from voicechat.benchmarks.sessions import PROMPTS, session_counts
from voicechat.benchmarks.workload import FRAME, RATE, bench_input
from voicechat.timeline import admission
from voicechat.errors import SessionsFull
from voicechat.timeline.loop import SessionGroup, TickClock

PARTS = ("encoder", "rnnt first joints", "llm decode", "text sampling", "tts backbone", "tts codes", "codec")
HOST = ("push", "build", "queue", "wait", "finish")
SETTLE = 5  # unmeasured ticks once every conversation is past its prompt
QMM_ROWS = (1, 2, 4, 8, 16, 32, 64)
QMM_LAYERS = 8


class CountingClock(TickClock):
    """The tick's clock, which also counts each part's graph nodes (its inputs are evaluated by then)."""

    def __init__(self, profile: bool, nodes: dict | None):
        super().__init__(profile)
        self.nodes = nodes

    def stage(self, name: str, t0: float, *arrays) -> float:
        if self.profile and self.nodes is not None and arrays:
            self.nodes[name] = count_ops(*arrays)
        return super().stage(name, t0, *arrays)


class ProfiledGroup(SessionGroup):
    """A group whose ticks are profiled when ``profiling`` says so, whatever its sessions say."""

    profiling = False
    nodes: dict | None = None  # an empty dict: the next profiled tick fills it
    clock: TickClock | None = None  # the last tick's
    host: dict | None = None  # a dict: each tick's host parts go in it (HOST)

    def _clock(self, rows: list) -> TickClock:
        self.clock = CountingClock(self.profiling, self.nodes if self.nodes == {} else None)
        return self.clock

    def _timed(self, part: str, t0: float) -> None:
        if self.host is not None:
            self.host.setdefault(part, []).append(time.perf_counter() - t0)

    def _build(self):
        t0 = time.perf_counter()
        tick = super()._build()
        self._timed("build", t0)
        return tick

    def _queue(self, tick) -> None:
        t0 = time.perf_counter()
        super()._queue(tick)
        self._timed("queue", t0)

    def _finish(self, tick) -> None:
        t0 = time.perf_counter()
        mx.eval([tick.ids] + [a for a in (tick.codes, tick.samples) if a is not None] + list(tick.heard[1:]))
        self._timed("wait", t0)
        t1 = time.perf_counter()
        super()._finish(tick)
        self._timed("finish", t1)


def percentiles(seconds: list[float]) -> dict:
    ms = np.array(seconds) * 1e3
    return {"p50": float(np.median(ms)), "p90": float(np.percentile(ms, 90)), "n": len(ms)}


def steady_group(model, r: int, ticks: int, group_class=None, max_minutes=None):
    """R conversations in one group (``group_class``, default :class:`ProfiledGroup`; each conversation capped at
    ``max_minutes``, which admission reserves for), ticked until every one is past its prompt and SETTLE ticks more.
    -> (group, sessions, tick): ``tick()`` pushes each conversation's next 80 ms and steps the group, ``ticks`` more
    times at least without a row running out of input; it returns its seconds."""
    from voicechat.timeline.conversation import Session

    group = (group_class or ProfiledGroup)(model, r, max_minutes)
    sessions = [Session(model, PROMPTS[i % len(PROMPTS)], i, group=group,
                        script=speech_script(model, model.prompt_length(PROMPTS[i % len(PROMPTS)])))
                for i in range(r)]
    step = round(FRAME * RATE)
    longest = max(s.prompt_frames for s in sessions)
    chunks = longest + SETTLE + ticks + 2
    x = bench_input(chunks)
    fed = 0

    def tick() -> float:  # the input goes round (the set-ups' ticks come on top): no row runs out of frames
        nonlocal fed
        t0 = time.perf_counter()
        for s in sessions:
            s.push(x[fed % chunks * step:(fed % chunks + 1) * step], RATE)
        group._timed("push", t0)
        group.step()
        fed += 1
        return time.perf_counter() - t0

    while any(s.setting_up or s.prompt_inputs for s in sessions) or fed < longest:  # set-ups: one stage a tick
        tick()
    for _ in range(SETTLE):
        tick()
    return group, sessions, tick


def measure_rows(model, r: int, runs: int, max_minutes=None) -> dict:
    """R conversations in one group past their prompts; whole ticks, then profiled ticks per part."""
    group, sessions, tick = steady_group(model, r, 2 * runs, max_minutes=max_minutes)
    group.host = {}
    whole = [tick() for _ in range(runs)]
    host, group.host = group.host, None
    group.profiling, group.nodes = True, {}
    parts: dict[str, list[float]] = {}
    for _ in range(runs):
        tick()
        for name, took in group.clock.seconds.items():
            parts.setdefault(name, []).append(took)
    for s in sessions:
        s.close()
    return {"rows": r, "group_rows": group.rows, "tick": percentiles(whole),
            "host": {part: percentiles(host[part]) for part in HOST},
            "parts": {name: {**percentiles(parts[name]), "nodes": group.nodes.get(name, 0)}
                      for name in PARTS if name in parts}}


def llm_shapes(model) -> dict[tuple[int, int], int]:
    """(out, in) of each Linear of the LLM as the config builds it -> how many layers have it."""
    shapes: dict[tuple[int, int], int] = {}
    for _, m in model.net.stt_model.llm.named_modules():
        if isinstance(m, nn.QuantizedLinear):
            shape = (m.weight.shape[0], m.weight.shape[1] * 32 // m.bits)
        elif isinstance(m, nn.Linear):
            shape = tuple(m.weight.shape)
        else:
            continue
        shapes[shape] = shapes.get(shape, 0) + 1
    return shapes


def speech_shapes(model) -> dict[tuple[int, int], int]:
    """(out, in) of each dense Linear outside the LLM (the encoder, the RNNT, the TTS, the codec) -> how many."""
    llm = {id(m) for _, m in model.net.stt_model.llm.named_modules()}
    shapes: dict[tuple[int, int], int] = {}
    for _, m in model.net.named_modules():
        if isinstance(m, nn.Linear) and not isinstance(m, nn.QuantizedLinear) and id(m) not in llm:
            shapes[tuple(m.weight.shape)] = shapes.get(tuple(m.weight.shape), 0) + 1
    return shapes


def timed(build, runs: int) -> float:
    for _ in range(3):
        mx.eval(build())
    seconds = []
    for _ in range(runs):
        t0 = time.perf_counter()
        mx.eval(build())
        seconds.append(time.perf_counter() - t0)
    return float(np.median(seconds))


def qmm_probe(model, runs: int) -> list[dict]:
    """4-bit quantized products against bf16 ones at the LLM's shapes, per row count (ms per product)."""
    return [row for (n_out, n_in), layers in sorted(llm_shapes(model).items()) if n_in % 64 == 0  # group 64 needs it
            for row in qmm_shape(n_out, n_in, layers, runs)]


def qmm_shape(n_out: int, n_in: int, layers: int, runs: int) -> list[dict]:
    k = min(layers, QMM_LAYERS)
    packed = [mx.quantize(mx.random.normal((n_out, n_in)).astype(mx.bfloat16) * 0.02, group_size=64, bits=4)
              for _ in range(k)]
    plain = [mx.dequantize(*p, group_size=64, bits=4).astype(mx.bfloat16) for p in packed]
    mx.eval(packed, plain)
    out = []
    for m in QMM_ROWS:
        x = mx.random.normal((m, n_in)).astype(mx.bfloat16)
        mx.eval(x)
        q = timed(lambda: [mx.quantized_matmul(x, *p, transpose=True, group_size=64, bits=4) for p in packed], runs)
        d = timed(lambda: [x @ w.T for w in plain], runs)
        out.append({"out": n_out, "in": n_in, "layers": layers, "m": m, "qmm_ms": 1e3 * q / k, "bf16_ms": 1e3 * d / k})
    return out


def dense_probe(model, runs: int, most: int) -> list[dict]:
    """The speech path's dense products over M rows (each a conversation's one row, [M, 1, K]) written three ways:
    ``x @ W^T`` (MLX's CUDA backend folds the rows into one product: its gemv kernel at one row, cuBLAS from two,
    docs/platform.md §8), ``gather_mm`` against the one weight, unsorted (MLX's gather gemv) and sorted (its
    grouped gemm), and on CUDA ours (``voicechat.rows_kernel.dense_product``, tensor cores): ms per product, and
    whether every row equals its own one-row product bit for bit (``x @ W^T``'s; ours: its own). The ``most``
    commonest shapes."""
    dtype = compute.speech_dtype()
    out = []
    for (n_out, n_in), layers in sorted(speech_shapes(model).items(), key=lambda kv: -kv[1])[:most]:
        k = min(layers, QMM_LAYERS)
        weights = [(mx.random.normal((n_out, n_in)) * 0.02).astype(dtype) for _ in range(k)]
        mx.eval(weights)
        for m in QMM_ROWS:
            x = mx.random.normal((m, 1, n_in)).astype(dtype)
            zeros = mx.zeros((m,), mx.uint32)
            mx.eval(x, zeros)
            ways = {"matmul": lambda w: x @ w.T,
                    "gather": lambda w: mx.gather_mm(x, w.T[None], rhs_indices=zeros),
                    "gather sorted": lambda w: mx.gather_mm(x, w.T[None], rhs_indices=zeros, sorted_indices=True)}
            if mx.default_device() == mx.cpu and dtype != mx.float32:
                ways = {"matmul": ways["matmul"]}  # MLX's CPU gather_mm takes float32 only
            alone = {name: mx.concatenate([x[r] @ weights[0].T for r in range(m)]) for name in ways}
            if rows_kernel.serves_dense(x.reshape(m, n_in), weights[0]):
                ways["ours"] = lambda w: rows_kernel.dense_product(x.reshape(m, n_in), w)
                alone["ours"] = mx.concatenate([rows_kernel.dense_product(x[r], weights[0]) for r in range(m)])
            row = {"out": n_out, "in": n_in, "layers": layers, "m": m}
            for name, way in ways.items():
                row[f"{name} ms"] = 1e3 * timed(lambda: [way(w) for w in weights], runs) / k
                row[f"{name} rows alone"] = bool(mx.array_equal(way(weights[0]).reshape(m, -1), alone[name]).item())
            out.append(row)
    return out


def print_rows(results: list[dict]) -> None:
    heads = (f" {'R=' + str(r['rows']) + ' p50':>11s} {'p90':>7s} {'nodes':>6s}" for r in results)
    print(f"{'part':20s}" + "".join(heads))
    for name in PARTS:
        if not any(name in r["parts"] for r in results):
            continue
        line = f"{name:20s}"
        for r in results:
            p = r["parts"].get(name)
            line += f" {p['p50']:11.2f} {p['p90']:7.2f} {p['nodes']:6d}" if p else f" {'-':>11s} {'-':>7s} {'-':>6s}"
        print(line)
    for part in HOST:
        line = (f" {r['host'][part]['p50']:11.2f} {r['host'][part]['p90']:7.2f} {'':6s}" for r in results)
        print(f"{'host ' + part:20s}" + "".join(line))
    ticks = (f" {r['tick']['p50']:11.2f} {r['tick']['p90']:7.2f} {'':6s}" for r in results)
    print(f"{'whole tick':20s}" + "".join(ticks), flush=True)


def print_qmm(rows: list[dict]) -> None:
    print(f"{'out x in':>14s} {'layers':>6s} {'M':>3s} {'4-bit ms':>9s} {'bf16 ms':>8s} {'ratio':>6s}")
    for q in rows:
        print(f"{q['out']:>6d} x {q['in']:<5d} {q['layers']:6d} {q['m']:3d} {q['qmm_ms']:9.4f} {q['bf16_ms']:8.4f} "
              f"{q['qmm_ms'] / q['bf16_ms']:6.2f}", flush=True)


def print_dense(rows: list[dict]) -> None:
    ways = [k[:-3] for k in rows[0] if k.endswith(" ms")]
    print(f"{'out x in':>14s} {'layers':>6s} {'M':>3s}" + "".join(f" {w + ' ms':>17s} {'alone':>5s}" for w in ways))
    for d in rows:
        print(f"{d['out']:>6d} x {d['in']:<5d} {d['layers']:6d} {d['m']:3d}"
              + "".join(f" {d[w + ' ms']:17.4f} {'yes' if d[w + ' rows alone'] else 'no':>5s}" for w in ways),
              flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.rows", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--rows", type=session_counts, default=[1, 8, 32], help="row counts (default 1,8,32)")
    p.add_argument("--runs", type=int, default=30, help="ticks measured per row count (default 30)")
    p.add_argument("--qmm", action="store_true", help="then the 4-bit against bf16 product probe")
    p.add_argument("--dense", type=int, default=0, metavar="SHAPES",
                   help="then the speech path's dense products over M rows, three ways, for its SHAPES "
                   "commonest shapes")
    p.add_argument("--max-minutes", type=float, default=None,
                   help="each conversation's most, which admission reserves memory for (default: the timeline's "
                        "limit; 64 full-size conversations fit an 80 GB card only with a cap)")
    p.add_argument("--json", help="write the results here")
    a = p.parse_args(argv)
    model = load(a.model)
    # admission weighs each conversation at its cap, the timeline's limit without one (docs/batching.md §4); these
    # hold a few dozen positions, so the group may take all the free memory, and a row count still refused is
    # reported, not fatal
    admission.MEMORY_SHARE = 1.0
    print(f"model {a.model}  device {mx.default_device()}  mlx {mx.__version__}  {a.runs} runs; ms", flush=True)
    report = {"model": a.model, "device": str(mx.default_device()), "mlx": mx.__version__, "runs": a.runs,
              "max_minutes": a.max_minutes, "rows": []}
    for r in a.rows:  # the table and the JSON so far after each row count (a run cut short keeps them)
        try:
            report["rows"].append(measure_rows(model, r, a.runs, a.max_minutes))
        except SessionsFull as e:
            print(f"R={r}: {e}", flush=True)
            report.setdefault("refused", {})[r] = str(e)
            continue
        print_rows(report["rows"])
        write(a.json, report)
    if a.qmm:
        report["qmm"] = qmm_probe(model, a.runs)
        print_qmm(report["qmm"])
        write(a.json, report)
    if a.dense:
        report["dense"] = dense_probe(model, a.runs, a.dense)
        print_dense(report["dense"])
        write(a.json, report)
    return 0


def write(path, report: dict) -> None:
    if path:
        Path(path).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    raise SystemExit(main())
