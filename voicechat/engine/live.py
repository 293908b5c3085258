"""Live conversations on the engine thread (docs/batching.md §5): a :class:`LiveJob` takes audio from any thread
(``LiveJob.send``) and gives its session's frames back as they are finished; the engine's part that admits them to
the group at the next tick, up to ``max_sessions`` at once, and closes them."""

from __future__ import annotations

import collections
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from queue import Empty, Queue
from typing import Any, Optional

import numpy as np

from .. import metrics
from ..errors import ToolError, VoiceChatError
from ..result import Result
from .recordings import ERROR, Job, host_result


class EngineBusy(VoiceChatError):
    """As many live conversations are open as the engine steps at once (``max_sessions``)."""


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
    frames: tuple = ()  # FRAMES: voicechat.Frame objects (numpy only)
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

    def __init__(self, engine, job_id: int, request: LiveRequest, owner: Optional[str]):
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


class LiveConversations:
    """The engine's part that runs live conversations (a part of :class:`voicechat.engine.thread.Engine`)."""

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
            metrics.join_refused(e)
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
