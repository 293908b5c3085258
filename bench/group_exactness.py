"""Is a row's number independent of the row count on this device? ``python -m bench.group_exactness --model M
[--sessions 8] [--frames 100] [--json F]``.

N conversations in one group (voicechat/benchmarks/sessions.py's prompts of different lengths in turn, each its own
seed and its own stretch of the workload's input, every other one speaking in a voice of its own (a second of the
workload's input as its reference recording, the others the checkpoint's voice), joining ``STAGGER`` ticks apart, the
model's own text channel),
then each of them in a group of its own, run alone. Per conversation it prints whether the text and function ids and
the codes are identical at every position; where they are not, the first position that differs and the top-2 margin
of the logits there in the run alone (text, or function where only that id differs: a margin near 0 is a tie that any
rounding breaks); the largest difference of the output samples and of the encoder frames. The CPU suite checks the
same on the NeMo fixtures (tests/test_loop.py); this is for a GPU, where a product over R rows may round
differently from one over one row.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Optional

import numpy as np
import mlx.core as mx

from voicechat import load
from voicechat.benchmarks.sessions import PROMPTS, STAGGER
from voicechat.benchmarks.workload import FRAME, RATE, bench_input
from voicechat.timeline.loop import SessionGroup, TickClock
from voicechat.timeline.conversation import Session

OFFSET = 7  # frames between two conversations' starts in the input (each hears its own stretch)
VOICE_SECONDS = 1.0  # an own voice's reference recording


class MarginClock(TickClock):
    """The tick's clock, which also keeps the LLM's logits of the tick as built: (text,) or (text, function)."""

    def __init__(self, profile: bool, heads: int):
        super().__init__(profile)
        self.heads, self.logits = heads, ()

    def stage(self, name: str, t0: float, *arrays) -> float:
        if name == "llm decode":  # its arrays: the heads' logits, then the LLM's state
            self.logits = arrays[:self.heads]
        return super().stage(name, t0, *arrays)


class MarginGroup(SessionGroup):
    """A group that keeps, per conversation and position, the top-2 margin of its text (and function) logits."""

    def __init__(self, model, max_sessions: int, max_minutes=None):
        super().__init__(model, max_sessions, max_minutes)
        self.pending: list = []  # (rows of a tick, top-2 of each head's logits), read once the tick is evaluated

    def _clock(self, rows: list) -> TickClock:
        self.clock = MarginClock(any(row.session.clock.profile for _, row in rows),
                                 1 if self.stt.function_head is None else 2)
        return self.clock

    def _build(self):
        tick = super()._build()
        if tick is not None and self.clock.logits:
            self.pending.append(([(r, row.session, row.t) for r, row in tick.rows],
                                 [mx.topk(x.astype(mx.float32), 2, axis=-1) for x in self.clock.logits]))
        return tick

    def read_margins(self) -> None:
        for rows, tops in self.pending:
            tops = [np.asarray(t) for t in tops]
            for r, session, t in rows:
                session.margins[t] = tuple(float(abs(top[r, 1] - top[r, 0])) for top in tops)
        self.pending = []


class Recorded(Session):
    """A conversation that keeps each position's frame, encoder frame (None where it heard none) and margins."""

    def __init__(self, *args, **kwargs):
        self.frames, self.encoded, self.margins = [], [], {}
        super().__init__(*args, **kwargs)

    def _finish_row(self, row, *args):
        super()._finish_row(row, *args)
        self.frames.append(self.outbox[-1])
        heard = row.encoded is not None and row.t >= self.prompt_frames
        self.encoded.append(np.array(row.encoded.astype(mx.float32)) if heard else None)  # numpy has no bfloat16


def voice(i: int, x: np.ndarray) -> Optional[tuple]:
    """Conversation i's speaker: the checkpoint's (None) for even i, else a second of the input at a place of its
    own, as (samples, rate): a new voice, whose codec encode and TTS warm-up are its set-up's."""
    if i % 2 == 0:
        return None
    n = round(VOICE_SECONDS * RATE)
    start = (OFFSET * i * round(FRAME * RATE)) % max(len(x) - n, 1)
    return x[start:start + n], RATE


def conversation(model, i: int, group: MarginGroup, x: np.ndarray) -> Recorded:
    return Recorded(model, PROMPTS[i % len(PROMPTS)], i, voice(i, x), group=group)


def run_together(model, n: int, x: np.ndarray, frames: int, max_minutes=None) -> list[Recorded]:
    """N conversations joining STAGGER ticks apart, each pushed 80 ms a tick, then each flushed."""
    group = MarginGroup(model, n, max_minutes)
    step = round(FRAME * RATE)
    sessions, fed = [], []
    tick = 0
    while len(sessions) < n or min(fed) < frames:
        if len(sessions) < n and tick == STAGGER * len(sessions):
            sessions.append(conversation(model, len(sessions), group, x))
            fed.append(0)
        for i, s in enumerate(sessions):
            if fed[i] < frames:
                start = (OFFSET * i + fed[i]) * step
                s.push(x[start:start + step], RATE)
                fed[i] += 1
        group.step()
        group.read_margins()
        tick += 1
    for s in sessions:
        s.flush()
        group.read_margins()
    return sessions


def run_alone(model, i: int, x: np.ndarray, frames: int) -> Recorded:
    group = MarginGroup(model, 1)
    s = conversation(model, i, group, x)
    step = round(FRAME * RATE)
    for k in range(frames):
        start = (OFFSET * i + k) * step
        s.feed(x[start:start + step], RATE)
        group.read_margins()
    s.flush()
    group.read_margins()
    return s


def first_difference(a: np.ndarray, b: np.ndarray) -> Optional[int]:
    """The first position (row) where two [T, ...] arrays differ, or None (a length difference counts)."""
    n = min(len(a), len(b))
    rows = np.flatnonzero(np.any((a[:n] != b[:n]).reshape(n, -1), axis=1))
    return int(rows[0]) if len(rows) else (None if len(a) == len(b) else n)


def largest_difference(a: list, b: list) -> Optional[float]:
    """The largest |a - b| over the positions both have a value for (None where they have none in common)."""
    d = [float(np.abs(p - q).max()) for p, q in zip(a, b) if p is not None and q is not None and p.size and q.size]
    return max(d) if d else None


def first_encoder_difference(a: list, b: list) -> Optional[int]:
    """The first position whose encoder frames both runs have and that differ, or None."""
    return next((t for t, (p, q) in enumerate(zip(a, b))
                 if p is not None and q is not None and p.shape == q.shape and (p != q).any()), None)


def samples_difference(a: Recorded, b: Recorded) -> Optional[float]:
    """The largest |a - b| of the two output streams (inf if their lengths differ)."""
    x, y = (np.concatenate([f.audio for f in s.frames]) for s in (a, b))
    if len(x) != len(y):
        return float("inf")
    return float(np.abs(x - y).max()) if len(x) else None


def compare(together: Recorded, alone: Recorded) -> dict:
    ids = [np.array([[f.text_id, f.function_id] for f in s.frames]) for s in (together, alone)]
    codes = [np.stack([f.codes for f in s.frames]) for s in (together, alone)]
    at = first_difference(*ids)
    margin = None
    if at is not None and at < min(len(i) for i in ids):
        head = 0 if ids[0][at, 0] != ids[1][at, 0] else 1
        margins = alone.margins.get(at, ())
        margin = margins[head] if head < len(margins) else None
    return {"prompt": together.system_prompt, "seed": together.seed, "voice": together.voice,
            "positions": len(together.frames),
            "ids_identical": at is None, "ids_first_difference": at, "top2_margin_there": margin,
            "codes_identical": first_difference(*codes) is None, "codes_first_difference": first_difference(*codes),
            "max_samples_difference": samples_difference(together, alone),
            "max_encoder_difference": largest_difference(together.encoded, alone.encoded),
            "encoder_first_difference": first_encoder_difference(together.encoded, alone.encoded)}


def print_report(report: dict) -> None:
    print(f"model {report['model']}  device {report['device']}  mlx {report['mlx']}  {report['sessions']} "
          f"conversations together against each alone, {report['frames']} x 80 ms each")
    print(f"{'#':>2s} {'seed':>4s} {'voice':>10s} {'positions':>9s} {'ids':>4s} {'first':>6s} {'margin':>8s} "
          f"{'codes':>5s} {'first':>6s} {'max |samples|':>14s} {'max |encoder|':>14s} {'from':>5s}")
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    for i, c in enumerate(report["conversations"]):
        print(f"{i:2d} {c['seed']:4d} {c['voice'][:10]:>10s} {c['positions']:9d} "
              f"{'yes' if c['ids_identical'] else 'no':>4s} {fmt(c['ids_first_difference'], 'd'):>6s} "
              f"{fmt(c['top2_margin_there'], '.2e'):>8s} "
              f"{'yes' if c['codes_identical'] else 'no':>5s} {fmt(c['codes_first_difference'], 'd'):>6s} "
              f"{fmt(c['max_samples_difference'], '.3e'):>14s} {fmt(c['max_encoder_difference'], '.3e'):>14s} "
              f"{fmt(c['encoder_first_difference'], 'd'):>5s}",
              flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.group_exactness", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--sessions", type=int, default=8, help="conversations at once (default 8)")
    p.add_argument("--frames", type=int, default=100, help="80 ms of input per conversation (default 100)")
    p.add_argument("--max-minutes", type=float, default=None,
                   help="each conversation's most, which the group's admission reserves memory for (default: the "
                        "timeline's limit; 64 full-size conversations need a cap to fit an H200)")
    p.add_argument("--json", help="write the results here")
    a = p.parse_args(argv)
    if a.sessions < 1 or a.frames < 1:
        p.error("--sessions and --frames must be at least 1")
    model = load(a.model)
    x = bench_input(OFFSET * a.sessions + a.frames)
    together = run_together(model, a.sessions, x, a.frames, a.max_minutes)
    report = {"model": a.model, "device": str(mx.default_device()), "mlx": mx.__version__, "sessions": a.sessions,
              "frames": a.frames, "conversations": [compare(s, run_alone(model, i, x, a.frames))
                                                    for i, s in enumerate(together)]}
    print_report(report)
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
