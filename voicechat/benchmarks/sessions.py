"""Many conversations on one model: ``python -m voicechat bench --model M --sessions 1,2,4,8 [--frames N] [--json F]``.

For each N, N conversations in one group (``model.sessions(N)``, docs/batching.md) on the ``speech`` workload
(workload.py: the harness question as input, the text channel scripted as speech has it, each conversation its own
seed and a system prompt of its own length). They start staggered, one every ``STAGGER`` ticks, so each joins while
the others run (its set-up's stages between the ticks, one a tick, then its prompt positions in the next ticks). A tick
is what advancing every conversation by 80 ms costs: each conversation's 80 ms of audio pushed (its samples into its mel
buffer: a steady frame waits for the tick), then one ``group.step()`` (every network once for all rows, the streaming
encoder's steady frames included). Reported per N, over the ``--frames`` ticks after the last conversation's prompt
(every conversation has input through them, and the fewest rows a measured tick stepped is reported): tick p50 / p95 /
p99 / max, milliseconds per conversation (tick p50 / N), the step alone, the joins' stall of the others (per tick in
which a set-up stage ran while another conversation had joined: the asking and that stage) and each conversation's
whole set-up, active memory per conversation and the peak, the state the group holds at the end (``state_bytes``: its
arrays' bytes, docs/batching.md §4) and per conversation, the graph nodes of one tick of all rows; then the largest
N whose tick p95 stays under 80 ms.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from .. import compute
import mlx.core as mx

from ..files import write_atomically
from ..timeline.loop import SessionGroup
from . import count_ops, peak_memory_gb
from .frame import speech_script
from .workload import FRAME, PROMPT, RATE, bench_input, stats

STAGGER = 3  # ticks between two conversations' starts
PROMPTS = (PROMPT, "Be brief.", PROMPT + " Answer in one sentence.", "")  # prompts of different lengths, in turn


class CountingGroup(SessionGroup):
    """A group that counts the graph nodes of its first tick in which every conversation is past its prompt (the
    streaming encoder's steady frames included: docs/batching.md §2), and times its set-up stages."""

    nodes = 0
    staged = 0.0  # seconds of set-up stages run since it was last read
    stepped = 0  # rows the last tick stepped

    def set_up_stage(self):
        t0 = time.perf_counter()
        staged = super().set_up_stage()
        if staged is not None:
            self.staged += time.perf_counter() - t0
        return staged

    def _build(self):
        tick = super()._build()
        self.stepped = 0 if tick is None else len(tick.rows)
        steady = tick is not None and len(tick.rows) == self.max_sessions and all(
            row.t > row.session.prompt_frames for _, row in tick.rows)
        if steady and not self.nodes:
            self.nodes = count_ops(*tick.arrays)
        return tick


def run_group(model, n: int, frames: int, max_minutes=None, lookahead: int = 0) -> dict:
    """N staggered conversations, each fed 80 ms a tick from its start until ``frames`` ticks have run with all N past
    their prompts (so every conversation has input through the measured ticks); the statistics of those ticks."""
    from ..timeline.conversation import Session

    group = CountingGroup(model, n, max_minutes)
    x = bench_input(frames)  # the question repeated; each conversation goes round it from its start
    step = round(FRAME * RATE)
    chunks = len(x) // step
    sessions, fed, stalls, set_ups = [], [], [], []
    ticks, steps, stepped, steady_from = [], [], [], None
    mx.reset_peak_memory()
    base = mx.get_active_memory()
    tick = 0
    while steady_from is None or len(ticks) - steady_from < frames:
        asking = 0.0
        if len(sessions) < n and tick == STAGGER * len(sessions):
            prompt = PROMPTS[len(sessions) % len(PROMPTS)]
            t0 = time.perf_counter()
            s = Session(model, prompt, len(sessions), script=speech_script(model, model.prompt_length(prompt)),
                        group=group)
            asking = time.perf_counter() - t0
            sessions.append(s)
            set_ups.append(asking)
            fed.append(0)
        joined = any(not s.setting_up for s in sessions)  # a conversation a set-up stage could hold back
        setting_up = next((s for s in sessions if s.setting_up), None)
        group.staged = 0.0
        t0 = time.perf_counter()
        for i, s in enumerate(sessions):
            k = fed[i] % chunks
            s.push(x[k * step:(k + 1) * step], RATE)
            fed[i] += 1
        t1 = time.perf_counter()
        group.step(lookahead)
        t2 = time.perf_counter()
        if setting_up is not None:
            set_ups[sessions.index(setting_up)] += group.staged
        if joined and (asking or group.staged):
            stalls.append(asking + group.staged)
        if steady_from is None and len(sessions) == n and all(s.started for s in sessions):
            steady_from = len(ticks)
        ticks.append(t2 - t0)
        steps.append(t2 - t1)
        stepped.append(group.stepped)
        tick += 1
    steady = ticks[steady_from:]
    active = mx.get_active_memory()
    held = group.held_bytes()
    positions = [s.position for s in sessions]
    for s in sessions:
        s.close()
    tick_stats = stats(steady)
    return {"sessions": n, "tick": tick_stats, "step": stats(steps[steady_from:]),
            "ms_per_conversation": tick_stats["p50"] / n, "join": stats(stalls), "set_up": stats(set_ups),
            "active_gb_per_conversation": (active - base) / 1e9 / n, "peak_gb": peak_memory_gb(),
            "ticks_measured": len(steady), "fewest_rows_stepped": min(stepped[steady_from:]),
            "graph_nodes_per_tick": group.nodes, "state_bytes": held, "state_bytes_per_conversation": held / n,
            "positions": {"min": min(positions), "max": max(positions)}}


def run(model_spec: str, counts: list[int], frames: int, max_minutes=None, lookahead: int = 0) -> dict:
    from .. import load

    model = load(model_spec)
    if compute.compile_enabled():
        run_group(model, max(counts), 4, max_minutes, lookahead)  # warm-up: every row count's compiled shapes once
    rows = [run_group(model, n, frames, max_minutes, lookahead) for n in counts]
    fits = [r["sessions"] for r in rows if r["tick"]["p95"] < FRAME * 1e3]
    return {"model": model_spec, "device": str(mx.default_device()), "blas": compute.BLAS, "mlx": mx.__version__,
            "frames": frames, "stagger_ticks": STAGGER, "max_minutes": max_minutes, "lookahead": lookahead,
            "rows": rows,
            "largest_real_time": max(fits) if fits else 0}


def print_table(r: dict) -> None:
    print(f"model {r['model']}  device {r['device']}  mlx {r['mlx']}  {r['frames']} ticks measured with all N "
          f"past their prompts, starts {r['stagger_ticks']} ticks apart, {r['lookahead']} tick(s) left running "
          "on the device by each step")
    print(f"{'N':>3s} {'tick p50':>9s} {'p95':>7s} {'p99':>7s} {'max':>7s} {'ms/conv':>8s} {'step p50':>9s} "
          f"{'join p50':>9s} {'join max':>9s} {'set-up p50':>11s} {'GB/conv':>8s} {'state MB/conv':>14s} "
          f"{'peak GB':>8s} {'nodes':>6s}")
    for row in r["rows"]:
        t, j = row["tick"], row["join"]
        print(f"{row['sessions']:3d} {t['p50']:9.2f} {t['p95']:7.2f} {t['p99']:7.2f} {t['max']:7.2f} "
              f"{row['ms_per_conversation']:8.2f} {row['step']['p50']:9.2f} {j['p50']:9.1f} {j['max']:9.1f} "
              f"{row['set_up']['p50']:11.1f} "
              f"{row['active_gb_per_conversation']:8.4f} {row['state_bytes_per_conversation'] / 1e6:14.2f} "
              f"{row['peak_gb']:8.3f} {row['graph_nodes_per_tick']:6d}")
    print(f"largest N with tick p95 < {FRAME * 1e3:.0f} ms: {r['largest_real_time']}")


def main(args) -> int:
    r = run(args.model, args.sessions, args.frames, args.max_minutes, args.lookahead)
    print_table(r)
    if args.json:
        write_atomically(Path(args.json), json.dumps(r, indent=1).encode("utf-8"))
    return 0


def session_counts(text: str) -> list[int]:
    """``--sessions 1,2,4``: the conversation counts, each at least 1."""
    try:
        counts = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sessions takes counts like 1,2,4,8; got {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"--sessions takes counts of at least 1; got {text!r}")
    return counts
