"""What a Realtime client may send, checked before anything is parsed, built or tokenized past a small size
(docs/limits.md §2): an event's values and its size besides audio, the tools' count, size and depth, the pace of
its audio, and the client's event id an error echoes."""

from __future__ import annotations

import json
from typing import Any

from ..limits import MAX_PROMPT_CHARS
from ..tools.declare import MAX_TOOLS
from .protocol import RATE, ClientEventError

# An event without its base64 audio: a session.update with the longest instructions and tools (both at most
# MAX_PROMPT_CHARS, each character at most a 6-character JSON escape) fits with room to spare.
MAX_EVENT_CHARS = 1024 * 1024
# JSON values of one event, counted by its brackets and commas before it is parsed: strings parse at memory speed,
# but each value is an object; the largest session.update has far fewer (its tools take MAX_PROMPT_CHARS at most)
MAX_EVENT_VALUES = 2 * MAX_PROMPT_CHARS
AUDIO_EVENTS = ("input_audio_buffer.append", "voicechat.voice.add")  # the events whose "audio" may be large
MAX_SCHEMA_DEPTH = 16  # objects and lists nested in one tool declaration
MAX_EVENT_ID_CHARS = 128  # what an error event echoes of the client's event_id


def check_message(text: str) -> tuple[int, int]:
    """Before parsing: a message over MAX_EVENT_CHARS must be one whose ``"audio"`` string makes up the excess (only
    the audio events' may be large), and the rest may hold at most MAX_EVENT_VALUES JSON values (each one an object
    once parsed; 140,000 tools once were all built before their count was checked). Else refused unparsed.
    -> where that string's characters start and end in ``text`` ((0, 0) for a message within MAX_EVENT_CHARS)."""
    start = end = 0
    if len(text) > MAX_EVENT_CHARS:
        key = text.find('"audio"')
        start = text.find('"', key + len('"audio"')) + 1  # the value's opening quote: base64 holds no quote
        end = text.find('"', start)
        if key < 0 or start == 0 or end < 0 or len(text) - (end - start) > MAX_EVENT_CHARS:
            raise ClientEventError("event_too_large", f"the message has {len(text)} characters; an event may have "
                                                      f"{MAX_EVENT_CHARS} besides its audio")
    values = sum(text.count(mark, 0, start) + text.count(mark, end) for mark in "{[,")
    if values > MAX_EVENT_VALUES:
        raise ClientEventError("event_too_large", f"the message holds about {values} JSON values; an event may "
                                                  f"hold {MAX_EVENT_VALUES}")
    return start, end


def unparsed_append(text: str, span: tuple[int, int]) -> bool:
    """Whether ``text`` is an input_audio_buffer.append whose audio is ``span`` (``check_message``'s), told from the
    rest of it (at most MAX_EVENT_CHARS) parsed with the audio left out, before the audio's megabytes are parsed."""
    start, end = span
    if end <= start or text.find("\\", start, end) >= 0:  # an escape: the span is not the string's characters
        return False
    try:
        rest = json.loads(text[:start] + text[end:])
    except ValueError:  # the whole message's parse says what is wrong
        return False
    return isinstance(rest, dict) and rest.get("type") == "input_audio_buffer.append" and rest.get("audio") == ""


def check_size(text: str, event: dict) -> None:
    """After parsing, before anything else: at most MAX_EVENT_CHARS besides an audio event's audio (``check_message``
    only looked for a large string)."""
    audio = event.get("audio") if event.get("type") in AUDIO_EVENTS else None
    rest = len(text) - (len(audio) if isinstance(audio, str) else 0)
    if rest > MAX_EVENT_CHARS:
        raise ClientEventError("event_too_large", f"the event has {rest} characters besides audio; the limit is "
                                                  f"{MAX_EVENT_CHARS}")


def audio_seconds(chars: int, end: str, per_second: int = 2 * RATE) -> float:
    """Seconds of base64 audio of ``chars`` characters whose last two are ``end`` (its "=" padding) and of
    ``per_second`` bytes a second (24 kHz PCM16 by default), from its length alone (nothing decoded)."""
    return (chars * 3 // 4 - end.count("=")) / per_second


def check_tools(session: Any) -> None:
    """A session.update's tools, before any Tool is built: at most MAX_TOOLS, each nested at most MAX_SCHEMA_DEPTH
    deep, all together at most MAX_PROMPT_CHARS characters (the prompt they go into may have no more)."""
    declarations = session.get("tools") if isinstance(session, dict) else None
    if not isinstance(declarations, list):
        return  # SessionConfig.updated names what is wrong with it
    param = "session.tools"
    if len(declarations) > MAX_TOOLS:
        raise ClientEventError("invalid_value", f"at most {MAX_TOOLS} tools per conversation (got "
                                                f"{len(declarations)}): pass fewer", param)
    budget = MAX_PROMPT_CHARS
    for i, spec in enumerate(declarations):
        budget = check_declaration(spec, f"{param}[{i}]", budget)


def check_declaration(value: Any, param: str, budget: int) -> int:
    """Walk ``value`` (strings, keys, numbers) and return the characters left of ``budget``; stops at the first
    level past MAX_SCHEMA_DEPTH or the first character past the budget."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_SCHEMA_DEPTH:
            raise ClientEventError("invalid_value", f"{param} nests deeper than {MAX_SCHEMA_DEPTH} levels", param)
        if isinstance(item, dict):
            stack += [(key, depth) for key in item] + [(v, depth + 1) for v in item.values()]
        elif isinstance(item, list):
            stack += [(v, depth + 1) for v in item]
        budget -= len(item) if isinstance(item, str) else 1
        if budget < 0:
            raise ClientEventError("invalid_value", f"{param} takes the tools past {MAX_PROMPT_CHARS} characters, "
                                                    "the prompt's limit (docs/limits.md §1): shorten the "
                                                    "descriptions and schemas", param)
    return budget


class Pace:
    """How far a client's audio runs ahead: of real time (each append adds its seconds, real time drains them, never
    below none: silence banks nothing), and of what the model has heard (its backlog at its last frames, and the
    appends since). An append that would put both past ``limit`` is refused whole (0: no limit)."""

    def __init__(self, limit: float):
        self.limit, self.ahead, self.last, self.unheard = limit, 0.0, None, 0.0

    def check(self, seconds: float, now: float) -> float:
        """Refuse an append of ``seconds`` that would run past the limit; -> how far ahead of real time the audio
        runs before it."""
        ahead = max(0.0, self.ahead - (now - self.last)) if self.last is not None else 0.0
        if self.limit and min(ahead, self.unheard) + seconds > self.limit:
            raise ClientEventError("audio_ahead_of_time", f"this append of {seconds:.2f} s would put the audio "
                                                          f"{min(ahead, self.unheard) + seconds:.2f} s ahead of real "
                                                          f"time and of the model; the limit is {self.limit:g} s: "
                                                          "send audio as it is recorded", "audio")
        return ahead

    def admit(self, seconds: float, now: float) -> None:
        ahead = self.check(seconds, now)
        self.ahead, self.last, self.unheard = ahead + seconds, now, self.unheard + seconds

    def heard(self, backlog: float) -> None:
        """A frames event: the model has ``backlog`` seconds of the client's audio still to hear."""
        self.unheard = backlog
