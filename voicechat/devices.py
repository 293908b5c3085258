"""Live audio ends for voicechat's ``live`` command: the microphone and the speaker through sounddevice (PortAudio),
or a recording played as the microphone and a virtual speaker that records, and the buffers between them and the
main loop.

PortAudio runs the callbacks on its own threads: they only copy numpy arrays (the microphone's into a
:class:`Ring`, the speaker's out of a :class:`JitterBuffer`) and never wait, never touch MLX. Everything else
(resampling, the session) happens on the main loop, which calls ``pull`` / ``tick`` / ``check``.
"""

from __future__ import annotations

import ctypes
import sys
import threading
import time
from typing import Optional

import numpy as np

from .config import FRAME_SECONDS, INPUT_SAMPLE_RATE
from .errors import AudioDeviceError, command_name

FAST_AHEAD = 0.32  # a fast file microphone: seconds of input handed over ahead of what the session consumed
STALL_SECONDS = 3.0  # a device whose callback has not run for this long has stopped (PortAudio on macOS does not
#                      always report a device that went away: its callbacks just stop)
PORTAUDIO_FIX = "Linux: sudo apt install libportaudio2; macOS: pip install --force-reinstall sounddevice"


class DeviceChoiceError(AudioDeviceError):
    """--input-device / --output-device names no device of that kind (a usage error)."""


# ---------------------------------------------------------------------------------------------------------------
# sounddevice / PortAudio
# ---------------------------------------------------------------------------------------------------------------
def import_sounddevice():
    """The sounddevice module, or one line that says how to get PortAudio (its Linux wheel does not bundle it)."""
    silence_alsa()
    try:
        import sounddevice
    except OSError as e:  # sounddevice raises OSError when the PortAudio library is missing or cannot load
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise AudioDeviceError(f"live audio needs the PortAudio library, which did not load ({reason}); "
                               f"install it ({PORTAUDIO_FIX})") from None
    except ImportError:
        raise AudioDeviceError("live audio needs the sounddevice package: pip install sounddevice") from None
    return sounddevice


# void handler(const char *file, int line, const char *function, int err, const char *fmt, ...): the variable
# arguments are not declared, which the C calling convention allows for a callee that ignores them
ALSA_ERROR_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                                      ctypes.c_char_p)
_alsa_handler = []  # keeps the installed handler alive


def silence_alsa() -> None:
    """Linux: ALSA prints its own messages (an underrun it recovered from, a plugin it could not open while PortAudio
    lists devices) straight to the terminal, through the status line, which counts underruns itself. Installed
    before PortAudio loads ALSA; PortAudio's own errors still print."""
    if sys.platform != "linux" or _alsa_handler:
        return
    try:
        alsa = ctypes.CDLL("libasound.so.2")
    except OSError:  # no ALSA: PortAudio will not find it either, and says so
        return
    _alsa_handler.append(ALSA_ERROR_HANDLER(lambda *args: None))
    alsa.snd_lib_error_set_handler(_alsa_handler[0])


def device_table(sd) -> str:
    """sounddevice's table of devices (``>`` marks the default input, ``<`` the default output)."""
    devices = sd.query_devices()
    if not len(devices):
        return "no audio devices found (connect a microphone and speakers, or start the system's sound server)"
    return f"{devices}\n(> marks the default input, < the default output, * both; --input-device and " \
           f"--output-device take a number or part of a name)"


def list_hint() -> str:
    return f"`{command_name()} live --list-devices` lists them"


# what stands in for a missing device: a recording played as the microphone, a file written for the speaker
FILE_STAND_IN = {"input": "or play a recording as the microphone with --input-file WAV",
                 "output": "or, with --input-file, write the answer to a file with --output-file OUT.wav"}


def pick_device(sd, spec: Optional[str], kind: str) -> tuple[int, dict]:
    """(index, sounddevice's device dict) for ``spec`` (None: the system default; a number; or part of a name)."""
    what = "microphone" if kind == "input" else "speaker"
    option = f"--{kind}-device"
    if spec is None:
        try:
            info = sd.query_devices(kind=kind)
        except Exception:  # PortAudioError "Error querying device -1": there is no default device of this kind
            raise AudioDeviceError(f"no {what} found: connect one, pick one with {option} ({list_hint()}), "
                                   f"{FILE_STAND_IN[kind]}") from None
    else:
        try:
            info = sd.query_devices(int(spec) if spec.strip().isdigit() else spec, kind=kind)
        except Exception as e:  # ValueError: no or several devices match; PortAudioError: bad number
            reason = str(e).splitlines()[0] if str(e) else "no such device"
            raise DeviceChoiceError(f"{option} {spec!r}: {reason} ({list_hint()})") from None
    if info[f"max_{kind}_channels"] < 1:
        raise DeviceChoiceError(f"{option} {spec!r}: {info['name']} has no {kind} channels ({list_hint()})")
    return int(info["index"]), dict(info)


# ---------------------------------------------------------------------------------------------------------------
# buffers between the audio callbacks and the main loop
# ---------------------------------------------------------------------------------------------------------------
class Ring:
    """A float32 ring for one writer thread and one reader thread, without locks: each side only advances its own
    counter (a Python int, replaced atomically), so a callback never waits. Full: new samples are dropped and
    counted."""

    def __init__(self, capacity: int):
        self._buf = np.zeros(capacity, np.float32)
        self._written = 0  # total samples written (writer only)
        self._read = 0  # total samples read or skipped (reader only)
        self.dropped = 0  # samples that did not fit (writer only)

    @property
    def capacity(self) -> int:
        return self._buf.size

    @property
    def available(self) -> int:
        return self._written - self._read

    def write(self, x: np.ndarray) -> None:
        n = min(len(x), self.capacity - self.available)
        self.dropped += len(x) - n
        start = self._written % self.capacity
        first = min(n, self.capacity - start)
        self._buf[start:start + first] = x[:first]
        self._buf[:n - first] = x[first:n]
        self._written += n

    def read_into(self, out: np.ndarray) -> int:
        """Fill the head of ``out`` with up to ``len(out)`` samples; returns how many."""
        n = min(len(out), self.available)
        start = self._read % self.capacity
        first = min(n, self.capacity - start)
        out[:first] = self._buf[start:start + first]
        out[first:n] = self._buf[:n - first]
        self._read += n
        return n

    def read(self) -> np.ndarray:
        """Everything available (a new array)."""
        out = np.empty(self.available, np.float32)
        self.read_into(out)
        return out

    def skip(self, n: int) -> None:
        self._read += min(n, self.available)


class JitterBuffer:
    """What the speaker plays: the answer's audio, written by the main loop as frames arrive, read by the speaker.

    The policy is Moshi's and Unmute's playback worklets' (docs/live.md §4), with the levels raised by one 80 ms frame,
    because the session hands over audio a whole frame at a time (the worklets get 20 ms packets):

    * playing starts when one frame plus ``partial`` (10 ms at first) is queued;
    * an underrun plays silence, is counted, waits for that level again, and grows ``partial`` by 5 ms (to 80 ms);
    * more than two frames plus ``partial`` plus ``extra`` queued drops the oldest audio back to the starting level,
      so the delay stays bounded, and grows ``extra`` (from 10 ms). The worklets grow it by 5 ms to 80 ms; here it
      grows by a whole frame, to 400 ms: a machine that needs more than 80 ms for some frames catches up with
      bursts of several frames, and dropping each of those would cut the answer to pieces (measured on a 2-core
      CPU: a third of the answer lost with 5 ms steps).

    ``drain()`` (no more audio will come, or no clock to keep up with) plays everything, without levels or drops.
    """

    STEP, MOST = 0.005, 0.08  # partial
    EXTRA_MOST = 0.4

    def __init__(self, rate: int, seconds: float = 10.0):
        self.rate = rate
        self.ring = Ring(int(seconds * rate))
        self.frame = int(FRAME_SECONDS * rate)
        self.partial = int(0.010 * rate)
        self.extra = int(0.010 * rate)
        self.playing = False
        self.draining = False
        self.underruns = 0  # times the speaker ran dry while playing
        self.dropped = 0  # samples dropped to keep the delay bounded
        self.played = 0  # samples handed to the speaker, silence included

    def write(self, x: np.ndarray) -> None:
        self.ring.write(x)

    def drain(self) -> None:
        self.draining = True

    @property
    def buffered_seconds(self) -> float:
        return self.ring.available / self.rate

    def read_into(self, out: np.ndarray) -> None:
        """Fill ``out`` (the speaker's block): queued audio, silence where there is none."""
        available = self.ring.available
        start_level = self.frame + self.partial
        if available > 2 * self.frame + self.partial + self.extra and not self.draining:
            self.ring.skip(available - start_level)
            self.dropped += available - start_level
            self.extra = min(self.extra + self.frame, int(self.EXTRA_MOST * self.rate))
        if not self.playing and (self.ring.available >= start_level or self.draining):
            self.playing = True
        n = self.ring.read_into(out) if self.playing else 0
        out[n:] = 0.0
        if self.playing and n < len(out) and not self.draining:
            self.underruns += 1
            self.playing = False
            self.partial = min(self.partial + int(self.STEP * self.rate), int(self.MOST * self.rate))
        self.played += len(out)


# ---------------------------------------------------------------------------------------------------------------
# the two ends: devices, or a file and a virtual speaker
# ---------------------------------------------------------------------------------------------------------------
class DeviceStream:
    """One PortAudio stream whose callback only copies; ``check()`` (main loop) turns a stopped device into one
    line."""

    def __init__(self, sd, device: int, info: dict, kind: str):
        self.kind, self.name, self.info = kind, info["name"], info
        self.rate = int(info["default_samplerate"])
        self.calls = 0  # callbacks so far
        self.xruns = 0  # PortAudio's input overflow / output underflow flags
        self._last_call = time.monotonic()
        self._finished = threading.Event()
        self._stopping = False
        make = sd.InputStream if kind == "input" else sd.OutputStream
        try:
            # 10 ms blocks: with a free block size PortAudio's ALSA path to PulseAudio calls back in bursts with
            # pauses of a second (measured); fixed small blocks keep it steady and the delay low
            self.stream = make(device=device, samplerate=self.rate, blocksize=self.rate // 100, channels=1,
                               dtype="float32", latency="low", callback=self._callback,
                               finished_callback=self._finished.set)
        except Exception as e:  # PortAudioError: the device refuses the format, is busy, vanished ...
            raise AudioDeviceError(f"cannot open the {self.what} {self.name!r}: {first_line(e)}; "
                                   f"pick another with --{kind}-device ({list_hint()})") from None

    @property
    def what(self) -> str:
        return "microphone" if self.kind == "input" else "speaker"

    def _callback(self, *args) -> None:
        raise NotImplementedError

    def _tick(self, status) -> None:
        self.calls += 1
        self._last_call = time.monotonic()
        if status:
            self.xruns += 1

    def start(self) -> None:
        self._last_call = time.monotonic()
        self.stream.start()

    def check(self) -> None:
        """Raise AudioDeviceError if the device stopped on its own (unplugged, sound server gone)."""
        if self._stopping:
            return
        if self._finished.is_set():
            why = "device lost"
        elif time.monotonic() - self._last_call > STALL_SECONDS:
            why = f"no audio for {STALL_SECONDS:g} s"
        else:
            return
        raise AudioDeviceError(f"the {self.what} {self.name!r} stopped ({why}); reconnect it and start again, or "
                               f"pick another with --{self.kind}-device ({list_hint()})")

    def close(self) -> None:
        # abort, not stop: stop() waits for the device to play out or deliver its buffer, which a vanished or
        # silent device never does
        self._stopping = True
        try:
            self.stream.abort()
            self.stream.close()
        except Exception:  # the device is already gone: nothing left to release
            pass


class Microphone(DeviceStream):
    finished = False  # a microphone never runs out

    def __init__(self, sd, device: int, info: dict):
        super().__init__(sd, device, info, "input")
        self.ring = Ring(int(4 * self.rate))

    def _callback(self, indata, frames, time_info, status) -> None:
        self._tick(status)
        self.ring.write(indata[:, 0])

    def pull(self, lag: float) -> np.ndarray:
        return self.ring.read()


class Speaker(DeviceStream):
    def __init__(self, sd, device: int, info: dict, keep_played: bool = False):
        super().__init__(sd, device, info, "output")
        self.buffer = JitterBuffer(self.rate)
        self.played = Ring(int(4 * self.rate)) if keep_played else None  # what it played, for the echo canceller

    def _callback(self, outdata, frames, time_info, status) -> None:
        self._tick(status)
        self.buffer.read_into(outdata[:, 0])
        if self.played is not None:
            self.played.write(outdata[:, 0])

    def tick(self) -> None:
        pass


class FileMicrophone:
    """A recording played as the microphone: at the pace of the clock, or (``fast``) as fast as the session takes
    it, followed by ``tail`` seconds of silence (the microphone stays open while the model answers)."""

    name = "file"

    def __init__(self, samples: np.ndarray, rate: int, tail: float, fast: bool, clock=time.monotonic):
        self.samples = np.concatenate([samples, np.zeros(int(round(tail * rate)), np.float32)])
        self.rate, self.fast, self.clock = rate, fast, clock
        self.sent = 0
        self._start: Optional[float] = None

    def start(self) -> None:
        self._start = self.clock()

    @property
    def finished(self) -> bool:
        return self.sent >= self.samples.size

    def pull(self, lag: float) -> np.ndarray:
        if self.fast:
            due = self.sent + max(0, int((FAST_AHEAD - lag) * self.rate))
        else:
            due = round((self.clock() - self._start) * self.rate)
        chunk = self.samples[self.sent:min(due, self.samples.size)]
        self.sent += chunk.size
        return chunk

    def check(self) -> None:
        pass

    def close(self) -> None:
        pass


class FileSpeaker:
    """A virtual speaker that records what it would have played: at the clock's pace through the same jitter buffer
    (silences and drops included), or (``fast``) everything as soon as it is there."""

    name = "file"

    def __init__(self, rate: int, fast: bool, clock=time.monotonic):
        self.rate, self.fast, self.clock = rate, fast, clock
        self.buffer = JitterBuffer(rate, seconds=600.0 if fast else 10.0)
        if fast:
            self.buffer.drain()
        self.blocks: list[np.ndarray] = []
        self._start: Optional[float] = None

    def start(self) -> None:
        self._start = self.clock()

    def tick(self) -> None:
        due = self.buffer.ring.available if self.fast else \
            round((self.clock() - self._start) * self.rate) - self.buffer.played
        if due > 0:
            block = np.empty(due, np.float32)
            self.buffer.read_into(block)
            self.blocks.append(block)

    def audio(self) -> np.ndarray:
        return np.concatenate(self.blocks) if self.blocks else np.zeros(0, np.float32)

    def check(self) -> None:
        pass

    def close(self) -> None:
        pass


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class EchoCanceller:
    """WebRTC's acoustic echo canceller (AEC3), from the audio processing module of the ``livekit`` package (an
    optional dependency): it learns how what the speaker played (``played``) comes back into the microphone and
    removes it from what the microphone heard (``clean``). Both at 16 kHz; it works on 10 ms frames, so ``clean``
    holds back up to 10 ms."""

    RATE = INPUT_SAMPLE_RATE  # it cleans what the model is to hear
    FRAME = RATE // 100

    def __init__(self, delay_ms: int):
        try:
            from livekit import rtc
        except ImportError:
            raise AudioDeviceError("--echo-cancel needs WebRTC's audio processing from the livekit package: "
                                   "pip install livekit") from None
        self.rtc = rtc
        self.apm = rtc.AudioProcessingModule(echo_cancellation=True)
        self.apm.set_stream_delay_ms(delay_ms)  # a hint: AEC3 estimates the delay itself
        self.far = np.zeros(0, np.float32)
        self.near = np.zeros(0, np.float32)
        self.seconds = 0.0  # spent in the module
        self.frames = 0  # 10 ms microphone frames cleaned

    def played(self, x: np.ndarray) -> None:
        self.far = np.concatenate([self.far, x])
        while self.far.size >= self.FRAME:
            self._process(self.apm.process_reverse_stream, self.far[:self.FRAME])
            self.far = self.far[self.FRAME:]

    def clean(self, x: np.ndarray) -> np.ndarray:
        self.near = np.concatenate([self.near, x])
        whole = self.near.size // self.FRAME * self.FRAME
        out = [self._process(self.apm.process_stream, self.near[i:i + self.FRAME]) for i in range(0, whole, self.FRAME)]
        self.near = self.near[whole:]
        self.frames += len(out)
        return np.concatenate(out) if out else np.zeros(0, np.float32)

    def _process(self, step, x: np.ndarray) -> np.ndarray:
        """One 10 ms frame through ``step`` (in place, as 16-bit PCM)."""
        pcm = (np.clip(x, -1.0, 1.0) * 32767.0).round().astype(np.int16)
        frame = self.rtc.AudioFrame(pcm.tobytes(), self.RATE, 1, self.FRAME)
        t0 = time.perf_counter()
        step(frame)
        self.seconds += time.perf_counter() - t0
        return np.frombuffer(frame.data, dtype=np.int16).astype(np.float32) / 32767.0

    @property
    def ms_per_model_frame(self) -> float:
        """Milliseconds spent per 80 ms of microphone audio (its reverse stream included)."""
        return 1000 * self.seconds / max(self.frames, 1) * 8

