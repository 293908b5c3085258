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
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from .. import metrics
from ..errors import ConfigError, VoiceChatError
from .live import CLOSED, LiveConversations, LiveEvent, LiveJob
from .loading import (FAILED, LOADING, READY, STARTING, TICKS_MEASURED, EngineStatus, ModelLoader, download_bar,
                      model_facts)
from .recordings import CANCELLED, ERROR, QUEUED, Event, Job, Recordings, Request, check_settings, expected_frames, \
    frames_left, waiting_for_memory


class EngineFull(VoiceChatError):
    """Too many jobs are already waiting."""


def check_limits(max_sessions: Optional[int], max_recordings: int = 1, max_minutes: Optional[float] = None, *,
                 flags: bool = False) -> None:
    """The engine's conversation limits, checked here alone (the command line, the app and a deployment ask before
    anything loads; ``flags`` names them as the command line's options): ``max_sessions`` live conversations at once
    (None: as many as fit), ``max_recordings`` recordings at once, each at least 1; ``max_minutes`` a conversation's
    most (None: the timeline's limit), above 0."""
    flag = lambda name: "--" + name.replace("_", "-") if flags else name  # noqa: E731
    for name, value in (("max_sessions", max_sessions), ("max_recordings", max_recordings)):
        if value is not None and value < 1:
            raise ConfigError(f"{flag(name)} must be at least 1, got {value}")
    if max_minutes is not None and not max_minutes > 0:
        raise ConfigError(f"{flag('max_minutes')} must be above 0, got {max_minutes}")


class Engine(LiveConversations, Recordings):
    """One background thread that loads the model and steps every conversation in one group (voicechat/timeline/loop.py:
    one tick advances every conversation whose next 80 ms has arrived): up to ``max_sessions`` live conversations and up
    to ``max_recordings`` recordings at once; more recordings wait in submission order (docs/batching.md §5)."""

    def __init__(self, load_model: ModelLoader, *, name: str, max_waiting: int = 8, max_sessions: Optional[int] = 1,
                 max_recordings: int = 1, max_minutes: Optional[float] = None):
        """``max_sessions`` None: as many as :func:`voicechat.timeline.admission.fitting_sessions` finds once the model
        is loaded (one until then). The recordings have rows of their own, so that a live conversation always finds
        its row at the next tick. ``max_minutes``: a conversation's most (None: the timeline's limit); at it a live
        conversation ends with an ERROR event, and admission reserves each conversation's memory up to it."""
        check_limits(max_sessions, max_recordings, max_minutes)
        self.max_minutes = max_minutes
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
        self._ticks: collections.deque = collections.deque(maxlen=TICKS_MEASURED)  # seconds (engine thread appends)

    # ---- called from any thread --------------------------------------------------------------------------------
    def start(self) -> "Engine":
        self.thread.start()
        _RUNNING.add(self)
        return self

    def status(self) -> EngineStatus:
        with self._lock:
            status = self._status
        ticks = list(self._ticks)
        return dataclasses.replace(status, tick_seconds=float(np.median(ticks))) if ticks else status

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
        if measured:
            return frames * measured[2] / measured[0]
        status = self.status()
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
            _native_exit(self.thread, timeout)

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
            t0 = time.perf_counter()
            ticked = self.group.step()
            if ticked:
                self._ticks.append(time.perf_counter() - t0)
                metrics.ticked(self.group, self._ticks[-1])
            return ticked
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            message = f"Engine error: {type(e).__name__}: {e}"
            for live in list(self._lives):
                self._fail(live, message)
            for job in list(self._recordings):
                self._stop(job, Event(ERROR, message=message))
            return {}

    def _load(self) -> None:
        from ..compute import compile_enabled
        from ..timeline.admission import capped_positions, fitting_sessions

        t0 = time.perf_counter()
        self._set_status(EngineStatus(LOADING, f"Loading {self.name}"))
        try:
            model = self._load_model(download_bar(self.name, self._set_status))
            if self._fit_sessions:
                self.max_sessions = fitting_sessions(model, max_positions=capped_positions(self.max_minutes))
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
        metrics.model_loaded(seconds)
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

    def _ended(self) -> None:
        """A conversation left the group (call with the lock held): its row and memory may take the next recording,
        and the queue moves up."""
        self._short_of_memory = False
        self._announce_positions()


def _native_exit(thread: threading.Thread, timeout: float) -> None:
    """Wait until the OS thread behind a joined ``thread`` has ended (Linux: its /proc task is gone). After Python's
    join it still runs its thread-local destructors, MLX's compile cache among them, which take the GIL: were the
    interpreter finalizing by then, the process would abort (docs/operations.md §3)."""
    task = Path(f"/proc/self/task/{thread.native_id}")
    deadline = time.monotonic() + timeout
    while task.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


_RUNNING: "weakref.WeakSet[Engine]" = weakref.WeakSet()  # started engines, for the interpreter's exit


@atexit.register
def _close_running() -> None:
    """At interpreter exit, stop every engine still running: its thread is a daemon, so the interpreter would not
    wait for it, and MLX's C++ statics (the streams' schedulers) would be torn down under a frame it is evaluating,
    which ends the process in std::terminate (rc 134) after every test passed. atexit runs before that teardown."""
    for engine in list(_RUNNING):
        engine.close()


# ---------------------------------------------------------------------------------------------------------------
