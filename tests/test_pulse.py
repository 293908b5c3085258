"""The PulseAudio test fixture (tests/pulse.py) through sounddevice: what the test says comes out of the microphone,
what a program plays reaches the recording. Programs run as subprocesses: PortAudio reads the server's address
when it loads."""

import subprocess
import sys
import textwrap

import numpy as np

from pulse import MIC_RATE, SPEAKER_RATE, pulse  # noqa: F401  (pulse: the fixture)

ROUND_TRIP = textwrap.dedent("""
    import sys
    import numpy as np
    import sounddevice as sd

    heard = sd.rec(int(1.5 * 16000), samplerate=16000, channels=1, dtype="float32", blocking=True)[:, 0]
    np.save(sys.argv[1], heard)
    t = np.arange(22050) / 22050
    sd.play((0.5 * np.sin(2 * np.pi * 300 * t)).astype(np.float32), 22050, blocking=True)
""")


def test_sounddevice_round_trip(pulse, tmp_path):
    # noise is unique at every offset: where the recording starts (whenever the program got going) can be found
    said = (0.3 * np.random.default_rng(0).uniform(-1, 1, 8 * MIC_RATE)).astype(np.float32)
    pulse.say(said)
    with pulse.record() as speaker:
        subprocess.run([sys.executable, "-c", ROUND_TRIP, str(tmp_path / "heard.npy")], env=pulse.env(), check=True,
                       timeout=60)
    heard = np.load(tmp_path / "heard.npy")
    # the microphone delivered the noise sample for sample, up to the 16-bit quantisation: PulseAudio and PortAudio
    # both run at 16 kHz here
    offset = int(np.argmax(np.correlate(said, heard, mode="valid")))
    np.testing.assert_allclose(heard, said[offset:offset + heard.size], atol=1 / 32767)
    # the speaker got the 300 Hz tone at its amplitude. Its samples, counted: a sine exceeds half its peak 2/3 of
    # the time, so the whole second gives 2/3 s. Not all of it need arrive: PortAudio's ALSA path cuts up to the
    # last 80 ms when a stream stops, and its recovery from an underrun (a busy machine) discards what was queued
    # (measured here: 0.09 s lost on an idle machine, 0.23 s at a load of 8 on 2 cores); at least half must.
    played = speaker.audio
    loud_seconds = np.count_nonzero(np.abs(played) > 0.25) / SPEAKER_RATE
    assert 0.5 * 2 / 3 <= loud_seconds <= 2 / 3 + 0.01
    assert abs(np.abs(played).max() - 0.5) < 2e-3
    start = int(np.argmax(np.abs(played) > 0.25))
    spectrum = np.abs(np.fft.rfft(played[start:start + SPEAKER_RATE // 4]))
    assert abs(np.argmax(spectrum) * 4 - 300) <= 4
