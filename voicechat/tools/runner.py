"""Running tools off the frame loop: each call on its own daemon thread, polled (never awaited) by the loop, with a
timeout after which the call is abandoned and answered with an error (docs/tools.md §3)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from .calls import json_value

DEFAULT_TIMEOUT = 15.0  # NVIDIA's fc_tool_timeout_sec (NV-YAML)


@dataclass(frozen=True)
class Outcome:
    """How one call ended: its JSON-able result, or an error line; and the seconds it took."""

    result: Any = None
    error: Optional[str] = None
    seconds: float = 0.0
    timed_out: bool = False


def exception_line(e: BaseException) -> str:
    """NVIDIA's ``{"error": str(e)}`` (NV-PIPE L775), with the class name when ``str(e)`` is empty."""
    return " ".join(str(e).split()) or type(e).__name__


def checked_result(output: Any, seconds: float) -> Outcome:
    value = json_value(output)
    try:
        json.dumps(value)
    except (TypeError, ValueError) as e:
        return Outcome(error=f"the tool returned something that is not JSON ({exception_line(e)})", seconds=seconds)
    return Outcome(result=value, seconds=seconds)


class Pending:
    """One call in flight: started at ``start`` (monotonic seconds), over when ``done`` is set or ``timeout`` passed."""

    def __init__(self, start: float, timeout: float):
        self.start, self.timeout = start, timeout
        self.done = threading.Event()
        self.outcome: Optional[Outcome] = None
        self._lock = threading.Lock()

    def finish(self, outcome: Outcome) -> None:
        """The first outcome wins (the tool's thread and the timeout race for it)."""
        with self._lock:
            if not self.done.is_set():
                self.outcome = outcome
                self.done.set()


class ToolRunner:
    """Starts calls and reports their outcomes. ``poll`` never blocks; ``wait`` blocks at most until the calls'
    timeouts (for a caller with nothing else to do, such as an offline generation at the end of its input).
    ``timeout``: the default of calls started without one."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, clock: Callable[[], float] = time.monotonic):
        if not timeout > 0:
            raise ValueError("the tool timeout must be positive")
        self.timeout = timeout
        self.clock = clock
        self._calls: dict[str, Pending] = {}

    def start(self, call_id: str, fn: Callable[..., Any], arguments: dict, timeout: Optional[float] = None) -> None:
        """Run ``fn(**arguments)`` on a daemon thread (a hung tool cannot keep the process alive)."""
        pending = self._calls[call_id] = Pending(self.clock(), timeout or self.timeout)

        def run():
            try:
                output = fn(**arguments)
            except Exception as e:  # a tool's failure is its result, never the loop's
                pending.finish(Outcome(error=exception_line(e), seconds=self.clock() - pending.start))
                return
            pending.finish(checked_result(output, self.clock() - pending.start))

        threading.Thread(target=run, name=f"voicechat-tool-{call_id}", daemon=True).start()

    def expect(self, call_id: str, timeout: Optional[float] = None) -> None:
        """A call that the caller runs; ``provide`` delivers its output."""
        self._calls[call_id] = Pending(self.clock(), timeout or self.timeout)

    def provide(self, call_id: str, output: Any) -> bool:
        """Deliver a caller-run call's output; False when the call is unknown or already over (answered or timed
        out)."""
        pending = self._calls.get(call_id)
        if pending is None or self.poll(call_id) is not None:
            return False
        pending.finish(checked_result(output, self.clock() - pending.start))
        return True

    def poll(self, call_id: str) -> Optional[Outcome]:
        """The call's outcome, or None while it runs within its timeout. Past the timeout the call is over: its
        outcome is the timeout error, and a later result is ignored."""
        pending = self._calls[call_id]
        if not pending.done.is_set() and self.clock() - pending.start >= pending.timeout:
            pending.finish(Outcome(error=f"the tool did not answer within {pending.timeout:g} s",
                                   seconds=self.clock() - pending.start, timed_out=True))
        return pending.outcome if pending.done.is_set() else None

    def wait(self, call_ids) -> None:
        """Block until each call has finished or reached its timeout."""
        for call_id in call_ids:
            pending = self._calls[call_id]
            pending.done.wait(max(0.0, pending.start + pending.timeout - self.clock()))
            self.poll(call_id)
