"""Per-frame speed of a checkpoint: ``python -m voicechat bench --model M [--frames N] [--json out.json]``.

Prints load time, prompt prefill time, and per 80 ms frame: perception, RNNT, LLM, TTS, codec and total (mean, p50,
p95), the real-time factor, the number of MLX graph nodes one frame evaluates, and peak memory. Works on any
checkpoint voicechat loads (tiny, medium or full-size random ones: ``python -m voicechat.random_checkpoint``).

The input is ``--frames`` x 80 ms of the harness question (repeated) after the system prompt "You are a helpful
assistant."; the run uses the checkpoint's TTS sampling and app mode with exactly that input (no appended silence).
Timings: the unprofiled runs give the true per-frame wall time (from the progress callback); one extra run syncs at
every stage boundary and gives the split (its sums run a little above the unprofiled total).
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

from . import count_ops, peak_memory_gb

PROMPT = "You are a helpful assistant."
FRAME = 0.08


def bench_input(frames: int, rate: int = 16000) -> np.ndarray:
    """``frames`` x 80 ms of speech-like input: the harness question repeated (a chirp if it is not at hand)."""
    n = round(frames * FRAME * rate)
    wav = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "nemo" / "question_16k.wav"
    if wav.is_file():  # 16-bit PCM; the stdlib reads it (the GPU machines lack libsndfile's Python binding)
        import wave

        with wave.open(str(wav)) as f:
            x = np.frombuffer(f.readframes(f.getnframes()), np.int16).astype(np.float32) / 32768
    else:
        t = np.arange(rate * 2) / rate
        x = (0.3 * np.sin(2 * np.pi * (200 + 400 * t) * t)).astype(np.float32)
    return np.resize(x, n).astype(np.float32)


def stats(values: list[float]) -> dict:
    ms = sorted(v * 1e3 for v in values)
    if not ms:
        return {"mean": 0.0, "p50": 0.0, "p95": 0.0, "n": 0}
    return {"mean": statistics.fmean(ms), "p50": statistics.median(ms),
            "p95": ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))], "n": len(ms)}


def frame_ops(model) -> dict:
    """Graph nodes of one timeline frame per network (parameters and state evaluated first)."""
    from ..loop import tts_settings
    from ..config import GenerationConfig
    from ..stt import lm
    from ..tts.eartts import warmup_inputs
    from ..tts.mog import KeyNoise

    c, net = model.config, model.net
    state = lm.LMState(net.stt_model, c)
    audio = mx.zeros((1, c.llm.hidden_size))
    prev = mx.array([c.pad_id])
    mx.eval(state.arrays)
    text, func = lm.step(net.stt_model, c, state, audio, prev, prev if net.stt_model.function_head is not None else None)
    llm_ops = count_ops(text, *([func] if func is not None else []), *state.arrays)
    mx.eval(text, state.arrays)
    codes = model._warmup_codec_codes(None)
    tts_state, _ = net.tts_model.tts_model.warmup(warmup_inputs(codes, c.pad_id, c.eos_id, c.tts.speech_pad_id),
                                                  net.tts_model.audio_prompt_latents.get(c.speaker_name), KeyNoise(0))
    s = tts_settings(c, GenerationConfig())
    frame = net.tts_model.tts_model.step(tts_state, mx.array(codes[-1]), c.pad_id, s.guidance_scale, s.top_p, s.top_k,
                                         s.noise_scale)
    tts_ops = count_ops(frame, *tts_state.arrays())
    mx.eval(frame, tts_state.arrays())
    codec = net.tts_model.audio_codec
    codec_ops = count_ops(*codec.decode_frame(frame.reshape(1, 1, -1), *codec.decoder.initial_histories(1)))
    return {"llm": llm_ops, "tts": tts_ops, "codec": codec_ops, "total": llm_ops + tts_ops + codec_ops}


def run(model_spec: str, frames: int, runs: int) -> dict:
    from .. import GenerationConfig, load

    mx.reset_peak_memory()
    t0 = time.perf_counter()
    model = load(model_spec)
    load_s = time.perf_counter() - t0
    x = bench_input(frames)
    cfg = GenerationConfig(extra_seconds=0.0)
    model.generate(x, 16000, system_prompt=PROMPT, seed=0, config=cfg)  # warm-up (compiles, caches)
    frame_walls, totals = [], []
    result = None
    for i in range(runs):
        stamps = []
        t0 = time.perf_counter()
        result = model.generate(x, 16000, system_prompt=PROMPT, seed=i, config=cfg,
                                progress=lambda d, t, u: stamps.append(time.perf_counter()))
        totals.append(time.perf_counter() - t0)
        frame_walls += list(np.diff(stamps)[result.prompt_frames:])  # frames after the prompt
    profiled = model.generate(x, 16000, system_prompt=PROMPT, seed=0, config=cfg, profile=True)
    steps = len(profiled.text_tokens)
    calls = profiled.stage_calls
    once = {k: sum(calls.get(k, [])) / steps for k in ("perception", "transcript", "tts warm-up")}
    out = {
        "model": model_spec, "device": str(mx.default_device()), "blas": compute.BLAS, "mlx": mx.__version__,
        "load_s": load_s, "prompt_frames": result.prompt_frames, "timeline_frames": steps + result.prompt_frames,
        "prompt_prefill_ms": 1e3 * sum(calls.get("prompt prefill", [0.0])),
        "per_frame_ms": {
            "perception (once, per frame)": {"mean": 1e3 * once["perception"]},
            "rnnt (once, per frame)": {"mean": 1e3 * once["transcript"]},
            "tts warm-up (once, per frame)": {"mean": 1e3 * once["tts warm-up"]},
            "llm": stats(calls.get("llm", [])[1:]),
            "tts": stats(calls.get("tts", [])),
            "codec": stats(calls.get("codec", [])[:-1]),
            "total (unprofiled)": stats(frame_walls),
        },
        "wall_per_generate_s": statistics.median(totals),
        "ops_per_frame": frame_ops(model),
        "peak_memory_gb": peak_memory_gb(),
    }
    total = out["per_frame_ms"]["total (unprofiled)"]["mean"]
    out["realtime_factor"] = total / (FRAME * 1e3)
    return out


def print_table(r: dict) -> None:
    print(f"model {r['model']}  device {r['device']}  mlx {r['mlx']}  BLAS {r['blas']}")
    print(f"load {r['load_s']:.2f} s   prompt prefill ({r['prompt_frames']} positions, one call) "
          f"{r['prompt_prefill_ms']:.1f} ms   timeline {r['timeline_frames']} frames")
    print(f"{'per 80 ms frame':32s} {'mean':>9s} {'p50':>9s} {'p95':>9s}")
    for name, s in r["per_frame_ms"].items():
        cells = [f"{s[k]:9.2f}" if k in s else f"{'':9s}" for k in ("mean", "p50", "p95")]
        print(f"{name:32s} {' '.join(cells)}  ms")
    ops = r["ops_per_frame"]
    print(f"real-time factor {r['realtime_factor']:.3f} (per-frame time / 80 ms)   graph nodes per frame: "
          f"LLM {ops['llm']}, TTS {ops['tts']}, codec {ops['codec']}, total {ops['total']}")
    print(f"peak memory {r['peak_memory_gb']:.2f} GB")


def main(args=None) -> int:
    if args is None:
        p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("--model", required=True)
        p.add_argument("--frames", type=int, default=50)
        p.add_argument("--json")
        args = p.parse_args()
    r = run(args.model, args.frames, getattr(args, "runs", 3))
    print_table(r)
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
