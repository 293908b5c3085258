"""EAR-TTS speed at the release's dimensions (random weights, float32): warm-up (37 frames) and one 80 ms step.

    python -m bench.tts [--steps 5] [--warmups 1]

Prints wall time, graph size (``count_ops``) and the most frequent primitives of each.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from . import count_ops, op_histogram, peak_memory_gb, summary, time_calls
import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten

from voicechat.config import CharEncoderConfig, GemmaConfig, MoGConfig, TTSConfig, gemma_layer_types
from voicechat.tts.eartts import RVQEARTTSModel, warmup_inputs
from voicechat.tts.mog import KeyNoise

TEXT_VOCAB_SIZE = 131072  # Nemotron tokenizer
FRAMES = 37  # warm-up frames of a 3 s prompt
# docs/model.md §2.5: the release's EAR-TTS geometry
RELEASE_TTS = TTSConfig(
    backbone=GemmaConfig(hidden_size=1152, intermediate_size=4608, num_hidden_layers=28, num_attention_heads=16,
                         num_key_value_heads=16, head_dim=72, layer_types=gemma_layer_types(28, 6),
                         sliding_window=7500),
    char_encoder=CharEncoderConfig(hidden_size=1152, intermediate_size=4608, num_hidden_layers=1,
                                   num_attention_heads=16, num_key_value_heads=16, head_dim=72),
    mog=MoGConfig(intermediate_size=4608, num_layers=3, low_rank=64, num_predictions=1024),
    latent_size=512, codebook_size=1024, num_quantizers=31, use_audio_prompt_frozen_projection=True,
)


def synthetic_vocab(size: int) -> dict[str, int]:
    """256 single characters, then 3-character tokens (every third one a word start), ``size`` tokens in all."""
    chars = [chr(0x100 + i) for i in range(256)]
    vocab = {c: i for i, c in enumerate(chars)}
    for i in range(len(vocab), size):
        word = chars[i % 256] + chars[(i // 256) % 256] + chars[(i // 65536) % 256]
        vocab[("Ġ" if i % 3 == 0 else "") + word + str(i)] = i
    return vocab


def random_model(cfg: TTSConfig, vocab: dict[str, int], seed: int = 0) -> RVQEARTTSModel:
    """Random weights of realistic scale: matrices std 1/sqrt(fan_in), embeddings std 1, offset-norm weights std 0.1,
    codebooks unit rows scaled by (Q - q) / Q."""
    model = RVQEARTTSModel(cfg, len(vocab))
    model.set_text_vocab(vocab, bos_id=1, eos_id=2, fill_flag_tables=True)
    key = mx.random.key(seed)
    params = []
    for name, p in tree_flatten(model.parameters()):
        if not mx.issubdtype(p.dtype, mx.floating):
            continue
        key, sub = mx.random.split(key)
        noise = mx.random.normal(p.shape, key=sub)
        if name == "rvq_embs":
            scale = (cfg.num_quantizers - mx.arange(cfg.num_quantizers)) / cfg.num_quantizers
            value = noise / mx.linalg.norm(noise, axis=-1, keepdims=True) * scale[:, None, None]
        elif p.ndim == 1 or name.endswith(("norm.weight", "gate", "residual_scale")):
            value = 0.1 * noise
        elif "embed_tokens" in name or name.endswith("_emb.weight"):
            value = noise
        else:
            value = noise / math.sqrt(p.shape[-1])
        params.append((name, value))
        mx.eval(value)
    model.update(tree_unflatten(params))
    mx.eval(model.parameters())
    return model


def top_ops(*outputs: mx.array, n: int = 8) -> str:
    return ", ".join(f"{name} {count}" for name, count in op_histogram(*outputs).most_common(n))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmups", type=int, default=1)
    args = parser.parse_args()

    cfg = RELEASE_TTS
    model = random_model(cfg, synthetic_vocab(TEXT_VOCAB_SIZE))
    n_params = sum(p.size for _, p in tree_flatten(model.parameters()))
    print(f"EAR-TTS, release dims, {n_params / 1e6:.0f} M parameters, float32, {mx.default_device()}")

    rng = np.random.default_rng(0)
    inputs = warmup_inputs(rng.integers(0, cfg.codebook_size, (FRAMES + 1, cfg.num_quantizers)), 12, 2,
                           cfg.speech_pad_id)
    latent = mx.random.normal((1, FRAMES, cfg.backbone.hidden_size), key=mx.random.key(1))
    mx.eval(latent)

    caches = model.backbone.make_caches()  # the warm-up's graph, built without evaluating it
    cond = model.conditioning(inputs.subword_ids[None], inputs.subword_mask[None])
    hidden = model.backbone(model.fuse(model.warmup_code_embeds(inputs, latent), cond), caches)
    arrays = [hidden] + [a for c in caches for a in c.arrays()]
    print(f"warm-up ({FRAMES} frames, 2 CFG rows): {count_ops(*arrays)} ops ({top_ops(*arrays)})")
    times = time_calls(lambda: model.warmup(inputs, latent, KeyNoise(0)), args.warmups, warmup=0)
    print(f"warm-up: {summary(times)}")

    state, _ = model.warmup(inputs, latent, KeyNoise(0))
    prev = mx.array(inputs.code[-1].astype(np.int32))
    codes = model.step(state, prev, 300)
    print(f"step: {count_ops(codes, *state.arrays())} ops ({top_ops(codes, *state.arrays())})")
    mx.eval(codes, state.arrays())

    def one_step():
        nonlocal codes
        codes = model.step(state, codes, 300)
        mx.eval(codes, state.arrays())

    def backbone_only():
        mx.eval(model.step_hidden(state, codes, 300), state.arrays())

    print(f"step (backbone + MoG, 80 ms frame): {summary(time_calls(one_step, args.steps))}")
    print(f"  backbone part only: {summary(time_calls(backbone_only, max(1, args.steps // 2), warmup=0))}")
    print(f"peak memory {peak_memory_gb():.2f} GB")


if __name__ == "__main__":
    main()
