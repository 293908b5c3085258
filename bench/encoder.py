"""Speech input path at the release's dimensions (random weights, float32): log-mel frontend, FastConformer + proj.

    python -m bench.encoder [--seconds 10 60 120] [--runs 1]

Prints wall time per call and peak memory (with the weights, and above them) for each input length.
"""

from __future__ import annotations

import argparse
import mlx.core as mx
from mlx.utils import tree_flatten, tree_map

from voicechat.config import AudioConfig, EncoderConfig, PreprocessorConfig
from voicechat.stt.fastconformer import subsampled_length
from voicechat.stt.perception import Perception
from . import peak_memory_gb, summary, time_calls

SAMPLE_RATE = 16000
# The release's perception (docs/model.md §2.1-2.2): 128 mels from 25 ms windows, no padding; 24 layers of d_model 1024, 8 heads,
# dw_striding x8 with 256 causal channels, kernel 9, LayerNorm conv norm, no biases, no xscaling, chunked_limited
# att_context_size [70, 0]; proj to the LLM width 4480.
RELEASE_AUDIO = AudioConfig(
    preprocessor=PreprocessorConfig(features=128, window_size=0.025, pad_to=0),
    encoder=EncoderConfig(feat_in=128, n_layers=24, d_model=1024, n_heads=8, subsampling_factor=8,
                          subsampling_conv_channels=256, conv_kernel_size=9, conv_norm_type="layer_norm",
                          att_context_size=(70, 0), att_context_style="chunked_limited", xscaling=False,
                          use_bias=False, causal_downsampling=True),
    output_dim=4480,
)


def random_perception(cfg: AudioConfig, seed: int = 0) -> Perception:
    """Weights drawn N(0, 0.02) (norm weights around 1), evaluated so that timing sees no lazy initialisation."""
    model = Perception(cfg)
    mx.random.seed(seed)
    model.update(tree_map(lambda p: p + 0.02 * mx.random.normal(p.shape), model.parameters()))
    mx.eval(model.parameters())
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, nargs="+", default=[10.0, 60.0, 120.0])
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()

    model = random_perception(RELEASE_AUDIO)
    params = sum(v.size for _, v in tree_flatten(model.parameters()))
    weights_gb = params * 4 / 1e9
    print(f"perception: {params / 1e6:.1f} M parameters ({weights_gb:.2f} GB float32), device {mx.default_device()}")
    for seconds in args.seconds:
        samples = int(seconds * SAMPLE_RATE)
        audio = 0.1 * mx.random.normal((1, samples))
        lengths = mx.array([samples])
        features, feature_lengths = model.preprocessor(audio, lengths)
        mx.eval(audio, features, feature_lengths)

        def frontend():
            mx.eval(model.preprocessor(audio, lengths))

        def encoder_and_proj():
            encoded, encoded_lengths = model.encoder(features, feature_lengths)
            mx.eval(model.proj(encoded), encoded_lengths)

        mx.reset_peak_memory()
        frontend_times = time_calls(frontend, runs=args.runs, warmup=0)
        mx.reset_peak_memory()
        encoder_times = time_calls(encoder_and_proj, runs=args.runs, warmup=0)
        peak = peak_memory_gb()
        frames = features.shape[1]
        encoder_frames = subsampled_length(frames, RELEASE_AUDIO.encoder.subsampling_factor, True)
        print(f"{seconds:g} s audio ({frames} mel frames -> {encoder_frames} encoder frames):")
        print(f"  log-mel frontend : {summary(frontend_times)}")
        print(f"  FastConformer+proj: {summary(encoder_times)}; peak memory {peak:.2f} GB "
              f"({peak - weights_gb:.2f} GB above the weights)")


if __name__ == "__main__":
    main()
