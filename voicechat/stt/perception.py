"""Speech input path: ``stt_model.perception.*`` = log-mel preprocessor -> FastConformer -> ``proj`` (docs/model.md §2.2.5).

The modality adapter of this model is NeMo's IdentityConnector (no weights), so the encoder output goes straight
into ``proj``, a Linear d_model -> LLM width with bias.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .. import compute
import mlx.core as mx
import mlx.nn as nn

from ..config import AudioConfig
from ..layers import Linear
from .fastconformer import ConformerEncoder, EncoderStream, SubsamplingStream, subsampled_length
from .mel import MelStream, Preprocessor, valid_frames


class Perception(nn.Module):
    def __init__(self, cfg: AudioConfig):
        super().__init__()
        self.preprocessor = Preprocessor(cfg.preprocessor)
        self.encoder = ConformerEncoder(cfg.encoder)
        self.proj = Linear(cfg.encoder.d_model, cfg.output_dim)
        self._compiled = compute.CompiledFunctions()

    def __call__(self, audio: mx.array, lengths: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        """audio [B, N] float32 at 16 kHz, lengths [B] -> (projected [B, T, output_dim], valid lengths [B],
        encoder output [B, T, d_model]). T is the tensor length: one more than the valid length when
        floor(N / 160) = 1 (mod 8) (docs/model.md §1.2 B)."""
        features, feature_lengths = self.preprocessor(audio, lengths)
        encoded, lengths = self.encoder(features, feature_lengths)
        return self.proj(encoded), lengths, encoded

    def stream_frame(self):
        """One steady 80 ms frame of a stream as one function of arrays (compiled where that pays): (raw samples,
        absolute index of the first, end of the signal, frame index, valid length, subsampling carries..., layer
        caches...) -> (projected [1, output_dim], encoded [1, d_model], new carries..., new caches...)."""
        return self._compiled.get("stream frame", self._stream_frame)

    def _stream_frame(self, raw, first, end, start, valid, *state):
        mel, sub = MelStream(self.preprocessor.featurizer), SubsamplingStream(self.encoder.pre_encode)
        carries, caches = list(state[:len(sub.carries)]), state[len(sub.carries):]
        columns = mel.columns(raw, first, self.encoder.cfg.subsampling_factor, end)
        x, carries, _ = sub.rows_of(columns, carries)
        out, *caches = self.encoder.stream_layers(x, start, valid, *caches)
        out = compute.entry(out, 0)
        return (self.proj(out), out, *carries, *caches)


def timeline_frames(cfg: AudioConfig, samples: int) -> int:
    """Encoder frames of a recording of ``samples``: those of its 1 + N // hop mel columns (padded to ``pad_to``),
    docs/model.md §1.2 B; one more than the valid ones when N // hop = 1 (mod 8)."""
    pre, enc = cfg.preprocessor, cfg.encoder
    columns = 1 + samples // pre.hop_length
    if pre.pad_to > 0:
        columns += -columns % pre.pad_to
    return subsampled_length(columns, enc.subsampling_factor, enc.causal_downsampling)


class PerceptionStream:
    """:class:`Perception` over a recording that arrives in pieces: 16 kHz samples in, each encoder frame out once
    its input is complete (frame k once samples up to 1280 k + 256 are in, docs/streaming.md §2). ``finish`` ends the input
    as NeMo ends a recording (docs/model.md §2.1.9, §2.2.1), so the frames of the pieces are the frames of the whole."""

    def __init__(self, perception: Perception):
        self.perception = perception
        self.mel = MelStream(perception.preprocessor.featurizer)
        self.encoder = EncoderStream(perception.encoder)

    def push(self, samples: np.ndarray) -> tuple[mx.array, mx.array]:
        """[N] float32 -> (projected [n, output_dim], encoder output [n, d_model]) of the frames completed (lazy).
        A steady frame (8 new mel columns, every cache in place) runs as one function, compiled on a GPU."""
        factor = self.encoder.encoder.cfg.subsampling_factor
        raw, first, count, end = self.mel.take(samples, group=factor)  # a frame's columns together: one steady shape
        sub, encoder = self.encoder.subsampling, self.encoder
        if count != factor or encoder.state is None or any(c is None for c in sub.carries):
            return self._frames(encoder.push(self.mel.columns(raw, first, count, end)))
        projected, encoded, *state = self.perception.stream_frame()(
            mx.array(raw), mx.array(first), mx.array(end), mx.array(encoder.frames), mx.array([encoder.frames + 1]),
            *sub.carries, *encoder.state)
        sub.advance(count, state[:len(sub.carries)])
        encoder.advance(1, state[len(sub.carries):])
        return projected, encoded

    def finish(self) -> tuple[mx.array, mx.array]:
        """The frames that the end of the input completes (zero, one or two, with NeMo's padding at the end)."""
        end = valid_frames(self.mel.total, self.mel.n_fft, self.mel.hop)
        return self._frames(self.encoder.push(self.mel.finish(), end=end))

    @property
    def samples(self) -> int:
        """Samples received so far."""
        return self.mel.total

    @property
    def valid_frames(self) -> Optional[int]:
        """Encoder frames inside the valid length, once the input has ended (the last may be padding)."""
        return self.encoder.valid

    def arrays(self) -> list[mx.array]:
        return self.encoder.arrays()

    def _frames(self, encoded: mx.array) -> tuple[mx.array, mx.array]:
        return self.perception.proj(encoded), encoded
