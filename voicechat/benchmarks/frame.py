"""Per-frame speed of a checkpoint:
``python -m voicechat bench --model M [--frames N] [--minutes X] [--json out.json]``.

Prints, on any checkpoint voicechat loads (tiny, medium or full-size random ones:
``python -m voicechat.random_checkpoint``):

* load time, the prompt prefill (one call) and the session's setup (prefill, TTS warm-up, TTS over the prompt);
* the offline loop (``generate`` on ``--frames`` x 80 ms of input): per 80 ms frame mean / p50 / p95 / p99 / max,
  and one profiled run's split per network (a host sync at every stage boundary, so its sums run a little high);
* the streaming session fed 80 ms at a time, as a microphone would: per-frame compute and the latency from a
  completed 80 ms input frame to its output samples (the ``feed`` call that completes it);
* with ``--minutes``, one long session (the same 80 ms feeding): per-frame p50 / p95 / p99 / max over the whole of
  it and per 250 frames (with the CPU time of the thread that feeds it, where MLX builds, walks and launches the
  graph), the frames over 1.5x and 2x the median and where they were, and memory: peak, and active memory per minute;
* graph nodes of one frame per network, and peak memory.

Workload (``--workload``): ``speech`` (default) scripts the text channel as speech has it, a new subword id every 4
frames from the checkpoint's vocabulary (the words of a fixed English paragraph), so the TTS character encoder runs
as it does on real answers; ``model`` keeps whatever the checkpoint's (random) LLM says. The input is the harness
question repeated, after the system prompt "You are a helpful assistant."; app mode, the checkpoint's TTS sampling.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from .. import compute
import mlx.core as mx

from ..files import write_atomically
from . import count_ops, peak_memory_gb
from .workload import FRAME, PARAGRAPH, PROMPT, RATE, bench_input, stats, text_id_at


def speech_script(model, prompt_frames: int):
    """The text channel of the ``speech`` workload (``workload.text_id_at``: pad over the prompt too); the function
    channel as the model says. -> script(t) -> (text_id, None) for the session's seam."""
    ids = model.tokenizer.encode(PARAGRAPH)
    pad = model.config.pad_id

    def script(t: int) -> tuple[int, None]:
        scripted = text_id_at(t, prompt_frames, ids, pad)
        return (pad if scripted is None else scripted), None

    return script


def frame_ops(model) -> dict:
    """Graph nodes of one timeline frame per network (parameters and state evaluated first)."""
    from ..timeline.conversation import Session
    from ..llm import lm
    from ..tts.mog import KeyNoise

    s = Session(model, PROMPT)
    c, stt, group = model.config, s.stt, s.group  # a lone session's state: its group's row 0
    audio = mx.zeros((c.llm.hidden_size,))
    prev = mx.array([c.pad_id])
    text, func = lm.step(stt, c, group.lm, audio[None], prev, prev if stt.function_head is not None else None)
    llm_ops = count_ops(text, *([func] if func is not None else []), *group.lm.arrays)
    mx.eval(text, group.lm.arrays)
    x = bench_input(2)
    projected, encoded = s.listener.push(x)
    perception_ops = count_ops(projected, encoded, *s.listener.arrays())
    mx.eval(projected, encoded, s.listener.arrays())
    st = s.settings
    tts = s.tts.tts_model
    hidden = tts.step_hidden(group.tts_state, group.prev_code, mx.array([300]))
    codes = tts.generate_codes(hidden, KeyNoise(0), st.guidance_scale, st.top_p, st.top_k, st.noise_scale)
    tts_ops = count_ops(codes, *group.tts_state.arrays())
    mx.eval(codes, group.tts_state.arrays())
    codec = s.tts.audio_codec
    codec_ops = count_ops(*codec.decode_frame(codes.reshape(1, 1, -1), *codec.decoder.initial_histories(1)))
    per = {"perception (2 frames)": perception_ops, "llm": llm_ops, "tts": tts_ops, "codec": codec_ops}
    per["total"] = perception_ops // 2 + llm_ops + tts_ops + codec_ops
    return per


def offline(model, x: np.ndarray, runs: int, workload: str) -> dict:
    """``generate`` on the whole input: per-frame wall times (from the progress callback) and a profiled split."""
    from .. import GenerationConfig

    cfg = GenerationConfig(extra_seconds=0.0)
    p = model.prompt_length(PROMPT)
    script = speech_script(model, p) if workload == "speech" else None

    def run(seed, progress=None, profile=False):
        return model._generate(x, RATE, system_prompt=PROMPT, seed=seed, config=cfg, progress=progress,
                               profile=profile, script=script)

    run(0)  # warm-up (compiles, caches)
    walls, totals = [], []
    for i in range(runs):
        stamps = []
        t0 = time.perf_counter()
        result = run(i, progress=lambda d, t, u: stamps.append(time.perf_counter()))
        totals.append(time.perf_counter() - t0)
        walls += list(np.diff(stamps)[p + 1:])  # frames after the prompt (the first stamp is the announcement)
    calls = run(0, profile=True).stage_calls
    return {"frames": stats(walls), "wall_per_generate_s": statistics.median(totals),
            "timeline_frames": len(result.text_tokens) + p, "prompt_frames": p,
            "prompt_prefill_ms": 1e3 * sum(calls.get("prompt prefill", [0.0])),
            "split": {k: stats(calls.get(k, [])) for k in ("llm", "tts", "codec", "transcript")}}


WINDOW = 250  # frames (20 s) per row of a long session's per-window statistics


def live(model, x: np.ndarray, workload: str, seed: int = 0) -> dict:
    """A session fed 80 ms at a time: each feed completes one frame; its duration is the latency from the completed
    input frame to its samples, and the frame's own compute."""
    from ..timeline.conversation import Session

    t0 = time.perf_counter()
    p = model.prompt_length(PROMPT)
    s = Session(model, PROMPT, seed, script=speech_script(model, p) if workload == "speech" else None)
    setup = time.perf_counter() - t0
    step = round(FRAME * RATE)
    latency, computed, host = [], [], []
    mx.reset_peak_memory()
    start_memory = mx.get_active_memory()
    memory = []  # (minutes of input, active GB)
    for i in range(0, len(x) - step + 1, step):
        t0, c0 = time.perf_counter(), time.thread_time()
        frames = s.feed(x[i:i + step], RATE)
        if frames:
            latency.append(time.perf_counter() - t0)
            host.append(time.thread_time() - c0)
            computed += [f.seconds["total"] for f in frames]
        if (i // step) % 750 == 749:  # each minute of input
            memory.append(((i + step) / RATE / 60, mx.get_active_memory() / 1e9))
    times = computed
    median = statistics.median(times) if times else 0.0
    slow = [(j, round(t * 1e3, 1)) for j, t in enumerate(times) if t > 1.5 * median]
    return {"setup_s": setup, "frames": stats(times), "latency": stats(latency),
            "over_1.5x_median": len(slow), "over_2x_median": sum(1 for t in times if t > 2 * median),
            "slowest": sorted(slow, key=lambda a: -a[1])[:10], "frames_ms": [round(t * 1e3, 2) for t in times],
            "by_window": [{"first": j, **stats(times[j:j + WINDOW]), "host_cpu_p50": stats(host[j:j + WINDOW])["p50"]}
                          for j in range(0, len(times), WINDOW)],
            "memory_gb": {"start_active": start_memory / 1e9, "peak": peak_memory_gb(), "per_minute": memory}}


def run(model_spec: str, frames: int, runs: int, minutes: float, workload: str) -> dict:
    from .. import load

    mx.reset_peak_memory()
    t0 = time.perf_counter()
    model = load(model_spec)  # on a GPU this includes warming the compiled functions up (Model.warm_up)
    load_s = time.perf_counter() - t0
    weights_gb = mx.get_active_memory() / 1e9
    load_peak_gb = peak_memory_gb()
    mx.reset_peak_memory()
    x = bench_input(frames)
    out = {"model": model_spec, "device": str(mx.default_device()), "blas": compute.BLAS, "mlx": mx.__version__,
           "workload": workload, "load_s": load_s, "weights_gb": weights_gb, "load_peak_gb": load_peak_gb}
    out["offline"] = offline(model, x, runs, workload)
    live(model, bench_input(8), workload)  # warm-up of the session's shapes
    out["session"] = live(model, x, workload)
    if minutes:
        out["long_session"] = {"minutes": minutes, **live(model, bench_input(round(minutes * 60 / FRAME)), workload)}
    out["ops_per_frame"] = frame_ops(model)
    out["peak_memory_gb"] = peak_memory_gb()
    out["session_vs_offline"] = out["session"]["frames"]["mean"] / max(out["offline"]["frames"]["mean"], 1e-9)
    out["realtime_factor"] = out["session"]["frames"]["mean"] / (FRAME * 1e3)
    return out


def print_table(r: dict) -> None:
    print(f"model {r['model']}  device {r['device']}  mlx {r['mlx']}  BLAS {r['blas']}  workload {r['workload']}")
    o, s = r["offline"], r["session"]
    print(f"load {r['load_s']:.2f} s ({r['weights_gb']:.2f} GB, peak {r['load_peak_gb']:.2f} GB)   "
          f"prompt prefill ({o['prompt_frames']} positions, one call) {o['prompt_prefill_ms']:.1f} ms   "
          f"session setup {s['setup_s'] * 1e3:.0f} ms   "
          f"offline timeline {o['timeline_frames']} frames")
    print(f"{'per 80 ms frame, ms':34s} {'mean':>8s} {'p50':>8s} {'p95':>8s} {'p99':>8s} {'max':>8s}")
    rows = {"offline loop": o["frames"], "session, 80 ms feeds": s["frames"],
            "session latency (input->samples)": s["latency"]}
    if "long_session" in r:
        rows[f"long session ({r['long_session']['minutes']:g} min)"] = r["long_session"]["frames"]
    rows.update({f"  offline split: {k}": v for k, v in o["split"].items() if v["n"]})
    for name, st in rows.items():
        print(f"{name:34s} " + " ".join(f"{st[k]:8.2f}" for k in ("mean", "p50", "p95", "p99", "max")))
    print(f"session / offline per frame {r['session_vs_offline']:.2f}x   real-time factor {r['realtime_factor']:.3f}")
    if "long_session" in r:
        ls = r["long_session"]
        mem = ls["memory_gb"]
        print(f"long session: {ls['over_1.5x_median']} frames over 1.5x the median, {ls['over_2x_median']} over 2x; "
              f"slowest (frame, ms) {ls['slowest'][:5]}")
        print(f"  by {WINDOW} frames (first frame: p50 / p95 / max, and p50 of the feeding thread's CPU time): "
              + ", ".join(f"{w['first']}: {w['p50']:.1f} / {w['p95']:.1f} / {w['max']:.1f}, cpu {w['host_cpu_p50']:.1f}"
                          for w in ls["by_window"]))
        print(f"  memory: active at start {mem['start_active']:.2f} GB, peak {mem['peak']:.2f} GB, active per minute "
              + ", ".join(f"{m:g} min {g:.2f} GB" for m, g in mem["per_minute"]))
    ops = r["ops_per_frame"]
    print("graph nodes per frame: " + ", ".join(f"{k} {v}" for k, v in ops.items()))
    print(f"peak memory after load (conversations) {r['peak_memory_gb']:.2f} GB")


def main(args=None) -> int:
    if args is None:
        p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
        add_arguments(p)
        args = p.parse_args()
    r = run(args.model, args.frames, args.runs, args.minutes, args.workload)
    print_table(r)
    if args.json:
        write_atomically(Path(args.json), json.dumps(r, indent=1).encode("utf-8"))
    return 0


def add_arguments(p: argparse.ArgumentParser, demo: bool = False) -> None:
    """The bench's arguments; ``demo``: ``--demo`` (the CLI's tiny random-weight model) instead of ``--model``."""
    p.add_argument("--model", required=not demo, help="checkpoint directory or Hub repo id")
    if demo:
        p.add_argument("--demo", action="store_true", help="the demo model: a tiny random-weight checkpoint written "
                                                           "for the run (no download)")
    p.add_argument("--frames", type=int, default=50, help="80 ms input frames per run; with --sessions, the "
                   "ticks measured once all N conversations are past their prompts (default 50)")
    p.add_argument("--runs", type=int, default=3, help="timed offline runs (default 3)")
    p.add_argument("--minutes", type=float, default=0.0, help="also one long session of this many minutes")
    p.add_argument("--workload", choices=("speech", "model"), default="speech",
                   help="speech (default): a scripted text channel, as real answers drive the TTS; model: what the "
                        "checkpoint's own LLM says (the module's docstring)")
    p.add_argument("--json", metavar="FILE", help="also write the numbers here as JSON")


if __name__ == "__main__":
    raise SystemExit(main())
