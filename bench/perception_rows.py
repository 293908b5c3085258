"""The streaming perception of a tick for N conversations, each alone against all in one call:
``python -m bench.perception_rows M [--sessions 1,2,4,8] [--ticks 300]``.

Per tick each conversation hears 80 ms (one steady frame, the caches full). "alone": each conversation's own
``PerceptionStream.push`` (its steady frame in a call of its own, as before the group held the encoders' caches);
"rows": each one's ``hear``, then one ``PerceptionRows.steady`` over the N rows (docs/batching.md §2). The two run
in turn, tick by tick, so a machine shared with other work loads both alike. Prints the median and p90 milliseconds
of a tick (evaluated), the graph nodes of one, and the exactness of the one call: how many conversations' encoder
frames differ from their own calls' at any tick, the first such tick and the largest difference (0 on a device whose
every op of the frame is row-invariant, docs/batching.md §3).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from voicechat import load
from voicechat.benchmarks import count_ops
from voicechat.benchmarks.sessions import session_counts
from voicechat.stt.perception import PerceptionRows, PerceptionStream
import mlx.core as mx

FRAME_SAMPLES = 1280  # 80 ms at 16 kHz
FILL_TICKS = 80  # ticks before the measured ones: every attention cache full (70 frames)


def alone_tick(streams: list, chunks: list) -> list:
    """Each stream's (projected, encoded, *state)."""
    return [a for s, x in zip(streams, chunks) for a in (*s.push(x), *s.arrays())]


def rows_tick(rows: PerceptionRows, streams: list, chunks: list) -> list:
    """Each stream's (projected, encoded), then the rows' state."""
    frames = [(i, s.hear(x)) for i, (s, x) in enumerate(zip(streams, chunks))]
    rows.steady(frames)
    return [a for _, f in frames for a in (f.projected, f.encoded)] + rows.arrays


def encoded_frames(out: list, n: int, every: int) -> np.ndarray:
    """The n streams' encoder frames of a tick's outputs (each stream's second of ``every`` arrays), [n, d_model]."""
    return np.stack([np.array(out[i * every + 1].astype(mx.float32)).reshape(-1) for i in range(n)])


def measure(perception, n: int, ticks: int, rng) -> dict:
    audio = [(rng.standard_normal(FRAME_SAMPLES * (FILL_TICKS + ticks + 1)) * 0.1).astype(np.float32) for _ in range(n)]
    alone = [PerceptionStream(perception) for _ in range(n)]
    rows = PerceptionRows(perception, n)
    together = [PerceptionStream(perception, rows, r) for r in range(n)]
    mx.eval([s.push(x[:FRAME_SAMPLES]) for s, x in zip(alone + together, audio + audio)])  # frame 0: alone, a block
    seconds = {"alone": [], "rows": []}
    nodes, encoded = {}, {}
    differs, first, largest = np.zeros(n, bool), None, 0.0
    every = 2 + len(alone[0].arrays())  # arrays per stream in an alone tick's outputs: projected, encoded, state
    for t in range(1, FILL_TICKS + ticks + 1):
        chunks = [x[t * FRAME_SAMPLES:(t + 1) * FRAME_SAMPLES] for x in audio]
        for name, tick, stride in (("alone", lambda: alone_tick(alone, chunks), every),
                                   ("rows", lambda: rows_tick(rows, together, chunks), 2)):
            t0 = time.perf_counter()
            out = tick()
            if t == FILL_TICKS:
                nodes[name] = count_ops(*out)
            mx.eval(out)
            if t > FILL_TICKS:
                seconds[name].append(time.perf_counter() - t0)
            encoded[name] = encoded_frames(out, n, stride)
        gap = np.abs(encoded["rows"] - encoded["alone"]).max(axis=1)
        if first is None and gap.any():
            first = t
        differs |= gap > 0
        largest = max(largest, float(gap.max()))
    ms = {k: np.array(v) * 1e3 for k, v in seconds.items()}
    return {"sessions": n, **{f"{k}_p50": float(np.median(v)) for k, v in ms.items()},
            **{f"{k}_p90": float(np.percentile(v, 90)) for k, v in ms.items()},
            **{f"{k}_nodes": v for k, v in nodes.items()},
            "streams_differing": int(differs.sum()), "first_differing_tick": first, "largest_difference": largest}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.perception_rows", description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--sessions", type=session_counts, default=[1, 2, 4, 8])
    p.add_argument("--ticks", type=int, default=300)
    a = p.parse_args(argv)
    perception = load(a.model).net.stt_model.perception
    rng = np.random.default_rng(0)
    print(f"{'N':>3s} {'alone p50':>10s} {'p90':>7s} {'rows p50':>9s} {'p90':>7s} "
          f"{'alone nodes':>12s} {'rows nodes':>11s} {'differ':>7s} {'from tick':>9s} {'max |diff|':>10s}")
    for n in a.sessions:
        r = measure(perception, n, a.ticks, rng)
        print(f"{n:3d} {r['alone_p50']:10.2f} {r['alone_p90']:7.2f} {r['rows_p50']:9.2f} {r['rows_p90']:7.2f} "
              f"{r['alone_nodes']:12d} {r['rows_nodes']:11d} {r['streams_differing']:7d} "
              f"{'-' if r['first_differing_tick'] is None else r['first_differing_tick']:>9} "
              f"{r['largest_difference']:10.3e}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
