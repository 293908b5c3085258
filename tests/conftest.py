"""Shared test paths. NeMo fixtures: tests/fixtures/nemo (made by tests/fixtures/nemo/regenerate.sh)."""

from pathlib import Path

import voicechat  # noqa: F401  (BLAS preload before mlx)

TESTS = Path(__file__).parent
NEMO = TESTS / "fixtures" / "nemo"
HARNESS_WAV = NEMO / "question_16k.wav"
