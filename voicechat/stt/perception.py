"""Speech input, ``stt_model.perception.*``: log-mel preprocessor -> FastConformer -> ``proj`` (docs/model.md §2.2.5).

The modality adapter of this model is NeMo's IdentityConnector (no weights), so the encoder output goes straight
into ``proj``, a Linear d_model -> LLM width with bias.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Optional, Union

import numpy as np

from .. import compute
import mlx.core as mx
import mlx.nn as nn

from ..config import AudioConfig
from ..layers import Linear
from .fastconformer import ConformerEncoder, EncoderStream, SubsamplingStream, subsampled_length
from .mel import MelStream, Preprocessor, valid_frames


class Perception(nn.Module):
    def __init__(self, cfg: AudioConfig):
        super().__init__()
        self.preprocessor = Preprocessor(cfg.preprocessor)
        self.encoder = ConformerEncoder(cfg.encoder)
        self.proj = Linear(cfg.encoder.d_model, cfg.output_dim)
        self._compiled = compute.CompiledFunctions()

    def __call__(self, audio: mx.array, lengths: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        """audio [B, N] float32 at 16 kHz, lengths [B] -> (projected [B, T, output_dim], valid lengths [B],
        encoder output [B, T, d_model]). T is the tensor length: one more than the valid length when
        floor(N / 160) = 1 (mod 8) (docs/model.md §1.2 B)."""
        features, feature_lengths = self.preprocessor(audio, lengths)
        encoded, lengths = self.encoder(features, feature_lengths)
        return self.proj(encoded), lengths, encoded

    def stream_frame(self):
        """One steady 80 ms frame of B streams as one function of arrays (compiled where that pays): (raw samples
        [B, N], absolute index of each one's first [B], end of each signal [B], frame index [B], valid length [B],
        subsampling carries..., layer caches... [B, ...]) -> (projected [B, output_dim], encoded [B, d_model], new
        carries..., new caches...)."""
        return self._compiled.get("stream frame", self._stream_frame)

    def _stream_frame(self, raw, first, end, start, valid, *state):
        mel, sub = MelStream(self.preprocessor.featurizer), SubsamplingStream(self.encoder.pre_encode)
        carries, caches = list(state[:len(sub.carries)]), state[len(sub.carries):]
        columns = mel.rows_columns(raw, first, self.encoder.cfg.subsampling_factor, end)
        x, carries, _ = sub.rows_of(columns, carries)
        out, *caches = self.encoder.stream_layers(x, start, valid, *caches)
        out = compute.entry(out, 0, axis=1)
        return (self.proj(out), out, *carries, *caches)


def timeline_frames(cfg: AudioConfig, samples: int) -> int:
    """Encoder frames of a recording of ``samples``: those of its 1 + N // hop mel columns (padded to ``pad_to``),
    docs/model.md §1.2 B; one more than the valid ones when N // hop = 1 (mod 8)."""
    pre, enc = cfg.preprocessor, cfg.encoder
    columns = 1 + samples // pre.hop_length
    if pre.pad_to > 0:
        columns += -columns % pre.pad_to
    return subsampled_length(columns, enc.subsampling_factor, enc.causal_downsampling)


@dataclass
class SteadyFrame:
    """A stream's steady 80 ms frame (8 new mel columns, every cache in place) taken from its samples, waiting for
    the call that computes it with the other streams' (docs/batching.md §2): its inputs on the host, its outputs
    once computed."""

    raw: np.ndarray  # [N] float32: the raw samples of its columns (MelStream.take)
    first: int  # absolute index of the first
    end: int  # the signal's end when it was taken
    start: int  # its encoder frame index
    projected: Optional[mx.array] = None  # [output_dim]
    encoded: Optional[mx.array] = None  # [d_model]


class PerceptionRows:
    """The streaming encoder state of many streams, slot-major (docs/batching.md §2): each strided subsampling
    layer's carried input row [R, 1, F, C], then each conformer layer's keys and values [R, H, left, dk] and conv
    inputs [R, K - 1, D]. Row r is stream r's once it is past its first frame (which it computes alone: its carries
    are the left padding then). :meth:`steady` computes one steady frame of any of the streams in one call."""

    def __init__(self, perception: Perception, rows: int = 0):
        self.perception = perception
        self.arrays = self._zeros(rows)

    def _zeros(self, rows: int) -> list[mx.array]:
        encoder = self.perception.encoder
        dtype = encoder.pre_encode.conv[0].weight.dtype
        carries = [mx.zeros((rows, *shape), dtype) for shape in SubsamplingStream(encoder.pre_encode).carry_shapes()]
        return carries + encoder.stream_state(dtype, rows)

    @property
    def rows(self) -> int:
        return self.arrays[0].shape[0]

    def with_rows(self, rows: int) -> None:
        """Room for ``rows`` streams (new rows zero), evaluated."""
        self.arrays = [mx.concatenate([a, b]) for a, b in zip(self.arrays, self._zeros(rows - self.rows))]
        mx.eval(self.arrays)

    def row(self, r: int) -> list[mx.array]:
        """Stream r's state, [1, ...] each."""
        return [a[r:r + 1] for a in self.arrays]

    def put(self, r: int, state: list[mx.array]) -> None:
        self.arrays = [mx.slice_update(a, s.astype(a.dtype), mx.array([r]), axes=(0,))
                       for a, s in zip(self.arrays, state)]

    def steady(self, frames: list[tuple[int, SteadyFrame]]) -> None:
        """Each (row, frame)'s steady frame, lazily, in one call over all rows: its outputs go to the frame, the
        state of the rows without one is kept."""
        rows = self.rows
        raw = np.zeros((rows, len(frames[0][1].raw)), np.float32)
        first, end, start = (np.zeros(rows, np.int32) for _ in range(3))
        for r, frame in frames:
            raw[r], first[r], end[r], start[r] = frame.raw, frame.first, frame.end, frame.start
        projected, encoded, *state = self.perception.stream_frame()(
            mx.array(raw), mx.array(first), mx.array(end), mx.array(start), mx.array(start + 1), *self.arrays)
        if len(frames) < rows:
            active = np.zeros(rows, bool)
            active[[r for r, _ in frames]] = True
            state = [compute.kept_where(mx.array(active), new, old) for new, old in zip(state, self.arrays)]
        self.arrays = state
        for r, frame in frames:
            frame.projected, frame.encoded = compute.entry(projected, r), compute.entry(encoded, r)


class PerceptionStream:
    """:class:`Perception` over a recording that arrives in pieces: 16 kHz samples in, each encoder frame out once
    its input is complete (frame k once samples up to 1280 k + 256 are in, docs/streaming.md §2). ``finish`` ends the
    input as NeMo ends a recording (docs/model.md §2.1.9, §2.2.1), so the frames of the pieces are the frames of the
    whole. Its caches are row ``row`` of ``rows`` (its own single row without one); a piece that completes one
    steady frame gives it as a :class:`SteadyFrame`, computed with the other rows' (:meth:`hear`); any other piece
    (the first frame, several frames at once: a recording's bulk, the end) is computed for this stream alone, as one
    block (docs/batching.md §2)."""

    def __init__(self, perception: Perception, rows: Optional[PerceptionRows] = None, row: int = 0):
        self.perception = perception
        self.rows = rows or PerceptionRows(perception, 1)
        self.row = row
        self.mel = MelStream(perception.preprocessor.featurizer)
        self.encoder = EncoderStream(perception.encoder)
        self.waiting: deque = deque()  # steady frames given out, not yet computed

    def hear(self, samples: np.ndarray) -> Union[SteadyFrame, tuple[mx.array, mx.array]]:
        """[N] float32 -> the one steady frame they complete, or (projected [n, output_dim], encoder output
        [n, d_model]) of the n frames completed (lazy; n may be 0)."""
        factor = self.encoder.encoder.cfg.subsampling_factor
        raw, first, count, end = self.mel.take(samples, group=factor)  # a frame's columns together: one steady shape
        if count == factor and self.encoder.frames:
            frame = SteadyFrame(raw, first, end, self.encoder.frames)
            self.encoder.advance(count)
            while self.waiting and self.waiting[0].encoded is not None:  # computed by a tick since
                self.waiting.popleft()
            self.waiting.append(frame)
            return frame
        return self._block(self.mel.columns(raw, first, count, end))

    def push(self, samples: np.ndarray) -> tuple[mx.array, mx.array]:
        """:meth:`hear`, a steady frame computed now: -> (projected [n, output_dim], encoder output [n, d_model])."""
        heard = self.hear(samples)
        if isinstance(heard, SteadyFrame):
            self.settle()
            return heard.projected[None], heard.encoded[None]
        return heard

    def settle(self) -> None:
        """Compute this stream's waiting steady frames now (the other rows kept)."""
        while self.waiting:
            frame = self.waiting.popleft()
            if frame.encoded is None:
                self.rows.steady([(self.row, frame)])

    def finish(self) -> tuple[mx.array, mx.array]:
        """The frames that the end of the input completes (zero, one or two, with NeMo's padding at the end)."""
        end = valid_frames(self.mel.total, self.mel.n_fft, self.mel.hop)
        return self._block(self.mel.finish(), end=end)

    def _block(self, columns: mx.array, end: Optional[int] = None) -> tuple[mx.array, mx.array]:
        """Mel columns through this stream's encoder alone (its waiting frames first), its state from its row and
        back (not after the end: nothing reads it then)."""
        if columns.shape[0] == 0 and end is None:  # nothing new: no graph
            encoded = mx.zeros((0, self.perception.encoder.cfg.d_model))
            return self.perception.proj(encoded), encoded
        self.settle()
        if self.encoder.frames:
            self.encoder.load(self.rows.row(self.row))
        encoded = self.encoder.push(columns, end=end)
        if end is None and self.encoder.frames:
            self.rows.put(self.row, self.encoder.arrays())
        self.encoder.load(None)  # held in the row, not twice
        return self.perception.proj(encoded), encoded

    @property
    def samples(self) -> int:
        """Samples received so far."""
        return self.mel.total

    @property
    def valid_frames(self) -> Optional[int]:
        """Encoder frames inside the valid length, once the input has ended (the last may be padding)."""
        return self.encoder.valid

    def arrays(self) -> list[mx.array]:
        """The state its rows hold (to evaluate with its output)."""
        return self.rows.arrays
