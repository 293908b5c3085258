"""Which kernels a group's steady tick runs at R rows, and for how long each, on CUDA (docs/batching.md §6 asks why
the tick grows from 1 to 8 rows):

    ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum -f -o k8 \\
        python -m bench.kernel_profile --model M --rows 8
    ncu --import k8.ncu-rep --csv --page raw --print-units base --print-kernel-base demangled > k8.csv
    python -m bench.kernel_profile --summarize k1.csv k8.csv [--top 40]

    py-spy record --native -r 200 -f raw -o h8.raw -- python -m bench.kernel_profile --model M --rows 8 --ticks 200
    python -m bench.host_profile h8.raw

A run sets up R conversations past their prompts (``bench.rows``'s group), then, bracketed by CUDA's
``cuProfilerStart`` / ``cuProfilerStop`` (the driver API through ctypes, so a profiler started with profiling off
sees only this), ``--ticks`` whole ticks, a run of ``PHASE_MARKS`` marker kernels, and one tick whose parts
(``bench.rows.PARTS``) are each evaluated on their own, each after ``i + 1`` marker kernels for the i-th part it
evaluates. A marker is one ``arctanh`` of a small array: a kernel (MLX's ``unary_v<ArcTanh ...>``) that the networks
never run. ``--summarize`` reads ncu's CSV of such runs (one per R) and prints, per kernel, its launches and
microseconds per whole tick in each run, then each part's kernel time; on a machine without CUDA the ticks just run.
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import ctypes.util
import itertools
import re
from collections import Counter, defaultdict

import mlx.core as mx

from voicechat.timeline import admission
from voicechat import load

from bench.rows import ProfiledGroup, steady_group

MARK = "ArcTanh"  # the marker kernel's operation, in its demangled name
PHASE_MARKS = 9  # more marks than parts: the whole ticks' end


class CudaProfiler:
    """``cuProfilerStart`` / ``cuProfilerStop`` of the CUDA driver, or nothing where there is none."""

    def __init__(self):
        self.lib = None
        if mx.cuda.is_available():
            self.lib = ctypes.CDLL(ctypes.util.find_library("cuda") or "libcuda.so.1")

    def __enter__(self):
        mx.synchronize()
        if self.lib is not None:
            self.lib.cuProfilerStart()
        return self

    def __exit__(self, *exc):
        mx.synchronize()
        if self.lib is not None:
            self.lib.cuProfilerStop()


_MARKED: list[mx.array] = []  # the marker's operand, evaluated before any mark: a mark is its one kernel alone


def marker() -> mx.array:
    """One marker kernel's graph: ``arctanh`` of an evaluated array, one node (of a fresh ``mx.zeros`` it was two
    kernels, the fill and the arctanh, and the fills broke the runs of marks apart in the 2026-12-03 H200 profile)."""
    if not _MARKED:
        _MARKED.append(mx.zeros((4,)))
        mx.eval(_MARKED[0])
    return mx.arctanh(_MARKED[0])


def marks(n: int) -> None:
    """``n`` marker kernels, each evaluated on its own."""
    for _ in range(n):
        mx.eval(marker())


class MarkedGroup(ProfiledGroup):
    """A group whose profiled tick runs the marks of each part before evaluating it; ``parts``: their order."""

    def __init__(self, model, max_sessions: int, max_minutes=None):
        super().__init__(model, max_sessions, max_minutes)
        self.parts: list[str] = []

    def _clock(self, rows: list):
        clock = super()._clock(rows)
        stage = clock.stage

        def marked_stage(name, t0, *arrays):  # the part's graph is built; its kernels run in stage()
            if clock.profile:
                self.parts.append(name)
                marks(len(self.parts))
            return stage(name, t0, *arrays)

        clock.stage = marked_stage
        return clock


def profile(model_spec: str, rows: int, ticks: int) -> list[str]:
    model = load(model_spec)
    admission.MEMORY_SHARE = 1.0  # a few dozen positions each: as bench.rows, the group may take the free memory
    group, sessions, tick = steady_group(model, rows, ticks + 1, MarkedGroup)
    with CudaProfiler():
        for _ in range(ticks):
            tick()
        marks(PHASE_MARKS)
        group.profiling = True
        tick()
    for s in sessions:
        s.close()
    return group.parts


# ---------------------------------------------------------------------------------------------------------------
# ncu's CSV
# ---------------------------------------------------------------------------------------------------------------
TIME = "gpu__time_duration.sum"
SCALE_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}


def kernel_times(path: str) -> list[tuple[str, float]]:
    """(demangled kernel name, microseconds) of each kernel ncu profiled, in order, from its ``--csv`` output: the
    details page (a row per kernel and metric) or the raw page (a row per kernel, a column per metric, a row of units
    under the header)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(line for line in f if line.startswith('"')))
    if rows and TIME in rows[0]:  # --page raw
        scale = SCALE_US[rows[0][TIME]]
        return [(row["Kernel Name"], float(row[TIME].replace(",", "")) * scale) for row in rows[1:]]
    return [(row["Kernel Name"], float(row["Metric Value"].replace(",", "")) * SCALE_US[row["Metric Unit"]])
            for row in rows if row.get("Metric Name") == TIME]


def short_name(name: str) -> str:
    """A demangled kernel name without namespaces, parameters and all but its first template argument."""
    name = re.sub(r"\b(void |mlx::core::cu::|mlx::core::|cutlass::|cute::)", "", name)
    name = name.split("(")[0]
    head, _, rest = name.partition("<")
    return f"{head}<{re.split(r'[,<>]', rest)[0]}>" if rest else head


def split_run(kernels: list[tuple[str, float]]) -> tuple[list, list[list]]:
    """-> (the whole ticks' kernels, each profiled part's kernels in order), by the runs of marker kernels: PHASE_MARKS
    end the whole ticks, then i marks open the i-th part (a part that ran no kernel
    leaves its marks in the next run)."""
    due = itertools.chain([PHASE_MARKS], itertools.count(1))
    buckets = [[]]  # the whole ticks; then what ran before the first part; then each part
    marks_due, marks_run = next(due), 0
    for name, us in kernels + [("", 0.0)]:  # the sentinel ends a last run of marks
        if MARK in name:
            marks_run += 1
            continue
        while marks_run:
            if marks_run < marks_due:
                raise ValueError(f"a run of {marks_run} marker kernels where {marks_due} were due")
            marks_run -= marks_due
            marks_due = next(due)
            buckets.append([])
        if name:
            buckets[-1].append((name, us))
    return buckets[0], buckets[2:]


def summarize(paths: list[str], top: int) -> None:
    tables, parts = [], []
    for path in paths:
        kernels = kernel_times(path)
        whole, part_runs = split_run(kernels)
        per = defaultdict(lambda: [0, 0.0])
        for name, us in whole:
            per[short_name(name)][0] += 1
            per[short_name(name)][1] += us
        tables.append(per)
        parts.append([sum(us for _, us in run) for run in part_runs])
        print(f"{path}: {len(kernels)} kernels profiled, {len(whole)} in the whole ticks "
              f"({sum(us for _, us in whole) / 1e3:.2f} ms of kernel time), {len(part_runs)} parts")
    names = Counter()
    for per in tables:
        for name, (_, us) in per.items():
            names[name] = max(names[name], us)
    print(f"{'kernel (whole ticks: launches, us)':70s}" + "".join(f" {p[-24:]:>24s}" for p in paths))
    for name, _ in names.most_common(top):
        cells = "".join(f" {per[name][0] if name in per else 0:8d} {per[name][1] if name in per else 0:15.1f}"
                        for per in tables)
        print(f"{name[:70]:70s}{cells}")
    print("parts' kernel time (ms), in the order the profiled tick evaluates them:")
    for path, times in zip(paths, parts):
        print(f"  {path}: " + " ".join(f"{t / 1e3:.2f}" for t in times))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kernel_profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--model")
    p.add_argument("--rows", type=int, default=8, help="conversations in the group (default 8)")
    p.add_argument("--ticks", type=int, default=2, help="whole ticks profiled (default 2)")
    p.add_argument("--summarize", nargs="+", metavar="CSV", help="print ncu CSV logs of runs side by side")
    p.add_argument("--top", type=int, default=40, help="kernels listed by --summarize (default 40)")
    a = p.parse_args(argv)
    if a.summarize:
        summarize(a.summarize, a.top)
        return 0
    if not a.model:
        p.error("--model is needed unless --summarize")
    if a.rows < 1 or a.ticks < 1:
        p.error(f"--rows and --ticks take 1 or more; got {a.rows} and {a.ticks}")
    parts = profile(a.model, a.rows, a.ticks)
    print(f"rows {a.rows}: {a.ticks} whole ticks, then the parts {', '.join(parts)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
