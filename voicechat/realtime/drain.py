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

from .server import CLOSING_SECONDS

INTERRUPTED = 130  # 128 + SIGINT, the shell's status for Ctrl+C


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


def run_until_stopped(realtime, drain_seconds: float) -> int:
    """The main thread of a process whose uvicorn runs in another thread (app.py: Gradio's): wait for SIGTERM or
    SIGINT, then drain ``realtime`` on the event loop its connections live on; a second signal ends the wait at once.
    -> the exit status; the caller then closes the server."""
    signals: list[int] = []
    came = threading.Event()

    def note(sig: int, frame) -> None:
        signals.append(sig)
        came.set()
        if len(signals) > 1:
            raise Forced()

    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        came.wait()
        seconds = drain_seconds_for(signals[0], drain_seconds)
        realtime.draining = True
        if realtime.loop is not None and not realtime.loop.is_closed():  # None: no connection ever came
            drained = asyncio.run_coroutine_threadsafe(realtime.drain(seconds), realtime.loop)
            drained.result(seconds + CLOSING_SECONDS + 1)
    except (Forced, concurrent.futures.TimeoutError):
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return exit_status(signals)
