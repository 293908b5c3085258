"""``voicechat bench`` (frame.py on workload.py's input) and the graph and memory counters it shares with the lab.
The lab's part-by-part benchmarks and the peer harness's adapter are in the repository's bench/ (not installed).

They print numbers; nothing here asserts a time.
"""

from __future__ import annotations

import io
from collections import Counter

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


def peak_memory_gb() -> float:
    return mx.get_peak_memory() / 1e9
