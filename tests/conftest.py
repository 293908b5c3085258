"""Shared test paths. NeMo fixtures: tests/fixtures/nemo (made by tests/fixtures/nemo/regenerate.sh)."""

from pathlib import Path

import voicechat  # noqa: F401  (BLAS preload before mlx)
import mlx.core as mx

TESTS = Path(__file__).parent
NEMO = TESTS / "fixtures" / "nemo"
HARNESS_WAV = NEMO / "question_16k.wav"


class ReplayNoise:
    """NeMo's recorded draws in NeMo's call order, alternating per MoG iteration: the Gumbel values G (already
    -log(-log(u+eps)+eps)), then the normals. Asking in another order fails."""

    def __init__(self, ref):
        gumbels, normals = ref["tts.noise.gumbel"], ref["tts.noise.randn"]
        assert len(gumbels) == len(normals)
        self.draws = [draw for g, n in zip(gumbels, normals) for draw in (("gumbel", g), ("normal", n))]

    def _next(self, kind, shape):
        recorded_kind, value = self.draws.pop(0)
        assert recorded_kind == kind, f"asked for a {kind} draw where NeMo drew {recorded_kind}"
        return mx.array(value).reshape(shape)

    def gumbel(self, shape):
        return self._next("gumbel", shape)

    def normal(self, shape):
        return self._next("normal", shape)
