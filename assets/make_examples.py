"""Make the example questions in assets/ with espeak-ng (a synthetic voice, so no one's recording is shipped).

    python assets/make_examples.py        # needs `espeak-ng` on PATH (apt-get install espeak-ng)

Each example is written at a different sample rate / channel count on purpose: the app and the engine accept any
rate and channel layout and resample to 16 kHz mono. The list of examples (file, text, format) goes to
assets/examples.json, which the app reads for its example labels. Output of espeak-ng 1.51 (Debian 12).
"""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

ASSETS = Path(__file__).resolve().parent
LEAD_IN_S = 0.3  # silence before the question
TAIL_S = 0.4  # silence after it (the model hears the pause; the app appends more)

# file, voice, words per minute, sample rate, channels, the question
EXAMPLES = [
    ("capital_16k_mono.wav", "en-us", 165, 16000, 1, "Hi there! What is the capital of France?"),
    ("tea_44k_stereo.wav", "en-gb", 160, 44100, 2, "Can you tell me how to make a good cup of tea?"),
    ("octopus_22k_mono.wav", "en-us+f3", 170, 22050, 1, "Tell me one fun fact about octopuses."),
]


def espeak(text: str, voice: str, wpm: int) -> tuple[np.ndarray, int]:
    """espeak-ng's own output: mono float32 at its native rate (22050 Hz)."""
    wav = subprocess.run(["espeak-ng", "-v", voice, "-s", str(wpm), "--stdout", text], check=True,
                         capture_output=True).stdout
    samples, rate = sf.read(io.BytesIO(wav), dtype="float32")
    return samples, rate


def framed(samples: np.ndarray, rate: int) -> np.ndarray:
    """Silence around the question and a peak level of -3 dBFS."""
    x = np.concatenate([np.zeros(round(LEAD_IN_S * rate), np.float32), samples,
                        np.zeros(round(TAIL_S * rate), np.float32)])
    return (x * (0.707 / max(np.abs(x).max(), 1e-9))).astype(np.float32)


def main() -> None:
    listing = []
    for name, voice, wpm, rate, channels, text in EXAMPLES:
        samples, native = espeak(text, voice, wpm)
        x = framed(soxr.resample(samples, native, rate).astype(np.float32), rate)
        data = np.repeat(x[:, None], channels, axis=1) if channels > 1 else x
        sf.write(ASSETS / name, data, rate, subtype="PCM_16")
        listing.append(dict(file=name, text=text, sample_rate=rate, channels=channels, voice=f"espeak-ng {voice}",
                            seconds=round(len(x) / rate, 2)))
        print(f"{name}: {len(x) / rate:.2f} s, {rate} Hz, {channels} ch  \"{text}\"")
    (ASSETS / "examples.json").write_text(json.dumps(listing, indent=2) + "\n")


if __name__ == "__main__":
    main()
