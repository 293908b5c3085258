"""The one thread that owns MLX for apps: it loads the model and runs every job, one at a time, from a queue.

MLX arrays and streams belong to the thread that made them (docs/platform.md §2), so a web server's worker threads
never touch the model: they ``submit`` a :class:`Request` and read :class:`Event`\\ s from the :class:`Job` they
get back (queue position, per-frame progress with the partial text and the frame's new answer samples, then one
of done / error / cancelled). Only numpy arrays and Python values leave this thread. ``Job.cancel()`` stops a running
job within one 80 ms frame (the progress callback raises :class:`~voicechat.errors.Cancelled`) and removes a waiting
one from the queue at once.

This queue is the only place where requests wait: a web app should hand every request to ``submit`` at once (Gradio:
no concurrency limit on the handler), so that positions and expected waits (:meth:`Engine.wait_seconds`) are the
engine's, measured from its frame times. :attr:`EngineStatus.facts` gives apps the loaded model's numbers.

    engine = Engine(hub_model("mlx-community/NemotronLabs-VoiceChat-11B-4bit"), name="4-bit").start()
    job = engine.submit(Request("question.wav", None, system_prompt="Be brief.", seed=0))
    for event in job:
        print(event.kind, event.done, event.total)

A live conversation (:meth:`Engine.open_live`) is a job too: it takes audio from any thread (``LiveJob.send``) and
gives the session's frames back as they are finished. Live conversations and recordings are conversations of one
group, stepped together tick by tick (docs/batching.md §5): a live one joins at the next tick, a recording once a
recording row is free.
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import itertools
import sys
import threading
import time
import traceback
import weakref
from dataclasses import dataclass
from pathlib import Path
from queue import Empty, Queue
from typing import Any, Callable, Iterator, Optional, Union

import numpy as np
from tqdm.auto import tqdm

from .config import GenerationConfig
from .errors import ConfigError, SessionsFull, ToolError, VoiceChatError
from .limits import check_prompt_positions, checked_prompt, checked_seed, run_positions
from .answer import Answer, make_answer
from .result import FrameUpdate, Result
from .tools import system_prompt as tool_prompt
from .voices import preview_recording

# Event kinds. The last three end a job.
QUEUED, STARTED, PROGRESS, DONE, ERROR, CANCELLED = "queued", "started", "progress", "done", "error", "cancelled"
TERMINAL = (DONE, ERROR, CANCELLED)
# Engine states (EngineStatus.state).
STARTING, DOWNLOADING, LOADING, READY, FAILED, CLOSED = (
    "starting", "downloading", "loading", "ready", "failed", "closed")

ModelLoader = Callable[[type], Any]  # (tqdm-compatible progress-bar class) -> a loaded voicechat model
# The real-time factor assumed until a run has been measured (docs/performance.md): near real time on a GPU (reported on
# recent Apple Silicon), about 100 times slower than real time on a CPU.
EXPECTED_REALTIME_FACTOR = {"gpu": 1.0, "cpu": 100.0}


class EngineFull(VoiceChatError):
    """Too many jobs are already waiting."""


class EngineBusy(VoiceChatError):
    """As many live conversations are open as the engine steps at once (``max_sessions``)."""


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
        """PROGRESS: the voicechat.session.Frame just finished (its new answer samples: ``frame.audio``), or None."""
        return self.update.frame if self.update is not None else None

    @property
    def terminal(self) -> bool:
        return self.kind in TERMINAL


@dataclass(frozen=True)
class ModelFacts:
    """The loaded model's numbers that an app shows or starts its controls at (the engine owns the model)."""

    frame_seconds: float  # one timeline position (config.frame_length)
    tts_guidance_scale: float  # the checkpoint's own EAR-TTS sampling (config.tts)
    tts_top_p: float  # 1.0 when the checkpoint samples by top-k
    tts_noise_scale: float
    expected_realtime_factor: float  # assumed until a run is measured (EXPECTED_REALTIME_FACTOR, by device)


@dataclass(frozen=True)
class EngineStatus:
    state: str  # STARTING, DOWNLOADING, LOADING, READY, FAILED, CLOSED
    message: str  # one line for the user
    fraction: Optional[float] = None  # download progress, when known
    load_seconds: Optional[float] = None  # once READY
    facts: Optional[ModelFacts] = None  # once READY
    realtime_factor: Optional[float] = None  # of the last finished run (None before one)

    @property
    def expected_realtime_factor(self) -> Optional[float]:
        """The last measured real-time factor, else the one assumed for this device; None without a model."""
        if self.realtime_factor is not None:
            return self.realtime_factor
        return self.facts.expected_realtime_factor if self.facts is not None else None


class Job:
    """A submitted request. Iterate it (or call ``next_event``) to follow it; ``cancel()`` at any time."""

    def __init__(self, engine: "Engine", job_id: int, request: Request, owner: Optional[str]):
        self.id = job_id
        self.request = request
        self.owner = owner
        self._engine = engine
        self._events: Queue = Queue()
        self._cancel = threading.Event()
        self.finished = threading.Event()
        self.frames_expected: Optional[int] = None  # its progress total, when known at submission (wait estimates)
        self.progress: Optional[tuple[int, int, float]] = None  # (done, total, seconds) once it runs
        self.input: Any = None  # a recording's conversation once it runs (voicechat.api.OfflineInput; engine thread)
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


# LiveJob-conversation event kinds. CLOSED ends the conversation (after an ERROR too).
READY, FRAMES, CLOSED = "ready", "frames", "closed"


@dataclass(frozen=True)
class LiveRequest:
    system_prompt: str = ""
    seed: int = 0
    speaker: Any = None  # None (the checkpoint's voice), a voicechat.voices.Voice, a speaker name or a WAV path
    config: Any = None  # voicechat.config.GenerationConfig (None = the model's defaults)
    tools: tuple = ()  # voicechat.tools.Tool objects the model may call (Frame.events report the calls)


@dataclass(frozen=True)
class LiveEvent:
    kind: str  # QUEUED, READY, FRAMES, ERROR, CLOSED
    frames: tuple = ()  # FRAMES: voicechat.session.Frame objects (numpy only)
    backlog_seconds: float = 0.0  # FRAMES: audio received and not yet turned into frames
    setup_seconds: float = 0.0  # READY: what starting the session took (prompt, TTS warm-up)
    prompt_frames: int = 0  # READY
    position: int = 0  # QUEUED: 0 (a live conversation joins at the next tick)
    message: str = ""  # ERROR: one line for the user

    @property
    def terminal(self) -> bool:
        return self.kind == CLOSED


class LiveJob(Job):
    """A live conversation on the engine thread: ``send`` audio from any thread (it never blocks), read
    :class:`LiveEvent`\\ s; ``flush`` ends the input, ``close`` stops at the next frame. After CLOSED, ``result()``
    is the whole conversation (numpy)."""

    def __init__(self, engine: "Engine", job_id: int, request: LiveRequest, owner: Optional[str]):
        super().__init__(engine, job_id, request, owner)
        self._inbox: Queue = Queue()
        self._lock = threading.Lock()
        self._received = 0.0  # seconds of audio sent
        self._consumed = 0.0  # seconds of it fed to the session
        self._result: Optional[Result] = None
        self._unread: collections.deque = collections.deque()  # messages taken from the inbox, not handled yet
        self._ready_sent = False

    def send(self, samples: np.ndarray, sample_rate: int) -> None:
        samples = np.array(samples, copy=True)
        with self._lock:
            self._received += len(samples) / sample_rate
        self._put(("audio", samples, int(sample_rate)))

    def flush(self) -> None:
        self._put(("flush",))

    def close(self) -> None:
        self.cancel()
        self._put(("close",))

    def provide_tool_result(self, call_id: str, output: str) -> None:
        """The output of a call to a tool declared without a function (a ``call`` event named it); any thread. A
        result for a call the session no longer waits for (late, unknown) is dropped with a warning."""
        self._put(("tool_result", call_id, output))

    def _put(self, message: tuple) -> None:
        self._inbox.put(message)
        self._engine._wake.set()

    @property
    def backlog_seconds(self) -> float:
        with self._lock:
            return max(0.0, self._received - self._consumed)

    def result(self) -> Optional[Result]:
        """The conversation, once CLOSED (None if it never started)."""
        return self._result

    # ---- the engine thread ----------------------------------------------------------------------------------
    def _messages(self) -> collections.deque:
        """What arrived and is not handled yet (never waits)."""
        while True:
            try:
                self._unread.append(self._inbox.get_nowait())
            except Empty:
                return self._unread

    def _open(self, group) -> None:
        """Its conversation joins the engine's group; the prompt's positions run in the next ticks, and READY comes
        once they have (:meth:`_announce_ready`), as a lone session's setup ends with them."""
        request: LiveRequest = self.request
        self._opened = time.perf_counter()
        self.session = group.session(request.system_prompt, request.seed, request.speaker, request.config,
                                     tools=request.tools or ())
        self._announce_ready()

    def _announce_ready(self) -> None:
        if not self._ready_sent and self.session.started:
            self._ready_sent = True
            self._emit(LiveEvent(READY, setup_seconds=time.perf_counter() - self._opened,
                                 prompt_frames=self.session.prompt_frames))

    def _read(self) -> None:
        """Hand what arrived to the session: audio is heard and waits for the ticks; a flush runs the rest of the
        input at once (the other conversations advancing in its ticks)."""
        session = self.session
        messages = self._messages()
        while messages and not (self.cancel_requested or session.ended):
            if messages[0][0] == "flush" and (session._ready() or session.setting_up):
                return  # the set-up and the positions heard so far run in the ticks first, as without the flush
            message = messages.popleft()
            if message[0] == "audio":
                session.push(message[1], message[2])
                with self._lock:
                    self._consumed += len(message[1]) / message[2]
            elif message[0] == "flush":
                self._deliver(session.flush())
            elif message[0] == "tool_result":
                self._tool_result(session, *message[1:])
            else:
                return

    def _deliver(self, frames: list) -> None:
        """The conversation's new frames past its prompt (the prompt's positions are set-up, as a lone session's)."""
        frames = [f for f in frames if f.position >= self.session.prompt_frames]
        if frames:  # the backlog counts the user's frames a tool exchange holds back too
            backlog = self.backlog_seconds + self.session.held_seconds
            self._emit(LiveEvent(FRAMES, frames=tuple(frames), backlog_seconds=backlog))

    @property
    def _over(self) -> bool:
        return self.cancel_requested or self.session.ended

    def _end(self) -> None:
        """Leave the group: the frames still waiting go out, the conversation becomes the result."""
        self._deliver(self.session.close())
        self._result = host_result(self.session.result())

    @staticmethod
    def _tool_result(session, call_id: str, output: str) -> None:
        """A client's tool result (the positions that waited for it run in the next ticks). One the session no
        longer waits for (it came after the call's timeout, which already answered the model with an error) is
        dropped with a warning: the conversation goes on."""
        try:
            session.provide_tool_result(call_id, output)
        except ToolError as e:
            print(f"voicechat: tool result dropped: {e}", file=sys.stderr)


class Engine:
    """One background thread that loads the model and steps every conversation in one group (voicechat/group.py: one
    tick advances every conversation whose next 80 ms has arrived): up to ``max_sessions`` live conversations and up
    to ``max_recordings`` recordings at once; more recordings wait in submission order (docs/batching.md §5)."""

    def __init__(self, load_model: ModelLoader, *, name: str, max_waiting: int = 8, max_sessions: Optional[int] = 1,
                 max_recordings: int = 1, max_minutes: Optional[float] = None):
        """``max_sessions`` None: as many as :func:`voicechat.group.fitting_sessions` finds once the model is
        loaded (one until then). The recordings have rows of their own, so that a live conversation always finds
        its row at the next tick. ``max_minutes``: a conversation's most (None: the timeline's limit); at it a live
        conversation ends with an ERROR event, and admission reserves each conversation's memory up to it."""
        from .group import capped_positions

        self.max_minutes, self.max_positions = max_minutes, capped_positions(max_minutes)
        if max_recordings < 1:
            raise ConfigError(f"max_recordings must be at least 1, got {max_recordings}")
        self.name = name
        self.max_waiting = max_waiting
        self.max_sessions = max_sessions or 1
        self.max_recordings = max_recordings
        self._fit_sessions = max_sessions is None
        self.group: Any = None  # the model's SessionGroup, once it is loaded (engine thread only)
        self._lives: list[LiveJob] = []  # the live conversations the engine thread steps now
        self._recordings: list[Job] = []  # the recordings it steps now, in the order they started
        self._short_of_memory = False  # a recording did not fit: none starts until a conversation ends
        self._wake = threading.Event()  # a live conversation has a message, or a job arrived
        self.model: Any = None  # touched by the engine thread only
        self.thread = threading.Thread(target=self._main, name="voicechat-engine", daemon=True)
        self._load_model = load_model
        self._lock = threading.Condition()
        self._waiting: collections.deque[Job] = collections.deque()
        self._closing = False
        self._next_id = 1
        self._status = EngineStatus(STARTING, f"Starting {name}")

    # ---- called from any thread --------------------------------------------------------------------------------
    def start(self) -> "Engine":
        self.thread.start()
        _RUNNING.add(self)
        return self

    def status(self) -> EngineStatus:
        with self._lock:
            return self._status

    def submit(self, request: Request, *, owner: Optional[str] = None) -> Job:
        """Queue a request; the job's first event says how many jobs it waits for."""
        return self._enqueue(Job, request, owner)

    def wait_seconds(self, job: Job) -> Optional[float]:
        """The expected wait of a waiting recording: until a recording row is free for it, the rows freeing as the
        running recordings and the ones ahead end (their frames left, all advancing together, one per tick), at a
        running recording's measured speed (else the last run's, else the expected one); while recordings wait for
        memory, only the running recordings' rows. None when the job is not waiting, a recording it waits for has no
        length (a file path) or it waits for memory held by live conversations alone (their end is not known)."""
        with self._lock:
            if job not in self._waiting or isinstance(job, LiveJob):
                return None
            rows = [frames_left(r) for r in self._recordings] + [0] * self._free_rows()
            ahead = [frames_left(j) for j in itertools.takewhile(lambda j: j is not job, self._waiting)
                     if not isinstance(j, LiveJob)]
            if not rows or None in rows or None in ahead:
                return None
            for frames in ahead:  # each takes the row that is free first
                rows[rows.index(min(rows))] += frames
            frames = min(rows)
            measured = next((r.progress for r in self._recordings if r.progress and r.progress[0] > 0), None)
            status = self._status
        if measured:
            return frames * measured[2] / measured[0]
        if status.facts is None:
            return None
        return frames * status.expected_realtime_factor * status.facts.frame_seconds

    def _enqueue(self, kind: type, request: Any, owner: Optional[str]) -> Job:
        model = self.model
        if model is not None:  # refused before it waits (docs/limits.md); once loading, the session checks it
            check_settings(model, request)
        with self._lock:
            if self._closing:
                raise EngineFull("the engine is shutting down")
            if len(self._waiting) >= self.max_waiting:
                raise EngineFull(f"{len(self._waiting)} requests are already waiting; try again in a minute")
            job = kind(self, self._next_id, request, owner)
            if kind is Job and self.model is not None:  # the tokenizer and config only: no MLX on this thread
                job.frames_expected = expected_frames(self.model, request)
            self._next_id += 1
            self._waiting.append(job)
            job._emit(self._queued(job))
            self._lock.notify_all()
        self._wake.set()
        return job

    def open_live(self, request: LiveRequest, *, owner: Optional[str] = None) -> LiveJob:
        """Queue a live conversation; it joins the group at the next tick, beside the other live ones and the
        recordings. At most ``max_sessions`` at a time."""
        with self._lock:
            if self.live_count() >= self.max_sessions:
                raise EngineBusy(f"{self.max_sessions} live conversation{'s are' if self.max_sessions > 1 else ' is'} "
                                 "already running on this model; try again when one has ended")
            job = self._enqueue(LiveJob, request, owner)
        return job

    def live_count(self) -> int:
        """Live conversations open or waiting to start (not yet closed)."""
        with self._lock:
            jobs = (*self._lives, *self._waiting)
            return len({id(j) for j in jobs if isinstance(j, LiveJob) and not j.finished.is_set()})

    def cancel_owner(self, owner: str) -> int:
        """Cancel every job (waiting or running) submitted with this owner tag; returns how many."""
        with self._lock:
            jobs = [j for j in (*self._recordings, *self._lives, *self._waiting) if j.owner == owner]
        for job in set(jobs):
            job.cancel()
        return len(jobs)

    def pending(self) -> int:
        """Jobs waiting or running."""
        with self._lock:
            return len(self._waiting) + len(self._recordings) + len(self._lives)

    def close(self, timeout: float = 10.0) -> None:
        """Cancel everything and stop the thread."""
        with self._lock:
            self._closing = True
            jobs = [*self._recordings, *self._lives, *self._waiting]
            self._lock.notify_all()
        for job in set(jobs):
            job.cancel()
        self._wake.set()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout)

    def _withdraw(self, job: Job) -> None:
        """A cancelled job that has not started leaves the queue now; a running one stops at its next frame."""
        with self._lock:
            if job not in self._waiting:
                return
            self._waiting.remove(job)
            self._announce_positions()
        live = isinstance(job, LiveJob)
        job._emit(LiveEvent(CLOSED) if live else Event(CANCELLED, message="Cancelled while waiting."))

    def _set_status(self, status: EngineStatus) -> None:
        with self._lock:
            self._status = status

    def _free_rows(self) -> int:
        """Recordings the queue may start now (call with the lock held): the free recording rows, none while a
        recording waits for memory."""
        return 0 if self._short_of_memory else self.max_recordings - len(self._recordings)

    def _queued(self, job: Job) -> Union[Event, LiveEvent]:
        """What a waiting job waits for, as its QUEUED event (call with the lock held): nothing for a live
        conversation (it joins at the next tick); for a recording, the recordings before it in the queue and, when
        no row is free for it (every recording row taken, or the memory), the running ones, with the memory named."""
        if isinstance(job, LiveJob):
            return LiveEvent(QUEUED)
        ahead = itertools.takewhile(lambda j: j is not job, self._waiting)
        before = sum(1 for j in ahead if not isinstance(j, LiveJob))
        running = len(self._recordings)
        return Event(QUEUED, position=before + (running if self._free_rows() <= 0 else 0),
                     message=waiting_for_memory(running + len(self._lives)) if self._short_of_memory else "")

    def _announce_positions(self) -> None:
        """Tell every waiting job what it waits for (call with the lock held)."""
        for job in self._waiting:
            job._emit(self._queued(job))

    # ---- the engine thread ----------------------------------------------------------------------------------
    def _main(self) -> None:
        self._load()
        while True:
            arrivals = self._arrivals()
            if arrivals is None:
                break
            self._round(*arrivals)
        self._set_status(EngineStatus(CLOSED, "The engine has stopped."))

    def _arrivals(self) -> Optional[tuple[list, list]]:
        """Wait until there is work; take every live conversation waiting and as many recordings as rows are free
        for them (none while one waits for memory: :meth:`_requeue`); they run from now on. None once the engine is
        closing and nothing runs."""
        with self._lock:
            while not (self._waiting or self._lives or self._recordings or self._closing):
                self._lock.wait()
            if self._closing and not (self._lives or self._recordings):
                return None
            lives = [j for j in self._waiting if isinstance(j, LiveJob)]
            recordings = [j for j in self._waiting if not isinstance(j, LiveJob)][:max(0, self._free_rows())]
            for job in (*lives, *recordings):
                self._waiting.remove(job)
            self._recordings.extend(recordings)
            if lives or recordings:
                self._announce_positions()
        return lives, recordings

    def _round(self, lives: list, recordings: list) -> None:
        """Between two ticks: the arrivals join the group, every live conversation's new messages go to its session,
        every recording gets its next input; then one tick, and each conversation's frames go out (a recording's as
        PROGRESS events, from the tick itself). With no position ready it waits for a message."""
        if (lives or recordings) and self.model is None:
            self._load()  # retry: the network may be back, or the files downloaded meanwhile
        for live in lives:
            self._admit(live)
        self._start_recordings(recordings)
        for live in list(self._lives):
            self._guarded(live, live._read)
        for job in list(self._recordings):
            self._advance(job)
        ticked = self._tick()
        for live in list(self._lives):
            live._announce_ready()
            live._deliver(ticked.get(live.session, []))
            if live._over:
                self._guarded(live, live._end)
                self._close_live(live)
        for job in list(self._recordings):
            if job.cancel_requested:
                self._stop(job, Event(CANCELLED, done=job._reached[0],
                                      message=f"Cancelled after {job._reached[0]} of {job._reached[1]} frames."))
        idle = all(job.input.session.waits_for_tool() for job in self._recordings)
        if not ticked and idle and not any(live.session._ready() or live.session.setting_up for live in self._lives):
            self._wake.wait(0.05)
            self._wake.clear()

    def _tick(self) -> dict:
        """One ``group.step()``; a failure (a bug) fails every conversation of the group, and the engine goes on."""
        if self.group is None:
            return {}
        try:
            return self.group.step()
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            message = f"Engine error: {type(e).__name__}: {e}"
            for live in list(self._lives):
                self._fail(live, message)
            for job in list(self._recordings):
                self._stop(job, Event(ERROR, message=message))
            return {}

    def _load(self) -> None:
        from .compute import compile_enabled
        from .group import fitting_sessions

        t0 = time.perf_counter()
        self._set_status(EngineStatus(LOADING, f"Loading {self.name}"))
        try:
            model = self._load_model(download_bar(self.name, self._set_status))
            if self._fit_sessions:
                self.max_sessions = fitting_sessions(model, max_positions=self.max_positions)
            rows = self.max_sessions + self.max_recordings  # the group's (Engine._group)
            if compile_enabled() and rows > 2:  # load warmed one row up; the group meets more at joins
                model.warm_up(sessions=rows)
        except VoiceChatError as e:
            self._set_status(EngineStatus(FAILED, str(e)))
            return
        except Exception as e:  # a bug, not a user error: keep the app alive and show it
            traceback.print_exc(file=sys.stderr)
            self._set_status(EngineStatus(FAILED, f"Loading {self.name} failed: {type(e).__name__}: {e}"))
            return
        seconds = time.perf_counter() - t0
        with self._lock:
            self.model = model
            self._status = EngineStatus(READY, f"{self.name} is ready", load_seconds=seconds,
                                        facts=model_facts(model), realtime_factor=self._status.realtime_factor)

    def _group(self):
        """The model's group: ``max_sessions`` rows for live conversations, ``max_recordings`` for recordings (its
        rows are made as conversations join: rows never used hold no memory)."""
        if self.group is None:
            self.group = self.model.sessions(self.max_sessions + self.max_recordings, self.max_minutes)
        return self.group

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

    def _ended(self) -> None:
        """A conversation left the group (call with the lock held): its row and memory may take the next recording,
        and the queue moves up."""
        self._short_of_memory = False
        self._announce_positions()

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

    def _admit(self, live: LiveJob) -> None:
        if live.cancel_requested:
            live._emit(LiveEvent(CLOSED))
            return
        if self.model is None:
            live._emit(LiveEvent(ERROR, message=self.status().message))
            live._emit(LiveEvent(CLOSED))
            return
        try:
            live._open(self._group())
        except VoiceChatError as e:
            live._emit(LiveEvent(ERROR, message=str(e)))
            live._emit(LiveEvent(CLOSED))
            return
        except Exception as e:  # a bug: report it in one line, keep serving
            traceback.print_exc(file=sys.stderr)
            live._emit(LiveEvent(ERROR, message=f"Engine error: {type(e).__name__}: {e}"))
            live._emit(LiveEvent(CLOSED))
            return
        with self._lock:
            self._lives.append(live)

    def _guarded(self, live: LiveJob, work) -> None:
        """``work()`` for one conversation; its failure ends that conversation only."""
        try:
            work()
        except VoiceChatError as e:
            self._fail(live, str(e))
        except Exception as e:  # a bug: report it in one line, keep serving the others
            traceback.print_exc(file=sys.stderr)
            self._fail(live, f"Engine error: {type(e).__name__}: {e}")

    def _fail(self, live: LiveJob, message: str) -> None:
        live._emit(LiveEvent(ERROR, message=message))
        if live in self._lives:
            live.session.close()
            live._result = host_result(live.session.result())
            self._close_live(live)

    def _close_live(self, live: LiveJob) -> None:
        with self._lock:
            if live in self._lives:
                self._lives.remove(live)
                self._ended()
        live._emit(LiveEvent(CLOSED))


_RUNNING: "weakref.WeakSet[Engine]" = weakref.WeakSet()  # started engines, for the interpreter's exit


@atexit.register
def _close_running() -> None:
    """At interpreter exit, stop every engine still running: its thread is a daemon, so the interpreter would not
    wait for it, and MLX's C++ statics (the streams' schedulers) would be torn down under a frame it is evaluating,
    which ends the process in std::terminate (rc 134) after every test passed. atexit runs before that teardown."""
    for engine in list(_RUNNING):
        engine.close()


# ---------------------------------------------------------------------------------------------------------------
# what leaves the engine thread
# ---------------------------------------------------------------------------------------------------------------
def model_facts(model) -> ModelFacts:
    import mlx.core as mx

    tts = model.config.tts
    device = "gpu" if mx.default_device().type == mx.DeviceType.gpu else "cpu"
    return ModelFacts(frame_seconds=float(model.config.frame_length), tts_guidance_scale=float(tts.guidance_scale),
                      tts_top_p=float(tts.top_p) if tts.top_p is not None else 1.0,
                      tts_noise_scale=float(tts.noise_scale), expected_realtime_factor=EXPECTED_REALTIME_FACTOR[device])


def expected_frames(model, request: Request) -> Optional[int]:
    """The progress total ``model.generate`` will report for ``request`` (Model._generate's: the prompt, the
    recording and the silence after it, the automatic mode's bound included); None for a file path (its length is
    read on the engine thread)."""
    if isinstance(request.audio, (str, Path)) or not request.sample_rate:
        return None
    samples = round(len(request.audio) * model.config.input_sample_rate / request.sample_rate)  # once resampled
    return run_positions(model, samples, tool_prompt(request.system_prompt, request.tools),
                         request.config or GenerationConfig())


def check_settings(model, request: Union[Request, LiveRequest]) -> None:
    """A request's seed and system prompt against voicechat.limits, with the tokenizer only (no MLX on the caller's
    thread); its GenerationConfig checked itself when it was made."""
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


# ---------------------------------------------------------------------------------------------------------------
# model loaders (run on the engine thread)
# ---------------------------------------------------------------------------------------------------------------
def download_bar(name: str, report: Callable[[EngineStatus], None]) -> type:
    """A tqdm class for huggingface_hub: it draws the usual terminal bar and reports byte progress to ``report``.

    snapshot_download makes several bars (files, transfer bytes, written bytes) and grows their totals as file
    sizes become known; the largest byte total is the download's size."""

    class DownloadBar(tqdm):
        def __init__(self, *args, **kwargs):
            self.is_bytes = kwargs.get("unit") == "B"
            self.bytes_done = kwargs.get("initial", 0)  # counted here: a disabled tqdm stops counting
            super().__init__(*args, **kwargs)

        def update(self, n=1):
            self.bytes_done += n or 0
            if self.is_bytes and self.total:
                report(EngineStatus(DOWNLOADING, f"Downloading {name}: {self.format_sizeof(self.bytes_done)}B of "
                                                 f"{self.format_sizeof(self.total)}B",
                                    fraction=min(1.0, self.bytes_done / self.total)))
            return super().update(n)

    return DownloadBar


def hub_model(spec: str, *, offline: bool = False) -> ModelLoader:
    """Load a local checkpoint directory or a Hub repo id (downloaded on first use)."""

    def load(progress_bar: type):
        import voicechat

        return voicechat.load(spec, offline=offline, download_progress=progress_bar)

    return load


def demo_model(directory: Union[str, Path]) -> ModelLoader:
    """Write a tiny random-weight checkpoint into ``directory`` and load it: the whole app works offline, and every
    answer is noise."""

    def load(progress_bar: type):
        import voicechat
        from voicechat.random_checkpoint import write_tiny_checkpoint

        return voicechat.load(write_tiny_checkpoint(Path(directory), seed=0), offline=True)

    return load
