"""Audio in and out: read any file soundfile can (WAV, FLAC, OGG, MP3), check it, resample, write PCM16 WAVs.

Conventions (ECOSYSTEM.md §5): float32 mono in [-1, 1]; integers scaled by their full range; channels averaged;
soxr's HQ resampler; output written as 16-bit PCM.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Union

import numpy as np

from .errors import AudioInputError

DEFAULT_MAX_SECONDS = 600.0  # 10 minutes


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


def read_audio(path: Union[str, Path]) -> tuple[np.ndarray, int]:
    """Decode a file to (mono float32 samples, sample rate)."""
    import soundfile as sf

    path = Path(path)
    if not path.is_file():
        raise AudioInputError(f"{path} does not exist")
    try:
        data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except Exception as e:  # soundfile raises LibsndfileError / RuntimeError for unknown or broken files
        raise AudioInputError(f"{path.name} is not a readable audio file ({str(e).strip() or type(e).__name__})") from None
    return to_float32(data), int(rate)


def resample(x: np.ndarray, rate: int, target: int) -> np.ndarray:
    if rate == target:
        return x
    import soxr

    return soxr.resample(x, rate, target).astype(np.float32)


def prepare_input(audio: Union[np.ndarray, str, Path], sample_rate: int | None, target_rate: int,
                  min_samples: int, max_seconds: float = DEFAULT_MAX_SECONDS) -> np.ndarray:
    """The model's input: mono float32 at ``target_rate``, checked. ``audio`` is samples (with their rate) or a
    file path (rate read from the file)."""
    if isinstance(audio, (str, Path)):
        x, sample_rate = read_audio(audio)
    else:
        if sample_rate is None:
            raise AudioInputError("sample_rate is required when audio is given as samples")
        x = to_float32(audio)
    if sample_rate <= 0:
        raise AudioInputError(f"sample rate {sample_rate} is not positive")
    if x.size == 0:
        raise AudioInputError("the recording is empty")
    if not np.all(np.isfinite(x)):
        raise AudioInputError("the recording contains NaN or infinite samples")
    seconds = x.size / sample_rate
    if seconds > max_seconds:
        raise AudioInputError(f"the recording is {seconds:.1f} s long; the limit is {max_seconds:.0f} s")
    x = resample(x, sample_rate, target_rate)
    if x.size < min_samples:
        raise AudioInputError(
            f"the recording is {1000 * seconds:.0f} ms long, shorter than one {1000 * min_samples / target_rate:.0f} ms frame"
        )
    return x


def to_int16(x: np.ndarray) -> np.ndarray:
    return (np.clip(np.asarray(x, dtype=np.float32), -1.0, 1.0) * 32767.0).round().astype(np.int16)


def wav_bytes(x: np.ndarray, rate: int) -> bytes:
    """A mono 16-bit PCM WAV file."""
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, to_int16(x), rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def write_wav(path: Union[str, Path], x: np.ndarray, rate: int) -> Path:
    path = Path(path)
    path.write_bytes(wav_bytes(x, rate))
    return path
