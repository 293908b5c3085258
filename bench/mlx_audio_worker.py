"""mlx-audio 0.6.2's VoiceChat on the shared workload (workload.py): the worker that side_by_side.py starts in
mlx-audio's venv. It prints ONE JSON line.

    /path/to/peer_audio/bin/python bench/mlx_audio_worker.py --ckpt DIR --frames 72 --runs 3

It runs as a file, without voicechat's package: ``workload.py`` and ``compute.py`` (voicechat's BLAS preload, before
mlx loads) are loaded from beside it. The checkpoint is loaded by mlx-audio's own ``load_model``. Measured as
voicechat's bench measures (frame.py): ``generate`` on the whole input after a warm-up (wall per run, and the time
between consecutive timeline positions after the prompt), and its streaming session fed 80 ms per ``push_audio``
(each call completes one frame: its duration is that frame's compute and latency).

Two things of mlx-audio are patched (facts from its session.py, streaming.py, model.py and conformer.py):
* the text channel: offline and streaming, each timeline position's text id is ``int(mx.argmax(text_logits[:, -1]))``
  of one ``VoiceChatSTT.__call__``. The STT module gets a subclass whose call returns the same output with the
  scripted id's logit set to +inf: the LLM still runs and is evaluated where it was, plus one elementwise op over the
  vocabulary. The call also stamps the time, one stamp per timeline position.
* ``conv_norm_type: batch_norm`` (NeMo's tiny checkpoints): mlx-audio's ConformerConvolution builds only a LayerNorm;
  a subclass puts mlx's BatchNorm (eps 1e-5, eval mode: running statistics, as NeMo's) in its place.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import statistics
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load_file(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# preloads the BLAS, then imports mlx
compute = load_file("voicechat_compute", HERE.parent / "voicechat" / "compute.py")
workload = load_file("voicechat_workload", HERE.parent / "voicechat" / "benchmarks" / "workload.py")

import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402
import numpy as np  # noqa: E402


class Script:
    """The scripted text channel, and one time stamp per timeline position of the current run."""

    def __init__(self, prompt_frames: int, ids: list[int], pad: int):
        self.prompt_frames, self.ids, self.pad = prompt_frames, ids, pad
        self.stamps: list[float] = []

    def reset(self) -> None:
        self.stamps = []

    def next_id(self):
        t = len(self.stamps)
        self.stamps.append(time.perf_counter())
        return workload.text_id_at(t, self.prompt_frames, self.ids, self.pad)

    def expected(self, frames: int) -> list[int]:
        return [workload.text_id_at(t, self.prompt_frames, self.ids, self.pad)
                for t in range(self.prompt_frames, self.prompt_frames + frames)]


def script_text_channel(stt, script: Script) -> None:
    base = type(stt)

    class ScriptedSTT(base):
        def __call__(self, inputs_embeds, *, cache=None):
            out = base.__call__(self, inputs_embeds, cache=cache)
            text_id = script.next_id()
            if text_id is not None:
                hot = mx.arange(out.text_logits.shape[-1]) == text_id
                out.text_logits = mx.where(hot, mx.array(math.inf, dtype=out.text_logits.dtype), out.text_logits)
            return out

    stt.__class__ = ScriptedSTT


def allow_batch_norm() -> None:
    from mlx_audio.stt.models.nemotron_asr import conformer

    base = conformer.ConformerConvolution

    class ConvolutionWithBatchNorm(base):
        def __init__(self, args):
            batch_norm = args.conv_norm_type == "batch_norm"
            super().__init__(dataclasses.replace(args, conv_norm_type="layer_norm") if batch_norm else args)
            if batch_norm:
                self.batch_norm = nn.BatchNorm(args.d_model, eps=1e-5)

    conformer.ConformerConvolution = ConvolutionWithBatchNorm


def load(ckpt: Path):
    from mlx.utils import tree_flatten
    from mlx_audio.sts.utils import load_model

    allow_batch_norm()
    model = load_model(ckpt)  # mlx-audio's loader and defaults (strict=False: see "missing_parameters")
    stored = {k for f in ckpt.glob("*.safetensors") for k in mx.load(str(f))}
    missing = sorted(k for k, _ in tree_flatten(model.parameters()) if k not in stored)
    return model, missing


def offline(model, x: np.ndarray, runs: int, cache: bool, script: Script) -> dict:
    session = model.create_session()

    def generate(seed: int):
        script.reset()
        return session.generate(mx.array(x), system_prompt=workload.PROMPT, seed=seed, use_language_cache=cache)

    t0 = time.perf_counter()
    generate(0)  # warm-up
    warmup_s = time.perf_counter() - t0
    totals, frames = [], []
    for i in range(runs):
        t0 = time.perf_counter()
        out = generate(i)
        totals.append(time.perf_counter() - t0)
        frames += list(np.diff(script.stamps[script.prompt_frames:]))
    timeline = len(script.stamps)
    text = out.text_tokens.tolist()
    return {"frames": workload.stats(frames), "wall_per_generate_s": statistics.median(totals), "runs_s": totals,
            "warmup_s": warmup_s, "timeline_frames": timeline, "prompt_frames": script.prompt_frames,
            "scripted": text == script.expected(len(text))}


def streaming(model, x: np.ndarray, script: Script, seed: int = 0) -> dict:
    session = model.create_session()
    script.reset()
    t0 = time.perf_counter()
    stream = session.create_streaming_session(system_prompt=workload.PROMPT, seed=seed, use_language_cache=True,
                                              use_perception_cache=True)
    setup = time.perf_counter() - t0
    step = round(workload.FRAME * workload.RATE)
    latency = []
    for i in range(0, len(x) - step + 1, step):
        t0 = time.perf_counter()
        stream.push_audio(x[i:i + step])
        latency.append(time.perf_counter() - t0)
    text = stream._text_tokens[script.prompt_frames:]  # read only to check that the script took effect
    return {"setup_s": setup, "frames": workload.stats(latency), "latency": workload.stats(latency),
            "scripted": text == script.expected(len(text))}


def run(ckpt: Path, frames: int, runs: int, nocache: bool) -> dict:
    import importlib.metadata

    t0 = time.perf_counter()
    model, missing = load(ckpt)
    load_s = time.perf_counter() - t0
    c, tok = model.config, model.tokenizer
    prompt_frames = len(tok.encode(workload.PROMPT, add_special_tokens=False)) + 2  # bos, prompt, eos
    ids = tok.encode(workload.PARAGRAPH, add_special_tokens=False)
    script = Script(prompt_frames, ids, c.pad_token_id)
    script_text_channel(model.stt_model, script)
    x = workload.bench_input(frames)
    out = {"engine": f"mlx-audio {importlib.metadata.version('mlx-audio')}", "device": str(mx.default_device()),
           "mlx": mx.__version__, "blas": compute.BLAS, "load_s": load_s, "missing_parameters": missing,
           "script_ids": ids, "offline": offline(model, x, runs, True, script)}
    if nocache:
        out["offline_nocache"] = offline(model, x, runs, False, script)
    streaming(model, workload.bench_input(8), script)  # warm-up of the session's shapes
    out["session"] = streaming(model, x, script)
    out["peak_memory_gb"] = mx.get_peak_memory() / 1e9
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", required=True, help="a folder in mlx-audio's layout (its converter's output)")
    p.add_argument("--frames", type=int, default=72, help="80 ms input frames (default 72)")
    p.add_argument("--runs", type=int, default=3, help="timed offline runs after one warm-up (default 3)")
    p.add_argument("--nocache", action="store_true", help="also time generate without the LLM cache (its default)")
    a = p.parse_args()
    print(json.dumps(run(Path(a.ckpt), a.frames, a.runs, a.nocache)))


if __name__ == "__main__":
    main()
