"""A finished conversation as the app, the terminal and the records show it: each channel's tokens decoded at the
position that emitted them (:class:`Piece`), the assistant's turns, the real-time factor, and the stereo timeline of a
live call (the user left, the answer right). Numpy and Python values only."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .audio import resample
from .result import Result
from .tokenizer import TextStream


@dataclass(frozen=True)
class Piece:
    """One non-pad token of a channel, where it was emitted."""

    frame: int  # timeline position
    token_id: int
    text: str  # what the token adds to the decoded text ("" for special tokens)
    token: str  # the tokenizer's name for it (e.g. "Ġthe", "<s>")


@dataclass(frozen=True)
class Answer:
    """A finished job: the engine's result (numpy only) plus each channel's tokens decoded where they were emitted."""

    result: Result
    text_pieces: tuple[Piece, ...]
    function_pieces: tuple[Piece, ...]
    turn_starts: tuple[int, ...]  # frames where the text channel emitted BOS (the assistant starts a turn)
    turn_ends: tuple[int, ...]  # frames where it emitted EOS
    wall_seconds: float

    @property
    def timeline_frames(self) -> int:
        """Positions computed, system prompt included: the last progress event's ``done``."""
        return self.result.first_frame + len(self.result.text_tokens)

    @property
    def realtime_factor(self) -> float:
        return realtime_factor(self.wall_seconds, self.timeline_frames, self.result.frame_seconds)


def realtime_factor(seconds: float, frames: int, frame_seconds: float) -> float:
    """Wall seconds since the job started per second of timeline computed (every position: system prompt, recording
    and the silence after it); below 1 is faster than real time. The same definition during a run and after it."""
    return seconds / max(frames * frame_seconds, 1e-9)


def channel_pieces(tokenizer, ids: Sequence[int], first_frame: int, skip: set[int]) -> tuple[Piece, ...]:
    """Each token that is not in ``skip``, at its timeline frame, with the text it adds to the channel: what the
    session's frame gave at that position (the same :class:`TextStream`, docs/streaming.md §6); the last one also
    the text the end of the channel settles, so that the pieces, joined, are the channel's text."""
    stream = TextStream(tokenizer, skip)
    pieces = [Piece(first_frame + i, int(t), stream.add(int(t)), tokenizer.id_to_token(int(t)) or str(int(t)))
              for i, t in enumerate(ids) if int(t) not in skip]
    if pieces:
        pieces[-1] = dataclasses.replace(pieces[-1], text=pieces[-1].text + stream.finish())
    return tuple(pieces)


def frames_of(ids: Sequence[int], token_id: int, first_frame: int) -> tuple[int, ...]:
    return tuple(first_frame + i for i, t in enumerate(ids) if int(t) == token_id)


def make_answer(model, result: Result, wall_seconds: float) -> Answer:
    cfg = model.config
    return Answer(
        result=result,
        text_pieces=channel_pieces(model.tokenizer, result.text_tokens, result.first_frame,
                                   {cfg.pad_id, cfg.bos_id, cfg.eos_id}),
        function_pieces=channel_pieces(model.tokenizer, result.function_tokens, result.first_frame, {cfg.pad_id}),
        turn_starts=frames_of(result.text_tokens, cfg.bos_id, result.first_frame),
        turn_ends=frames_of(result.text_tokens, cfg.eos_id, result.first_frame),
        wall_seconds=wall_seconds,
    )


def stereo_timeline(user: np.ndarray, user_rate: int, result) -> np.ndarray:
    """[samples, 2] float32 at the answer's rate: the user's audio left, the answer right, on the 80 ms timeline.
    The answer starts at ``first_frame``. Each 80 ms of the user's audio sits at the position that heard it: from
    ``prompt_frames`` on, skipping a tool exchange's positions, which heard the silence embedding while the user's
    frames waited (docs/tools.md §5: those frames come after the exchange, as the model heard them); audio that no
    position heard (sent as the call stopped) is left out. Used by ``live --save`` and the app's Talk live tab."""
    rate = result.sample_rate
    hop = round(result.frame_seconds * rate)
    end = result.first_frame + len(result.text_tokens)  # one past the last position
    voice = resample(np.asarray(user, np.float32), user_rate, rate)
    right = np.asarray(result.audio, np.float32)
    out = np.zeros((max((end - result.first_frame) * hop, right.size), 2), np.float32)
    out[:right.size, 1] = right
    held = set(result.held_positions)
    frame = 0
    for position in range(result.prompt_frames, end):
        if position in held:
            continue
        piece = voice[frame * hop:(frame + 1) * hop]
        start = (position - result.first_frame) * hop
        out[start:start + piece.size, 0] = piece
        frame += 1
    return out

