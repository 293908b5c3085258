"""The lab's benchmarks: each part on its own, voicechat beside mlx-audio, the H200 runs (bench/README.md).

Run from the repository root: ``python -m bench.<name> --help``. Not installed with the package.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

from voicechat.benchmarks import count_ops, op_histogram, peak_memory_gb

__all__ = ["count_ops", "op_histogram", "peak_memory_gb", "time_calls", "summary"]


def time_calls(fn: Callable[[], object], runs: int, warmup: int = 1) -> list[float]:
    """Wall seconds of ``runs`` calls of ``fn`` (which must evaluate its own results), after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def summary(times: list[float]) -> str:
    ms = sorted(t * 1e3 for t in times)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return f"mean {statistics.fmean(ms):.2f} ms, p50 {statistics.median(ms):.2f} ms, p95 {p95:.2f} ms (n={len(ms)})"
