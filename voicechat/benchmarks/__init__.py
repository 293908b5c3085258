"""Benchmark scripts (``python -m voicechat.benchmarks.<part>``) and the measuring helpers they share.

They print numbers; nothing here asserts a time.
"""

from __future__ import annotations

import io
import statistics
import time
from collections import Counter
from typing import Callable

from .. import compute  # noqa: F401  (BLAS preload before mlx)
import mlx.core as mx


def op_histogram(*outputs: mx.array) -> Counter:
    """Primitives (graph nodes) that evaluating ``outputs`` would run, by name; evaluated inputs are not counted."""
    dot = io.StringIO()
    mx.export_to_dot(dot, *outputs)
    names = Counter()
    for line in dot.getvalue().splitlines():
        if "shape=rectangle" in line:
            names[line.split('label ="', 1)[1].split('"', 1)[0]] += 1
    return names


def count_ops(*outputs: mx.array) -> int:
    return sum(op_histogram(*outputs).values())


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


def peak_memory_gb() -> float:
    return mx.get_peak_memory() / 1e9
