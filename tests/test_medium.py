"""Optional: the whole loop against NeMo on the peer harness's MEDIUM checkpoint (567 M parameters, the release's
depths at ~1/4 widths, 2.3 GB; too large to commit). Build it with the peer harness's build_medium.py and
point VOICECHAT_MEDIUM at its output folder (holding nemo_model/ and nemo_greedy/)."""

import os
from pathlib import Path

import numpy as np
import pytest

from conftest import HARNESS_WAV
import voicechat
from voicechat import GenerationConfig

MEDIUM = os.environ.get("VOICECHAT_MEDIUM")


@pytest.mark.nemo
@pytest.mark.slow
@pytest.mark.skipif(not MEDIUM, reason="VOICECHAT_MEDIUM is not set (the medium NeMo checkpoint is not committed)")
def test_medium_checkpoint_end_to_end_parity():
    root = Path(MEDIUM)
    ref = np.load(root / "nemo_greedy" / "reference.npz")
    m = voicechat.load(root / "nemo_model")
    r = m.generate(HARNESS_WAV, system_prompt="You are a helpful assistant.",
                   config=GenerationConfig(reference=True, tts_guidance_scale=0.5, tts_top_k=1, tts_noise_scale=0.0))
    assert np.array_equal(r.text_tokens, ref["stt.gen_text_full"][0])
    assert np.array_equal(r.audio_codes, ref["out.gen_audio_codes"][0])
    assert np.abs(r.audio - ref["out.audio"][0]).max() < 1e-4
