"""Leaving gracefully (docs/operations.md §3): SIGTERM drains the Realtime server (no new conversation; the open
ones go on for ``--drain-seconds``, then get ``server_shutting_down`` and close 1001); SIGINT closes them at once;
a second signal forces the exit. ``serve`` runs uvicorn with :class:`DrainingServer`; app.py, whose uvicorn runs in
Gradio's thread, uses :class:`Stopping` from its main thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
import threading
from typing import Optional

import uvicorn


INTERRUPTED = 130  # 128 + SIGINT, the shell's status for Ctrl+C
CLOSING_SECONDS = 3.0  # after a drain, how long the closes may take: the process is gone within drain + 5 s


def drain_seconds_for(sig: int, drain_seconds: float) -> float:
    """SIGTERM (a rolling update, Kubernetes) lets conversations finish their sentence; Ctrl+C means now."""
    return drain_seconds if sig == signal.SIGTERM else 0.0


def exit_status(signals: list[int]) -> int:
    """0 after SIGTERM's drain (an orderly stop), 130 once Ctrl+C came."""
    return INTERRUPTED if signal.SIGINT in signals else 0


class DrainingServer(uvicorn.Server):
    """uvicorn whose first SIGTERM or SIGINT drains the Realtime server (``realtime.drain``) before uvicorn's own
    shutdown, which would close every WebSocket at once with 1012; a second signal is uvicorn's forced exit. The
    signal is not re-raised: ``exit_status()`` is the process's status."""

    def __init__(self, config: uvicorn.Config, realtime, drain_seconds: float):
        super().__init__(config)
        self.realtime, self.drain_seconds = realtime, drain_seconds
        self.signals: list[int] = []
        self.drained: Optional[asyncio.Task] = None

    def handle_exit(self, sig: int, frame) -> None:
        self.signals.append(sig)
        if len(self.signals) > 1:
            self.should_exit = self.force_exit = True

    async def on_tick(self, counter: int) -> bool:
        if self.signals and self.drained is None:  # the signal handler only notes it: the drain runs on the loop
            self.drained = asyncio.create_task(self.realtime.drain(drain_seconds_for(self.signals[0],
                                                                                     self.drain_seconds)))
        if self.drained is not None and self.drained.done():
            return True
        return await super().on_tick(counter)

    def exit_status(self) -> int:
        return exit_status(self.signals)


class Forced(Exception):
    """A second signal while draining: stop waiting."""


class Signals:
    """SIGTERM and SIGINT on the main thread of a process whose server runs elsewhere (app.py: Gradio's uvicorn
    thread; ``serve --ray``: Ray's processes): :meth:`wait` until the first; a second raises :class:`Forced` in the
    main thread, which ends the drain it waits for."""

    def __init__(self):
        self.received: list[int] = []
        self.came = threading.Event()
        self.previous = {sig: signal.signal(sig, self.note) for sig in (signal.SIGTERM, signal.SIGINT)}

    def note(self, sig: int, frame) -> None:
        self.received.append(sig)
        self.came.set()
        if len(self.received) > 1:
            raise Forced()

    def wait(self, drain_seconds: float) -> float:
        """-> how long to drain, once a signal came."""
        self.came.wait()
        return drain_seconds_for(self.received[0], drain_seconds)

    def restore(self) -> int:
        """The handlers from before; -> the exit status."""
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        return exit_status(self.received)


def run_until_stopped(realtime, drain_seconds: float) -> int:
    """app.py's main thread: wait for SIGTERM or SIGINT, then drain ``realtime`` on the event loop its connections
    live on. -> the exit status; the caller then closes the server."""
    signals = Signals()
    try:
        seconds = signals.wait(drain_seconds)
        realtime.draining = True
        if realtime.loop is not None and not realtime.loop.is_closed():  # None: no connection ever came
            drained = asyncio.run_coroutine_threadsafe(realtime.drain(seconds), realtime.loop)
            drained.result(seconds + CLOSING_SECONDS + 1)
    except (Forced, concurrent.futures.TimeoutError):
        pass
    return signals.restore()
