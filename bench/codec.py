"""Codec speed at the release's dimensions (random weights, float32): full decode, streaming decode, encode.

    python -m bench.codec [--frames 50] [--stream-frames 12] [--encode-frames 38] [--runs 2]

Prints seconds and the multiple of real time (audio seconds / compute seconds; > 1 is faster than real time).
"""

from __future__ import annotations

import argparse

import numpy as np

from . import peak_memory_gb, summary, time_calls
import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten

from voicechat.config import CodecConfig
from voicechat.tts.codec import AudioCodec

FRAME_SECONDS = 0.08  # one code frame: 1764 samples at 22.05 kHz


def fan_in(name: str, shape: tuple) -> int:
    """Inputs per output of a weight in our layouts."""
    if name.endswith("dwconv.weight"):  # [C, k, 1]
        return shape[1]
    if len(shape) == 3:  # decoder transposed conv [in, k, out]; encoder strided conv [out, k, in]
        return shape[0] if name.startswith("decoder.") else shape[1] * shape[2]
    return shape[1]  # Linear [out, in]


def random_codec(cfg: CodecConfig, seed: int = 0) -> AudioCodec:
    """A codec with random weights of realistic scale: matrices std 1/sqrt(fan_in), biases std 0.1, norm weights
    1 + std 0.1, PRVQ means unit rows scaled by (Q - q) / Q (NeMo's initialisation)."""
    codec = AudioCodec(cfg)
    rng = np.random.default_rng(seed)
    params = []
    for name, p in tree_flatten(codec.parameters()):
        shape = tuple(p.shape)
        if ".mus_list." in name:
            q = int(name.rsplit(".", 1)[1])
            mus = rng.standard_normal(shape)
            value = mus / np.linalg.norm(mus, axis=1, keepdims=True) * (cfg.num_quantizers - q) / cfg.num_quantizers
        elif name.endswith("norm.weight"):
            value = 1 + 0.1 * rng.standard_normal(shape)
        elif name.endswith("bias"):
            value = 0.1 * rng.standard_normal(shape)
        else:
            value = rng.standard_normal(shape) / np.sqrt(fan_in(name, shape))
        params.append((name, mx.array(value.astype(np.float32))))
    codec.update(tree_unflatten(params))
    mx.eval(codec.parameters())
    return codec


def real_time(audio_seconds: float, times: list[float]) -> str:
    best = min(times)
    return f"{best:.3f} s for {audio_seconds:.2f} s of audio = {audio_seconds / best:.2f}x real time"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=50, help="code frames of the full decode (50 = 4 s)")
    ap.add_argument("--stream-frames", type=int, default=12, help="frames pushed one at a time")
    ap.add_argument("--encode-frames", type=int, default=38, help="frames encoded (38 = the TTS warm-up prompt)")
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()

    cfg = CodecConfig()  # the release: base 384, mult (1, 2, 4), rates (7, 7, 9), 3 blocks, latent 512, 1024 x 31
    codec = random_codec(cfg)
    n_params = sum(p.size for _, p in tree_flatten(codec.parameters()))
    print(f"codec: {n_params / 1e6:.1f} M parameters, float32, device {mx.default_device()}")
    codes = mx.random.randint(0, cfg.codebook_size, (1, max(args.frames, args.stream_frames), cfg.num_quantizers),
                              key=mx.random.key(0))
    mx.eval(codes)

    def stream_frames():
        stream = codec.stream()
        for i in range(args.stream_frames):
            stream.push(codes[:, i:i + 1])
        stream.flush()

    times = time_calls(stream_frames, args.runs)  # its warm-up call also pays the one-off GELU compile
    per_frame = [t / args.stream_frames for t in times]
    print(f"streaming decode, 1 frame per push: {summary(per_frame)} per frame; "
          f"{real_time(FRAME_SECONDS, per_frame)}")

    full = codes[:, :args.frames]
    times = time_calls(lambda: codec.decode(full), args.runs, warmup=0)
    print(f"full decode of {args.frames} frames: {summary(times)}; {real_time(args.frames * FRAME_SECONDS, times)}")

    wave = mx.random.uniform(-0.5, 0.5, (1, args.encode_frames * cfg.samples_per_frame), key=mx.random.key(1))
    mx.eval(wave)
    times = time_calls(lambda: codec.encode(wave), args.runs, warmup=0)
    print(f"encode of {args.encode_frames} frames: {summary(times)}; "
          f"{real_time(args.encode_frames * FRAME_SECONDS, times)}")
    print(f"peak memory {peak_memory_gb():.2f} GB")


if __name__ == "__main__":
    main()
