"""Speech input path: ``stt_model.perception.*`` = log-mel preprocessor -> FastConformer -> ``proj`` (SPEC §2.2.5).

The modality adapter of this model is NeMo's IdentityConnector (no weights), so the encoder output goes straight
into ``proj``, a Linear d_model -> LLM width with bias.
"""

from __future__ import annotations

from .. import compute  # noqa: F401  (BLAS preload before mlx)
import mlx.core as mx
import mlx.nn as nn

from ..config import AudioConfig
from .fastconformer import ConformerEncoder
from .mel import Preprocessor

# The featurizer buffers are derived from the config, so a checkpoint may leave them out
# (``load_into(..., optional=DERIVED_BUFFERS)``).
DERIVED_BUFFERS = (r"preprocessor\.featurizer\.(window|fb)$",)


class Perception(nn.Module):
    def __init__(self, cfg: AudioConfig):
        super().__init__()
        self.preprocessor = Preprocessor(cfg.preprocessor)
        self.encoder = ConformerEncoder(cfg.encoder)
        self.proj = nn.Linear(cfg.encoder.d_model, cfg.output_dim)

    def __call__(self, audio: mx.array, lengths: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        """audio [B, N] float32 at 16 kHz, lengths [B] -> (projected [B, T, output_dim], valid lengths [B],
        encoder output [B, T, d_model]). T is the tensor length: one more than the valid length when
        floor(N / 160) = 1 (mod 8) (SPEC §1.2 B)."""
        features, feature_lengths = self.preprocessor(audio, lengths)
        encoded, lengths = self.encoder(features, feature_lengths)
        return self.proj(encoded), lengths, encoded
