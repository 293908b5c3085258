"""Log-mel frontend: NeMo's AudioToMelSpectrogramPreprocessor / FilterbankFeatures at inference (docs/model.md §2.1).

waveform [B, N] -> pre-emphasis -> zero-padded centred STFT (symmetric Hann) -> power -> Slaney mel -> log(x + guard)
-> frames at and past the valid length set to ``pad_value`` -> padded to a multiple of ``pad_to``.
Features are channels-last, [B, T, F] (NeMo's are [B, F, T]).
"""

from __future__ import annotations

import math

import numpy as np

from .. import compute
import mlx.core as mx
import mlx.nn as nn

from ..config import PreprocessorConfig


# ----------------------------------------------------------------------------------------------------------------
# constant tables (numpy, rounded to float32 where the torch / librosa originals round)
# ----------------------------------------------------------------------------------------------------------------
def hann_window(length: int, periodic: bool) -> np.ndarray:
    """``torch.hann_window(length, periodic)``, evaluated in float32 the way torch does (n * float32(2 pi / N), cos,
    * -0.5 + 0.5) with N = length (periodic: the codec's iSTFT) or length - 1 (symmetric: the mel, docs/model.md
    §2.1.4)."""
    n = np.arange(length, dtype=np.float32)
    step = np.float32(2.0 * math.pi / (length if periodic else length - 1))
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
    (docs/model.md §2.1.2). The STFT itself has one frame more."""
    return (num_samples + 2 * (n_fft // 2) - n_fft) // hop


def stft_frames(padded: mx.array, count: int, n_fft: int, hop: int) -> mx.array:
    """``count`` frames of ``n_fft`` samples every ``hop`` samples from the start of ``padded`` [B, N] -> [B, T, n_fft]
    (``torch.stft(center=True)`` once the signal carries its n_fft // 2 samples of padding on each side)."""
    starts = mx.arange(count)[:, None] * hop
    return padded[:, starts + mx.arange(n_fft)[None, :]]


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
        self.window = mx.array(hann_window(cfg.win_length, periodic=False))
        self.fb = mx.array(slaney_mel_filterbank(cfg.sample_rate, cfg.n_fft, cfg.features, cfg.lowfreq, fmax)[None])

    def __call__(self, audio: mx.array, lengths: mx.array) -> tuple[mx.array, mx.array]:
        # audio [B, N] float32, lengths [B] -> features [B, T, F], valid frames [B]
        cfg = self.cfg
        lengths = lengths.astype(mx.int32)
        frame_lengths = valid_frames(lengths, cfg.n_fft, cfg.hop_length)
        x = self.pre_emphasis(audio, lengths)
        padded = mx.pad(x, [(0, 0), (cfg.n_fft // 2, cfg.n_fft // 2)])
        features = self.log_mel(stft_frames(padded, 1 + x.shape[1] // cfg.hop_length, cfg.n_fft, cfg.hop_length))
        return self.pad_frames(features, frame_lengths), frame_lengths

    def pre_emphasis(self, audio: mx.array, lengths: mx.array) -> mx.array:
        """x'[0] = x[0], x'[n] = x[n] - preemph * x[n - 1]; samples from the length on zeroed (docs/model.md §2.1.3)."""
        emphasized = mx.concatenate([audio[:, :1], audio[:, 1:] - self.cfg.preemph * audio[:, :-1]], axis=1)
        inside = mx.arange(audio.shape[1])[None, :] < lengths[:, None]
        return mx.where(inside, emphasized, 0.0)

    def log_mel(self, frames: mx.array) -> mx.array:
        """STFT frames of the pre-emphasized signal [B, T, n_fft] -> log-mel [B, T, F]: the window centred in n_fft,
        one-sided FFT, |X| ** mag_power, Slaney mel, log(x + guard) (docs/model.md §2.1.4-7). float32 like NeMo: in bins
        60 dB below their frame, float32 FFT rounding (ours and NeMo's MKL one) reaches ~1e-4 in the log domain."""
        cfg = self.cfg
        left = (cfg.n_fft - cfg.win_length) // 2
        window = mx.pad(self.window, [(left, cfg.n_fft - cfg.win_length - left)])
        spectrum = mx.fft.rfft(frames * window, n=cfg.n_fft, axis=-1)
        power = mx.sqrt(mx.real(spectrum) ** 2 + mx.imag(spectrum) ** 2) ** cfg.mag_power
        # each item's frames their own product: a group's streams' numbers do not depend on each other (compute.product)
        return mx.log(compute.product(power, compute.entry(self.fb, 0).T) + cfg.log_zero_guard_value)

    def pad_frames(self, features: mx.array, frame_lengths: mx.array) -> mx.array:
        """Frames at and past the valid length become ``pad_value`` (0.0, not the log floor), then the time axis is
        padded with it to a multiple of ``pad_to`` (docs/model.md §2.1.9)."""
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


class MelStream:
    """The log-mel columns of a signal that arrives in pieces, each computed once, when the samples of its STFT frame
    are all in: column j spans samples [hop j - n_fft / 2, hop j + n_fft / 2) (docs/model.md §2.1.4). ``finish`` ends
    the signal the way NeMo ends a recording: the pre-emphasized samples past its end are zero, the centred STFT's
    frames run to 1 + N // hop, and the columns at and past the valid length N // hop are ``pad_value``
    (docs/model.md §2.1.9). So the columns of pieces pushed, then finished, are those of the whole recording."""

    def __init__(self, featurizer: Featurizer):
        cfg = featurizer.cfg
        self.featurizer = featurizer
        self.n_fft, self.hop = cfg.n_fft, cfg.hop_length
        self.kept = np.zeros(0, np.float32)  # the raw samples from absolute index `kept_from` on
        self.kept_from = 0
        self.total = 0  # samples received
        self.next_column = 0
        self.finished = False

    def push(self, samples: np.ndarray) -> mx.array:
        """New samples (16 kHz float32) -> the columns they complete [n, F] (n may be 0)."""
        return self.columns(*self.take(samples))

    def take(self, samples: np.ndarray, group: int = 1) -> tuple[np.ndarray, int, int, int]:
        """Keep new samples; what the columns they complete are made from: (raw samples, absolute index of the
        first, count of columns, end of the signal). :meth:`columns` turns that into the columns. With ``group`` g the
        columns come out as column 0, then whole groups of g (an encoder frame's columns, 8k - 7 .. 8k:
        docs/streaming.md §2), so what follows them sees the same columns per frame however the audio is chunked."""
        if self.finished:
            raise RuntimeError("this mel stream was finished")
        self.kept = np.concatenate([self.kept, np.asarray(samples, np.float32)])
        self.total += len(samples)
        ready = (self.total - self.n_fft // 2) // self.hop + 1  # columns whose frame ends at or before `total`
        ready -= max(0, ready - 1) % group  # down to 1 + a multiple of the group
        return self._take(max(0, ready - self.next_column))

    def finish(self) -> mx.array:
        """The remaining columns of the signal as it stands [n, F]: those inside the valid length from the samples
        (zero past the end), the rest ``pad_value``, then ``pad_to`` padding."""
        cfg = self.featurizer.cfg
        self.finished = True
        valid = valid_frames(self.total, self.n_fft, self.hop)
        tensor = 1 + self.total // self.hop
        if cfg.pad_to > 0:
            tensor += -tensor % cfg.pad_to
        columns = self.columns(*self._take(max(0, valid - self.next_column)))
        pads = tensor - self.next_column
        return mx.concatenate([columns, mx.full((pads, cfg.features), cfg.pad_value, columns.dtype)])

    def columns(self, raw, first, count: int, end) -> mx.array:
        """``count`` columns from raw samples [N] (absolute index ``first - 1`` on: one more on the left for the
        pre-emphasis) of a signal that ends at ``end`` (the pre-emphasized samples from it on are 0). -> [count, F]"""
        if count == 0:
            return mx.zeros((0, self.featurizer.cfg.features))
        return compute.entry(self.rows_columns(mx.array(raw)[None], mx.array(first), count, mx.array(end)), 0)

    def rows_columns(self, raw: mx.array, first: mx.array, count: int, end: mx.array) -> mx.array:
        """:meth:`columns` of B streams at once (a group's steady frames, inside a compiled function): raw [B, N],
        ``first`` and ``end`` [B] (or scalars) -> [B, count, F]."""
        emphasized = raw[:, 1:] - self.featurizer.cfg.preemph * raw[:, :-1]  # x[-1] reads as 0, so x'[0] = x[0]
        position = first.reshape(-1, 1) + mx.arange(emphasized.shape[1])[None]
        emphasized = mx.where((position >= 0) & (position < end.reshape(-1, 1)), emphasized, 0.0)
        return self.featurizer.log_mel(stft_frames(emphasized, count, self.n_fft, self.hop))

    def _take(self, count: int) -> tuple[np.ndarray, int, int, int]:
        """The raw samples of the next ``count`` columns; forget what no later column reads."""
        first = self.next_column * self.hop - self.n_fft // 2  # absolute index of the first sample of the frames
        last = (self.next_column + count - 1) * self.hop + self.n_fft // 2
        raw = self._raw(first - 1, last) if count else np.zeros(0, np.float32)
        self.next_column += count
        drop = min(len(self.kept), max(0, self.next_column * self.hop - self.n_fft // 2 - 1 - self.kept_from))
        self.kept, self.kept_from = self.kept[drop:], self.kept_from + drop
        return raw, first, count, self.total

    def _raw(self, first: int, last: int) -> np.ndarray:
        """Raw samples [first, last) as float32, zero outside what was received."""
        lo, hi = max(first, self.kept_from), min(last, self.total)
        out = np.zeros(last - first, np.float32)
        if hi > lo:
            out[lo - first:hi - first] = self.kept[lo - self.kept_from:hi - self.kept_from]
        return out
