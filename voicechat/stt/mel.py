"""Log-mel frontend: NeMo's AudioToMelSpectrogramPreprocessor / FilterbankFeatures at inference (SPEC §2.1).

waveform [B, N] -> pre-emphasis -> zero-padded centred STFT (symmetric Hann) -> power -> Slaney mel -> log(x + guard)
-> frames at and past the valid length set to ``pad_value`` -> padded to a multiple of ``pad_to``.
Features are channels-last, [B, T, F] (NeMo's are [B, F, T]).
"""

from __future__ import annotations

import math

import numpy as np

from .. import compute  # noqa: F401  (BLAS preload before mlx)
import mlx.core as mx
import mlx.nn as nn

from ..config import PreprocessorConfig


# ----------------------------------------------------------------------------------------------------------------
# constant tables (numpy, rounded to float32 where the torch / librosa originals round)
# ----------------------------------------------------------------------------------------------------------------
def hann_window(length: int) -> np.ndarray:
    """Symmetric Hann window, ``torch.hann_window(length, periodic=False)`` (SPEC §2.1.4), evaluated in float32 the
    way torch does (n * float32(2 pi / (length - 1)), cos, * -0.5 + 0.5)."""
    n = np.arange(length, dtype=np.float32)
    step = np.float32(2.0 * math.pi / (length - 1))
    return np.cos(n * step) * np.float32(-0.5) + np.float32(0.5)


# Slaney's auditory scale: linear below 1 kHz (200/3 Hz per mel), logarithmic above (a factor 6.4 per 27 mels).
_SLANEY_HZ_PER_MEL = 200.0 / 3.0
_SLANEY_BREAK_HZ = 1000.0
_SLANEY_BREAK_MEL = _SLANEY_BREAK_HZ / _SLANEY_HZ_PER_MEL
_SLANEY_LOG_STEP = math.log(6.4) / 27.0


def hz_to_mel(hz: np.ndarray) -> np.ndarray:
    hz = np.asarray(hz, dtype=np.float64)
    linear = hz / _SLANEY_HZ_PER_MEL
    log = _SLANEY_BREAK_MEL + np.log(np.maximum(hz, _SLANEY_BREAK_HZ) / _SLANEY_BREAK_HZ) / _SLANEY_LOG_STEP
    return np.where(hz >= _SLANEY_BREAK_HZ, log, linear)


def mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    linear = mel * _SLANEY_HZ_PER_MEL
    log = _SLANEY_BREAK_HZ * np.exp(_SLANEY_LOG_STEP * (np.maximum(mel, _SLANEY_BREAK_MEL) - _SLANEY_BREAK_MEL))
    return np.where(mel >= _SLANEY_BREAK_MEL, log, linear)


def slaney_mel_filterbank(sample_rate: int, n_fft: int, n_mels: int, fmin: float, fmax: float) -> np.ndarray:
    """Triangular filters on the Slaney mel scale, each scaled to unit area ("slaney" norm): the values of
    ``librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax, htk=False, norm="slaney")``, including its float32 rounding
    of the triangles before the area scaling. Returns [n_mels, n_fft // 2 + 1]."""
    bin_hz = np.linspace(0.0, sample_rate / 2.0, n_fft // 2 + 1)
    edges_hz = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    widths = np.diff(edges_hz)
    offsets = edges_hz[:, None] - bin_hz[None, :]  # [n_mels + 2, bins]
    rising = -offsets[:-2] / widths[:-1, None]
    falling = offsets[2:] / widths[1:, None]
    triangles = np.maximum(0.0, np.minimum(rising, falling)).astype(np.float32)
    area_scale = 2.0 / (edges_hz[2:] - edges_hz[:-2])
    return (triangles * area_scale[:, None]).astype(np.float32)


# ----------------------------------------------------------------------------------------------------------------
# lengths
# ----------------------------------------------------------------------------------------------------------------
def valid_frames(num_samples, n_fft: int, hop: int):
    """Frames NeMo counts as valid: floor((N + 2 * (n_fft // 2) - n_fft) / hop) = floor(N / hop) for an even n_fft
    (SPEC §2.1.2). The STFT itself has one frame more."""
    return (num_samples + 2 * (n_fft // 2) - n_fft) // hop


# ----------------------------------------------------------------------------------------------------------------
# modules
# ----------------------------------------------------------------------------------------------------------------
class Featurizer(nn.Module):
    """Holds NeMo's two buffers (``window`` [win_length], ``fb`` [1, features, n_fft // 2 + 1]) and computes the
    features. The buffers are derived here, so checkpoints without them load too; a checkpoint's copy overwrites
    them (they are equal, see tests/test_mel.py)."""

    def __init__(self, cfg: PreprocessorConfig):
        super().__init__()
        self.cfg = cfg
        fmax = cfg.highfreq if cfg.highfreq is not None else cfg.sample_rate / 2
        self.window = mx.array(hann_window(cfg.win_length))
        self.fb = mx.array(slaney_mel_filterbank(cfg.sample_rate, cfg.n_fft, cfg.features, cfg.lowfreq, fmax)[None])

    def __call__(self, audio: mx.array, lengths: mx.array) -> tuple[mx.array, mx.array]:
        # audio [B, N] float32, lengths [B] -> features [B, T, F], valid frames [B]
        cfg = self.cfg
        lengths = lengths.astype(mx.int32)
        frame_lengths = valid_frames(lengths, cfg.n_fft, cfg.hop_length)
        x = self.pre_emphasis(audio, lengths)
        power = self.power_spectrum(x)  # [B, T, n_fft // 2 + 1]
        mel = power @ self.fb[0].T  # [B, T, F]
        features = mx.log(mel + cfg.log_zero_guard_value)
        return self.pad_frames(features, frame_lengths), frame_lengths

    def pre_emphasis(self, audio: mx.array, lengths: mx.array) -> mx.array:
        """x'[0] = x[0], x'[n] = x[n] - preemph * x[n - 1]; samples at and past the length zeroed (SPEC §2.1.3)."""
        emphasized = mx.concatenate([audio[:, :1], audio[:, 1:] - self.cfg.preemph * audio[:, :-1]], axis=1)
        inside = mx.arange(audio.shape[1])[None, :] < lengths[:, None]
        return mx.where(inside, emphasized, 0.0)

    def power_spectrum(self, x: mx.array) -> mx.array:
        """``torch.stft(center=True, pad_mode="constant")``: zero padding of n_fft // 2 on both sides, the window
        centred in n_fft, 1 + N // hop frames; then |X| ** mag_power (SPEC §2.1.4-5). float32 like NeMo: in bins
        60 dB below their frame, float32 FFT rounding (ours and NeMo's MKL one) reaches ~1e-4 in the log domain."""
        cfg = self.cfg
        n_fft, hop = cfg.n_fft, cfg.hop_length
        padded = mx.pad(x, [(0, 0), (n_fft // 2, n_fft // 2)])
        n_frames = 1 + x.shape[1] // hop
        starts = mx.arange(n_frames)[:, None] * hop
        frames = padded[:, starts + mx.arange(n_fft)[None, :]]  # [B, T, n_fft]
        left = (n_fft - cfg.win_length) // 2
        window = mx.pad(self.window, [(left, n_fft - cfg.win_length - left)])
        spectrum = mx.fft.rfft(frames * window, n=n_fft, axis=-1)
        magnitude = mx.sqrt(mx.real(spectrum) ** 2 + mx.imag(spectrum) ** 2)
        return magnitude**cfg.mag_power

    def pad_frames(self, features: mx.array, frame_lengths: mx.array) -> mx.array:
        """Frames at and past the valid length become ``pad_value`` (0.0, not the log floor), then the time axis is
        padded with it to a multiple of ``pad_to`` (SPEC §2.1.9)."""
        cfg = self.cfg
        inside = mx.arange(features.shape[1])[None, :, None] < frame_lengths[:, None, None]
        features = mx.where(inside, features, cfg.pad_value)
        extra = (-features.shape[1]) % cfg.pad_to if cfg.pad_to > 0 else 0
        if extra:
            features = mx.pad(features, [(0, 0), (0, extra), (0, 0)], constant_values=cfg.pad_value)
        return features


class Preprocessor(nn.Module):
    """``stt_model.perception.preprocessor``: the featurizer is its only child (NeMo's module tree)."""

    def __init__(self, cfg: PreprocessorConfig):
        super().__init__()
        self.featurizer = Featurizer(cfg)

    def __call__(self, audio: mx.array, lengths: mx.array) -> tuple[mx.array, mx.array]:
        # [B, N] float32, [B] -> [B, T, F], [B]
        return self.featurizer(audio.astype(mx.float32), lengths)
