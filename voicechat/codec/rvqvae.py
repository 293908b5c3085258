"""The audio codec: NVIDIA's RVQ-VAE (``tts_model.audio_codec.*``, docs/model.md §2.6), 22.05 kHz <-> 12.5 codes/s.

waveform --STFT--> [real, imag] channels --encoder--> latent --PRVQ--> codes [B, T, Q]
codes --PRVQ means--> latent --decoder--> (magnitude, phase) --iSTFT--> waveform

Every convolution is causal or kernel == stride, so the decoder streams exactly: :class:`StreamingDecoder` keeps the
left context of each ConvNeXt block and the unfinished overlap-add tail, and the full :meth:`AudioCodec.decode` is one
push of every frame followed by the flush, i.e. the same code path.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache
from typing import Optional

import numpy as np

from .. import compute
import mlx.core as mx
import mlx.nn as nn

from ..config import CodecConfig
from ..errors import ConfigError
from ..layers import CausalDepthwiseConv, Linear
from ..stt.mel import hann_window

MAX_MAGNITUDE = 100.0  # docs/model.md §2.6: decoder head bounds the magnitude to (0, 100)
LAYER_NORM_EPS = 1e-6  # docs/model.md §2.6: LayerNormNd default
SILENCE_SECONDS = 10  # docs/model.md §2.5.10: the silence frame is taken from 10 s of zeros


# ----------------------------------------------------------------------------------------------------------------
# signal processing (docs/model.md §2.6)
# ----------------------------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def periodic_hann(n: int) -> mx.array:
    """The iSTFT window (docs/model.md §2.6): ``torch.hann_window(n)``, periodic (made once per size)."""
    return mx.array(hann_window(n, periodic=True))


def overlap_add(frames: mx.array, hop: int, carry: Optional[mx.array] = None) -> mx.array:
    """Sum frames placed every ``hop`` samples (``F.fold``; needs n % hop == 0) on top of ``carry``, the n - hop
    unfinished samples that earlier frames left. Contributions are added oldest frame first, so a sequence overlap-added
    in pieces (carrying the tail) gives bit-identical sums.

    [B, T, n], [B, n - hop] -> [B, hop * (T - 1) + n]
    """
    b, t, n = frames.shape
    parts = n // hop
    pieces = frames.reshape(b, t, parts, hop)
    if carry is None:
        acc = mx.zeros((b, t + parts - 1, hop), dtype=frames.dtype)
    else:
        acc = mx.pad(carry.reshape(b, parts - 1, hop), [(0, 0), (0, t), (0, 0)])
    for j in reversed(range(parts)):  # piece j of frame i lands in chunk i + j: larger j = older frame
        acc = acc + mx.pad(compute.entry(pieces, j, axis=2), [(0, 0), (j, parts - 1 - j), (0, 0)])
    return acc.reshape(b, (t + parts - 1) * hop)


def frame_signal(signal: mx.array, n: int, hop: int) -> mx.array:
    """Frames of ``n`` samples every ``hop`` samples, the inverse placement of :func:`overlap_add`.

    [B, hop * (T - 1) + n] -> [B, T, n]
    """
    b, length = signal.shape
    parts = n // hop
    t = length // hop - parts + 1
    chunks = signal.reshape(b, length // hop, hop)
    return mx.concatenate([chunks[:, j:j + t] for j in range(parts)], axis=-1)


def stft_channels(wave: mx.array, n_fft: int, hop: int) -> mx.array:
    """Encoder input: zero pad (n_fft - hop)/2 on each side, periodic Hann, no centring, one-sided DFT; channels
    [real(n_fft/2 + 1), imag(n_fft/2 + 1)] (docs/model.md §2.6, ``spectrogram`` + ``Wav2Latent.forward``).

    [B, N] -> [B, N / hop, n_fft + 2]
    """
    left = (n_fft - hop) // 2
    padded = mx.pad(wave.astype(mx.float32), [(0, 0), (left, n_fft - hop - left)])
    spec = mx.fft.rfft(frame_signal(padded, n_fft, hop) * periodic_hann(n_fft), axis=-1)
    return mx.concatenate([mx.real(spec), mx.imag(spec)], axis=-1)


def bounded_magnitude(m: mx.array) -> mx.array:
    """100 * exp(-softplus(-m + ln 100)): a smooth magnitude in (0, 100), ~exp(m) for small m (docs/model.md §2.6)."""
    return MAX_MAGNITUDE * mx.exp(-nn.softplus(math.log(MAX_MAGNITUDE) - m))


def head_spectrum(x: mx.array) -> mx.array:
    """Decoder head output -> one-sided spectrum. DC and Nyquist get mag * cos(phase) and no imaginary part.

    [B, T, 2 * bins] float -> [B, T, bins] complex64
    """
    x = x.astype(mx.float32)
    bins = x.shape[-1] // 2
    mag, phase = bounded_magnitude(x[..., :bins]), x[..., bins:]
    edge = mx.zeros_like(phase[..., :1])
    imag = mx.concatenate([edge, mag[..., 1:-1] * mx.sin(phase[..., 1:-1]), edge], axis=-1)
    return mag * mx.cos(phase) + 1j * imag


def windowed_frames(spec: mx.array, n_fft: int) -> mx.array:
    """irfft of each frame, each sample clamped to +-window[n] (``constrain_value_range``), times the window.

    [B, T, bins] complex -> [B, T, n_fft]
    """
    window = periodic_hann(n_fft)
    frames = mx.fft.irfft(spec, n=n_fft, axis=-1)
    return mx.clip(frames, -window, window) * window


# ----------------------------------------------------------------------------------------------------------------
# layers (channels last: [B, T, C])
# ----------------------------------------------------------------------------------------------------------------
class ConvNeXtBlock(nn.Module):
    """x + pwconv2(gelu(pwconv1(norm(dwconv(left-padded x))))), exact erf GELU (docs/model.md §2.6, ``ConvNeXt1d``)."""

    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.dwconv = CausalDepthwiseConv(channels, kernel_size)
        self.norm = nn.LayerNorm(channels, eps=LAYER_NORM_EPS)
        self.pwconv1 = Linear(channels, 4 * channels)
        self.pwconv2 = Linear(4 * channels, channels)

    def context_size(self) -> int:
        return self.dwconv.weight.shape[1] - 1

    def __call__(self, x: mx.array, history: Optional[mx.array] = None) -> tuple[mx.array, mx.array]:
        """``history``: the block's previous k-1 input frames (None = zeros, the causal padding).

        [B, T, C], [B, k-1, C] -> [B, T, C], the history for the next call
        """
        if history is None:
            history = mx.zeros((x.shape[0], self.context_size(), x.shape[2]), dtype=x.dtype)
        padded = mx.concatenate([history, x], axis=1)
        y = self.pwconv2(nn.gelu(self.pwconv1(self.norm(self.dwconv(padded)))))
        return x + y, mx.contiguous(padded[:, padded.shape[1] - self.context_size():])


class StridedConv1d(nn.Module):
    """Conv1d(C_in, C_out, k, stride k, no bias) as a matmul over non-overlapping patches."""

    def __init__(self, in_channels: int, out_channels: int, rate: int):
        super().__init__()
        self.weight = mx.zeros((out_channels, rate, in_channels))  # torch [out, in, k]

    def __call__(self, x: mx.array) -> mx.array:
        # [B, T * k, C_in] -> [B, T, k * C_in] @ [k * C_in, C_out] -> [B, T, C_out]
        c_out, k, c_in = self.weight.shape
        b, t = x.shape[0], x.shape[1] // k
        return x.reshape(b, t, k * c_in) @ self.weight.reshape(c_out, k * c_in).T


class StridedConvTranspose1d(nn.Module):
    """ConvTranspose1d(C_in, C_out, k, stride k, no bias) as a matmul: each frame becomes k frames
    (docs/platform.md §3: mx.conv_transpose1d is ~60x slower on CPU)."""

    def __init__(self, in_channels: int, out_channels: int, rate: int):
        super().__init__()
        self.weight = mx.zeros((in_channels, rate, out_channels))  # torch [in, out, k]

    def __call__(self, x: mx.array) -> mx.array:
        # [B, T, C_in] @ [C_in, k * C_out] -> [B, T * k, C_out]
        c_in, k, c_out = self.weight.shape
        b, t = x.shape[0], x.shape[1]
        return compute.product(x, self.weight.reshape(c_in, k * c_out)).reshape(b, t * k, c_out)


def run_layers(layers: list, x: mx.array, histories: list) -> tuple[mx.array, list]:
    """Apply ``layers`` in order; the ConvNeXt blocks take their entry of ``histories`` (one per block, in order)
    and return the next ones."""
    new_histories = []
    for layer in layers:
        if isinstance(layer, ConvNeXtBlock):
            x, h = layer(x, histories[len(new_histories)])
            new_histories.append(h)
        else:
            x = layer(x)
    return x, new_histories


def stage_widths(cfg: CodecConfig) -> list[int]:
    return [cfg.base_hidden_size * m for m in cfg.channel_mult]


class CodecEncoder(nn.Module):
    """``Wav2Latent``: 1x1 conv, then per stage ``num_blocks`` ConvNeXt blocks and a strided conv.

    [B, N] -> [B, N / samples_per_frame, latent]
    """

    def __init__(self, cfg: CodecConfig):
        super().__init__()
        self.n_fft, self.hop = cfg.n_fft, cfg.hop_length
        widths = stage_widths(cfg)
        layers: list = [Linear(cfg.n_fft + 2, widths[0], bias=False)]
        for width, next_width, rate in zip(widths, widths[1:] + [cfg.latent_size], cfg.rates):
            layers += [ConvNeXtBlock(width, cfg.kernel_size) for _ in range(cfg.num_blocks)]
            layers.append(StridedConv1d(width, next_width, rate))
        self.layers = layers

    def __call__(self, wave: mx.array) -> mx.array:
        x = stft_channels(wave, self.n_fft, self.hop)
        blocks = sum(isinstance(layer, ConvNeXtBlock) for layer in self.layers)
        return run_layers(self.layers, x, [None] * blocks)[0]


class CodecDecoder(nn.Module):
    """``Latent2Wav`` up to the head: per stage (widest first) a strided transposed conv and ``num_blocks``
    ConvNeXt blocks, then a 1x1 conv to [magnitude, phase].

    [B, T, latent] -> [B, T * samples_per_frame / hop, n_fft + 2]
    """

    def __init__(self, cfg: CodecConfig):
        super().__init__()
        widths = stage_widths(cfg)[::-1]
        layers: list = []
        for in_width, width, rate in zip([cfg.latent_size] + widths[:-1], widths, cfg.rates[::-1]):
            layers.append(StridedConvTranspose1d(in_width, width, rate))
            layers += [ConvNeXtBlock(width, cfg.kernel_size) for _ in range(cfg.num_blocks)]
        layers.append(Linear(widths[-1], cfg.n_fft + 2, bias=False))
        self.layers = layers

    def initial_histories(self, batch_size: int) -> list[mx.array]:
        """Zero left context for every ConvNeXt block (the causal padding of a fresh sequence)."""
        return [mx.zeros((batch_size, layer.context_size(), layer.norm.weight.shape[0]), layer.norm.weight.dtype)
                for layer in self.layers if isinstance(layer, ConvNeXtBlock)]

    def __call__(self, z: mx.array, histories: list) -> tuple[mx.array, list]:
        return run_layers(self.layers, z, histories)


class ProbabilisticRVQ(nn.Module):
    """``PreTrainedProbabilisticVQ`` at inference: greedy residual nearest mean, one codebook after the other."""

    def __init__(self, cfg: CodecConfig):
        super().__init__()
        self.mus_list = [mx.zeros((cfg.codebook_size, cfg.latent_size)) for _ in range(cfg.num_quantizers)]
        self._stacked = compute.Derived()

    def stacked(self) -> tuple[mx.array, mx.array]:
        """The codebooks one after the other [Q K, latent] and where each starts [Q], made at load: a frame's Q
        lookups are one gather."""
        size = self.mus_list[0].shape[0]
        return self._stacked.of(self.mus_list[0], lambda _: (mx.concatenate(self.mus_list),
                                                             size * mx.arange(len(self.mus_list), dtype=mx.int32)))

    def prepare(self) -> list[mx.array]:
        return list(self.stacked())

    def encode(self, z: mx.array) -> mx.array:
        """[B, T, latent] -> codes [B, T, Q] int32"""
        residual, codes = z, []
        for mus in self.mus_list:
            # NeMo's _dist_sq: |r|^2 + |mu|^2 - 2 r.mu (kept whole, so that float rounding decides ties alike)
            dist = (mx.sum(residual * residual, axis=-1, keepdims=True) + mx.sum(mus * mus, axis=-1)
                    - 2 * (residual @ mus.T))
            idx = mx.argmin(dist, axis=-1)
            residual = residual - mus[idx]
            codes.append(idx)
        return mx.stack(codes, axis=-1).astype(mx.int32)

    def decode(self, codes: mx.array) -> mx.array:
        """codes [B, T, Q] -> sum of the chosen means [B, T, latent], summed in codebook order as NeMo does."""
        table, starts = self.stacked()
        picked = table[codes + starts]  # [B, T, Q, latent]
        z = compute.entry(picked, 0, axis=-2)
        for q in range(1, len(self.mus_list)):
            z = z + compute.entry(picked, q, axis=-2)
        return z


# ----------------------------------------------------------------------------------------------------------------
# the codec
# ----------------------------------------------------------------------------------------------------------------
def _to_mx(x) -> tuple[mx.array, bool]:
    return (x, False) if isinstance(x, mx.array) else (mx.array(np.ascontiguousarray(x)), True)


def _like(x: mx.array, as_numpy: bool):
    return np.array(x) if as_numpy else x


def pad_to_multiple(wave, multiple: int):
    """Zero-pad the end of ``wave`` [B, N] to a multiple of ``multiple`` samples (NeMo's ``pad_audio_to_factor``)."""
    arr, as_numpy = _to_mx(wave)
    extra = -arr.shape[-1] % multiple
    return _like(mx.pad(arr, [(0, 0), (0, extra)]) if extra else arr, as_numpy)


class AudioCodec(nn.Module):
    """``tts_model.audio_codec``. Arrays in, same kind out: numpy in -> numpy out, mx in -> mx out."""

    def __init__(self, cfg: CodecConfig):
        super().__init__()
        if cfg.n_fft % cfg.hop_length or (cfg.n_fft - cfg.hop_length) % 2:
            raise ConfigError(f"codec n_fft {cfg.n_fft} must be a multiple of hop_length {cfg.hop_length} "
                              "with an even difference")
        self.cfg = cfg
        self.encoder = CodecEncoder(cfg)
        self.prvq = ProbabilisticRVQ(cfg)
        self.decoder = CodecDecoder(cfg)
        self._compiled = compute.CompiledFunctions()

    @property
    def samples_per_frame(self) -> int:
        return self.cfg.samples_per_frame

    def encode(self, wave):
        """wave [B, N] at ``cfg.sample_rate``, N a multiple of ``samples_per_frame`` -> codes [B, N / 1764, Q] int32.

        NeMo refuses other lengths (``ae_encode``); so do we: pad with :func:`pad_to_multiple` first if the tail
        should be encoded as zeros, as NeMo's callers do.
        """
        arr, as_numpy = _to_mx(wave)
        if arr.ndim != 2 or arr.shape[1] == 0 or arr.shape[1] % self.samples_per_frame:
            raise ValueError(f"codec encode needs a waveform [batch, samples] with samples a positive multiple of "
                             f"{self.samples_per_frame}, got shape {list(arr.shape)}; pad it with pad_to_multiple")
        codes = self.prvq.encode(self.encoder(arr))
        mx.eval(codes)
        return _like(codes, as_numpy)

    def decode(self, codes):
        """codes [B, T, Q] -> waveform [B, T * samples_per_frame] float32 (the stream pushed whole, then flushed)."""
        arr, as_numpy = _to_mx(codes)
        stream = self.stream(arr.shape[0] if arr.ndim == 3 else 1)
        return _like(mx.concatenate([stream.push(arr), stream.flush()], axis=1), as_numpy)

    def decode_frame(self, codes: mx.array, *histories: mx.array) -> tuple:
        """One code frame to its windowed iSTFT frames, compiled (fixed shapes).
        codes [B, 1, Q], the ConvNeXt histories -> (frames [B, 1764 / hop, n_fft], the next histories)"""
        fn = self._compiled.get("frame", self._decode_frame)
        return fn(codes, *histories)

    def _decode_frame(self, codes: mx.array, *histories: mx.array) -> tuple:
        x, histories = self.decoder(self.prvq.decode(codes), list(histories))
        return (windowed_frames(head_spectrum(x), self.cfg.n_fft), *histories)

    def stream(self, batch_size: int = 1) -> "StreamingDecoder":
        return StreamingDecoder(self, batch_size)

    def silence_codes(self) -> mx.array:
        """NeMo's ``get_codec_silence_frame`` (docs/model.md §2.5.10): the most frequent code frame of 10 s of zeros
        padded to whole frames; ties go to the frame seen first. For checkpoints without
        ``tts_model.codec_silence_tokens``.

        -> [Q] int32
        """
        zeros = pad_to_multiple(mx.zeros((1, SILENCE_SECONDS * self.cfg.sample_rate)), self.samples_per_frame)
        frames = np.array(self.encode(zeros))[0]
        most_common = Counter(tuple(row) for row in frames.tolist()).most_common(1)[0][0]
        return mx.array(most_common, dtype=mx.int32)


class StreamingDecoder:
    """Incremental :meth:`AudioCodec.decode`; the concatenated outputs equal the full decode sample for sample.

    State: the last k-1 inputs of every decoder ConvNeXt block and the n_fft - hop (= 12) overlap-add samples that
    still wait for later frames, with their window envelope. The iSTFT drops (n_fft - hop)/2 (= 6) samples at each
    end, and the samples just before the unfinished tail are final only once the next frame's overlap arrives or the
    stream ends, so the output runs 6 samples behind the codes:

    * the first ``push`` of k frames returns k * 1764 - 6 samples, every later ``push`` k * 1764;
    * ``flush()`` returns the last 6 samples, whose envelope holds only the frames that exist (as at the end of a
      full decode), and closes the stream.
    """

    def __init__(self, codec: AudioCodec, batch_size: int = 1):
        cfg = codec.cfg
        self.codec = codec
        self.n_fft, self.hop = cfg.n_fft, cfg.hop_length
        self.crop = (cfg.n_fft - cfg.hop_length) // 2
        tail = cfg.n_fft - cfg.hop_length
        self.histories = codec.decoder.initial_histories(batch_size)
        self.pending = mx.zeros((batch_size, tail))
        self.pending_envelope = mx.zeros((batch_size, tail))
        self.to_skip = self.crop  # samples still to drop at the start
        self.frames = 0
        self.as_numpy = False
        self.closed = False

    def _check_codes(self, codes: mx.array) -> None:
        cfg = self.codec.cfg
        if codes.ndim != 3 or codes.shape[0] != self.pending.shape[0] or codes.shape[2] != cfg.num_quantizers:
            raise ValueError(f"codec decode needs codes [{self.pending.shape[0]}, frames, {cfg.num_quantizers}], "
                             f"got shape {list(codes.shape)}")
        if codes.size and (mx.min(codes).item() < 0 or mx.max(codes).item() >= cfg.codebook_size):
            raise ValueError(f"codec codes must lie in [0, {cfg.codebook_size}); replace control codes "
                             "(speech BOS/EOS/PAD) by the silence frame before decoding")

    def _emit(self, signal: mx.array, envelope: mx.array) -> mx.array:
        """Normalise finished samples by the overlap-added window^2 and drop what the start crop still owes."""
        out = signal / envelope
        skip = min(self.to_skip, out.shape[1])
        self.to_skip -= skip
        return out[:, skip:]

    def push(self, codes):
        """codes [B, k, Q] (k >= 0 new frames) -> the newly finished samples [B, k * 1764] (6 fewer on the first)."""
        arr, self.as_numpy = _to_mx(codes)
        self._check_codes(arr)
        out = self.append(arr)
        mx.eval(out, self.arrays)
        return _like(out, self.as_numpy)

    def append(self, arr: mx.array) -> mx.array:
        """``push`` for codes known to be valid, without evaluating: the caller evaluates the returned samples
        together with ``arrays`` (the streaming loop does, once per frame)."""
        if self.closed:
            raise ValueError("this codec stream was flushed; start a new one with codec.stream()")
        if arr.shape[1] == 0:
            return mx.zeros((arr.shape[0], 0))
        signal, envelope = self._advance(arr)
        return self._emit(signal, envelope)

    def append_rows(self, codes: mx.array, active: np.ndarray) -> mx.array:
        """One code frame [B, 1, Q] for a group's rows, each its own stream (docs/batching.md): the rows not
        ``active`` keep their state exactly; -> every row's finished samples [B, 1764] before the start crop, which
        each conversation drops from its own first frame (:attr:`crop`)."""
        before = self.arrays
        signal, envelope = self._advance(codes)
        keep = mx.array(active)
        self.pending, self.pending_envelope, *self.histories = (compute.kept_where(keep, new, old)
                                                                for new, old in zip(self.arrays, before))
        return signal / envelope

    def _advance(self, arr: mx.array) -> tuple[mx.array, mx.array]:
        """The frames of codes [B, k, Q] overlap-added onto the state: (finished samples, their window envelope)
        [B, k * 1764] each, before normalisation and the start crop."""
        pieces = []
        for i in range(arr.shape[1]):
            # one code frame per pass: every matmul sees the same shapes however the frames are grouped, so the
            # result is bit-identical to any other grouping (BLAS rounding depends on the row count)
            piece, *self.histories = self.codec.decode_frame(arr[:, i:i + 1], *self.histories)
            pieces.append(piece)
        frames = mx.concatenate(pieces, axis=1)  # [B, F, n_fft]
        window_sq = mx.broadcast_to(periodic_hann(self.n_fft) ** 2, frames.shape)
        done = frames.shape[1] * self.hop
        signal = overlap_add(frames, self.hop, self.pending)  # [B, done + n_fft - hop]
        envelope = overlap_add(window_sq, self.hop, self.pending_envelope)
        self.pending = mx.contiguous(signal[:, done:])
        self.pending_envelope = mx.contiguous(envelope[:, done:])
        self.frames += arr.shape[1]
        return signal[:, :done], envelope[:, :done]

    def with_rows(self, rows: int) -> None:
        """Room for ``rows`` streams: every state padded with fresh rows."""
        self.pending, self.pending_envelope, *self.histories = (
            mx.pad(a, [(0, rows - a.shape[0])] + [(0, 0)] * (a.ndim - 1)) for a in self.arrays)
        mx.eval(self.arrays)

    def restart_row(self, row: int) -> None:
        """Row ``row`` back to a fresh stream's state (a conversation joins a group there)."""
        self.pending, self.pending_envelope, *self.histories = (
            mx.slice_update(a, mx.zeros((1, *a.shape[1:]), a.dtype), mx.array([row] + [0] * (a.ndim - 1)),
                            axes=tuple(range(a.ndim))) for a in self.arrays)
        mx.eval(self.arrays)

    @property
    def arrays(self) -> list[mx.array]:
        """The stream's state, to evaluate with the samples ``append`` returns."""
        return [self.pending, self.pending_envelope, *self.histories]

    def tail(self, row: int) -> mx.array:
        """Row ``row``'s last (n_fft - hop)/2 samples once its input has ended, as :meth:`flush` gives them: [1, 6]"""
        keep = self.pending.shape[1] - self.crop
        return self.pending[row:row + 1, :keep] / self.pending_envelope[row:row + 1, :keep]

    def flush(self):
        """The last (n_fft - hop)/2 samples of the sequence, [B, 6] (nothing if no frame was pushed); closes it."""
        self.closed = True
        if self.frames == 0:
            return _like(mx.zeros((self.pending.shape[0], 0)), self.as_numpy)
        keep = self.pending.shape[1] - self.crop
        out = self._emit(self.pending[:, :keep], self.pending_envelope[:, :keep])
        mx.eval(out)
        return _like(out, self.as_numpy)
