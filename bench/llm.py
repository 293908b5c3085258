"""LLM (Nemotron-H + embedding + text and function heads) at the real Nano-9B-v2 geometry, random weights quantized
4-bit group 64, float32 activations and scales: one decode step, its op count, and a prompt prefill.

    python -m bench.llm            # the full 56-layer model (6.5 GB peak; ~12 min on 2 CPU cores)
    python -m bench.llm --subset   # one layer of each kind, extrapolated to the 56-layer pattern

Weights are created and quantized one module at a time (random float32, quantize, evaluate), so only one float
layer (or vocabulary matrix, 2.3 GB) exists at a time.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from dataclasses import replace
from voicechat import compute
import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from . import count_ops, peak_memory_gb, summary, time_calls
from voicechat.config import NANO_9B_V2_CONFIG, LLMConfig, ModelConfig, parse_llm
from voicechat.stt import lm
from voicechat.stt.nemotron_h import LLMCache, NemotronH

KINDS = {"M": "Mamba-2", "-": "MLP", "*": "attention"}


class STT(nn.Module):
    """The release's ``stt_model`` LLM parts (with a function head)."""

    def __init__(self, cfg: LLMConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.llm = NemotronH(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.function_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)


def build(cfg: LLMConfig, group_size: int, bits: int) -> STT:
    """Random weights, quantized one part at a time (construction is lazy: a part's float weights exist only while
    it is quantized and evaluated)."""
    stt = STT(cfg)
    parts = ["embed_tokens", "lm_head", "function_head"] + [f"llm.layers.{i}." for i in range(len(cfg.pattern))]
    for part in parts:
        nn.quantize(stt, group_size, bits,
                    class_predicate=lambda path, m: path.startswith(part) and hasattr(m, "to_quantized"))
        mx.eval([v for k, v in tree_flatten(stt.parameters()) if k.startswith(part)])
    mx.eval(stt.parameters())
    return stt


def model_config(cfg: LLMConfig) -> ModelConfig:
    """What lm.py reads of a ModelConfig (the speech parts are not needed here): release channel weights 1/1/2."""
    return ModelConfig(llm=cfg, audio=None, tts=None, codec=None, pad_id=12, bos_id=1, eos_id=2,
                       function_channel_weight=2.0)


def timed_prefill(stt: STT, cfg: ModelConfig, prompt: mx.array) -> tuple[float, lm.LMState]:
    """Seconds of one prompt prefill (state evaluated), and the session it leaves."""
    state = lm.LMState(stt, cfg)
    t0 = time.perf_counter()
    mx.eval(lm.prefill(stt, cfg, state, prompt), state.arrays)
    return time.perf_counter() - t0, state


def measure_step(stt: STT, cfg: ModelConfig, state: lm.LMState, runs: int) -> tuple[int, list[float]]:
    """Op count and times of whole decode steps (fusion, layers, text and function heads) continuing ``state``."""
    audio = mx.random.normal((1, cfg.llm.hidden_size))
    prev = mx.array([cfg.pad_id])
    mx.eval(audio)
    ops = count_ops(*lm.step(stt, cfg, state, audio, prev, prev), *state.arrays)
    times = time_calls(lambda: mx.eval(lm.step(stt, cfg, state, audio, prev, prev), state.arrays), runs)
    return ops, times


def measure_blocks(stt: STT, cfg: ModelConfig, state: lm.LMState, prompt_len: int, runs: int) -> dict:
    """Per layer kind (its first layer): op count and times of a decode step continuing the layer's cache in
    ``state``, and the seconds of a prefill of ``prompt_len`` positions from an empty cache."""
    x1 = mx.random.normal((1, 1, cfg.llm.hidden_size))
    xp = mx.random.normal((1, prompt_len, cfg.llm.hidden_size))
    mx.eval(x1, xp)
    out = {}
    for letter in dict.fromkeys(cfg.llm.pattern):
        i = cfg.llm.pattern.index(letter)
        block, cache = stt.llm.layers[i], LLMCache(letter)
        cache.layers[0] = state.cache.layers[i]
        ops = count_ops(block(x1, cache.layers[0]), *cache.state)
        step = time_calls(lambda: mx.eval(block(x1, cache.layers[0]), cache.state), runs)
        fill = time_calls(lambda: mx.eval(block(xp, LLMCache(letter).layers[0])), 1, warmup=0)
        out[letter] = {"ops": ops, "step": step, "prefill": fill[0]}
    return out


def mean(times: list[float]) -> float:
    return sum(times) / len(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subset", action="store_true", help="one layer of each kind, extrapolated to the full pattern")
    ap.add_argument("--runs", type=int, default=3, help="timed decode steps (after one warm-up)")
    ap.add_argument("--prompt", type=int, default=32, help="prompt length of the prefill")
    ap.add_argument("--bits", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=64)
    args = ap.parse_args()

    full = parse_llm(NANO_9B_V2_CONFIG)
    llm_cfg = replace(full, pattern="".join(dict.fromkeys(full.pattern))) if args.subset else full
    cfg = model_config(llm_cfg)
    t0 = time.perf_counter()
    stt = build(llm_cfg, args.group_size, args.bits)
    print(f"built {len(llm_cfg.pattern)} layers + embedding + 2 heads ({args.bits}-bit, group {args.group_size}) "
          f"in {time.perf_counter() - t0:.1f} s; peak memory {peak_memory_gb():.2f} GB; BLAS {compute.BLAS}")
    prompt = mx.random.randint(0, full.vocab_size, (1, args.prompt))
    timed_prefill(stt, cfg, prompt[:, :2])  # warm-up (first-call costs)
    prefill_s, state = timed_prefill(stt, cfg, prompt)
    blocks = measure_blocks(stt, cfg, state, args.prompt, args.runs)
    for letter, m in blocks.items():
        print(f"  one {KINDS[letter]:9s} block: decode {summary(m['step'])}, {m['ops']} ops; "
              f"prefill of {args.prompt} positions {m['prefill']:.2f} s")
    ops, step = measure_step(stt, cfg, state, args.runs)
    label = "measured"
    if args.subset:  # add the layers the subset lacks, at their kind's measured cost
        label = "EXTRAPOLATED from one layer per kind"
        missing = Counter(full.pattern) - Counter(llm_cfg.pattern)
        step = [t + sum(k * mean(blocks[c]["step"]) for c, k in missing.items()) for t in step]
        ops += sum(k * blocks[c]["ops"] for c, k in missing.items())
        prefill_s += sum(k * blocks[c]["prefill"] for c, k in missing.items())
    print(f"decode step, {len(full.pattern)} layers + text and function heads ({label}): {summary(step)}")
    print(f"ops per decode step ({label}): {ops}")
    print(f"prefill of a {args.prompt}-token prompt ({label}): {prefill_s:.2f} s")
    print(f"peak memory {peak_memory_gb():.2f} GB")


if __name__ == "__main__":
    main()
