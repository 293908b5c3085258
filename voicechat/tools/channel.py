"""``ToolChannel``: the per-session state machine of tool calls on the function channel. The session consults it at
every timeline position; everything position-related about tools lives here (the layout: docs/tools.md §5).

The session's side, per position t (each position read back before the next one is built):

    if channel.paused(): stop        # a tool is running: compute no position; the user's audio waits
                                     # (live: feed() returns; offline / end of input: channel.wait(), then go on)
    plan = channel.plan(t)           # known before t is built:
        plan.hold                    #   t hears the silence embedding; the user's next frame keeps waiting
        plan.text_id, .function_id   #   ids t keeps in place of the model's (None: the model's)
        plan.pad_text_if             #   if the model's function id at t is this one (SOTC), t's text is PAD
    ... build and run position t with those ids (they feed t's TTS and t+1's input) ...
    events = channel.observe(t, text_id, function_id)   # the ids t kept; events to attach to t's Frame
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, replace
from typing import Any, Iterable, Optional

from ..errors import ConfigError, ToolError
from .calls import TIMEOUT_RESULT, ParsedCall, bounded_response, parse_calls, resolve
from .declare import Tool, checked_tools
from .runner import DEFAULT_TIMEOUT, Outcome, ToolRunner

MAX_CALL_POSITIONS = 256  # SOTC..EOTC inclusive (speech-swift's bound)
MAX_RESPONSE_TOKENS = 512  # <TOOL_RESPONSE>...</TOOL_RESPONSE> (speech-swift's bound)
# A caller's result is checked by its length before it is parsed or tokenized: a token is at least a character, and
# one over this many characters is far past MAX_RESPONSE_TOKENS with any tokenizer (docs/limits.md §1).
MAX_RESULT_CHARS = 16 * MAX_RESPONSE_TOKENS
SPECIALS = (("<SPECIAL_20>", "start of tool call"), ("<SPECIAL_21>", "end of tool call"),
            ("<SPECIAL_22>", "end of tool response"))
IDLE, CALL, RUN, INJECT, EOTR = "idle", "call", "run", "inject", "eotr"


@dataclass(frozen=True)
class ToolCall:
    """One call the model made, and what came of it. Positions are timeline positions."""

    call_id: str  # "call_" + 32 hex digits
    name: str  # the declared tool's name ("" when the call could not be read)
    arguments: Optional[dict]  # as the tool received them (None when unreadable)
    raw: str  # the decoded function-channel text between SOTC and EOTC
    call_start: int  # position of SOTC
    call_end: int  # position of EOTC
    result: Any = None  # the tool's JSON-able result
    error: Optional[str] = None  # why the model got an error object instead (None: it got the result)
    seconds: Optional[float] = None  # how long the tool ran (None: it was not run)
    injection_start: Optional[int] = None  # first position whose function token is the response
    injection_end: Optional[int] = None  # one past the last response position
    end: Optional[int] = None  # the position after the response, where the model is to predict EOTR
    eotr: Optional[bool] = None  # whether it did

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ToolEvent:
    """Something that happened on the function channel at a position: ``call_start`` (SOTC), ``call`` (EOTC; the
    calls were read and dispatched), ``result`` (the first response position; the calls carry their results or
    errors), ``end`` (the EOTR position; the exchange is over)."""

    kind: str
    position: int
    calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class Plan:
    """What the channel fixes for a position before it is computed."""

    hold: bool = False  # the position hears the silence embedding; the user's next frame waits
    text_id: Optional[int] = None  # the text id it keeps (None: the model's)
    function_id: Optional[int] = None  # the function id it keeps (None: the model's)
    pad_text_if: Optional[int] = None  # when the model's function id is this one (SOTC), the text is PAD


def check_result(output: Any) -> None:
    """A caller's tool result: a string of at most MAX_RESULT_CHARS characters, else ToolError (nothing parsed)."""
    if not isinstance(output, str):
        raise ToolError(f"a tool result must be a string (JSON or text), not {type(output).__name__}")
    if len(output) > MAX_RESULT_CHARS:
        raise ToolError(f"the tool result has {len(output)} characters; the model reads at most "
                        f"{MAX_RESPONSE_TOKENS} tokens of it, so at most {MAX_RESULT_CHARS} characters are taken")


def special_ids(tokenizer) -> tuple[int, int, int]:
    """The ids of SOTC, EOTC and EOTR in the checkpoint's tokenizer; ConfigError when one is missing."""
    ids = []
    for token, role in SPECIALS:
        i = tokenizer.token_to_id(token)
        if i is None:
            raise ConfigError(f"the checkpoint's tokenizer has no {token} ({role}): tool calls need NVIDIA's "
                              "tokenizer with its <SPECIAL_20>..<SPECIAL_22> tokens")
        ids.append(i)
    return ids[0], ids[1], ids[2]


class ToolChannel:
    """Catches calls on the function channel, runs them (``Tool.fn`` on a worker thread, or the caller through
    ``provide_result``), and injects the response, one token per position. ``timeout``: for tools without their
    own."""

    def __init__(self, tools: Iterable[Tool], tokenizer, pad_id: int, *, timeout: float = DEFAULT_TIMEOUT,
                 max_call_positions: int = MAX_CALL_POSITIONS, max_response_tokens: int = MAX_RESPONSE_TOKENS):
        self.tools = checked_tools(tools)
        self.sotc_id, self.eotc_id, self.eotr_id = special_ids(tokenizer)
        self.pad_id = int(pad_id)
        self.max_call_positions = max_call_positions
        self.max_response_tokens = max_response_tokens
        self._tokenizer = tokenizer
        self._by_name = {t.name: t for t in self.tools}
        self._runner = ToolRunner(timeout)
        self._state = IDLE
        self._call_start = 0
        self._tokens: list[int] = []  # the call's function ids so far, without PAD
        self._calls: list[ToolCall] = []  # the open exchange's calls
        self._running: list[str] = []  # their ids that were started (the rest failed before running)
        self._client_ids: set[str] = set()
        self._queue: list[int] = []  # response ids still to inject
        self._finished: list[ToolCall] = []

    # ---- what the session asks before a position -------------------------------------------------------------
    def holds_user_audio(self) -> bool:
        """True while the call, the response or the EOTR position runs: the position gets the silence embedding
        and the user's audio waits."""
        return self._state in (CALL, INJECT, EOTR)

    def paused(self) -> bool:
        """True while tools run between EOTC and their results: no position may be computed. Polls, never waits."""
        if self._state != RUN:
            return False
        outcomes = {i: self._runner.poll(i) for i in self._running}
        if any(o is None for o in outcomes.values()):
            return True
        self._prepare_response(outcomes)
        return False

    def plan(self, t: int) -> Plan:
        """What position ``t`` (the next one) keeps: docs/tools.md §5's table."""
        if self._state == RUN:
            raise RuntimeError("plan() while tools run: compute no position until paused() is False")
        if self._state == IDLE:
            return Plan(pad_text_if=self.sotc_id)
        if self._state == CALL:
            cut = t - self._call_start + 1 >= self.max_call_positions  # EOTC is forced on the last allowed position
            return Plan(True, self.pad_id, self.eotc_id if cut else None)
        if self._state == INJECT:
            return Plan(True, self.pad_id, self._queue[0])
        return Plan(True, self.pad_id, None, self.sotc_id)  # EOTR is the model's to predict

    def pending(self) -> bool:
        """True from SOTC until the exchange's EOTR position: the conversation should not end yet."""
        return self._state != IDLE

    def wait(self) -> None:
        """Block until the running tools have answered or timed out (for a caller with nothing else to do)."""
        if self._state == RUN:
            self._runner.wait(self._running)

    def provide_result(self, call_id: str, output: str) -> None:
        """The output of a call to a tool without ``fn``, run by the caller: a string, used as JSON when it is JSON."""
        check_result(output)
        if call_id not in self._client_ids or not self._runner.provide(call_id, output):
            raise ToolError(f"no tool call {call_id!r} is waiting for a result")

    def records(self) -> list[ToolCall]:
        """Every call so far, finished or not, in order."""
        return self._finished + self._calls

    # ---- what the session reports after a position ------------------------------------------------------------
    def observe(self, position: int, text_id: int, function_id: int) -> tuple[ToolEvent, ...]:
        """Position ``position`` was computed with its plan applied; it kept ``text_id`` and ``function_id``.
        Returns the events raised there."""
        plan = self.plan(position)
        function_id = int(function_id)
        if plan.function_id is not None and function_id != plan.function_id:
            raise RuntimeError(f"position {position} kept function id {function_id}, not the planned "
                               f"{plan.function_id}: apply plan() before computing a position")
        if self._state == IDLE:
            return self._begin_call(position) if function_id == self.sotc_id else ()
        if self._state == CALL:
            return self._in_call(position, function_id)
        if self._state == INJECT:
            return self._inject(position)
        return self._after_response(position, function_id)

    def _begin_call(self, t: int) -> tuple[ToolEvent, ...]:
        self._state, self._call_start, self._tokens = CALL, t, []
        return (ToolEvent("call_start", t),)

    def _in_call(self, t: int, function_id: int) -> tuple[ToolEvent, ...]:
        if function_id == self.eotc_id:
            return self._dispatch(t, at_bound=t - self._call_start + 1 >= self.max_call_positions)
        if function_id == self.sotc_id:
            self._tokens = []  # a second SOTC restarts the call (NV-WRAP L1607)
        elif function_id != self.pad_id:
            self._tokens.append(function_id)
        return ()

    def _dispatch(self, t: int, at_bound: bool) -> tuple[ToolEvent, ...]:
        """EOTC at t: read the calls and start them. On the last allowed position EOTC was forced, and a call that
        cannot be read there was cut off."""
        raw = self._tokenizer.decode(self._tokens)
        parsed = parse_calls(raw)
        if at_bound and any(call.error for call in parsed):
            parsed = [ParsedCall("", None, f"the tool call was cut off after {self.max_call_positions} positions")]
        self._calls, self._running = [], []
        for call in parsed:
            call_id = new_call_id()
            tool, call = resolve(call, self._by_name)
            self._calls.append(ToolCall(call_id, call.name, call.arguments, raw, self._call_start, t, error=call.error))
            if tool is None:
                continue
            if tool.fn is None:
                self._client_ids.add(call_id)
                self._runner.expect(call_id, tool.timeout)
            else:
                self._runner.start(call_id, tool.fn, call.arguments, tool.timeout)
            self._running.append(call_id)
        self._state = RUN
        return (ToolEvent("call", t, tuple(self._calls)),)

    def _prepare_response(self, outcomes: dict[str, Outcome]) -> None:
        values = []
        for i, call in enumerate(self._calls):
            outcome = outcomes.get(call.call_id)
            if outcome is not None:
                call = self._calls[i] = replace(call, result=outcome.result, error=outcome.error,
                                                seconds=outcome.seconds)
                if outcome.timed_out:
                    values.append(TIMEOUT_RESULT)
                    continue
            values.append({"error": call.error} if call.error else call.result)
        ids, replaced = bounded_response(values, self._tokenizer.encode, self.max_response_tokens)
        for i, error in replaced.items():
            self._calls[i] = replace(self._calls[i], error=error)
        self._queue = list(ids)
        self._state = INJECT

    def _inject(self, t: int) -> tuple[ToolEvent, ...]:
        events = ()
        if self._calls[0].injection_start is None:
            n = len(self._queue)
            self._calls = [replace(c, injection_start=t, injection_end=t + n) for c in self._calls]
            events = (ToolEvent("result", t, tuple(self._calls)),)
        self._queue.pop(0)
        if not self._queue:
            self._state = EOTR
        return events

    def _after_response(self, t: int, function_id: int) -> tuple[ToolEvent, ...]:
        done = tuple(replace(c, end=t, eotr=function_id == self.eotr_id) for c in self._calls)
        self._finished.extend(done)
        self._calls, self._running, self._state = [], [], IDLE
        events = (ToolEvent("end", t, done),)
        if function_id == self.sotc_id:  # a chained call instead of EOTR (docs/tools.md §5)
            events += self._begin_call(t)
        return events


def new_call_id() -> str:
    """vllm-omni's ``call_`` and random hex (docs/live.md §2.3), 32 characters in all: OpenAI's cap on a call_id,
    which clients such as LiveKit enforce by hashing longer ones (docs/realtime.md "Clients")."""
    return "call_" + uuid.uuid4().hex[:27]
