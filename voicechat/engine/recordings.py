"""Recordings on the engine thread (docs/batching.md §5): a :class:`Request` submitted, a :class:`Job` that reports
:class:`Event`\\ s (queue position, per-frame progress with the partial text and the frame's new answer samples, then
one of done / error / cancelled), and the engine's part that starts them in the group as rows and memory allow, gives
each its next input between ticks and ends it. ``Job.cancel()`` stops a running job within one 80 ms frame and removes
a waiting one from the queue at once."""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from queue import Empty, Queue
from typing import Any, Iterator, Optional, Union

import numpy as np

from ..answer import Answer, make_answer
from ..config import GenerationConfig
from ..errors import SessionsFull, VoiceChatError
from ..limits import check_prompt_positions, checked_prompt, checked_seed, run_positions
from ..result import FrameUpdate, Result
from ..tools import system_prompt as tool_prompt
from ..voices import preview_recording

# Event kinds. The last three end a job.
QUEUED, STARTED, PROGRESS, DONE, ERROR, CANCELLED = "queued", "started", "progress", "done", "error", "cancelled"
TERMINAL = (DONE, ERROR, CANCELLED)


@dataclass(frozen=True)
class Request:
    audio: Union[np.ndarray, str, Path]  # samples [N] or [N, channels] at sample_rate, or a file path
    sample_rate: Optional[int]  # None for a file path
    system_prompt: str = ""
    seed: int = 0
    config: Any = None  # voicechat.config.GenerationConfig (None = the model's defaults)
    tools: tuple = ()  # voicechat.tools.Tool objects the model may call (Result.tool_calls has the calls)
    speaker: Any = None  # the voice: a voicechat.voices.Voice, a speaker name or a WAV path (None: the checkpoint's)
    say: Optional[str] = None  # a voice preview instead (voicechat.voices.preview): the TTS says this; no audio


@dataclass(frozen=True)
class Event:
    kind: str  # QUEUED, STARTED, PROGRESS, DONE, ERROR, CANCELLED
    position: int = 0  # QUEUED: jobs it waits for (recordings ahead; the running ones when they fill every row or
    #                    the memory)
    prompt_frames: int = 0  # STARTED: positions of the system prompt (the first ones the progress counts)
    done: int = 0  # PROGRESS: timeline positions computed (the prompt's included)
    total: int = 0  # PROGRESS: positions of the whole run (in automatic mode a bound: the run may end earlier)
    seconds: float = 0.0  # PROGRESS: wall seconds since the job started (the DONE answer's wall_seconds clock)
    update: Optional[FrameUpdate] = None  # PROGRESS: stage and the text so far
    answer: Optional[Answer] = None  # DONE
    message: str = ""  # ERROR / CANCELLED: one line for the user; QUEUED: why it waits, when not only for its turn

    @property
    def frame(self):
        """PROGRESS: the voicechat.Frame just finished (its new answer samples: ``frame.audio``), or None."""
        return self.update.frame if self.update is not None else None

    @property
    def terminal(self) -> bool:
        return self.kind in TERMINAL


class Job:
    """A submitted request. Iterate it (or call ``next_event``) to follow it; ``cancel()`` at any time."""

    def __init__(self, engine, job_id: int, request: Request, owner: Optional[str]):
        self.id = job_id
        self.request = request
        self.owner = owner
        self._engine = engine
        self._events: Queue = Queue()
        self._cancel = threading.Event()
        self.finished = threading.Event()
        self.frames_expected: Optional[int] = None  # its progress total, when known at submission (wait estimates)
        self.progress: Optional[tuple[int, int, float]] = None  # (done, total, seconds) once it runs
        self.input: Any = None  # a recording once it runs (voicechat.timeline.recording.OfflineInput; engine thread)
        self._t0 = 0.0
        self._reached = (0, 0)  # (done, total) of its last frame, also after a cancel

    @property
    def cancel_requested(self) -> bool:
        return self._cancel.is_set()

    def cancel(self) -> None:
        """Stop it: a waiting job leaves the queue now, a running one after its current frame."""
        self._cancel.set()
        self._engine._withdraw(self)

    def next_event(self, timeout: Optional[float] = None) -> Optional[Event]:
        """The next event, or None after ``timeout`` seconds without one."""
        try:
            return self._events.get(timeout=timeout)
        except Empty:
            return None

    def __iter__(self) -> Iterator[Event]:
        while True:
            event = self._events.get()
            yield event
            if event.terminal:
                return

    def _emit(self, event: Event) -> None:
        if not self.finished.is_set():
            self._events.put(event)
            if event.terminal:
                self.finished.set()

    # ---- the engine thread (a recording) ---------------------------------------------------------------------
    def _start(self, model, group) -> None:
        """Its conversation joins the engine's group (its setup now: the recording read, the prompt's prefill, the
        TTS warm-up); its positions run in the group's next ticks, its input given by ``self.input.advance()``."""
        request = self.request
        self._emit(Event(STARTED, prompt_frames=prompt_frames(model, request)))
        self._t0 = time.perf_counter()
        if request.say is not None:
            self.input = preview_recording(model, request.speaker, request.say, request.seed, self._progress, group)
        else:
            self.input = model.recording(request.audio, request.sample_rate, system_prompt=request.system_prompt,
                                         seed=request.seed, speaker=request.speaker, config=request.config,
                                         progress=self._progress, tools=request.tools, group=group)

    def _progress(self, done: int, total: int, update: FrameUpdate) -> None:
        """After each of its frames (in a tick): a PROGRESS event, none once cancelled (it ends after the tick)."""
        self._reached = (done, total)
        if self.cancel_requested:
            return
        seconds = time.perf_counter() - self._t0
        self.progress = (done, total, seconds)
        self._emit(Event(PROGRESS, done=done, total=total, seconds=seconds, update=update))

    def _answer(self, model) -> Answer:
        return make_answer(model, host_result(self.input.result()), time.perf_counter() - self._t0)


class Recordings:
    """The engine's part that runs recordings (a part of :class:`voicechat.engine.thread.Engine`, on its thread)."""

    def _start_recordings(self, recordings: list) -> None:
        """The recordings taken from the queue start in order; from the first that does not fit in memory beside the
        conversations running, it and those after it go back to the head of the queue (docs/batching.md §5)."""
        for n, job in enumerate(recordings):
            if self._waits_for_memory(job):
                self._requeue(recordings[n:])
                return
            self._start(job)

    def _waits_for_memory(self, job: Job) -> bool:
        """Whether ``job`` must wait before it starts: the group's admission would refuse one more conversation now
        and other conversations run, whose end frees memory. With none running it never fits: it starts, and the
        admission ends it with its message."""
        if job.cancel_requested or self.model is None or not self._running_conversations():
            return False
        try:
            self._group().check_room()
        except SessionsFull:
            return True
        return False

    def _running_conversations(self) -> int:
        """Conversations in the group: the live ones and the recordings that have started."""
        return len(self._lives) + sum(1 for job in self._recordings if job.input is not None)

    def _requeue(self, jobs: list) -> None:
        """Recordings that did not start go back to the head of the queue in their order, and the queue starts none
        until a conversation ends (:meth:`_ended`): no retry before memory can have freed. One cancelled meanwhile
        leaves the queue now."""
        with self._lock:
            for job in jobs:
                self._recordings.remove(job)
            self._waiting.extendleft(reversed(jobs))
            self._short_of_memory = True
            self._announce_positions()
        for job in jobs:
            if job.cancel_requested:
                self._withdraw(job)

    def _start(self, job: Job) -> None:
        """A recording taken from the queue joins the group (or ends at once: cancelled, no model, refused)."""
        if job.cancel_requested:
            self._stop(job, Event(CANCELLED, message="Cancelled before it started."))
        elif self.model is None:
            self._stop(job, Event(ERROR, message=self.status().message))
        else:
            self._recording_work(job, lambda: job._start(self.model, self._group()))

    def _advance(self, job: Job) -> None:
        """A running recording's next input, once it has run what it had; its answer once all of it has run."""
        if job.cancel_requested:
            return  # it ends after the tick (Engine._round)

        def advance() -> None:
            if not job.input.advance():
                answer = job._answer(self.model)
                with self._lock:
                    self._status = dataclasses.replace(self._status, realtime_factor=answer.realtime_factor)
                self._stop(job, Event(DONE, answer=answer))

        self._recording_work(job, advance)

    def _recording_work(self, job: Job, work) -> None:
        """``work()`` for one recording; its failure ends that recording only (in one line, a bug's traceback on the
        terminal)."""
        try:
            work()
        except VoiceChatError as e:
            self._stop(job, Event(ERROR, message=str(e)))
        except Exception as e:  # a bug: report it in one line, keep serving
            traceback.print_exc(file=sys.stderr)
            self._stop(job, Event(ERROR, message=f"Engine error: {type(e).__name__}: {e}"))

    def _stop(self, job: Job, event: Event) -> None:
        """A recording ends: it leaves the group (its row is free for the next) and the queue moves up."""
        if job.input is not None:
            job.input.session.close()
        with self._lock:
            if job in self._recordings:
                self._recordings.remove(job)
                self._ended()
        job._emit(event)


def expected_frames(model, request: Request) -> Optional[int]:
    """The progress total ``model.generate`` will report for ``request`` (Model._generate's: the prompt, the
    recording and the silence after it, the automatic mode's bound included); None for a file path (its length is
    read on the engine thread)."""
    if isinstance(request.audio, (str, Path)) or not request.sample_rate:
        return None
    samples = round(len(request.audio) * model.config.input_sample_rate / request.sample_rate)  # once resampled
    return run_positions(model, samples, tool_prompt(request.system_prompt, request.tools),
                         request.config or GenerationConfig())


def check_settings(model, request) -> None:
    """A Request's or LiveRequest's seed and system prompt against voicechat.limits, with the tokenizer only (no MLX on
    the caller's thread); its GenerationConfig checked itself when it was made."""
    checked_seed(request.seed)
    checked_prompt(request.system_prompt)
    check_prompt_positions(prompt_frames(model, request))


def prompt_frames(model, request: Request) -> int:
    """Positions of the system prompt the model reads: the request's, with its tools' block when it has tools."""
    return model.prompt_length(tool_prompt(request.system_prompt, request.tools))


def frames_left(job: Job) -> Optional[int]:
    """A recording's positions still to run: from its progress once it runs, else its expected length (None for a
    file path not yet read)."""
    return job.progress[1] - job.progress[0] if job.progress else job.frames_expected


def waiting_for_memory(running: int) -> str:
    """A QUEUED event's reason while recordings wait for memory to free."""
    return f"waiting for memory: {running} conversation{'s' if running != 1 else ''} running"


def host_result(result: Result) -> Result:
    """The result with every array field as numpy (evaluated here, on the thread that owns the arrays)."""
    arrays = {f.name: np.asarray(getattr(result, f.name)) for f in dataclasses.fields(result)
              if f.name in ("audio", "text_tokens", "function_tokens", "audio_codes")}
    return dataclasses.replace(result, **arrays)
