"""voicechat.audio: every format a user may have (soundfile's and PyAV's), broken files, and the upload check.

The compressed files are made here by PyAV's encoders (AAC as a Mac records it, Opus in Ogg and in WebM as browsers
record it, Apple Lossless) from two known tones, left 440 Hz and right 660 Hz at amplitude 0.5; decoded and mixed to
mono (the mean of the channels) each tone must come back at amplitude 0.25.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import pytest
import soundfile as sf

from voicechat.audio import (FRAME_SECONDS, check_recording, check_upload, duration_words, prepare_input,
                             read_audio)
from voicechat.errors import AudioInputError
from conftest import NEMO, TESTS

TONES = (440.0, 660.0)  # left, right


def stereo_tones(rate: int, seconds: float = 1.0) -> np.ndarray:
    """[2, samples] float32: 0.5 sin(2 pi f t) per channel."""
    t = np.arange(round(rate * seconds)) / rate
    return np.stack([0.5 * np.sin(2 * np.pi * f * t) for f in TONES]).astype(np.float32)


def write_with_pyav(path: Path, codec: str, planes: np.ndarray, rate: int, sample_format: str = None) -> Path:
    """Encode [channels, samples] float32 with one of PyAV's encoders; the container follows the file name."""
    layout = {1: "mono", 2: "stereo"}[planes.shape[0]]
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=rate, layout=layout)
        if sample_format:
            stream.codec_context.format = sample_format
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(planes), format="fltp", layout=layout)
        frame.sample_rate = rate
        ctx = stream.codec_context
        resampler = av.AudioResampler(format=ctx.format.name, layout=layout, rate=rate,
                                      frame_size=ctx.frame_size or None)
        for chunk in resampler.resample(frame) + resampler.resample(None):
            for packet in stream.encode(chunk):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return path


def tone_amplitudes(x: np.ndarray, rate: int) -> tuple[np.ndarray, float]:
    """Least-squares amplitudes of the two tones over the middle half (clear of codec edges), and the RMS of what
    they do not explain."""
    start, stop = len(x) // 4, 3 * len(x) // 4
    t = np.arange(start, stop) / rate
    basis = np.stack([f(2 * np.pi * hz * t) for hz in TONES for f in (np.sin, np.cos)], axis=1)
    coef, *_ = np.linalg.lstsq(basis, x[start:stop], rcond=None)
    residual = x[start:stop] - basis @ coef
    return np.hypot(coef[0::2], coef[1::2]), float(np.sqrt(np.mean(residual**2)))


# (file name, encoder, rate, samples the codec may add at the end, largest RMS the tones leave unexplained)
# AAC adds its 1024-sample priming and pads to whole 1024-sample frames (so does the ffmpeg command); Opus' pre-skip
# is trimmed by the container.
LOSSY = [("voice-memo.m4a", "aac", 44100, 3 * 1024, 0.03), ("question.aac", "aac", 48000, 3 * 1024, 0.03),
         ("question.opus", "libopus", 48000, 0, 0.005), ("browser-recording.webm", "libopus", 48000, 0, 0.005)]


@pytest.mark.parametrize("name, codec, rate, padding, noise", LOSSY)
def test_compressed_formats_decode_to_the_tones(tmp_path, name, codec, rate, padding, noise):
    x, got_rate = read_audio(write_with_pyav(tmp_path / name, codec, stereo_tones(rate), rate))
    assert got_rate == rate and x.dtype == np.float32 and x.ndim == 1
    assert 0 <= len(x) - rate <= padding
    amplitudes, unexplained = tone_amplitudes(x, rate)
    np.testing.assert_allclose(amplitudes, [0.25, 0.25], atol=0.01)  # channels averaged, not summed or dropped
    assert unexplained < noise


def test_apple_lossless_decodes_exactly(tmp_path):
    planes = stereo_tones(44100)
    x, rate = read_audio(write_with_pyav(tmp_path / "lossless.m4a", "alac", planes, 44100, sample_format="s16p"))
    expected = (np.round(planes * 32767) / 32768).mean(axis=0)  # 16-bit samples, then the mean of the channels
    assert rate == 44100 and len(x) == len(expected)
    assert np.max(np.abs(x - expected)) <= 1 / 32768


@pytest.mark.parametrize("subtype, ext", [("PCM_16", "wav"), ("FLOAT", "wav"), ("PCM_24", "flac"), ("VORBIS", "ogg")])
def test_soundfile_formats_keep_their_rate_and_mix_channels(tmp_path, subtype, ext):
    planes = stereo_tones(22050)
    path = tmp_path / f"q.{ext}"
    sf.write(path, planes.T, 22050, subtype=subtype)
    x, rate = read_audio(path)
    amplitudes, _ = tone_amplitudes(x, rate)
    assert rate == 22050 and len(x) == 22050
    np.testing.assert_allclose(amplitudes, [0.25, 0.25], atol=0.01 if subtype == "VORBIS" else 1e-4)


def broken_m4a(tmp_path: Path) -> Path:
    whole = write_with_pyav(tmp_path / "whole.m4a", "aac", stereo_tones(44100), 44100).read_bytes()
    path = tmp_path / "cut off.m4a"
    path.write_bytes(whole[: len(whole) // 3])  # an interrupted copy: the index at the end is gone
    return path


def video_without_sound(tmp_path: Path) -> Path:
    path = tmp_path / "screen.mp4"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for i in range(3):
            frame = av.VideoFrame.from_ndarray(np.full((32, 32, 3), 40 * i, np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return path


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("make, words", [
    (broken_m4a, "is not a readable audio file"),
    (lambda p: write(p / "noise.m4a", np.random.default_rng(0).bytes(5000)), "is not a readable audio file"),
    (lambda p: write(p / "empty.wav", b""), "empty.wav is empty (0 bytes)"),
    (lambda p: write(p / "empty.m4a", b""), "empty.m4a is empty (0 bytes)"),
    (video_without_sound, "has no audio track"),
    (lambda p: p / "nothing here.wav", "does not exist"),
    (lambda p: p, "is a folder, not an audio file"),
])
def test_unusable_files_are_one_line_naming_only_the_file(tmp_path, make, words):
    path = make(tmp_path)
    with pytest.raises(AudioInputError) as e:
        read_audio(path)
    message = str(e.value)
    assert words in message and "\n" not in message
    assert message.startswith(path.name) and str(tmp_path) not in message  # no server folder in what users see


def test_checks_of_the_samples():
    assert check_recording(np.zeros(1280, np.float32), 16000) == FRAME_SECONDS
    for x, rate, words in [(np.zeros(0, np.float32), 16000, "empty"), (np.full(2000, np.nan, np.float32), 16000, "NaN"),
                           (np.zeros(1279, np.float32), 16000, r"too short \(80 ms, shorter than one 80 ms frame\)"),
                           (np.zeros(16000, np.float32), 0, "not positive")]:
        with pytest.raises(AudioInputError, match=words):
            check_recording(x, rate)
    with pytest.raises(AudioInputError, match="1.5 s long; the limit is 1 s"):
        check_recording(np.zeros(24000, np.float32), 16000, max_seconds=1.0)


def test_prepare_input_decodes_a_compressed_file_to_the_model_rate(tmp_path):
    path = write_with_pyav(tmp_path / "q.webm", "libopus", stereo_tones(48000), 48000)
    x = prepare_input(path, None, 16000, 1280)
    assert len(x) == 16000
    amplitudes, _ = tone_amplitudes(x, 16000)
    np.testing.assert_allclose(amplitudes, [0.25, 0.25], atol=0.01)


# ----------------------------------------------------------------------------------------------------------------
# checking an upload when it arrives
# ----------------------------------------------------------------------------------------------------------------
def tone_file(path: Path, seconds: float, rate: int = 8000) -> Path:
    sf.write(path, stereo_tones(rate, seconds).T, rate, subtype="PCM_16")
    return path


def test_upload_of_50_ms_is_too_short(tmp_path):
    with pytest.raises(AudioInputError, match=r"^click.wav is too short \(50 ms, shorter than one 80 ms frame\)"):
        check_upload(tone_file(tmp_path / "click.wav", 0.05))


def test_upload_of_a_short_question_says_its_length(tmp_path):
    check = check_upload(write_with_pyav(tmp_path / "q.m4a", "aac", stereo_tones(44100, 2.0), 44100), 3.0)
    assert not check.warning and check.sample_rate == 44100 and 2.0 <= check.seconds <= 2.1
    assert check.message == "q.m4a: 2.0 s."


def test_upload_longer_than_advised_warns_with_the_expected_wait(tmp_path):
    path = tone_file(tmp_path / "lecture.wav", 75.0)
    check = check_upload(path, realtime_factor=2.0)
    assert check.warning and check.seconds == 75.0
    assert check.message == ("lecture.wav is 1 min 15 s long; recordings under 1 min work best. At the current speed "
                             "(RTF 2) the answer takes about 2 min 30 s.")
    assert check_upload(path).message == "lecture.wav is 1 min 15 s long; recordings under 1 min work best."
    assert check_upload(path, 97.5).message.endswith("(RTF 97.5) the answer takes about 2 h 2 min.")  # a CPU
    assert not check_upload(path, 2.0, advised_seconds=90).warning
    with pytest.raises(AudioInputError, match="the limit is 60 s"):
        check_upload(path, max_seconds=60)


def test_duration_words():
    seconds = (0.25, 9.4, 12.0, 59.4, 59.6, 75.0, 120.0, 3599.0, 3599.6, 3600.0, 7312.5, 7470.0)
    assert [duration_words(s) for s in seconds] == ["0.2 s", "9.4 s", "12 s", "59 s", "1 min", "1 min 15 s", "2 min",
                                                    "59 min 59 s", "1 h", "1 h", "2 h 2 min", "2 h 4 min"]


# ----------------------------------------------------------------------------------------------------------------
# a long recording is refused before it is decoded (issue 41 §1, docs/limits.md §1)
# ----------------------------------------------------------------------------------------------------------------
def silent_flac(path: Path, seconds: int, say_length: bool = True, rate: int = 16000) -> Path:
    """``seconds`` of silence as a 16-bit FLAC (2 h: about 350 KB), written a minute at a time; without
    ``say_length`` its header gives no length (STREAMINFO's total samples 0, as a streaming encoder leaves it)."""
    with sf.SoundFile(str(path), "w", rate, 1, format="FLAC", subtype="PCM_16") as f:
        for start in range(0, seconds, 60):
            f.write(np.zeros(min(60, seconds - start) * rate, np.int16))
    if not say_length:
        data = bytearray(path.read_bytes())
        at = 4 + 4 + 10  # "fLaC", the block header, block sizes and frame sizes; then rate, channels, bits, total
        fields = int.from_bytes(data[at:at + 8], "big") & ~(2 ** 36 - 1)  # the low 36 bits: total samples
        data[at:at + 8] = fields.to_bytes(8, "big")
        path.write_bytes(bytes(data))
    return path


def peak_rss_mb(argv: list) -> float:
    """Peak resident memory of ``argv`` run alone (a fresh parent, whose only child it is), in MB, and its stderr."""
    parent = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
              "sys.stderr.write(p.stderr); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    p = subprocess.run([sys.executable, "-c", parent, *map(str, argv)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(TESTS.parent)})
    return int(p.stdout.split()[-1]) / 1024, p.stderr


def front_end(kind: str, recording: Path, tmp_path: Path) -> list:
    """The command that refuses ``recording`` as ``kind`` does: the CLI or batch."""
    if kind == "cli":
        return [sys.executable, "-m", "voicechat", "generate", "--model", tmp_path / "no model", "--audio", recording,
                "--quiet"]
    folder = tmp_path / f"set-{recording.stem}"
    folder.mkdir()
    (folder / recording.name).symlink_to(recording)
    return [sys.executable, "-m", "voicechat", "batch", folder, "--out", tmp_path / f"out-{recording.stem}",
            "--model", NEMO / "tiny_model"]


def refused(long: Path, say_length: bool) -> str:
    """What the refusal of ``long`` (two hours) says."""
    return f"{long.name} is 7200.0 s long; the limit is 600 s" if say_length else f"{long.name} is longer than 600 s"


@pytest.mark.parametrize("kind", ["cli", "batch"])
@pytest.mark.parametrize("say_length", [True, False], ids=["header", "no header"])
def test_refusing_two_hours_costs_what_refusing_a_short_recording_costs(tmp_path, kind, say_length):
    """A 2 h FLAC of silence (350 KB) was decoded whole before its length was checked: 1 GB to refuse it."""
    long = silent_flac(tmp_path / "long.flac", 7200, say_length)
    short = short_flac(tmp_path / "short.flac")
    short_mb, short_err = peak_rss_mb(front_end(kind, short, tmp_path))
    long_mb, long_err = peak_rss_mb(front_end(kind, long, tmp_path))
    assert "too short" in short_err
    assert refused(long, say_length) in long_err and "Traceback" not in long_err
    assert long_mb - short_mb < 100, (short_mb, long_mb)


def short_flac(path: Path) -> Path:
    sf.write(str(path), np.zeros(800, np.int16), 16000)  # 50 ms: refused as too short, once decoded
    return path


@pytest.fixture(scope="module")
def demo_app(tmp_path_factory):
    """``python app.py --demo`` with its model loaded: (process id, url, log file)."""
    import httpx
    from test_app import start_app, stop, wait_for

    proc, url, log = start_app(tmp_path_factory.mktemp("app"), "--demo", HF_HUB_OFFLINE="1")
    try:
        wait_for(lambda: httpx.get(f"{url}live/status", timeout=30).json()["model"]["state"] == "ready",
                 "the demo model", timeout=120)
        yield proc.pid, url, log
    finally:
        stop(proc)


def app_refusal(url: str, endpoint: str, recording: Path) -> str:
    """What the running app answers when ``recording`` is given to ``endpoint``: its line of refusal."""
    import httpx
    from gradio_client import Client, handle_file

    if endpoint == "/live/voice/add":
        with open(recording, "rb") as f:
            r = httpx.post(f"{url}live/voice/add", data={"name": "Long"}, files={"file": (recording.name, f)},
                           timeout=120)
        assert r.status_code == 400, r.text
        return r.json()["detail"]
    client = Client(url, verbose=False)
    if endpoint == "/add_voice":
        return client.predict("Long", handle_file(str(recording)), api_name="/add_voice")[1]
    return client.predict(handle_file(str(recording)), api_name="/check")[1]  # Record and run's status card


def peak_growth_mb(pid: int, act) -> tuple[float, object]:
    """How far ``act()`` takes process ``pid``'s peak resident memory above what it holds now, in MB; and what
    ``act`` returned. The peak is reset first (Linux: clear_refs 5 sets VmHWM to VmRSS)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    before = memory_kib(pid, "VmHWM")
    result = act()
    return (memory_kib(pid, "VmHWM") - before) / 1024, result


def memory_kib(pid: int, key: str) -> int:
    return int(re.search(rf"{key}:\s+(\d+)", Path(f"/proc/{pid}/status").read_text()).group(1))


@pytest.mark.parametrize("endpoint", ["/add_voice", "/check", "/live/voice/add"])
@pytest.mark.parametrize("say_length", [True, False], ids=["header", "no header"])
def test_the_running_app_refuses_two_hours_for_what_it_refuses_a_short_recording_for(demo_app, tmp_path, endpoint,
                                                                                     say_length):
    """The app's /add_voice (which needed no key) decoded a 2 h FLAC whole before its length was checked: 1.05 GB
    of the server's memory to refuse it. Measured on the app's own process, through its endpoints."""
    pid, url, log = demo_app
    long = silent_flac(tmp_path / "long.flac", 7200, say_length)
    short = short_flac(tmp_path / "short.flac")
    app_refusal(url, endpoint, short)  # the first request of a kind loads what any request needs
    short_mb, short_says = peak_growth_mb(pid, lambda: app_refusal(url, endpoint, short))
    long_mb, long_says = peak_growth_mb(pid, lambda: app_refusal(url, endpoint, long))
    print(f"\n{endpoint}: refusing the short recording +{short_mb:.1f} MB, two hours +{long_mb:.1f} MB")
    assert "too short" in short_says, short_says
    assert refused(long, say_length) in long_says and "\n" not in long_says, long_says
    assert long_mb - short_mb < 100, (short_mb, long_mb)
    assert "Traceback" not in log.read_text()


def test_a_header_that_gives_no_length_reads_as_one_that_does(tmp_path):
    told, untold = (silent_flac(tmp_path / f"{name}.flac", 3, flag) for name, flag in (("told", True),
                                                                                     ("untold", False)))
    assert sf.info(str(untold)).frames > 2 ** 62  # libsndfile's "unknown": read whole, it asked for an endless array
    x, rate = read_audio(untold, max_seconds=600)
    assert rate == 16000 and np.array_equal(x, read_audio(told)[0]) and len(x) == 3 * 16000
