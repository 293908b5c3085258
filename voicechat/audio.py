"""Audio in and out: decode a recording, check it, resample, write PCM16 WAVs.

Decoding: soundfile (libsndfile) for WAV, FLAC, OGG and MP3; every other format through PyAV, whose wheel ships its
own FFmpeg: M4A/AAC (what a Mac records), Opus, WebM (what browsers record), CAF, ... Conventions
(docs/platform.md §5): float32 mono in [-1, 1]; integers scaled by their full range; channels averaged; soxr's HQ
resampler; output written as 16-bit PCM. Error messages name the file, never its folder (a server's paths stay private).
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, Union

import numpy as np

from .config import FRAME_SECONDS, MAX_INPUT_SECONDS
from .errors import AudioInputError

DECODE_BLOCK_FRAMES = 65536  # samples decoded at a time: a bounded read stops within one block of its bound
UNKNOWN_FRAMES = 2 ** 62  # libsndfile's length when a header gives none (SF_COUNT_MAX)
ADVISED_SECONDS = 60.0  # the model was trained on conversations of up to about 2 minutes; shorter questions work best


def to_float32(samples: np.ndarray) -> np.ndarray:
    """Integer PCM scaled by its full range, floats as they are; [N] or [N, channels] -> mono [N] float32."""
    x = np.asarray(samples)
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        x = (x.astype(np.float64) - (info.min + info.max + 1) / 2) / ((info.max - info.min + 1) / 2)
    elif x.dtype.kind != "f":
        raise AudioInputError(f"audio samples of type {x.dtype} are neither integers nor floats")
    if x.ndim == 2:
        x = x.mean(axis=1)
    elif x.ndim != 1:
        raise AudioInputError(f"audio must be [samples] or [samples, channels], got shape {x.shape}")
    return np.ascontiguousarray(x, dtype=np.float32)


@dataclass(frozen=True)
class Decoder:
    """An opened recording: its rate, its length as its header gives it (None when it gives none), and ``blocks()``,
    which decodes it from the start in [samples, channels] float32 blocks."""

    rate: int
    header_seconds: Optional[float]
    blocks: Callable[[], Iterator[np.ndarray]]


def read_audio(path: Union[str, Path], max_seconds: Optional[float] = None) -> tuple[np.ndarray, int]:
    """Decode a file to (mono float32 samples, sample rate). With ``max_seconds``, a longer recording is refused by
    its header's length before any sample is decoded, and, where the header gives none or a wrong one, once the
    decoding passes the bound (docs/limits.md §1: a small file can hold hours of silence)."""
    path = Path(path)
    if path.is_dir():
        raise AudioInputError(f"{path.name} is a folder, not an audio file")
    if not path.is_file():
        raise AudioInputError(f"{path.name} does not exist")
    if path.stat().st_size == 0:  # else FFmpeg's "Invalid data found when processing input"
        raise AudioInputError(f"{path.name} is empty (0 bytes): the upload or the recording did not get through")
    decoder = soundfile_decoder(path) or pyav_decoder(path)
    if max_seconds is None:
        return mono(decoder.blocks()), decoder.rate
    if decoder.header_seconds is not None and decoder.header_seconds > max_seconds:
        raise too_long(path.name, decoder.header_seconds, max_seconds)
    return mono(bounded(decoder.blocks(), max_seconds * decoder.rate, path.name, max_seconds)), decoder.rate


def read_recording(path: Union[str, Path], max_seconds: float = MAX_INPUT_SECONDS,
                   min_seconds: float = FRAME_SECONDS) -> tuple[np.ndarray, int]:
    """A recording the model can take: decoded within ``max_seconds`` (:func:`read_audio`) and checked
    (:func:`check_recording`) -> (mono float32 samples, rate)."""
    x, rate = read_audio(path, max_seconds)
    check_recording(x, rate, min_seconds, max_seconds, Path(path).name)
    return x, rate


def bounded(blocks: Iterator[np.ndarray], max_samples: float, name: str, max_seconds: float) -> Iterator[np.ndarray]:
    """``blocks`` until they pass ``max_samples`` in all; then the recording is refused."""
    counted = 0
    for block in blocks:
        counted += len(block)
        if counted > max_samples:
            raise AudioInputError(f"{name} is longer than {max_seconds:.0f} s, the limit")
        yield block


def too_long(name: str, seconds: float, max_seconds: float) -> AudioInputError:
    return AudioInputError(f"{name} is {seconds:.1f} s long; the limit is {max_seconds:.0f} s")


def mono(blocks: Iterator[np.ndarray]) -> np.ndarray:
    """[samples, channels] blocks as one mono float32 array, each block mixed down as it comes."""
    kept = [to_float32(block) for block in blocks]
    return np.concatenate(kept) if kept else np.zeros(0, np.float32)


def soundfile_decoder(path: Path) -> Optional[Decoder]:
    """libsndfile's decoder, or None when it cannot open the file (PyAV may)."""
    import soundfile as sf

    try:
        with sf.SoundFile(str(path)) as f:
            rate, frames = int(f.samplerate), f.frames
    except RuntimeError:  # soundfile's LibsndfileError: a format it does not know, or a broken file
        return None
    if not 0 <= frames < UNKNOWN_FRAMES:  # a FLAC stream that does not say its length: libsndfile cannot read it
        return None

    def blocks() -> Iterator[np.ndarray]:
        try:
            with sf.SoundFile(str(path)) as f:
                yield from f.blocks(DECODE_BLOCK_FRAMES, dtype="float32", always_2d=True)
        except RuntimeError as e:
            raise AudioInputError(f"{path.name} is not a readable audio file ({e})") from None

    return Decoder(rate, frames / rate if rate > 0 else None, blocks)


def pyav_decoder(path: Path) -> Decoder:
    """The first audio stream through FFmpeg, resampled to planar float32 at its own rate and channels (resampling
    and mixing stay ours: soxr, mean)."""
    import av

    with pyav_errors(path):
        with av.open(str(path), metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise AudioInputError(f"{path.name} has no audio track")
            stream = container.streams.audio[0]
            rate = stream.codec_context.sample_rate
            if stream.duration:
                seconds = float(stream.duration * stream.time_base)
            else:
                seconds = container.duration / av.time_base if container.duration else None

    def blocks() -> Iterator[np.ndarray]:
        with pyav_errors(path), av.open(str(path), metadata_errors="ignore") as container:
            resampler = av.AudioResampler(format="fltp")
            for frame in container.decode(container.streams.audio[0]):
                yield from (out.to_ndarray().T for out in resampler.resample(frame))
            yield from (out.to_ndarray().T for out in resampler.resample(None))

    return Decoder(int(rate), seconds, blocks)


@contextlib.contextmanager
def pyav_errors(path: Path):
    """FFmpeg's errors as one line naming the file."""
    import av

    try:
        yield
    except (av.FFmpegError, ValueError) as e:  # ValueError: a stream whose format changes midway
        reason = getattr(e, "strerror", None) or type(e).__name__
        raise AudioInputError(f"{path.name} is not a readable audio file ({reason})") from None


def resample(x: np.ndarray, rate: int, target: int) -> np.ndarray:
    if rate == target:
        return x
    import soxr

    return soxr.resample(x, rate, target).astype(np.float32)


def check_recording(x: np.ndarray, sample_rate: int, min_seconds: float = FRAME_SECONDS,
                    max_seconds: float = MAX_INPUT_SECONDS, name: str = "the recording") -> float:
    """Refuse what the model cannot use (empty, NaN, shorter than ``min_seconds``, longer than ``max_seconds``);
    return the length in seconds. ``x``: mono float32 samples at ``sample_rate``; ``name``: what the messages call
    it (a file's name)."""
    if sample_rate <= 0:
        raise AudioInputError(f"sample rate {sample_rate} is not positive")
    if x.size == 0:
        raise AudioInputError(f"{name} is empty")
    if not np.all(np.isfinite(x)):
        raise AudioInputError(f"{name} contains NaN or infinite samples")
    seconds = x.size / sample_rate
    if seconds > max_seconds:
        raise too_long(name, seconds, max_seconds)
    if seconds < min_seconds:
        raise AudioInputError(f"{name} is too short ({1000 * seconds:.0f} ms, shorter than one "
                              f"{1000 * min_seconds:.0f} ms frame); record at least a word")
    return seconds


def prepare_input(audio: Union[np.ndarray, str, Path], sample_rate: int | None, target_rate: int,
                  min_samples: int, max_seconds: float = MAX_INPUT_SECONDS) -> np.ndarray:
    """The model's input: mono float32 at ``target_rate``, checked. ``audio`` is samples (with their rate) or a
    file path (rate read from the file)."""
    name = "the recording"
    if isinstance(audio, (str, Path)):
        x, sample_rate = read_audio(audio, max_seconds)
        name = Path(audio).name
    else:
        if sample_rate is None:
            raise AudioInputError("sample_rate is required when audio is given as samples")
        x = to_float32(audio)
    check_recording(x, sample_rate, min_samples / target_rate, max_seconds, name)
    return resample(x, sample_rate, target_rate)


# ----------------------------------------------------------------------------------------------------------------
# checking an upload before it is run
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class UploadCheck:
    """What :func:`check_upload` found: the recording is usable; ``message`` is one line for the user."""

    seconds: float
    sample_rate: int
    message: str
    warning: bool  # longer than advised: it runs, but the user should know the wait


def check_upload(path: Union[str, Path], realtime_factor: Optional[float] = None,
                 advised_seconds: float = ADVISED_SECONDS, max_seconds: float = MAX_INPUT_SECONDS) -> UploadCheck:
    """Decode and check an uploaded recording at upload time, before it waits in a queue. Raises
    :class:`AudioInputError` (one line) when it cannot be used; otherwise says its length, and warns with the
    expected wait (``seconds x realtime_factor``, the caller's measured or expected RTF) when it is longer than
    ``advised_seconds``."""
    x, rate = read_recording(path, max_seconds)
    name = Path(path).name
    seconds = len(x) / rate
    if seconds <= advised_seconds:
        return UploadCheck(seconds, rate, f"{name}: {duration_words(seconds)}.", False)
    message = f"{name} is {duration_words(seconds)} long; recordings under {duration_words(advised_seconds)} work best."
    if realtime_factor:
        message += (f" At the current speed (RTF {realtime_factor:.3g}) the answer takes about "
                    f"{duration_words(seconds * realtime_factor)}.")
    return UploadCheck(seconds, rate, message, True)


def duration_words(seconds: float) -> str:
    """'45 s', '3 min 5 s', '2 h 4 min' (what a status line says; hours to the nearest minute)."""
    if seconds < 59.5:
        return f"{seconds:.0f} s" if seconds >= 9.5 else f"{seconds:.1f} s"
    if round(seconds) < 3600:
        minutes, secs = divmod(round(seconds), 60)
        return f"{minutes} min" + (f" {secs} s" if secs else "")
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h" + (f" {minutes} min" if minutes else "")


# ----------------------------------------------------------------------------------------------------------------
# writing
# ----------------------------------------------------------------------------------------------------------------
def to_int16(x: np.ndarray) -> np.ndarray:
    return (np.clip(np.asarray(x, dtype=np.float32), -1.0, 1.0) * 32767.0).round().astype(np.int16)


def wav_bytes(x: np.ndarray, rate: int) -> bytes:
    """A 16-bit PCM WAV file of [N] mono or [N, channels] samples."""
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, to_int16(x), rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def write_wav(path: Union[str, Path], x: np.ndarray, rate: int) -> Path:
    """A 16-bit PCM WAV ([N] mono or [N, channels]), written through a temporary file (voicechat/files.py)."""
    from .files import write_atomically

    path = Path(path)
    write_atomically(path, wav_bytes(x, rate))
    return path
