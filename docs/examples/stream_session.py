"""Stream a recording into a conversation 80 ms at a time, as a microphone would, and write the spoken answer while
it arrives (the README's streaming example, under Python API).

    python docs/examples/stream_session.py question.wav answer.wav [--model DIR_OR_REPO] [--prompt TEXT] [--tail 3]

Prints the user's words and the assistant's as they come; the answer WAV (22.05 kHz) grows frame by frame.
"""

from __future__ import annotations

import argparse

import numpy as np
import soundfile as sf

import voicechat


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recording")
    p.add_argument("answer")
    p.add_argument("--model", default=None, help="checkpoint directory or Hub repo id (default: the 4-bit model)")
    p.add_argument("--prompt", default="You are a helpful assistant.")
    p.add_argument("--tail", type=float, default=3.0, help="seconds of silence after the recording (time to answer)")
    a = p.parse_args()

    model = voicechat.load(a.model)
    session = model.session(system_prompt=a.prompt, seed=0)
    print(f"ready in {session.setup_seconds:.2f} s")
    samples, rate = sf.read(a.recording, dtype="float32")
    samples = np.concatenate([samples, np.zeros((round(a.tail * rate), *samples.shape[1:]), np.float32)])
    chunk = rate * 80 // 1000  # 80 ms of the recording's own rate: the session resamples as a stream
    with sf.SoundFile(a.answer, "w", samplerate=session.sample_rate, channels=1, subtype="PCM_16") as out:
        for start in range(0, len(samples), chunk):
            for frame in session.feed(samples[start:start + chunk], rate):
                out.write(frame.audio)  # 1764 new samples per 80 ms
                if frame.transcript or frame.text:
                    print(f"[{frame.position * 0.08:6.2f} s] user: {frame.transcript!r} assistant: {frame.text!r}")
        for frame in session.flush():
            out.write(frame.audio)
    print(f"user said: {session.transcript}\nassistant said: {session.result().text}")


if __name__ == "__main__":
    main()
