"""The GA Realtime protocol (docs/live.md §3): client events parsed and checked, the session's configuration
(``session.update``), ids, and the small server events built from them. No state, no I/O."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import re
import secrets
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ..audio import to_int16
from ..errors import ToolError
from ..limits import SettingError, checked_prompt
from ..tools import Tool
from ..tools.declare import checked_tools
from ..voices import Voice
from . import g711

RATE = 24000  # GA PCM16 rate, in and out: "Only a 24kHz sample rate is supported" (docs/live.md §3)
MAX_APPEND_BYTES = 15 * 1024 * 1024  # GA limit of one input_audio_buffer.append (docs/live.md §3), base64 text
PCM = {"type": "audio/pcm", "rate": RATE}
# the GA session's audio formats (OAI realtime_audio_formats.py): PCM16 at 24 kHz, or G.711 at 8 kHz (docs/realtime.md
# "Phone audio"), each with its sample rate on the wire
FORMATS = {"audio/pcm": RATE, "audio/pcmu": g711.RATE, "audio/pcma": g711.RATE}


def bytes_per_second(fmt: str) -> int:
    """Bytes of one second of audio in the format ``fmt`` (a key of FORMATS): PCM16 takes two a sample, G.711 one."""
    return FORMATS[fmt] * (2 if fmt == "audio/pcm" else 1)
FORMAT_NAMES = {"audio/pcm": "PCM16 mono at 24 kHz", "audio/pcmu": "G.711 mu-law at 8 kHz",
                "audio/pcma": "G.711 A-law at 8 kHz"}
# OpenAI's own voice names (OAI realtime_audio_config_output.py): clients send one by default (LiveKit: "marin"), so
# they mean the checkpoint's own voice; any other name is a voice of the library (docs/voices.md)
OPENAI_VOICES = {"alloy", "ash", "ballad", "coral", "echo", "sage", "shimmer", "verse", "marin", "cedar"}
# Client events this server acts on, and GA client events it knows but does not implement (docs/live.md §3).
HANDLED = ("session.update", "input_audio_buffer.append", "input_audio_buffer.commit", "input_audio_buffer.clear",
           "conversation.item.create", "conversation.item.truncate", "conversation.item.delete",
           "conversation.item.retrieve", "response.create", "response.cancel", "voicechat.voice.list",
           "voicechat.voice.add")
UNSUPPORTED = {
    "output_audio_buffer.clear": "output_audio_buffer events belong to WebRTC/SIP, not WebSocket",
}


# ---------------------------------------------------------------------------------------------------------------
# errors


# ---------------------------------------------------------------------------------------------------------------


class ClientEventError(Exception):
    """A client event this server rejects: it becomes one GA ``error`` event and the connection goes on."""

    def __init__(self, code: str, message: str, param: Optional[str] = None, kind: str = "invalid_request_error"):
        message, param = bounded(message), param and bounded(param)  # docs/limits.md §2: it may quote the client
        super().__init__(message)
        self.code, self.message, self.param, self.kind = code, message, param, kind


QUOTE_CHARS = 64  # what an error message quotes of a client's value
MAX_ERROR_CHARS = 1024  # an error event's message (and param), and the log line that says it


def quoted(value: Any) -> str:
    """``repr`` of a client's value, cut to QUOTE_CHARS with its length said: an error never echoes megabytes."""
    text = repr(value)
    return text if len(text) <= QUOTE_CHARS else f"{text[:QUOTE_CHARS]}... ({len(text)} characters)"


def bounded(text: str) -> str:
    """At most MAX_ERROR_CHARS of ``text``: the last guard, whatever an error quotes."""
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS - 3] + "..."


def error_event(error: ClientEventError, event_id: Optional[str] = None) -> dict:
    """GA ``error`` (OAI ``realtime_error.py``): type, code, message, param, and the client event's id."""
    return {"type": "error", "error": {"type": error.kind, "code": error.code, "message": error.message,
                                       "param": error.param, "event_id": event_id}}


def event_text(event: dict) -> str:
    """A server event as sent: ``type`` first, then a fresh ``event_id``. Text UTF-8 cannot encode (a lone surrogate
    that came by another way than a client event) goes out escaped, so the writer never fails on it."""
    text = json.dumps({"type": event["type"], "event_id": new_id("event"), **event}, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(json.loads(text), ensure_ascii=True)
    return text


# ---------------------------------------------------------------------------------------------------------------
# client events


# ---------------------------------------------------------------------------------------------------------------


def parse_client_event(text: str) -> dict:
    """A client message -> its event object with a string ``type`` (anything else raises ClientEventError)."""
    try:
        event = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise ClientEventError("invalid_json", f"the message is not JSON ({e}); send one JSON event per message")
    if not isinstance(event, dict):
        raise ClientEventError("invalid_json", "the message is JSON but not an object; send {\"type\": ...} events")
    if "\\u" in text and LONE_SURROGATE_ESCAPE.search(text):  # the substring test runs at memory speed
        check_unicode(event, "")
    if not isinstance(event.get("type"), str):
        raise ClientEventError("missing_required_parameter", "the event has no string 'type'", "type")
    return event


# JSON's escape of a UTF-16 surrogate (a WebSocket text frame is UTF-8, so a surrogate can only come escaped): where
# the text has one, the event's strings are checked for a lone one, which no reply could encode
LONE_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")


def check_unicode(value: Any, param: str) -> None:
    """Every string of ``value`` (keys too) is UTF-8 encodable: a lone UTF-16 surrogate gets an error naming it."""
    if isinstance(value, dict):
        for key, item in value.items():
            check_unicode(key, param or "event")
            check_unicode(item, f"{param}.{key}" if param else key)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_unicode(item, f"{param}[{i}]")
    elif isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ClientEventError("invalid_value", f"{param or 'the event'} holds a lone UTF-16 surrogate "
                                                    "(\\ud800-\\udfff without its pair), which is not text",
                                   param or None)


def event_kind(event: dict) -> str:
    """The event's type if this server handles it; raises for unknown and unimplemented types."""
    kind = event["type"]
    if kind in UNSUPPORTED:
        raise ClientEventError("unsupported_event", f"{kind} is not supported: {UNSUPPORTED[kind]}", "type")
    if kind not in HANDLED:
        raise ClientEventError("invalid_value", f"unknown event type {quoted(kind)}; this server accepts "
                                                + ", ".join(HANDLED), "type")
    return kind


def decode_audio(event: dict, fmt: str = "audio/pcm") -> np.ndarray:
    """The base64 audio of ``input_audio_buffer.append`` (or ``voicechat.voice.add``) in the format ``fmt`` (PCM16
    little-endian mono, or G.711 bytes) -> int16 samples [N] at the format's rate."""
    audio = event.get("audio")
    if not isinstance(audio, str):
        raise ClientEventError("missing_required_parameter", f"{event.get('type', 'the event')} needs 'audio' "
                                                             f"(base64 {FORMAT_NAMES[fmt]})", "audio")
    if len(audio) > MAX_APPEND_BYTES:
        raise ClientEventError("audio_too_large", f"the append carries {len(audio) / 2 ** 20:.1f} MiB of base64; "
                                                  "the limit is 15 MiB: send smaller chunks", "audio")
    try:
        raw = base64.b64decode(audio, validate=True)
    except (binascii.Error, ValueError):
        raise ClientEventError("invalid_audio", "'audio' is not valid base64", "audio")
    if fmt in g711.LAWS:
        return g711.LAWS[fmt].decode(raw)
    if len(raw) % 2:
        raise ClientEventError("invalid_audio", f"'audio' decodes to {len(raw)} bytes, an odd number: PCM16 has "
                                                "2 bytes per sample", "audio")
    return np.frombuffer(raw, dtype="<i2").astype(np.int16)


def encode_audio(samples: np.ndarray, fmt: str = "audio/pcm") -> str:
    """float32 samples in [-1, 1] -> base64 PCM16 little-endian, or G.711 bytes."""
    pcm = to_int16(samples)
    raw = g711.LAWS[fmt].encode(pcm) if fmt in g711.LAWS else pcm.astype("<i2").tobytes()
    return base64.b64encode(raw).decode("ascii")



def format_object(fmt: str) -> dict:
    """The GA format object of a format's type (OAI realtime_audio_formats.py)."""
    return dict(PCM) if fmt == "audio/pcm" else {"type": fmt}


# ---------------------------------------------------------------------------------------------------------------
# the session's configuration (session.update)


# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)


class SessionConfig:
    instructions: str = ""  # the system prompt
    voice: Optional[str] = None  # a voice of the library, checked by the server (None: the checkpoint's default)
    tools: tuple = ()  # voicechat.tools.Tool without fn: the client runs them
    input_format: str = "audio/pcm"  # a key of FORMATS: what input_audio_buffer.append carries
    output_format: str = "audio/pcm"  # ... and what response.output_audio.delta carries

    @property
    def model_inputs(self) -> tuple:
        """What the model's live session is built from: fixed once audio has started."""
        return self.instructions, self.voice, self.tools

    def updated(self, session: Any) -> "SessionConfig":
        """This configuration with a ``session.update``'s partial ``session`` applied (validated as a whole)."""
        if not isinstance(session, dict):
            raise ClientEventError("invalid_value", "'session' must be an object", "session")
        if session.get("type") != "realtime":
            raise ClientEventError("invalid_value", "session.type must be \"realtime\" (transcription sessions are "
                                                    "not served)", "session.type")
        changes: dict = {}
        if "instructions" in session:
            changes["instructions"] = setting(checked_prompt, expect(session["instructions"], str,
                                                                     "session.instructions"))
        if session.get("output_modalities") not in (None, ["audio"]):
            raise ClientEventError("invalid_value", "output_modalities must be [\"audio\"]: the model always speaks "
                                                    "(its words come as the audio transcript)",
                                   "session.output_modalities")
        audio = expect(session.get("audio", {}), dict, "session.audio")
        for side in ("input", "output"):
            fmt = checked_format(expect(audio.get(side, {}), dict, f"session.audio.{side}"), f"session.audio.{side}")
            if fmt is not None:
                changes[f"{side}_format"] = fmt
        voice = expect(audio.get("output", {}), dict, "session.audio.output").get("voice")
        if voice is not None:
            if isinstance(voice, dict):  # GA custom voice object {id}
                voice = voice.get("id")
            voice = expect(voice, str, "session.audio.output.voice")
            changes["voice"] = None if voice in OPENAI_VOICES else voice
        if session.get("tools") is not None:
            changes["tools"] = client_tools(expect(session["tools"], list, "session.tools"))
        if session.get("tool_choice") not in (None, "auto"):
            raise ClientEventError("invalid_value", "tool_choice must be \"auto\": the model decides when it calls a "
                                                    "tool", "session.tool_choice")
        return dataclasses.replace(self, **changes)

    def ga(self, session_id: str, model: str) -> dict:
        """The GA session object of session.created / session.updated (OAI ``realtime_session_create_request``)."""
        return {
            "type": "realtime", "object": "realtime.session", "id": session_id, "model": model,
            "instructions": self.instructions, "output_modalities": ["audio"],
            "audio": {"input": {"format": format_object(self.input_format), "turn_detection": None,
                                "transcription": None, "noise_reduction": None},
                      "output": {"format": format_object(self.output_format), "voice": self.voice}},
            "tools": [{"type": "function", **t.declaration()} for t in self.tools], "tool_choice": "auto",
        }


KIND_NAMES = {str: "a string", dict: "an object", list: "a list"}
# voicechat.limits' setting names -> the GA session's fields
SESSION_PARAMS = {"system_prompt": "session.instructions"}


def setting(check, value: Any) -> Any:
    """``check(value)`` of voicechat.limits, its SettingError as a GA error naming the session's field."""
    try:
        return check(value)
    except SettingError as e:
        raise ClientEventError("invalid_value", str(e), SESSION_PARAMS.get(e.param, "session"))


def expect(value: Any, kind: type, param: str) -> Any:
    if not isinstance(value, kind):
        raise ClientEventError("invalid_value", f"{param} must be {KIND_NAMES[kind]}", param)
    return value


def checked_format(side: dict, param: str) -> Optional[str]:
    """A side's format type (None: not given): PCM16 at 24 kHz, the GA default, or the 8 kHz telephone codecs
    ``audio/pcmu`` and ``audio/pcma`` (G.711); a rate, where given, must be the format's own."""
    fmt = side.get("format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind not in FORMATS or fmt.get("rate", FORMATS[kind]) != FORMATS[kind]:
        raise ClientEventError("invalid_value", f"{param}.format must be {{\"type\": \"audio/pcm\", \"rate\": 24000}}, "
                                                f"{{\"type\": \"audio/pcmu\"}} or {{\"type\": \"audio/pcma\"}}, got "
                                                f"{json.dumps(fmt)}", f"{param}.format")
    return kind


def client_tools(declarations: list) -> tuple:
    """GA function tools (OAI ``realtime_function_tool.py``) -> voicechat Tools without a Python function (the client
    runs them and sends back function_call_output); names, schemas and the count are checked as for any session."""
    tools = []
    for i, spec in enumerate(declarations):
        param = f"session.tools[{i}]"
        expect(spec, dict, param)
        if spec.get("type", "function") != "function":
            raise ClientEventError("invalid_value", f"{param}.type must be \"function\" (client-executed tools only)",
                                   f"{param}.type")
        if not spec.get("name"):
            raise ClientEventError("missing_required_parameter", f"{param} needs a non-empty 'name'", f"{param}.name")
        try:
            tools.append(Tool.from_dict(spec))
        except ToolError as e:
            raise ClientEventError("invalid_value", f"{param}: {e}", param)
    try:
        return checked_tools(tools)
    except ToolError as e:
        raise ClientEventError("invalid_value", str(e), "session.tools")


# ---------------------------------------------------------------------------------------------------------------
# ids


# ---------------------------------------------------------------------------------------------------------------


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(10)}"


# ---------------------------------------------------------------------------------------------------------------
# the voice extension events


# ---------------------------------------------------------------------------------------------------------------


def voice_json(voice: Voice) -> dict:
    """A voice as the extension events list it."""
    return {"name": voice.name, "builtin": voice.builtin, "created": voice.created or None,
            "source": voice.source or None, "seconds": round(voice.seconds, 3)}
