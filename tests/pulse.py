"""A private PulseAudio server for tests of real audio I/O: a microphone fed from numpy, a speaker that is recorded.

docs/platform.md §7: PulseAudio in user mode with its own XDG_RUNTIME_DIR; ``module-pipe-source`` is the microphone
(what is written into its FIFO, s16le at 16 kHz mono, is what programs record), ``module-null-sink`` is the speaker
(``parec`` on its monitor records what programs play). PortAudio reaches it through ALSA's ``default`` device
(Debian's libasound2-plugins). Programs that use it need :meth:`PulseAudio.env` in their environment before they
load PortAudio (run them as subprocesses).

    with PulseAudio(tmp_path) as pulse:             # raises PulseUnavailable (with the reason) if it cannot start
        pulse.say(samples_16k)                      # the microphone plays this, then silence
        with pulse.record() as speaker:             # what programs play from now on
            subprocess.run([...], env=pulse.env())
        speaker.audio                               # float32 mono at 44.1 kHz

The microphone always delivers audio, silence when nothing is queued: a pipe source without a writer delivers none,
and PortAudio then waits for it forever.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Optional

import numpy as np
import pytest

MIC_RATE = 16000
SPEAKER_RATE = 44100  # the speaker's rate (null sink and recording), what most devices run at
CHUNK = MIC_RATE // 50  # the feeder writes 20 ms at a time, paced by the clock
PACKAGES = "pulseaudio pulseaudio-utils libportaudio2 libasound2-plugins"


class PulseUnavailable(Exception):
    """PulseAudio cannot start on this machine (the message says why)."""


class Recording:
    """``parec`` on the null sink's monitor: what every program played while it ran."""

    def __init__(self, env: dict, rate: int):
        self.rate = rate
        self._process = subprocess.Popen(
            ["parec", "-d", "spk.monitor", "--format=s16le", f"--rate={rate}", "--channels=1", "--raw",
             "--latency-msec=20"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.audio: Optional[np.ndarray] = None

    def _read(self) -> None:
        while chunk := self._process.stdout.read1(65536):
            self._chunks.append(chunk)

    def stop(self) -> np.ndarray:
        self._process.send_signal(signal.SIGTERM)
        self._process.wait(10)
        self._reader.join(10)
        self.audio = np.frombuffer(b"".join(self._chunks), dtype="<i2").astype(np.float32) / 32768.0
        return self.audio

    def __enter__(self) -> "Recording":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class PulseAudio:
    """One private server: ``mic`` (pipe source, the default source) and ``spk`` (null sink, the default sink)."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)
        self.runtime = self.dir / "runtime"
        self.fifo = self.runtime / "mic.fifo"
        self._queue: collections.deque[np.ndarray] = collections.deque()
        self._fed = 0  # microphone samples written so far (queued audio and silence)
        self._stop = threading.Event()
        self._stalled = threading.Event()
        self._feeder: Optional[threading.Thread] = None
        self._listener: Optional[subprocess.Popen] = None
        self.pid: Optional[int] = None

    def env(self) -> dict:
        """The environment under which programs (PortAudio, pactl, parec) talk to this server."""
        return {**os.environ, "XDG_RUNTIME_DIR": str(self.runtime), "PULSE_SERVER": f"unix:{self.runtime}/pulse/native"}

    # ---- start and stop ----------------------------------------------------------------------------------------
    def start(self) -> "PulseAudio":
        missing = [tool for tool in ("pulseaudio", "pactl", "parec") if shutil.which(tool) is None]
        if missing:
            raise PulseUnavailable(f"{', '.join(missing)} not installed (apt-get install {PACKAGES})")
        self.runtime.mkdir(mode=0o700, parents=True)
        # its own HOME too: the server writes its cookie and state there, not into the user's
        server_env = {**self.env(), "HOME": str(self.dir)}
        run = subprocess.run(
            ["pulseaudio", "--daemonize=yes", "--exit-idle-time=-1", "--system=no", "-n", "--log-target=stderr",
             "--load=module-native-protocol-unix auth-anonymous=1",
             f"--load=module-null-sink sink_name=spk rate={SPEAKER_RATE}",
             f"--load=module-pipe-source source_name=mic file={self.fifo} format=s16le rate={MIC_RATE} channels=1"],
            env=server_env, capture_output=True, text=True, timeout=30)
        pid_file = self.runtime / "pulse" / "pid"
        if run.returncode != 0 or not pid_file.is_file():
            raise PulseUnavailable(f"pulseaudio did not start (exit {run.returncode}): {last_error(run.stderr)}")
        self.pid = int(pid_file.read_text())
        # --daemonize returns before the modules are checked: a failed module leaves a server without the device
        sources = self.pactl("list", "short", "sources")
        if not self.fifo.exists() or "\tmic\t" not in sources:
            self.stop()
            raise PulseUnavailable(f"pulseaudio started without its microphone: {last_error(run.stderr)}")
        self.pactl("set-default-source", "mic")
        self.pactl("set-default-sink", "spk")
        # a listener on the monitor keeps the null sink at a low latency, as a sound card's sink is: with none it
        # renders 2 s at a time, and a program's output stream then gets no callback for a second or more (measured)
        self._listener = subprocess.Popen(["parec", "-d", "spk.monitor", "--latency-msec=20", "--raw"],
                                          env=self.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._feeder = threading.Thread(target=self._feed, name="pulse-mic", daemon=True)
        self._feeder.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.kill(signal.SIGTERM)  # first: a feeder blocked on a full FIFO then gets EPIPE and ends
        if self._feeder is not None:
            self._feeder.join(5)
        if self._listener is not None:  # it usually ends with the server; one that lingers (seen once in CI) is ended
            try:
                self._listener.wait(5)
            except subprocess.TimeoutExpired:
                self._listener.kill()
                self._listener.wait(10)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """End the server (SIGKILL: as if the sound device vanished) and wait until it is gone."""
        if self.pid is None:
            return
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and alive(self.pid):
            time.sleep(0.02)
        self.pid = None

    def pactl(self, *args: str) -> str:
        run = subprocess.run(["pactl", *args], env=self.env(), capture_output=True, text=True, timeout=30)
        if run.returncode != 0:
            raise PulseUnavailable(f"pactl {' '.join(args)} failed: {last_error(run.stderr)}")
        return run.stdout

    def __enter__(self) -> "PulseAudio":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- the microphone ----------------------------------------------------------------------------------------
    def say(self, samples: np.ndarray) -> None:
        """Queue float32 samples at 16 kHz for the microphone (they follow whatever is queued already)."""
        self._queue.append(np.asarray(samples, dtype=np.float32))

    @property
    def mic_seconds(self) -> float:
        """Seconds of audio (queued and silence) the microphone has delivered."""
        return self._fed / MIC_RATE

    def stall_mic(self) -> None:
        """The microphone stops delivering audio (the FIFO stays open): PortAudio's input callbacks stop."""
        self._stalled.set()

    def mic_hears_speaker(self) -> None:
        """From now on the default microphone is the speaker's monitor: a perfect echo of what programs play."""
        self.pactl("set-default-source", "spk.monitor")

    def said(self) -> bool:
        """Whether everything queued with :meth:`say` has been delivered."""
        return not self._queue

    def _feed(self) -> None:
        fd = os.open(self.fifo, os.O_WRONLY)  # the server holds the read end open
        pending = np.zeros(0, np.float32)
        start = time.monotonic()
        try:
            while not self._stop.is_set():
                if self._stalled.is_set():
                    time.sleep(0.02)
                    continue
                while pending.size < CHUNK and self._queue:
                    pending = np.concatenate([pending, self._queue.popleft()])
                chunk, pending = pending[:CHUNK], pending[CHUNK:]
                chunk = np.concatenate([chunk, np.zeros(CHUNK - chunk.size, np.float32)])
                os.write(fd, (np.clip(chunk, -1, 1) * 32767).round().astype("<i2").tobytes())
                self._fed += CHUNK
                time.sleep(max(0.0, start + self._fed / MIC_RATE - time.monotonic()))
        except BrokenPipeError:  # the server is gone (stopped, or killed by a test)
            pass
        finally:
            os.close(fd)

    # ---- the speaker -------------------------------------------------------------------------------------------
    def record(self, rate: int = SPEAKER_RATE) -> Recording:
        """Start recording what programs play (mono s16le at ``rate``); stop it (or leave the with-block) to read."""
        return Recording(self.env(), rate)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def last_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("E:")] or stderr.splitlines() or ["no output"]
    return lines[-1].strip()


@pytest.fixture
def pulse(tmp_path):
    """A running private PulseAudio (skips, with the reason, where it cannot start)."""
    server = PulseAudio(tmp_path / "pulse")
    try:
        server.start()
    except PulseUnavailable as e:
        pytest.skip(f"PulseAudio cannot start here: {e}")
    yield server
    server.stop()
