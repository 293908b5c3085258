"""Where a steady session frame's time goes on this device:
``python -m bench.frame_split MODEL [--frames N] [--nodes]``.

Per position of a session fed 80 ms at a time (speech workload; the first 60 positions left out): graph building
(``SessionGroup._build``, Python), ``mx.async_eval`` (MLX's graph walk and kernel launches; on the CPU it also waits for
most of the work), the host side of a finished position (``SessionGroup._finish``) and the whole ``feed`` call.
``--nodes`` adds the graph nodes of one position by primitive. The H200's launch settings were measured with it
(dbf1d95:bench/runs/h200-2026-12-01-launch-settings.txt, docs/performance.md §5).
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import numpy as np
import mlx.core as mx

from voicechat.timeline.loop import SessionGroup
from voicechat.timeline.conversation import Session
from voicechat.benchmarks import op_histogram
from voicechat.benchmarks.frame import speech_script
from voicechat.benchmarks.workload import FRAME, PROMPT, RATE, bench_input

SKIPPED = 60  # positions before the measured ones (prompt, caches filling)


class TimedGroup(SessionGroup):
    """A group of one whose frame loop records how long each part of each position took, and one position's
    nodes."""

    def __init__(self, model):
        super().__init__(model, 1)
        self.split, self.nodes = defaultdict(list), None

    def _build(self):
        t0 = time.perf_counter()
        tick = super()._build()
        self.split["build"].append(time.perf_counter() - t0)
        if tick is not None and self.nodes is None and tick.rows[0][1].t >= SKIPPED:
            self.nodes = op_histogram(*tick.arrays)
        return tick

    def _queue(self, tick):
        t0 = time.perf_counter()
        super()._queue(tick)
        self.split["async_eval"].append(time.perf_counter() - t0)

    def _finish(self, tick):
        t0 = time.perf_counter()
        super()._finish(tick)
        self.split["finish"].append(time.perf_counter() - t0)


def run(model_spec: str, frames: int) -> tuple[dict, object]:
    from voicechat import load

    model = load(model_spec)
    group = TimedGroup(model)
    session = Session(model, PROMPT, 0, script=speech_script(model, model.prompt_length(PROMPT)), group=group)
    x = bench_input(frames + SKIPPED)
    step = round(FRAME * RATE)
    feeds = []
    for i in range(0, len(x) - step + 1, step):
        if i // step == SKIPPED:
            group.split.clear()
            feeds.clear()
        t0 = time.perf_counter()
        session.feed(x[i:i + step], RATE)
        feeds.append(time.perf_counter() - t0)
    return {**group.split, "feed": feeds}, group.nodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--frames", type=int, default=140, help="measured positions (default 140)")
    parser.add_argument("--nodes", action="store_true", help="also the graph nodes of one position")
    args = parser.parse_args()
    split, nodes = run(args.model, args.frames)
    print(f"device {mx.default_device()}  mlx {mx.__version__}  per position, ms")
    for part, seconds in split.items():
        ms = 1e3 * np.asarray(seconds)
        print(f"{part:11s} n={ms.size:4d}  p50 {np.median(ms):7.2f}  mean {ms.mean():7.2f}  p99 "
              f"{np.percentile(ms, 99):7.2f}  max {ms.max():7.2f}")
    if args.nodes and nodes is not None:
        print("graph nodes of one position", sum(nodes.values()))
        for name, count in nodes.most_common():
            print(f"{count:6d} {name}")


if __name__ == "__main__":
    main()
