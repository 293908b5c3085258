"""Where a start's time goes: ``python -m bench.cold_start M [--frames 25] [--sessions N] [--json out.json]``.

In one fresh process, as ``voicechat.load`` and a first conversation run them: reading the checkpoint and building
the model; the warm-up at load (on a GPU: every per-frame function traced and run once, at every cache size and, with
``--sessions``, every row count a group of N conversations meets, as a server's ``--max-sessions N - 1`` warms up,
so MLX compiles the kernels they need), part by part; a session's setup (system prompt, TTS warm-up); then the first
``--frames`` x 80 ms fed as a microphone would (the first answer): each feed's time. Also how many files MLX's CUDA
kernel cache (``MLX_PTX_CACHE_DIR``, voicechat keeps it in ``~/.cache/voicechat/mlx-ptx``) held before and after.

Run it twice on a fresh GPU machine: the first process compiles every kernel, the second finds them cached.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from voicechat import compute
import mlx.core as mx

from voicechat.benchmarks.frame import speech_script
from voicechat.benchmarks.workload import FRAME, PROMPT, RATE, bench_input


def cached_kernels() -> int:
    """Files in MLX's CUDA kernel cache (0 where there is none, e.g. on a CPU or on Metal)."""
    folder = Path(os.environ.get("MLX_PTX_CACHE_DIR", ""))
    return sum(1 for f in folder.rglob("*") if f.is_file()) if folder.is_dir() else 0


def run(model_spec: str, frames: int, sessions: int = 1) -> dict:
    from voicechat.model import Model
    from voicechat.network import load_parts
    from voicechat.timeline.conversation import Session

    out = {"model": model_spec, "device": str(mx.default_device()), "mlx": mx.__version__,
           "compiled": compute.compile_enabled(), "sessions": sessions, "cached_kernels_before": cached_kernels()}
    t0 = time.perf_counter()
    model = Model(*load_parts(model_spec))
    mx.eval(model.net.parameters())
    out["read_and_build_s"] = time.perf_counter() - t0
    out["warm_up_s"] = model.warm_up(sessions=sessions) if compute.compile_enabled() else {}
    t0 = time.perf_counter()
    session = Session(model, PROMPT, script=speech_script(model, model.prompt_length(PROMPT)))
    out["session_setup_s"] = time.perf_counter() - t0
    x, step = bench_input(frames), round(FRAME * RATE)
    feeds = []
    for i in range(0, len(x) - step + 1, step):
        t0 = time.perf_counter()
        session.feed(x[i:i + step], RATE)
        feeds.append(time.perf_counter() - t0)
    out["first_answer"] = {"frames": len(feeds), "total_s": sum(feeds), "first_feed_ms": feeds[0] * 1e3,
                           "p50_ms": statistics.median(feeds) * 1e3, "max_ms": max(feeds) * 1e3}
    out["cached_kernels_after"] = cached_kernels()
    return out


def print_report(r: dict) -> None:
    print(f"model {r['model']}  device {r['device']}  mlx {r['mlx']}  compiled {r['compiled']}  warm-up for "
          f"{r['sessions']} conversation{'s' if r['sessions'] > 1 else ''}  kernel cache files "
          f"{r['cached_kernels_before']} before, {r['cached_kernels_after']} after")
    warm, a = r["warm_up_s"], r["first_answer"]
    start = r["read_and_build_s"] + sum(warm.values()) + r["session_setup_s"]
    rows = [("read the checkpoint and build the model", r["read_and_build_s"], "")]
    rows += [(f"warm-up: {part}", s, "") for part, s in warm.items()]
    rows += [("session setup", r["session_setup_s"], ""),
             (f"first answer: {a['frames']} feeds of 80 ms", a["total_s"],
              f"  (first {a['first_feed_ms']:.1f} ms, p50 {a['p50_ms']:.1f}, max {a['max_ms']:.1f})"),
             ("start to the end of the first answer", start + a["total_s"], "")]
    for name, seconds, note in rows:
        print(f"{name:44s} {seconds:8.2f} s{note}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--frames", type=int, default=25, help="80 ms feeds of the first answer (default 25)")
    p.add_argument("--sessions", type=int, default=1,
                   help="the warm-up of a group of this many conversations (default 1: what load does)")
    p.add_argument("--json")
    args = p.parse_args()
    if args.sessions < 1:
        p.error(f"--sessions must be at least 1, got {args.sessions}")
    r = run(args.model, args.frames, args.sessions)
    print_report(r)
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
