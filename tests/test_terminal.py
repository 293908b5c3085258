"""``python -m voicechat live``: the buffers and pacing on hand-made cases, the terminal, then the whole command as a
subprocess: through a private PulseAudio (a microphone fed from a WAV, a speaker that is recorded), with a recording
as the microphone (same ids and codes as the session fed the same file), and every failure a user can meet (one line,
the right exit code)."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr

import voicechat
from conftest import HARNESS_WAV, NEMO, default_sigint
from pulse import SPEAKER_RATE, pulse  # noqa: F401  (pulse: the fixture)
from voicechat.devices import FAST_AHEAD, FileMicrophone, FileSpeaker, JitterBuffer, Ring
from voicechat.errors import FellBehind
from voicechat.answer import stereo_timeline
from voicechat.terminal import LagGuard, TerminalView, tool_lines
from voicechat.result import Result
from voicechat.tools import ToolCall, ToolEvent

STATUS = re.compile(r"status: frame p50 ([\d.]+) ms p95 ([\d.]+) ms \| RTF ([\d.]+) \| lag (\d+) ms \| "
                    r"buffered (\d+) ms \| late frames (\d+) \| underruns (\d+)")
TIMEOUT = 120  # seconds for any one command (loading the demo model included)


# ---------------------------------------------------------------------------------------------------------------
# buffers and pacing
# ---------------------------------------------------------------------------------------------------------------
def test_ring_wraps_around_and_counts_what_did_not_fit():
    ring = Ring(5)
    ring.write(np.arange(3, dtype=np.float32))
    out = np.zeros(2, np.float32)
    assert ring.read_into(out) == 2 and out.tolist() == [0, 1]
    ring.write(np.arange(10, 15, dtype=np.float32))  # 1 queued + 4 fit; 14 is dropped
    assert ring.dropped == 1 and ring.available == 5
    assert ring.read().tolist() == [2, 10, 11, 12, 13]  # across the wrap, in order
    ring.write(np.array([7], np.float32))
    ring.skip(5)  # skips only what is there
    assert ring.available == 0 and ring.read().size == 0


def test_jitter_buffer_starts_at_a_frame_plus_10_ms_and_counts_underruns():
    rate = 1000  # 1 sample per ms: the levels read as milliseconds
    jb = JitterBuffer(rate)
    block = np.zeros(10, np.float32)
    jb.write(np.ones(85, np.float32))  # < 80 + 10 queued: silence
    jb.read_into(block)
    assert not block.any() and not jb.playing and jb.underruns == 0
    jb.write(np.full(10, 2.0, np.float32))  # 95 queued: it plays
    jb.read_into(block)
    assert jb.playing and block.tolist() == [1.0] * 10
    for _ in range(8):  # 85 left: 75 ones and 10 twos
        jb.read_into(block)
    assert block.tolist() == [1.0] * 5 + [2.0] * 5
    jb.read_into(block)  # 5 left: they play, then silence
    assert block.tolist() == [2.0] * 5 + [0.0] * 5
    assert jb.underruns == 1 and not jb.playing and jb.partial == 15  # waits for 80 + 15 now
    jb.write(np.ones(90, np.float32))
    jb.read_into(block)
    assert not block.any()
    jb.write(np.ones(5, np.float32))
    jb.read_into(block)
    assert block.all() and jb.played == 13 * 10


def test_jitter_buffer_drops_a_burst_back_to_the_starting_level():
    jb = JitterBuffer(1000)
    jb.write(np.arange(181, dtype=np.float32))  # 181 > 2 * 80 + 10 + 10: the oldest 91 go, 90 stay
    block = np.zeros(10, np.float32)
    jb.read_into(block)
    assert jb.dropped == 91 and block.tolist() == list(range(91, 101))
    assert jb.extra == 90  # the next burst may be a frame larger


def test_a_drained_jitter_buffer_plays_what_is_left():
    jb = JitterBuffer(1000)
    jb.write(np.ones(30, np.float32))
    jb.drain()
    block = np.zeros(40, np.float32)
    jb.read_into(block)
    assert block.tolist() == [1.0] * 30 + [0.0] * 10 and jb.underruns == 0
    jb.write(np.arange(300, dtype=np.float32))  # a burst: nothing dropped
    block = np.zeros(300, np.float32)
    jb.read_into(block)
    assert block.tolist() == list(range(300)) and jb.dropped == 0


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_file_microphone_delivers_at_the_clocks_pace_then_the_tail():
    clock = Clock()
    mic = FileMicrophone(np.ones(1600, np.float32), 16000, tail=0.05, fast=False, clock=clock)
    mic.start()
    assert mic.pull(0.0).size == 0
    clock.now += 0.06
    assert mic.pull(0.0).tolist() == [1.0] * 960
    clock.now += 1.0
    rest = mic.pull(0.0)
    assert rest.tolist() == [1.0] * 640 + [0.0] * 800 and mic.finished


def test_a_fast_file_microphone_stays_a_little_ahead_of_the_session():
    mic = FileMicrophone(np.ones(16000, np.float32), 16000, tail=0.0, fast=True)
    mic.start()
    assert mic.pull(lag=0.0).size == int(FAST_AHEAD * 16000)
    assert mic.pull(lag=FAST_AHEAD).size == 0  # the session has not taken any of it yet
    assert mic.pull(lag=0.1).size == int((FAST_AHEAD - 0.1) * 16000)


def test_the_virtual_speaker_plays_by_the_clock_with_the_jitter_policy():
    clock = Clock()
    speaker = FileSpeaker(1000, fast=False, clock=clock)
    speaker.start()
    clock.now += 0.05
    speaker.tick()  # nothing queued yet: 50 ms of silence
    speaker.buffer.write(np.ones(100, np.float32))
    clock.now += 0.2
    speaker.tick()  # 100 ms of answer, then it runs dry: 100 ms of silence, one underrun
    assert speaker.audio().tolist() == [0.0] * 50 + [1.0] * 100 + [0.0] * 100
    assert speaker.buffer.underruns == 1
    fast = FileSpeaker(1000, fast=True)
    fast.buffer.write(np.arange(30, dtype=np.float32))
    fast.tick()
    assert fast.audio().tolist() == list(range(30))  # as soon as it is there, no waiting level


# ---------------------------------------------------------------------------------------------------------------
# the terminal and the lag bound
# ---------------------------------------------------------------------------------------------------------------
def test_the_view_prints_one_line_per_turn_when_not_a_terminal():
    out = io.StringIO()
    view = TerminalView(out, tty=False)
    view.say("you", " what is")
    view.say("you", " the time")
    view.say("assistant", " It is")
    view.show("s1", now=10.0)
    view.say("assistant", " noon.")
    view.note("tool call: get_current_time({})")
    view.show("s2", now=10.5)  # a finished line prints at once; the status only once a second
    view.say("you", "thanks")
    view.close("s3")
    assert out.getvalue().splitlines() == ["you: what is the time", "status: s1", "assistant: It is noon.",
                                           "tool call: get_current_time({})", "you: thanks", "status: s3"]


def test_the_view_redraws_the_open_line_and_the_status_in_place_on_a_terminal(monkeypatch):
    monkeypatch.setattr(shutil, "get_terminal_size", lambda: os.terminal_size((20, 10)))
    out = io.StringIO()
    view = TerminalView(out, tty=True)
    view.say("assistant", "0123456789 0123456789")  # "assistant: " + 21 characters: two rows of 20
    view.show("status one", now=1.0, force=True)
    first = out.getvalue()
    assert first == "\r\x1b[Jassistant: 0123456789 0123456789\nstatus one"
    view.say("you", "hi")
    view.show("status two", now=2.0)
    # up over the open line's two rows, clear, the finished line, the new open line, the status
    assert out.getvalue()[len(first):] == ("\x1b[2A\r\x1b[Jassistant: 0123456789 0123456789\nyou: hi\n"
                                           "status two")


def test_tool_events_show_as_lines():
    call = ToolCall(call_id="call_" + "0" * 32, name="calculate", arguments={"expression": "2+2"}, raw="", call_start=5,
                    call_end=9, result={"value": 4})
    failed = dataclasses.replace(call, name="get_current_time", arguments={}, result=None, error="timeout")
    assert tool_lines(ToolEvent("call_start", 5)) == []
    assert tool_lines(ToolEvent("call", 9, (call, failed))) == ['tool call: calculate({"expression": "2+2"})',
                                                                "tool call: get_current_time({})"]
    assert tool_lines(ToolEvent("result", 10, (call, failed))) == ['tool result: calculate -> {"value": 4}',
                                                                   "tool result: get_current_time -> error: timeout"]


def test_the_lag_bound_stops_a_call_that_falls_behind_but_not_a_tool_exchange():
    guard = LagGuard(2.0)
    guard.check(1.9)
    with pytest.raises(FellBehind, match=r"fell 2\.1 s behind real time.*--max-lag"):
        guard.check(2.1)
    guard.tool_event("call_start", 0.1)
    guard.check(5.0)  # the session holds the user's audio on purpose
    guard.tool_event("end", 5.0)
    guard.check(6.9)  # 5 s left by the exchange, plus the bound
    guard.check(1.0)  # it caught up: the allowance is gone
    with pytest.raises(FellBehind):
        guard.check(3.1)
    LagGuard(0.0).check(100.0)  # 0: never


def test_the_stereo_file_puts_both_sides_on_one_timeline():
    rate = 22050
    answer = np.full(3 * 1764, 0.5, np.float32)
    result = Result(text="", function_text="", user_transcript="", audio=answer, sample_rate=rate,
                    text_tokens=np.zeros(3), function_tokens=np.zeros(3), audio_codes=np.zeros((3, 31)),
                    first_frame=0, prompt_frames=2, input_frames=1, frame_seconds=0.08)
    user = np.full(1280, 0.25, np.float32)  # one frame at 16 kHz
    stereo = stereo_timeline(user, 16000, result)
    # the answer starts at position 0 (reference mode keeps the prompt), the user's audio at position 2
    assert stereo.shape == (3 * 1764, 2)
    np.testing.assert_array_equal(stereo[:, 1], answer)
    assert not stereo[:2 * 1764, 0].any()
    np.testing.assert_allclose(stereo[2 * 1764 + 100:3 * 1764 - 100, 0], 0.25, atol=1e-3)


def test_the_stereo_file_puts_each_user_frame_where_the_model_heard_it():
    """Positions 3..12 after a 3-position prompt, a tool exchange from 5 (SOTC) to 8 (EOTR): the user's frames 0, 1, 2
    at positions 3, 4, 5, the silence embedding at 6, 7, 8, frames 3..6 at 9..12; frame 7 (sent, never heard) is left
    out. The answer is the right channel as it is."""
    hop = 4  # samples per position at 40 Hz
    user = np.repeat(np.arange(1, 9, dtype=np.float32) / 10, hop)  # frame k holds (k + 1) / 10
    answer = np.arange(10 * hop - 1, dtype=np.float32) / 100  # one sample short (the codec's last samples)
    result = Result(text="", function_text="", user_transcript="", audio=answer, sample_rate=40,
                    text_tokens=np.zeros(10), function_tokens=np.zeros(10), audio_codes=np.zeros((10, 31)),
                    first_frame=3, prompt_frames=3, input_frames=7, frame_seconds=0.1, held_positions=(6, 7, 8))
    stereo = stereo_timeline(user, 40, result)
    assert stereo.shape == (10 * hop, 2) and stereo.dtype == np.float32
    np.testing.assert_allclose(stereo[::hop, 0] * 10, [1, 2, 3, 0, 0, 0, 4, 5, 6, 7], atol=1e-6)
    np.testing.assert_array_equal(stereo[:, 1], np.append(answer, 0))


# ---------------------------------------------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------------------------------------------
def live_command(*args: str) -> list[str]:
    # -X faulthandler: a process that hangs and gets SIGABRT prints where it was
    return [sys.executable, "-X", "faulthandler", "-m", "voicechat", "live", *args]


def run_live(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(live_command(*args), env=env, capture_output=True, text=True, timeout=TIMEOUT)


class Running:
    """``live`` as a background process whose output is read as it comes."""

    def __init__(self, *args: str, env: dict):
        self.process = subprocess.Popen(live_command(*args), env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
        self.out: list[str] = []
        self.ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.out.append(line.rstrip("\n"))
            if line.startswith("ready"):
                self.ready.set()

    def wait_ready(self) -> None:
        if not self.ready.wait(TIMEOUT):
            self.process.send_signal(signal.SIGABRT)
            pytest.fail(f"live never got ready; stdout: {self.out}; stderr: {self.process.stderr.read()}")

    def finish(self) -> tuple[int, str]:
        try:
            rc = self.process.wait(TIMEOUT)
        except subprocess.TimeoutExpired:  # -X faulthandler: SIGABRT writes every thread's stack to stderr
            self.process.send_signal(signal.SIGABRT)
            self.process.wait(10)
            pytest.fail(f"live did not end; stdout: {self.out}; stderr: {self.process.stderr.read()}")
        self._reader.join(10)
        return rc, self.process.stderr.read()


def find(pieces: list[np.ndarray], haystack: np.ndarray) -> list[tuple[int, float]]:
    """For each piece (all of one length): where it best matches in ``haystack`` and the normalised correlation there
    (correlation through the FFT; the windows' energies from a cumulative sum)."""
    size = pieces[0].size
    n = 1 << int(np.ceil(np.log2(haystack.size + size)))
    spectrum = np.fft.rfft(haystack, n)
    energy = np.concatenate([[0.0], np.cumsum(haystack.astype(np.float64) ** 2)])
    norms = np.sqrt(np.maximum(energy[size:] - energy[:-size], 1e-12))
    out = []
    for piece in pieces:
        scores = np.fft.irfft(spectrum * np.conj(np.fft.rfft(piece, n)), n)[:haystack.size - size + 1]
        scores /= norms * np.linalg.norm(piece)
        at = int(np.argmax(scores))
        out.append((at, float(scores[at])))
    return out


@pytest.mark.solo  # the call keeps real time on a real audio stack: a test beside it can put it behind
def test_live_demo_through_pulseaudio_talks_and_stops_on_ctrl_c(pulse, tmp_path):
    """A real audio stack: PortAudio -> ALSA -> a private PulseAudio. The user says the question into the microphone
    once the call is ready; five seconds later Ctrl+C. The session got the microphone's audio, the speaker played
    the answer, the status line carried its numbers, and the call saved itself."""
    question, rate = sf.read(HARNESS_WAV, dtype="float32")
    save = tmp_path / "call"
    with pulse.record(SPEAKER_RATE) as speaker:
        call = Running("--demo", "--save", str(save), env=pulse.env())
        call.wait_ready()
        pulse.say(question)
        time.sleep(5.0)
        call.process.send_signal(signal.SIGINT)
        rc, err = call.finish()
    assert rc == 0, err
    assert "Wear headphones" in err and "stopped (Ctrl+C)" in err
    statuses = [line for line in call.out if line.startswith("status:")]
    assert all(STATUS.fullmatch(line) or line.startswith("status: listening") for line in statuses), statuses
    last = STATUS.fullmatch(statuses[-1])  # the last one, drawn when the call closed
    p50, p95, rtf = (float(last.group(i)) for i in (1, 2, 3))
    assert 0 < p50 <= p95 and rtf > 0

    record = json.loads((save / "conversation.json").read_text())
    positions = len(record["text_tokens"])
    sent = record["live"]["input_seconds"]
    # position k is made once the audio reaches a little into its 80 ms (the mel window is centred on the frame's
    # start, docs/live.md §1), so every position but the last was heard whole; what the session had not reached at
    # Ctrl+C is within the lag bound (2 s)
    assert sent - 2.0 - 0.08 <= (positions - 1) * 0.08 <= sent
    stereo, wav_rate = sf.read(save / "conversation.wav", dtype="float32")
    assert wav_rate == 22050 and stereo.shape[1] == 2

    # the session received the microphone: the whole question is in the left channel (what was sent, on the
    # timeline), as it was said
    said = voicechat.audio.resample(question, rate, wav_rate)
    [(_, score)] = find([said], stereo[:, 0])
    assert score > 0.99

    # the speaker played the answer. Every 10 ms of sound in the recording is 10 ms of the answer (at the speaker's
    # rate, as the call resampled it), in order: a correlation above 0.99, which no other stretch of audio reaches
    # (10 ms of noise against 10 s: about 0.25 at most). Only pieces that straddle a seam miss: silence inserted by
    # an underrun of the call or of the device, or audio dropped to bound the delay when this machine fell behind.
    answer = soxr.resample(stereo[:, 1], wav_rate, SPEAKER_RATE)
    size = SPEAKER_RATE // 100
    played = [speaker.audio[i:i + size] for i in range(0, speaker.audio.size - size, size)]
    played = [piece for piece in played if np.abs(piece).max() > 0.01]
    matches = find(played, answer)
    at = [where for where, score in matches if score > 0.99]
    assert len(at) >= 2 / 3 * len(played), sorted(score for _, score in matches)
    assert len(at) * size / SPEAKER_RATE >= 1.0  # a second of the answer, at least
    assert at == sorted(at)


def level_db(x: np.ndarray) -> float:
    return float(10 * np.log10(np.mean(np.square(x, dtype=np.float64)) + 1e-20))


def echo_call(pulse, tmp_path, *flags: str) -> np.ndarray:
    """6 s of a call whose microphone hears exactly what its speaker plays -> [samples, 2] (heard, answer)."""
    pulse.mic_hears_speaker()
    call = Running("--demo", "--save", str(tmp_path / "call"), *flags, env=pulse.env())
    call.wait_ready()
    time.sleep(6.0)
    call.process.send_signal(signal.SIGINT)
    rc, err = call.finish()
    assert rc == 0, err
    return sf.read(tmp_path / "call" / "conversation.wav", dtype="float32")[0]


@pytest.mark.solo  # the call keeps real time on a real audio stack: a test beside it can put it behind
def test_echo_cancel_removes_the_speaker_from_the_microphone(pulse, tmp_path):
    """The microphone is the speaker's monitor (a perfect echo, delayed by PulseAudio). Without --echo-cancel the
    session hears the answer back at its own level; with it, at least 10 dB lower once it has learnt the room (2 s).
    Measured here, on 2 busy cores: 17 to 90 dB; a device underrun the canceller's reference does not see sets it
    back. Skips where the livekit package (WebRTC's audio processing) is missing."""
    pytest.importorskip("livekit.rtc", reason="--echo-cancel needs the livekit package: pip install livekit")
    rate = 22050
    plain = echo_call(pulse, tmp_path / "plain")
    assert abs(level_db(plain[2 * rate:, 0]) - level_db(plain[2 * rate:, 1])) < 6  # the echo is there
    cancelled = echo_call(pulse, tmp_path / "cancelled", "--echo-cancel")
    assert level_db(cancelled[2 * rate:, 0]) < level_db(cancelled[2 * rate:, 1]) - 10


@pytest.mark.parametrize("rate", [16000, 44100])
def test_input_file_gives_the_sessions_ids_and_codes(tmp_path, rate):
    """A NeMo fixture checkpoint and its question as the microphone (as fast as the session takes it, in the pieces
    the pacing makes; at 44.1 kHz resampled as it goes), then 4 s of silence: the same ids and codes as one session
    fed the same samples at once, and the speaker file is the answer."""
    question = voicechat.audio.resample(sf.read(HARNESS_WAV, dtype="float32")[0], 16000, rate)
    sf.write(tmp_path / "question.wav", question, rate, subtype="FLOAT")
    save, out = tmp_path / "call", tmp_path / "spoken.wav"
    run = run_live("--model", str(NEMO / "tiny_model"), "--input-file", str(tmp_path / "question.wav"),
                   "--output-file", str(out), "--fast", "--tail", "4", "--save", str(save), "--seed", "3")
    assert run.returncode == 0, run.stderr
    assert "end of the input file" in run.stderr

    session = voicechat.load(NEMO / "tiny_model").session(seed=3)
    session.feed(np.concatenate([question, np.zeros(4 * rate, np.float32)]), rate)
    session.flush()
    expected = session.result()
    record = json.loads((save / "conversation.json").read_text())
    np.testing.assert_array_equal(record["text_tokens"], expected.text_tokens)
    np.testing.assert_array_equal(record["function_tokens"], expected.function_tokens)
    np.testing.assert_array_equal(record["audio_codes"], expected.audio_codes)
    spoken, spoken_rate = sf.read(out, dtype="int16")
    assert spoken_rate == expected.sample_rate
    # every frame's samples, as 16-bit PCM (the codec's last 6 samples come only with the result)
    assert spoken.size == expected.audio.size - 6
    np.testing.assert_array_equal(spoken, voicechat.audio.to_int16(expected.audio[:spoken.size]))


# ---------------------------------------------------------------------------------------------------------------
# what a user can get wrong, or lose: one line each, and the exit code
# ---------------------------------------------------------------------------------------------------------------
def last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


def test_missing_portaudio_says_how_to_install_it():
    """The PortAudio library hidden in a private mount namespace (a file that is not a library where it was)."""
    lib = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    paths = re.findall(r"libportaudio\.so\.2 .*=> (\S+)", lib)
    if not paths or shutil.which("unshare") is None:
        pytest.skip("needs libportaudio2 installed and unshare (util-linux)")
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a mount namespace here: {probe.stderr.strip()}")
    hidden = Path(paths[0]).resolve()
    run = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                          f"mount --bind /dev/null {hidden} && exec \"$0\" \"$@\"", *live_command("--demo")],
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert run.returncode == 1
    assert run.stderr.count("\n") == 1
    assert last_line(run.stderr).startswith("error: live audio needs the PortAudio library")
    assert "apt install libportaudio2" in run.stderr


def test_no_microphone_says_so(tmp_path):
    """No sound server and no sound card: PortAudio finds no device."""
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path), "PULSE_SERVER": f"unix:{tmp_path}/none"}
    probe = subprocess.run([sys.executable, "-c", "import sounddevice as s; print(len(s.query_devices()))"], env=env,
                           capture_output=True, text=True)
    if probe.returncode != 0 or probe.stdout.strip() != "0":
        pytest.skip("this machine has a sound device of its own")
    run = run_live("--demo", env=env)
    assert run.returncode == 1 and run.stderr.count("\n") == 1
    assert last_line(run.stderr) == ("error: no microphone found: connect one, pick one with --input-device "
                                     "(`python -m voicechat live --list-devices` lists them), or play a recording "
                                     "as the microphone with --input-file WAV")
    listing = run_live("--list-devices", env=env)
    assert listing.returncode == 0 and listing.stdout.startswith("no audio devices found")
    # a recording as the microphone still needs a speaker: the message names the file that stands in for it
    played = run_live("--demo", "--input-file", str(HARNESS_WAV), env=env)
    assert played.returncode == 1 and last_line(played.stderr).startswith("error: no speaker found: ")
    assert last_line(played.stderr).endswith("or, with --input-file, write the answer to a file with --output-file "
                                             "OUT.wav")
    # run as the installed command, the hint names that command
    command = tmp_path / "bin" / "voicechat"
    command.parent.mkdir()
    checkout = str(Path(voicechat.__file__).parents[1])
    command.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {checkout!r})\n"
                       "from voicechat.__main__ import main\nsys.exit(main())\n")
    command.chmod(0o755)
    installed = subprocess.run([command, "live", "--demo"], env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert "(`voicechat live --list-devices` lists them)" in last_line(installed.stderr)


def test_devices_are_listed_and_a_wrong_one_is_a_usage_error(pulse):
    listing = run_live("--list-devices", env=pulse.env())
    assert listing.returncode == 0
    assert re.search(r"^\S*\s*\d+ pulse, ALSA", listing.stdout, re.M), listing.stdout
    wrong = run_live("--demo", "--input-device", "no such microphone", env=pulse.env())
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1
    assert last_line(wrong.stderr).startswith("error: --input-device 'no such microphone': ")


def test_a_device_that_vanishes_mid_call_stops_it_with_one_line(pulse, tmp_path):
    call = Running("--demo", "--save", str(tmp_path / "call"), env=pulse.env())
    call.wait_ready()
    time.sleep(1.0)
    pulse.kill()  # the sound server dies: both devices are gone
    rc, err = call.finish()
    assert rc == 1
    assert re.fullmatch(r"error: the (microphone|speaker) 'default' stopped \(device lost\); "
                        r"reconnect it and start again, or pick another with --(input|output)-device "
                        r"\(`python -m voicechat live --list-devices` lists them\)", last_line(err)), err
    assert (tmp_path / "call" / "conversation.json").is_file()  # what there was is saved


def test_a_microphone_that_stops_delivering_stops_the_call(pulse, tmp_path):
    call = Running("--demo", env=pulse.env())
    call.wait_ready()
    pulse.stall_mic()  # as a device that went away without PortAudio noticing
    rc, err = call.finish()
    assert rc == 1
    assert last_line(err) == ("error: the microphone 'default' stopped (no audio for 3 s); reconnect it and start "
                              "again, or pick another with --input-device (`python -m voicechat live --list-devices` "
                              "lists them)")


def test_falling_behind_real_time_stops_cleanly(tmp_path):
    """A bound of 10 ms: the demo model on this CPU takes longer than that per frame, so input waits."""
    run = run_live("--demo", "--input-file", str(HARNESS_WAV), "--output-file", str(tmp_path / "o.wav"),
                   "--max-lag", "0.01", "--save", str(tmp_path / "call"))
    assert run.returncode == 1
    assert re.fullmatch(r"error: stopped: the model fell \d+\.\d s behind real time on this machine .* allow more "
                        r"delay with --max-lag", last_line(run.stderr)), run.stderr
    assert (tmp_path / "call" / "conversation.wav").is_file() and (tmp_path / "o.wav").is_file()


@pytest.mark.parametrize("args, message", [
    (["--fast"], "--fast runs faster than real time, so it needs --input-file and --output-file"),
    (["--output-file", "x.wav"], "--output-file records what the speaker would play for --input-file"),
    (["--input-file", "missing.wav"], "--input-file missing.wav: no such file"),
    (["--input-file", str(HARNESS_WAV), "--echo-cancel"], "--echo-cancel works between a speaker and a microphone"),
])
def test_usage_errors(args, message):
    run = run_live("--demo", *args)
    assert run.returncode == 2 and run.stderr.count("\n") == 1
    assert last_line(run.stderr).startswith(f"error: {message}")
