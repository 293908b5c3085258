"""What ``live --echo-cancel`` costs: ``python -m bench.echo [--seconds S]``.

Runs :class:`voicechat.devices.EchoCanceller` (WebRTC AEC3 through the ``livekit`` package) on a made-up room: the
speaker plays the harness question (as the model's voice), the microphone hears it back 60 ms later at half
amplitude with a short decaying tail, and no one else talks. Prints the canceller's time per 80 ms model frame
(mean, p50, p95, max over the 10 ms steps, times 8) and how far it pushed the echo down (echo return loss
enhancement: the echo's level over what is left, after the first 2 s in which it learns the room).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from voicechat.audio import read_audio, resample
from voicechat.benchmarks.workload import QUESTION
from voicechat.devices import EchoCanceller

RATE = EchoCanceller.RATE
STEP = EchoCanceller.FRAME


def room(far: np.ndarray, delay_s: float = 0.06) -> np.ndarray:
    """What the microphone hears of ``far``: 60 ms later, half as loud, with three weaker reflections."""
    echo = np.zeros_like(far)
    for delay, gain in ((delay_s, 0.5), (delay_s + 0.007, 0.2), (delay_s + 0.019, 0.1), (delay_s + 0.031, 0.05)):
        shift = int(delay * RATE)
        echo[shift:] += gain * far[:far.size - shift]
    return echo


def level_db(x: np.ndarray) -> float:
    return float(10 * np.log10(np.mean(np.square(x, dtype=np.float64)) + 1e-20))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=20.0, help="length of the conversation (default 20)")
    a = p.parse_args(argv)
    question, rate = read_audio(QUESTION)
    question = resample(question, rate, RATE)
    n = int(a.seconds * RATE) // STEP * STEP
    far = np.resize(question, n).astype(np.float32)
    near = room(far)
    aec = EchoCanceller(delay_ms=60)
    steps, cleaned = [], []
    for i in range(0, n, STEP):
        t0 = time.perf_counter()
        aec.played(far[i:i + STEP])
        cleaned.append(aec.clean(near[i:i + STEP]))
        steps.append(time.perf_counter() - t0)
    out = np.concatenate(cleaned)
    ms = 8000 * np.asarray(steps)  # per 80 ms frame: 8 steps of 10 ms
    learnt = 2 * RATE
    print(f"echo canceller (WebRTC AEC3 via livekit), {a.seconds:g} s at {RATE} Hz")
    print(f"per 80 ms frame: mean {ms.mean():.2f} ms  p50 {np.percentile(ms, 50):.2f} ms  "
          f"p95 {np.percentile(ms, 95):.2f} ms  max {ms.max():.2f} ms")
    print(f"echo {level_db(near[learnt:]):.1f} dB -> {level_db(out[learnt:]):.1f} dB after the first 2 s: "
          f"{level_db(near[learnt:]) - level_db(out[learnt:]):.1f} dB removed")


if __name__ == "__main__":
    main()
