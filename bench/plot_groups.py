"""A group's tick and memory against its conversation count, for one or more code versions side by side:
``python -m bench.plot_groups OUT.png LABEL=SESSIONS.json[,MORE.json] [LABEL=...]``.

Each series is a code version: the rows of its ``voicechat bench --sessions`` JSON files (several files are merged,
later files' counts replacing earlier ones'). The left panel draws tick p50 (solid) and p95 (dashed) in ms with the
80 ms frame as a line; the right one the peak device memory in GB, both against N on a log2 axis (docs/batching.md
§6). Drawn with Pillow (Gradio's dependency), so the lab needs nothing more.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from PIL import Image, ImageDraw

from voicechat.config import FRAME_SECONDS

COLORS = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189)]
PANEL_W, PANEL_H, MARGIN = 520, 360, 60


def series(spec: str) -> tuple[str, dict[int, dict]]:
    """``LABEL=a.json,b.json`` -> (label, {N: its row})."""
    label, _, files = spec.partition("=")
    if not files:
        raise argparse.ArgumentTypeError(f"a series is LABEL=FILE.json[,FILE.json]; got {spec!r}")
    rows: dict[int, dict] = {}
    for f in files.split(","):
        try:
            found = json.loads(Path(f).read_text())["rows"]
            rows.update({row["sessions"]: row for row in found})
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise argparse.ArgumentTypeError(f"{f} is not a `voicechat bench --sessions` JSON file ({e!r})") from None
    return label, rows


def nice_top(value: float) -> float:
    """The axis' top: 1, 2 or 5 times a power of ten at or above ``value``."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= value)


class Panel:
    """One plot area: N (log2) across, a linear value up from 0 to ``top``."""

    def __init__(self, draw: ImageDraw.ImageDraw, left: int, counts: list[int], top: float, title: str):
        self.draw, self.left, self.top = draw, left, top
        self.lo, self.hi = math.log2(min(counts)), math.log2(max(counts)) or 1.0
        x0, y0, x1, y1 = self.box = (left + MARGIN, 30, left + PANEL_W - 20, PANEL_H - 40)
        draw.rectangle(self.box, outline="black")
        draw.text((x0, 10), title, fill="black")
        for n in counts:
            x, _ = self.at(n, 0)
            draw.line([(x, y1), (x, y1 + 4)], fill="black")
            draw.text((x - 6, y1 + 8), str(n), fill="black")
        draw.text(((x0 + x1) // 2 - 40, y1 + 22), "conversations N", fill="black")
        for i in range(6):
            v = top * i / 5
            _, y = self.at(min(counts), v)
            draw.line([(x0 - 4, y), (x0, y)], fill="black")
            draw.text((left + 8, y - 6), f"{v:g}", fill="black")

    def at(self, n: float, value: float) -> tuple[float, float]:
        x0, y0, x1, y1 = self.box
        span = (self.hi - self.lo) or 1.0
        return (x0 + (math.log2(n) - self.lo) / span * (x1 - x0), y1 - min(value, self.top) / self.top * (y1 - y0))

    def line(self, points: list[tuple[int, float]], color, dashed: bool = False, dots: bool = True) -> None:
        xy = [self.at(n, v) for n, v in points]
        for (a, b) in zip(xy, xy[1:]):
            if not dashed:
                self.draw.line([a, b], fill=color, width=2)
                continue
            steps = max(1, int(math.dist(a, b) // 8))
            for k in range(0, steps, 2):
                p = (a[0] + (b[0] - a[0]) * k / steps, a[1] + (b[1] - a[1]) * k / steps)
                q = (a[0] + (b[0] - a[0]) * (k + 1) / steps, a[1] + (b[1] - a[1]) * (k + 1) / steps)
                self.draw.line([p, q], fill=color, width=2)
        for x, y in xy if dots else ():
            self.draw.ellipse([x - 3, y - 3, x + 3, y + 3], fill=color)


def plot(out: Path, all_series: list[tuple[str, dict[int, dict]]]) -> None:
    counts = sorted({n for _, rows in all_series for n in rows})
    if not counts:
        raise SystemExit("no rows in the JSON files")
    image = Image.new("RGB", (2 * PANEL_W, PANEL_H + 20 * len(all_series)), "white")
    draw = ImageDraw.Draw(image)
    frame_ms = FRAME_SECONDS * 1e3
    tick_top = nice_top(max([frame_ms] + [r["tick"]["p95"] for _, rows in all_series for r in rows.values()]))
    memory_top = nice_top(max(r["peak_gb"] for _, rows in all_series for r in rows.values()))
    ticks = Panel(draw, 0, counts, tick_top, "tick p50 (solid) and p95 (dashed), ms")
    memory = Panel(draw, PANEL_W, counts, memory_top, "peak device memory, GB")
    ticks.line([(counts[0], frame_ms), (counts[-1], frame_ms)], (120, 120, 120), dashed=True, dots=False)
    for i, (label, rows) in enumerate(all_series):
        color = COLORS[i % len(COLORS)]
        ns = sorted(rows)
        ticks.line([(n, rows[n]["tick"]["p50"]) for n in ns], color)
        ticks.line([(n, rows[n]["tick"]["p95"]) for n in ns], color, dashed=True)
        memory.line([(n, rows[n]["peak_gb"]) for n in ns], color)
        draw.text((MARGIN, PANEL_H + 20 * i), f"{label}: N = {', '.join(map(str, ns))}", fill=color)
    image.save(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="the PNG to write")
    p.add_argument("series", nargs="+", type=series, help="LABEL=SESSIONS.json[,MORE.json]: one code version")
    a = p.parse_args(argv)
    plot(a.out, a.series)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
