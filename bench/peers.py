"""voicechat as an engine of the project's shared peer harness (its ``bench_peers.py --engines-json``).

    python -m bench.peers --ckpt DIR --mode cache --runs 5      # a worker: prints ONE JSON line
    python -m bench.peers --engines-json engines.json           # writes the engine description

(from the repository root, as every bench module.)

The workload is the harness's: question_16k.wav, system prompt "You are a helpful assistant.", seed 0, greedy TTS
(guidance 0.5, top-1 component, noise 0), one warm-up and ``--runs`` timed offline generations with the codec
decode included. voicechat always decodes with caches (``--mode`` is accepted and ignored) and runs NVIDIA's
reference timeline (prompt + audio frames, all decoded), i.e. no less work than the peers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HARNESS = Path(os.environ.get("NEMO_HARNESS", Path(__file__).resolve().parents[2] / "shared/reference/nemo-harness"))
PEER_HARNESS = Path(os.environ.get("PEER_HARNESS", HARNESS.parent / "peer-harness"))
PROMPT = "You are a helpful assistant."


def machine_load() -> str:
    sys.path.insert(0, str(PEER_HARNESS))
    sys.dont_write_bytecode = True
    import peer_common

    return peer_common.machine_load()


def worker(ckpt: str, runs: int) -> dict:
    from voicechat import GenerationConfig, load

    before = machine_load()
    t0 = time.perf_counter()
    model = load(ckpt, offline=True)
    load_s = time.perf_counter() - t0
    cfg = GenerationConfig(reference=True, tts_guidance_scale=0.5, tts_top_k=1, tts_noise_scale=0.0)
    wav = HARNESS / "question_16k.wav"
    t0 = time.perf_counter()
    first = model.generate(wav, system_prompt=PROMPT, seed=0, config=cfg)
    warmup_s = time.perf_counter() - t0
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        model.generate(wav, system_prompt=PROMPT, seed=0, config=cfg)
        times.append(time.perf_counter() - t0)
    # the per-stage split is the session's benchmark seam (Model._generate), not the public generate
    profiled = model._generate(wav, system_prompt=PROMPT, seed=0, config=cfg, profile=True)
    return {"times_s": times, "timeline_frames": len(first.text_tokens), "load_s": load_s, "warmup_s": warmup_s,
            "load_before": before, "load_after": machine_load(),
            "profile_s": {k: v for k, v in profiled.timings.items() if k != "total"}}


def engines_json(path: str) -> None:
    spec = {"voicechat": {"cmd": [sys.executable, "-m", "bench.peers", "--ckpt", "{ckpt}",
                                  "--mode", "{mode}", "--runs", "{runs}"], "ckpt": "nemo_model"}}
    Path(path).write_text(json.dumps(spec, indent=1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt")
    p.add_argument("--mode", default="cache")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--engines-json")
    a = p.parse_args()
    if a.engines_json:
        engines_json(a.engines_json)
        return
    print(json.dumps(worker(a.ckpt, a.runs)))


if __name__ == "__main__":
    main()
