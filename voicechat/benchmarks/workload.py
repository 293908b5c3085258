"""The benchmark workload both engines get, and the statistics both report (numpy and the standard library only:
mlx-audio's worker loads this file in mlx-audio's venv, without voicechat).

After the system prompt, the text channel carries a new subword id every ``WORDS_EVERY`` frames, as speech has it:
the ids of a fixed English paragraph in the checkpoint's own vocabulary (the paragraph again when it runs out), pad
between. The input is the harness question repeated.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

PROMPT = "You are a helpful assistant."
# voicechat.config.FRAME_SECONDS and INPUT_SAMPLE_RATE: mlx-audio's worker loads this file without voicechat
FRAME = 0.08
RATE = 16000
WORDS_EVERY = 4  # frames between subword ids in speech (about 3 ids per second at 12.5 frames per second)
PARAGRAPH = ("The capital of France is Paris. It sits on the Seine, in the north of the country, and about two million "
             "people live in the city itself. Most visitors come for the museums, the food and the long walks by the "
             "river, and many of them stay for more than a week.")
QUESTION = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "nemo" / "question_16k.wav"


def bench_input(frames: int, rate: int = RATE) -> np.ndarray:
    """``frames`` x 80 ms of speech-like input: the harness question repeated (a chirp if it is not at hand)."""
    n = round(frames * FRAME * rate)
    if QUESTION.is_file():  # 16-bit PCM; the stdlib reads it (the GPU machines lack libsndfile's Python binding)
        import wave

        with wave.open(str(QUESTION)) as f:
            x = np.frombuffer(f.readframes(f.getnframes()), np.int16).astype(np.float32) / 32768
    else:
        t = np.arange(rate * 2) / rate
        x = (0.3 * np.sin(2 * np.pi * (200 + 400 * t) * t)).astype(np.float32)
    return np.resize(x, n).astype(np.float32)


def text_id_at(t: int, prompt_frames: int, ids: Sequence[int], pad: int) -> Optional[int]:
    """The scripted text id at timeline position ``t`` (None over the system prompt, where the model's is kept)."""
    k = t - prompt_frames
    if k < 0:
        return None
    return pad if k % WORDS_EVERY else ids[(k // WORDS_EVERY) % len(ids)]


def stats(values: list[float]) -> dict:
    """Seconds -> milliseconds: mean, p50, p95, p99, max and the count."""
    ms = sorted(v * 1e3 for v in values)
    if not ms:
        return {"mean": 0.0, "p50": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0, "n": 0}

    def pick(q):
        return ms[min(len(ms) - 1, round(q * (len(ms) - 1)))]

    return {"mean": statistics.fmean(ms), "p50": statistics.median(ms), "p95": pick(0.95), "p99": pick(0.99),
            "max": ms[-1], "n": len(ms)}
