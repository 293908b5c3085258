"""A recording on the timeline (docs/model.md §1.2 A): its set-up (the audio read and checked, its conversation
opened in a group), the input given a piece at a time between the group's ticks (:class:`OfflineInput`), and the
progress reported per frame. ``Model.generate`` is a recording answered in a group of one (:func:`answer`); the engine
and ``voicechat batch`` give theirs the same pieces by the same call (``advance``) in a group they step."""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Iterator, Optional, Sequence

import numpy as np

from ..audio import prepare_input
from ..config import GenerationConfig
from ..limits import TIMELINE_LIMIT, check_timeline, checked_prompt, run_positions
from ..result import FrameUpdate, Result
from ..tools import Tool, system_prompt as tool_prompt
from .conversation import LISTEN_BLOCK_FRAMES, Frame, Session

QUIET_FRAMES_AFTER_ANSWER = 6  # app mode: stop 0.48 s after the assistant's EOS once the recording has been heard

Progress = Callable[[int, int, FrameUpdate], None]


def open_recording(model, audio, sample_rate: Optional[int] = None, system_prompt: str = "", seed: int = 0,
                   speaker=None, config: Optional[GenerationConfig] = None, progress: Optional[Progress] = None,
                   tools: Sequence[Tool] = (), *, noise=None, profile: bool = False, script=None,
                   group=None) -> "OfflineInput":
    """The recording read and checked, its session opened in ``group`` (a group of one without it) -> its input to
    come. ``noise``, ``profile``, ``script``: the test and benchmark seams of :class:`~voicechat.Session`."""
    gen = config or GenerationConfig()
    cfg = model.config
    x = prepare_input(audio, sample_rate, cfg.input_sample_rate, cfg.samples_per_input_frame, gen.max_input_seconds)
    fixed, extra = gen.fixed_length, gen.silence_samples(cfg.input_sample_rate)
    prompt = tool_prompt(checked_prompt(system_prompt), tools)
    positions = run_positions(model, len(x), prompt, gen)
    most = TIMELINE_LIMIT if group is None else group.max_positions
    check_timeline(positions, "extra_seconds" if fixed else "max_extra_seconds", most)  # refused before it starts
    tracker = ProgressTracker(progress, positions)
    tracker.announce("prompt")
    session = Session(model, system_prompt, seed, speaker, gen, tools, noise=noise, profile=profile,
                      on_frame=tracker.frame, script=script, group=group)
    return OfflineInput(model, session, x, extra, fixed, positions)


def answer(recording: "OfflineInput") -> Result:
    """A lone recording run to its end as every recording is, by ``advance`` between its group's ticks (a running
    tool is simply waited for) -> the result."""
    session = recording.session
    try:
        while recording.advance():
            if session.waits_for_tool():
                session.settle()
            else:
                session.poll()
        return recording.result()
    finally:
        session.close()  # also when the progress callback stopped the run


class OfflineInput:
    """What ``generate`` gives a session, a piece at a time: the recording, then silence: in fixed mode all of it and
    the end of the input; in app mode 80 ms at a time until the answer has ended, and the end of the input at the
    bound (docs/model.md §1.2 A). :meth:`pieces` yields each piece once the session has run all the one before
    allows; None is the end of the input (``flush``). :meth:`advance` gives them, between the ticks of the session's
    group: a lone recording's (:func:`answer`), ``voicechat batch``'s (docs/batch.md §1), the engine's
    (docs/batching.md §5). ``positions``: the run's timeline positions at most (its progress total)."""

    def __init__(self, model, session: Session, x: np.ndarray, extra: int, fixed: bool, positions: int):
        self.cfg, self.session, self.x, self.extra, self.fixed = model.config, session, x, extra, fixed
        self.positions = positions
        # positions carrying the recording: those whose 80 ms hold some of it (the last one may be padding)
        self.input_frames = min(-(-len(x) // self.cfg.samples_per_input_frame), model.encoder_frames(len(x) + extra))
        self._given: Optional[Iterator] = None  # pieces() as advance() gives them

    def pieces(self) -> Iterator[Optional[np.ndarray]]:
        """Long stretches in blocks of LISTEN_BLOCK_FRAMES (a group's other conversations then wait at most one
        block's encoder between two ticks; ``feed`` splits its audio so anyway)."""
        cfg, session = self.cfg, self.session
        yield from blocks(self.x, LISTEN_BLOCK_FRAMES * cfg.samples_per_input_frame)
        if self.fixed:
            yield from blocks(np.zeros(self.extra, np.float32), LISTEN_BLOCK_FRAMES * cfg.samples_per_input_frame)
            yield None
            return
        heard = session.prompt_frames + self.input_frames
        frame = cfg.samples_per_input_frame
        for i in range(0, self.extra, frame):  # at the bound without an end, the input ends
            start = answer_start(session)
            if start is not None and answer_finished(session.text, session.position - 1, heard + session.held,
                                                     cfg.pad_id, cfg.eos_id, start):
                return
            yield np.zeros(min(frame, self.extra - i), np.float32)
        yield None

    def advance(self) -> bool:
        """Give the session its next piece once it has run all the one before allows (the group's ticks run it);
        False when every piece is given and run (the session has then left the group)."""
        if self._given is None:
            self._given = self.pieces()
        session = self.session
        while session.ended or session.input_used():
            piece = next(self._given, False)
            if piece is False:
                session.close()
                return False
            if piece is None:
                session.flush()
            else:
                session.push(piece, self.cfg.input_sample_rate)
        return True

    def result(self) -> Result:
        return dataclasses.replace(self.session.result(), input_frames=self.input_frames)


def blocks(x: np.ndarray, size: int) -> Iterator[np.ndarray]:
    """``x`` in pieces of ``size`` samples at most (none for an empty ``x``)."""
    for i in range(0, len(x), size):
        yield x[i:i + size]


def answer_start(session: Session) -> Optional[int]:
    """Where the answer is looked for: after the prompt and after the last tool exchange, since the model answers
    from a tool's result once it has read it. None while an exchange is open."""
    if session.tool_channel is not None and session.tool_channel.pending():
        return None
    ends = [call.end + 1 for call in session.tool_calls if call.end is not None]
    return max([session.prompt_frames, *ends])


def answer_finished(text: list, t: int, heard: int, pad_id: int, eos_id: int, prompt: int) -> bool:
    """App mode stops once the recording has been heard (positions before ``heard``) and the assistant has ended its
    turn (EOS, then some quiet frames without a new token); the appended silence bounds it otherwise."""
    if t < heard:
        return False
    spoken = np.asarray(text[prompt:t + 1])
    eos = np.flatnonzero(spoken == eos_id)
    if eos.size == 0:
        return False
    after = spoken[eos[-1] + 1:]
    return len(after) >= QUIET_FRAMES_AFTER_ANSWER and bool(np.all(after == pad_id))


class ProgressTracker:
    """Turns the session's frames into ``progress(done, total, update)`` calls."""

    def __init__(self, progress: Optional[Progress], total: int):
        self.progress, self.total = progress, total
        self.start = time.perf_counter()
        self.done = 0
        self.text = self.function_text = ""

    def announce(self, stage: str, frame: Optional[Frame] = None) -> None:
        if self.progress is not None:
            elapsed = time.perf_counter() - self.start
            self.progress(self.done, self.total, FrameUpdate(stage, elapsed, self.done / max(elapsed, 1e-9),
                                                             self.text, self.function_text, frame))

    def frame(self, frame: Frame) -> None:
        self.done += 1
        self.total = max(self.total, self.done)  # a tool exchange adds positions
        self.text += frame.text
        self.function_text += frame.function_text
        self.announce("frames", frame)
