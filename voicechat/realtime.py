"""An OpenAI Realtime (GA) WebSocket server for the full-duplex model: ``GET /v1/realtime``.

The event names and fields are OpenAI's GA Realtime protocol (docs/live.md §3, OAI ``types/realtime``), so the
official clients work unchanged: the ``openai`` SDK (``client.realtime.connect`` with ``base_url``), LiveKit's OpenAI
realtime plugin, pipecat. How VoiceChat maps onto it (README "Realtime API"):

- audio flows both ways all the time. ``input_audio_buffer.append`` carries base64 PCM16 mono at 24 kHz (the only GA
  rate, docs/live.md §3); the session resamples it to the model's 16 kHz with soxr's stream resampler. Every 80 ms
  frame of the answer (1764 samples at 22.05 kHz) leaves resampled to 24 kHz PCM16 with one stream resampler per
  session.
- the model decides when it speaks. A response opens at the assistant's BOS, or at its first text if no BOS came,
  and closes at its EOS; audio of frames outside a response goes only into the opt-in ``voicechat.frame`` event.
- the RNNT transcript of the user goes to a user message item, which closes when a response opens or on commit.
- client-executed tools: ``session.update.tools`` declares them; when the model's call has been read a
  ``function_call`` item goes out and its response ends; ``conversation.item.create {type: function_call_output}``
  brings the result back into the model's function channel.
- ``session.audio.output.voice`` names a voice of the library (voicechat/voices.py, docs/voices.md), never a file;
  OpenAI's own voice names mean the checkpoint's voice. Extension events: ``voicechat.voice.list``, and
  ``voicechat.voice.add`` (base64 PCM16 at 24 kHz), off unless the server was started with ``--allow-voice-add``,
  which needs an API key.

Up to ``--max-sessions`` connections hold a conversation at once, stepped together on one model (docs/batching.md);
one more gets ``error`` code ``server_busy`` and close code 1013. ``GET /health`` says whether the model is ready and
how many conversations are open, for a load balancer.
All MLX work stays on the engine thread: these handlers pass numpy arrays to it and read ``Frame``\\ s back.
``RealtimeServer(engine).router()`` mounts the route in any FastAPI app (``serve`` here, app.py beside Gradio).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import dataclasses
import hmac
import json
import logging
import re
import secrets
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np
import soxr
from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse
from starlette.websockets import WebSocketDisconnect

from .audio import to_int16
from .config import FRAME_SECONDS, OUTPUT_SAMPLE_RATE
from .engine import READY, EngineBusy, LiveRequest
from .errors import AudioInputError, ToolError, VoiceChatError
from .limits import DEFAULT_IDLE_SECONDS, SettingError, checked_prompt
from .tools import Tool
from .tools.declare import checked_tools
from .voices import Voice, VoiceError, VoiceLibrary, model_library

log = logging.getLogger("voicechat.realtime")

PATH = "/v1/realtime"
HEALTH_PATH = "/health"
RATE = 24000  # GA PCM16 rate, in and out: "Only a 24kHz sample rate is supported" (docs/live.md §3)
MAX_APPEND_BYTES = 15 * 1024 * 1024  # GA limit of one input_audio_buffer.append (docs/live.md §3), base64 text
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # WebSocket frame limit (uvicorn's default): a 15 MiB append fits in it
# 1013 is "Try Again Later" in the IANA close-code registry (RFC 6455 §11.7); mlx-vlm uses it for its second
# connection (docs/live.md §3)
CLOSE_TRY_AGAIN_LATER = 1013
CLOSE_POLICY_VIOLATION = 1008  # a bad key (before accept uvicorn answers the upgrade with HTTP 403), a client not reading
LIVE_CLOSE_SECONDS = 60.0  # how long a closing connection waits for the engine to free the model
# A client that does not read what the server sends would hold the model while its answer piles up in memory: it is
# closed once this much of its answer's audio waits unsent (docs/limits.md).
MAX_BEHIND_SECONDS = 10.0
CLOSE_NORMAL = 1000
SEND_BUFFER_BYTES = 256 * 1024  # kernel send buffer of serve's connections: a few seconds of answer (docs/limits.md §2)
PCM = {"type": "audio/pcm", "rate": RATE}
INSECURE_KEY_PROTOCOL = "openai-insecure-api-key."  # browsers cannot set headers: the key rides a subprotocol
DISCONNECTS = {1005: "the client vanished without a close frame", 1006: "the client vanished without a close frame",
               1009: f"closed: the client sent a message over the {MAX_MESSAGE_BYTES // 2 ** 20} MiB WebSocket limit"}

# OpenAI's own voice names (OAI realtime_audio_config_output.py): clients send one by default (LiveKit: "marin"), so
# they mean the checkpoint's own voice; any other name is a voice of the library (docs/voices.md)
OPENAI_VOICES = {"alloy", "ash", "ballad", "coral", "echo", "sage", "shimmer", "verse", "marin", "cedar"}

# Client events this server acts on, and GA client events it knows but does not implement (docs/live.md §3).
HANDLED = ("session.update", "input_audio_buffer.append", "input_audio_buffer.commit", "input_audio_buffer.clear",
           "conversation.item.create", "response.create", "response.cancel", "voicechat.voice.list",
           "voicechat.voice.add")
UNSUPPORTED = {
    "conversation.item.truncate": "the model hears its own past speech as it was produced; nothing can be truncated",
    "conversation.item.delete": "the model's timeline cannot forget items",
    "conversation.item.retrieve": "items are not stored on the server",
    "output_audio_buffer.clear": "output_audio_buffer events belong to WebRTC/SIP, not WebSocket",
}


# ---------------------------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------------------------
class ClientEventError(Exception):
    """A client event this server rejects: it becomes one GA ``error`` event and the connection goes on."""

    def __init__(self, code: str, message: str, param: Optional[str] = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.code, self.message, self.param, self.kind = code, message, param, kind


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
    if LONE_SURROGATE_ESCAPE.search(text):
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
        raise ClientEventError("invalid_value", f"unknown event type {kind!r}; this server accepts "
                                                + ", ".join(HANDLED), "type")
    return kind


def decode_audio(event: dict) -> np.ndarray:
    """The base64 PCM16 little-endian mono of ``input_audio_buffer.append`` (or ``voicechat.voice.add``) -> int16
    samples [N]."""
    audio = event.get("audio")
    if not isinstance(audio, str):
        raise ClientEventError("missing_required_parameter", f"{event.get('type', 'the event')} needs 'audio' "
                                                             "(base64 PCM16 mono at 24 kHz)", "audio")
    if len(audio) > MAX_APPEND_BYTES:
        raise ClientEventError("audio_too_large", f"the append carries {len(audio) / 2 ** 20:.1f} MiB of base64; "
                                                  "the limit is 15 MiB: send smaller chunks", "audio")
    try:
        raw = base64.b64decode(audio, validate=True)
    except (binascii.Error, ValueError):
        raise ClientEventError("invalid_audio", "'audio' is not valid base64", "audio")
    if len(raw) % 2:
        raise ClientEventError("invalid_audio", f"'audio' decodes to {len(raw)} bytes, an odd number: PCM16 has "
                                                "2 bytes per sample", "audio")
    return np.frombuffer(raw, dtype="<i2").astype(np.int16)


def encode_audio(samples: np.ndarray) -> str:
    """float32 samples in [-1, 1] -> base64 PCM16 little-endian."""
    return base64.b64encode(to_int16(samples).astype("<i2").tobytes()).decode("ascii")


# ---------------------------------------------------------------------------------------------------------------
# the session's configuration (session.update)
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SessionConfig:
    instructions: str = ""  # the system prompt
    voice: Optional[str] = None  # a voice of the library, checked by the server (None: the checkpoint's default)
    tools: tuple = ()  # voicechat.tools.Tool without fn: the client runs them

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
            check_format(expect(audio.get(side, {}), dict, f"session.audio.{side}"), f"session.audio.{side}")
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
            "audio": {"input": {"format": dict(PCM), "turn_detection": None, "transcription": None,
                                "noise_reduction": None},
                      "output": {"format": dict(PCM), "voice": self.voice}},
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


def check_format(side: dict, param: str) -> None:
    """Only PCM16 at 24 kHz, the GA default (``audio/pcmu`` and ``audio/pcma`` are 8 kHz telephone codecs)."""
    fmt = side.get("format")
    if fmt is None:
        return
    if not isinstance(fmt, dict) or fmt.get("type") != "audio/pcm" or fmt.get("rate", RATE) != RATE:
        raise ClientEventError("invalid_value", f"{param}.format must be {{\"type\": \"audio/pcm\", \"rate\": 24000}} "
                                                f"(PCM16 mono at 24 kHz), got {json.dumps(fmt)}", f"{param}.format")


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
# the model's frames -> GA server events
# ---------------------------------------------------------------------------------------------------------------


class AudioOut:
    """22.05 kHz float32 frames -> 24 kHz PCM16 base64. One stream resampler per conversation: the concatenated
    deltas equal the whole answer resampled at once (soxr's stream output is chunking-invariant,
    docs/platform.md §5)."""

    def __init__(self):
        self.stream = soxr.ResampleStream(OUTPUT_SAMPLE_RATE, RATE, 1, dtype="float32")

    def encode(self, samples: np.ndarray) -> str:
        return encode_audio(self.stream.resample_chunk(np.asarray(samples, dtype=np.float32)))


def message_item(item_id: str, role: str, content_type: str) -> dict:
    """A GA message item (OAI ``realtime_conversation_item_{user,assistant}_message.py``) with one audio part."""
    return {"id": item_id, "object": "realtime.item", "type": "message", "role": role, "status": "in_progress",
            "content": [{"type": content_type, "transcript": ""}]}


@dataclass
class Response:
    """One assistant turn: its message item (output 0), then any function_call items."""

    id: str
    message: dict
    metadata: Optional[dict]
    output: list = field(default_factory=list)

    @property
    def transcript(self) -> str:
        return self.message["content"][0]["transcript"]

    def ga(self, status: str, details: Optional[dict] = None) -> dict:
        """OAI ``realtime_response.py``."""
        return {"object": "realtime.response", "id": self.id, "status": status, "status_details": details,
                "output": copy.deepcopy(self.output), "output_modalities": ["audio"], "conversation_id": None,
                "audio": {"output": {"format": dict(PCM)}}, "metadata": self.metadata, "usage": None}

    def part(self, **fields) -> dict:
        """The fields every event about the message's audio part carries."""
        return {"response_id": self.id, "item_id": self.message["id"], "output_index": 0, "content_index": 0,
                **fields}


class RealtimeConversation:
    """Maps the model's frames onto GA items and responses; every method returns the server events to send.

    Turns: a response opens at the assistant's BOS (``Frame.turn == "start"``), or at the first frame with assistant
    text when no response is open (a model can skip the BOS), and closes at its EOS (``turn == "end"``); a BOS inside
    an open response closes it and opens the next. ``response.cancel`` closes the response at once; the rest of that
    turn (until the model's next BOS or EOS) belongs to no response. The user's RNNT transcript goes to a user message
    item that opens with its first characters and closes when a response opens or the client commits.
    """

    def __init__(self, frames_event: bool):
        self.frames_event = frames_event  # opt-in voicechat.frame per frame (ids, codes, stats, audio outside turns)
        self.audio = AudioOut()
        self.response: Optional[Response] = None
        self.user: Optional[dict] = None  # the open user message item
        self.user_previous: Optional[str] = None  # the item before it
        self.user_frames = (0, 0)  # first and last timeline position of the open user item's transcript
        self.muted = False  # after response.cancel, until the model's turn ends
        self.last_item: Optional[str] = None  # for previous_item_id
        self.metadata: Optional[dict] = None  # from response.create: tags the next response
        self.waiting: dict[str, dict] = {}  # call_id -> function_call item whose output the session waits for

    # ---- frames ------------------------------------------------------------------------------------------------
    def frames(self, frames: Iterable, backlog_seconds: float) -> list[dict]:
        return [e for frame in frames for e in self.frame(frame, backlog_seconds)]

    def frame(self, frame, backlog_seconds: float) -> list[dict]:
        out = self.hear(frame.transcript, frame.position) if frame.transcript else []
        calls_start = any(event.kind == "call_start" for event in frame.events)
        if frame.turn == "start":
            out += self.close_response("completed") + self.open_response(frame.position)
            self.muted = False
        elif self.response is None and ((frame.text and not self.muted) or calls_start):
            out += self.open_response(frame.position)
        audio = self.audio.encode(frame.audio)
        response = self.response
        if response is not None:
            out.append({"type": "response.output_audio.delta", **response.part(delta=audio)})
            if frame.text:
                response.message["content"][0]["transcript"] += frame.text
                out.append({"type": "response.output_audio_transcript.delta", **response.part(delta=frame.text)})
        for event in frame.events:
            if event.kind == "call":
                out += self.function_calls(event.calls, frame.position)
            elif event.kind == "result":  # the session has the results (or timed out): no call waits any more
                for call in event.calls:
                    self.waiting.pop(call.call_id, None)
        if frame.turn == "end":
            out += self.close_response("completed")
            self.muted = False
        if self.frames_event:
            out.append(frame_event(frame, backlog_seconds, response.id if response else None,
                                   None if response else audio))
        return out

    def open_response(self, position: int) -> list[dict]:
        message = message_item(new_id("item"), "assistant", "output_audio")
        self.response = response = Response(new_id("resp"), message, self.metadata, [message])
        self.metadata = None
        return [*self.close_user(),
                {"type": "response.created", "response": response.ga("in_progress")},
                {"type": "response.output_item.added", "response_id": response.id, "output_index": 0,
                 "item": copy.deepcopy(message)},
                self.added(message),
                {"type": "response.content_part.added", **response.part(part={"type": "audio", "transcript": ""})}]

    def close_response(self, status: str, details: Optional[dict] = None) -> list[dict]:
        response, self.response = self.response, None
        if response is None:
            return []
        message = response.message
        message["status"] = "completed" if status == "completed" else "incomplete"
        part = {"type": "audio", "transcript": response.transcript}
        return [{"type": "response.output_audio.done", **response.part()},
                {"type": "response.output_audio_transcript.done", **response.part(transcript=response.transcript)},
                {"type": "response.content_part.done", **response.part(part=part)},
                {"type": "response.output_item.done", "response_id": response.id, "output_index": 0,
                 "item": copy.deepcopy(message)},
                {"type": "conversation.item.done", "item": copy.deepcopy(message)},
                {"type": "response.done", "response": response.ga(status, details)}]

    # ---- tool calls --------------------------------------------------------------------------------------------
    def function_calls(self, calls, position: int) -> list[dict]:
        """The model's calls were read (EOTC): one function_call item per usable call, then the response ends, as an
        OpenAI response that calls a function does; the model's answer after the results is the next response. The
        model itself gets an error object for an unusable call: the client only hears of it."""
        out = [] if self.response is not None else self.open_response(position)
        response = self.response
        for call in calls:
            if call.error:
                out.append({"type": "voicechat.function_call.failed", "call_id": call.call_id, "name": call.name,
                            "error": call.error, "raw": call.raw})
                continue
            arguments = json.dumps(call.arguments, ensure_ascii=False)
            item = {"id": new_id("item"), "object": "realtime.item", "type": "function_call",
                    "status": "in_progress", "call_id": call.call_id, "name": call.name, "arguments": ""}
            where = {"response_id": response.id, "item_id": item["id"], "output_index": len(response.output),
                     "call_id": call.call_id}
            response.output.append(item)
            out += [{"type": "response.output_item.added", "response_id": response.id,
                     "output_index": where["output_index"], "item": copy.deepcopy(item)},
                    self.added(item),
                    {"type": "response.function_call_arguments.delta", **where, "delta": arguments}]
            item.update(arguments=arguments, status="completed")
            out += [{"type": "response.function_call_arguments.done", **where, "name": call.name,
                     "arguments": arguments},
                    {"type": "response.output_item.done", "response_id": response.id,
                     "output_index": where["output_index"], "item": copy.deepcopy(item)},
                    {"type": "conversation.item.done", "item": copy.deepcopy(item)}]
            self.waiting[call.call_id] = item
        return out + self.close_response("completed")

    def function_output(self, item: dict) -> list[dict]:
        """conversation.item.create of a function_call_output: checked against the calls that wait for one."""
        call_id = expect(item.get("call_id"), str, "item.call_id")
        expect(item.get("output"), str, "item.output")
        if call_id not in self.waiting:
            raise ClientEventError("invalid_value", f"no function call {call_id} is waiting for its output (unknown, "
                                                    "answered already, or timed out)", "item.call_id")
        del self.waiting[call_id]
        item = {"id": item.get("id") or new_id("item"), "object": "realtime.item", "type": "function_call_output",
                "call_id": call_id, "output": item["output"], "status": "completed"}
        return [self.added(item), {"type": "conversation.item.done", "item": item}]

    # ---- the user's side ---------------------------------------------------------------------------------------
    def hear(self, text: str, position: int) -> list[dict]:
        out = self.open_user(position) if self.user is None else []
        self.user["content"][0]["transcript"] += text
        self.user_frames = (self.user_frames[0], position)
        out.append({"type": "conversation.item.input_audio_transcription.delta", "item_id": self.user["id"],
                    "content_index": 0, "delta": text})
        return out

    def open_user(self, position: int) -> list[dict]:
        self.user, self.user_previous = message_item(new_id("item"), "user", "input_audio"), self.last_item
        self.user_frames = (position, position)
        return [self.added(self.user)]

    def close_user(self) -> list[dict]:
        item, self.user = self.user, None
        if item is None:
            return []
        item["status"] = "completed"
        first, last = self.user_frames
        return [{"type": "conversation.item.input_audio_transcription.completed", "item_id": item["id"],
                 "content_index": 0, "transcript": item["content"][0]["transcript"],
                 "usage": {"type": "duration", "seconds": round((last - first + 1) * FRAME_SECONDS, 2)}},
                {"type": "conversation.item.done", "item": item}]

    def added(self, item: dict) -> dict:
        """conversation.item.added for a new item (a snapshot: items keep growing after it)."""
        event = {"type": "conversation.item.added", "previous_item_id": self.last_item, "item": copy.deepcopy(item)}
        self.last_item = item["id"]
        return event

    # ---- client requests ---------------------------------------------------------------------------------------
    def commit(self) -> list[dict]:
        """input_audio_buffer.commit: the open user item (an empty one if the model heard no words yet) is done."""
        out = [] if self.user is not None else self.open_user(self.user_frames[1])
        committed = {"type": "input_audio_buffer.committed", "item_id": self.user["id"],
                     "previous_item_id": self.user_previous}
        return out + [committed, *self.close_user()]

    def cancel(self, response_id: Optional[str]) -> list[dict]:
        if self.response is None or response_id not in (None, self.response.id):
            raise ClientEventError("response_cancel_not_active",
                                   "no response is in progress" if self.response is None else
                                   f"response {response_id} is not in progress", "response_id")
        self.muted = True
        return self.close_response("cancelled", {"type": "cancelled", "reason": "client_cancelled"})

    def fail(self, message: str) -> list[dict]:
        """The live session ended with an error: the open response fails with it."""
        return self.close_response("failed", {"type": "failed", "error": {"type": "server_error",
                                                                          "code": "session_failed",
                                                                          "message": message}})


def frame_event(frame, backlog_seconds: float, response_id: Optional[str], audio: Optional[str]) -> dict:
    """``voicechat.frame``: everything the model produced at one timeline position, for exactness checks and
    live displays. OpenAI clients skip unknown event types (the SDK parses with construct_type_unchecked,
    docs/live.md §3; LiveKit only logs them in debug mode). ``audio`` (24 kHz PCM16) only for frames outside a
    response: a response's audio is in its response.output_audio.delta."""
    return {"type": "voicechat.frame", "position": frame.position, "response_id": response_id,
            "text_id": int(frame.text_id), "function_id": int(frame.function_id),
            "codes": np.asarray(frame.codes).tolist(), "text": frame.text, "function_text": frame.function_text,
            "transcript": frame.transcript, "turn": frame.turn,
            "compute_ms": {stage: round(1000 * s, 3) for stage, s in frame.seconds.items()},
            "backlog_ms": round(1000 * backlog_seconds, 1), "audio": audio,
            "events": [{"kind": e.kind, "position": e.position,
                        "calls": [{"call_id": c.call_id, "name": c.name, "arguments": c.arguments, "error": c.error}
                                  for c in e.calls]} for e in frame.events]}


# ---------------------------------------------------------------------------------------------------------------
# one WebSocket connection
# ---------------------------------------------------------------------------------------------------------------
class Connection:
    """A client's conversation: reads client events, feeds audio to the engine's live session, and sends the GA
    events its frames map to. Three tasks: the reader, the writer (the only one that sends), and the follower of the
    live session's events (fed by a thread that waits on the engine)."""

    def __init__(self, server: "RealtimeServer", websocket, name: str, frames_event: bool):
        self.server, self.ws, self.name = server, websocket, name
        self.config, self.configured = SessionConfig(), False
        self.conversation = RealtimeConversation(frames_event)
        self.session_id = new_id("sess")
        self.live = None  # the engine's live session, once open
        self.follower: Optional[asyncio.Task] = None
        self.heard = False  # audio has reached the live session: its instructions, tools and voice are fixed
        self.appended = False  # audio since the last commit
        self.setup_error: Optional[str] = None  # why the last live session could not start (until session.update)
        self.outbox: asyncio.Queue = asyncio.Queue()  # (JSON text, seconds of answer audio in it), or (code, reason)
        self.unsent = 0.0  # seconds of answer audio in the outbox: how far behind real time the client reads
        self.idle_since = asyncio.get_running_loop().time()  # the idle timeout counts from here ...
        self.setting_up = False  # ... except while a live session is set up: then the model is slow, not the client
        self.dropped = asyncio.Event()  # set when the server gives up on a client that does not read

    async def run(self) -> None:
        self.emit({"type": "session.created", "session": self.session()})
        tasks = [asyncio.create_task(self.read()), asyncio.create_task(self.write()),
                 asyncio.create_task(self.dropped.wait())]
        watcher = asyncio.create_task(self.watch_idle(self.server.idle_seconds))
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in [*tasks, watcher]:
                task.cancel()
            self.server.leaving.add(self.name)  # a next client waits for this close instead of getting server_busy
            await self.close_live()
            self.server.release(self.name)
            log.info("%s: closed", self.name)
            if self.dropped.is_set():  # the close frame waits behind the unread data: the WebSocket library gives
                # up on it after its close timeout and drops the connection (docs/limits.md §2); the model is free
                await asyncio.gather(self.ws.close(CLOSE_POLICY_VIOLATION, "not reading"), return_exceptions=True)

    async def watch_idle(self, seconds: float) -> None:
        """Close the connection (through the writer) once no audio has come for ``seconds``: it would hold the
        model for nothing. 0: never."""
        loop = asyncio.get_running_loop()
        while seconds and ((left := self.idle_since + seconds - loop.time()) > 0 or self.setting_up):
            await asyncio.sleep(left if left > 0 else seconds)
        if seconds:
            self.reject(ClientEventError("idle_timeout", f"no audio for {seconds:g} s: the connection is closed so "
                                                         "that the model is free for others", kind="server_error"), None)
            self.close(CLOSE_NORMAL, "idle timeout")

    def session(self) -> dict:
        return self.config.ga(self.session_id, self.server.model_name)

    # ---- sending -----------------------------------------------------------------------------------------------
    def emit(self, event: dict, seconds: float = 0.0) -> None:
        """Queue an event carrying ``seconds`` of the answer's audio; a client that lets more than MAX_BEHIND_SECONDS
        of it wait is dropped."""
        self.outbox.put_nowait((event_text(event), seconds))
        self.unsent += seconds
        if self.unsent > MAX_BEHIND_SECONDS and not self.dropped.is_set():
            log.warning("%s: closed: the client does not read what the server sends (%.1f s of its answer unsent, "
                        "the limit is %.0f s)", self.name, self.unsent, MAX_BEHIND_SECONDS)
            self.dropped.set()

    def emit_all(self, events: Iterable[dict], seconds: float = 0.0) -> None:
        """Queue events that together carry ``seconds`` of answer audio (counted with the last one)."""
        events = list(events)
        for i, event in enumerate(events):
            self.emit(event, seconds if i == len(events) - 1 else 0.0)

    def reject(self, error: ClientEventError, event_id: Optional[str]) -> None:
        log.warning("%s: %s: %s", self.name, error.code, error.message)
        self.emit(error_event(error, event_id))

    def close(self, code: int, reason: str) -> None:
        """Close after everything already queued has been sent."""
        self.outbox.put_nowait((code, reason))

    async def write(self) -> None:
        try:
            while True:
                item = await self.outbox.get()
                if isinstance(item[0], int):
                    await self.ws.close(*item)
                    return
                await self.ws.send_text(item[0])
                self.unsent -= item[1]
        except (WebSocketDisconnect, RuntimeError, OSError) as e:  # the client went away while we were sending
            log.info("%s: the client went away while events were being sent (%s)", self.name, type(e).__name__)
        except Exception:  # a bug: the connection ends, and the log says why
            log.error("%s: the writer failed\n%s", self.name, traceback.format_exc())

    # ---- receiving ---------------------------------------------------------------------------------------------
    async def read(self) -> None:
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                code = message.get("code")
                log.info("%s: %s (close code %s)", self.name, DISCONNECTS.get(code, "the client went away"), code)
                return
            if message.get("text") is None:
                self.reject(ClientEventError("invalid_json", "binary messages are not events: send JSON text"), None)
                continue
            await self.handle(message["text"])

    async def handle(self, text: str) -> None:
        event_id = None
        try:
            event = parse_client_event(text)
            event_id = event.get("event_id") if isinstance(event.get("event_id"), str) else None
            await getattr(self, "on_" + event_kind(event).replace(".", "_"))(event)
        except ClientEventError as e:
            self.reject(e, event_id)
        except Exception as e:  # a bug: report it, keep the connection
            log.error("%s: internal error\n%s", self.name, traceback.format_exc())
            self.reject(ClientEventError("internal_error", f"internal error: {type(e).__name__}: {e}",
                                         kind="server_error"), event_id)

    async def on_session_update(self, event: dict) -> None:
        new = self.config.updated(event.get("session"))
        self.server.voice(new.voice)  # a name of the library, or an error listing them
        if self.live is not None and new.model_inputs != self.config.model_inputs:
            if self.heard:
                raise ClientEventError("session_locked", "instructions, tools and voice are fixed once audio has "
                                                         "started; open a new connection to change them", "session")
            await self.close_live()  # not heard anything yet: start again with the new prompt
        previous = self.config, self.configured
        self.config, self.configured, self.setup_error = new, True, None
        try:
            await self.ensure_live(required=False)
        except ClientEventError:
            self.config, self.configured = previous
            raise
        self.emit({"type": "session.updated", "session": self.session()})

    async def on_input_audio_buffer_append(self, event: dict) -> None:
        samples = decode_audio(event)
        if not self.configured:
            raise ClientEventError("session_not_configured", "send session.update (instructions, tools, voice) "
                                                             "before audio: the model reads its prompt first", "type")
        if self.setup_error:
            raise ClientEventError("session_setup_failed", f"the session could not start: {self.setup_error}; send "
                                                           "session.update with other settings", "session")
        if await self.ensure_live(required=True):
            self.live.send(samples, RATE)  # the session resamples 24 -> 16 kHz with soxr's stream resampler
            self.idle_since = asyncio.get_running_loop().time()
            self.heard = self.appended = True
            self.server.notify("heard", self.session_id, samples)

    async def on_input_audio_buffer_commit(self, event: dict) -> None:
        if not self.appended:
            raise ClientEventError("input_audio_buffer_commit_empty", "no audio was appended since the last commit")
        self.appended = False
        self.emit_all(self.conversation.commit())

    async def on_input_audio_buffer_clear(self, event: dict) -> None:
        # full duplex: appended audio goes to the model at once, so there is no buffer to empty
        self.emit({"type": "input_audio_buffer.cleared"})

    async def on_conversation_item_create(self, event: dict) -> None:
        item = expect(event.get("item"), dict, "item")
        if item.get("type") != "function_call_output":
            raise ClientEventError("invalid_value", "only function_call_output items can be created: the model "
                                                    "takes speech, not text", "item.type")
        events = self.conversation.function_output(item)  # checks the call waits: a wrong id would end the session
        if self.live is None:
            raise ClientEventError("invalid_value", "the conversation has ended", "item.call_id")
        self.live.provide_tool_result(item["call_id"], item["output"])
        self.emit_all(events)

    async def on_response_create(self, event: dict) -> None:
        # The model decides when it speaks: the request tags the next response the model opens (LiveKit's
        # generate_reply matches response.created by response.metadata.client_event_id).
        response = expect(event.get("response", {}), dict, "response")
        self.conversation.metadata = expect(response.get("metadata", {}), dict, "response.metadata") or None

    async def on_response_cancel(self, event: dict) -> None:
        response_id = event.get("response_id")
        if response_id is not None:
            expect(response_id, str, "response_id")
        self.emit_all(self.conversation.cancel(response_id))

    async def on_voicechat_voice_list(self, event: dict) -> None:
        self.emit({"type": "voicechat.voice.list", "voices": self.server.voice_list()})

    async def on_voicechat_voice_add(self, event: dict) -> None:
        """Extension: a voice made from the event's recording, stored in the library (docs/voices.md)."""
        if not self.server.voice_add:
            raise ClientEventError("unsupported_event", "voicechat.voice.add is off on this server: start it with "
                                                        "--allow-voice-add (and --api-key)", "type")
        name = expect(event.get("name"), str, "name")
        samples = decode_audio(event)
        voice = await asyncio.to_thread(self.server.add_voice, name, samples)
        log.info("%s: added the voice %s", self.name, voice.name)
        self.emit({"type": "voicechat.voice.added", "voice": voice_json(voice), "voices": self.server.voice_list()})

    # ---- the engine's live session -----------------------------------------------------------------------------
    async def ensure_live(self, required: bool) -> bool:
        """Open the live session if there is none; False when this connection is closing instead (model busy)."""
        if self.live is not None:
            return True
        status = self.server.engine.status()
        if status.state != READY:
            if required:
                raise ClientEventError("model_not_ready", f"{status.message}; send audio again once it is ready",
                                       kind="server_error")
            return False
        try:
            request = LiveRequest(system_prompt=self.config.instructions, speaker=self.server.voice(self.config.voice),
                                  tools=self.config.tools)
            live = self.server.engine.open_live(request, owner=self.name)
        except EngineBusy as e:
            self.reject(ClientEventError("server_busy", str(e), kind="server_error"), None)
            self.close(CLOSE_TRY_AGAIN_LATER, "server busy")
            return False
        except SettingError as e:
            raise ClientEventError("invalid_value", str(e), SESSION_PARAMS.get(e.param, "session"))
        except VoiceChatError as e:
            raise ClientEventError("invalid_value", str(e), "session")
        self.live, self.heard, self.setting_up = live, False, True
        self.server.notify("opened", self.session_id)
        events: asyncio.Queue = asyncio.Queue()
        threading.Thread(target=pump, args=(live, asyncio.get_running_loop(), events), daemon=True,
                         name=f"voicechat-realtime-{self.name}").start()
        self.follower = asyncio.create_task(self.follow(live, events))
        log.info("%s: live session %s opened", self.name, self.session_id)
        return True

    async def follow(self, live, events: asyncio.Queue) -> None:
        """The live session's events -> server events, until it has closed."""
        started = False
        while True:
            event = await events.get()
            if event.kind != "frames" and not started:  # set up, or failed to: the idle clock starts now
                self.setting_up, self.idle_since = event.kind == "queued", asyncio.get_running_loop().time()
            if event.kind == "queued":  # the engine finishes other work first (app.py's recordings)
                self.emit({"type": "voicechat.session.queued", "jobs_ahead": event.position})
            elif event.kind == "ready":
                started = True
                self.emit({"type": "voicechat.session.ready", "setup_seconds": round(event.setup_seconds, 3),
                           "prompt_frames": event.prompt_frames})
            elif event.kind == "frames":
                self.emit_all(self.conversation.frames(event.frames, event.backlog_seconds),
                              len(event.frames) * FRAME_SECONDS)
            elif event.kind == "error" and not started:  # the prompt or the voice could not be set up
                if self.live is live:
                    self.live, self.follower, self.setup_error = None, None, event.message
                self.reject(ClientEventError("session_setup_failed", f"the session could not start: {event.message}"
                                                                     "; send session.update with other settings",
                                             "session"), None)
            elif event.kind == "error":
                log.error("%s: the live session failed: %s", self.name, event.message)
                self.emit_all(self.conversation.fail(event.message))
                self.reject(ClientEventError("session_failed", event.message, kind="server_error"), None)
                self.close(1011, "the live session failed")
            elif event.kind == "closed":
                return

    async def close_live(self) -> None:
        """Stop the live session and wait until the engine has let go of it (the next connection may need it)."""
        live, follower, self.live, self.follower = self.live, self.follower, None, None
        if live is None:
            return
        live.close()
        try:
            await asyncio.wait_for(asyncio.shield(follower), LIVE_CLOSE_SECONDS)
        except asyncio.TimeoutError:
            log.error("%s: the engine did not close the live session within %.0f s", self.name, LIVE_CLOSE_SECONDS)
        self.server.notify("closed", self.session_id, live)


def pump(live, loop: asyncio.AbstractEventLoop, events: asyncio.Queue) -> None:
    """Thread: forward the live session's events (blocking reads) into the connection's event loop."""
    for event in live:
        try:
            loop.call_soon_threadsafe(events.put_nowait, event)
        except RuntimeError:  # the event loop has stopped (server shutdown): let the engine go
            live.close()


# ---------------------------------------------------------------------------------------------------------------
# the route, the app, the command
# ---------------------------------------------------------------------------------------------------------------
class RealtimeServer:
    """``GET /v1/realtime`` on one engine: as many live conversations at once as the engine steps together
    (``engine.max_sessions``), and ``GET /health``. Mount ``router()`` in any FastAPI app
    (``python -m voicechat serve``, and app.py beside the Gradio page).

    ``observer`` (optional) hears of each live session by its connection's session id: ``opened(session_id)``,
    ``heard(session_id, samples)`` (each append's int16 samples at 24 kHz, once they went to the model) and
    ``closed(session_id, live)`` (the engine has let go: ``live.result()`` is the conversation). The app's Talk live
    tab (voicechat/webui/talk.py) saves conversations with it.

    ``voices``: the voice library's folder (None: the checkpoint's voices only); ``voice_add`` lets clients add
    voices to it (``voicechat.voice.add``), only with an ``api_key``."""

    def __init__(self, engine, *, api_key: Optional[str] = None, model_name: str = "voicechat", observer=None,
                 idle_seconds: float = DEFAULT_IDLE_SECONDS, voices: Optional[Path] = None, voice_add: bool = False):
        if voice_add and not (api_key and voices):
            raise ServeError("adding voices over the API needs an API key and a voice library folder")
        self.engine, self.api_key, self.model_name = engine, api_key, model_name
        self.idle_seconds = idle_seconds  # 0: no idle timeout
        self.active: list[str] = []  # the connections that hold a conversation
        self.leaving: set[str] = set()  # those of them that are closing: a next one waits for them
        self.freed = asyncio.Event()  # set once a connection has let go of its conversation
        self.count = 0
        self.observer = observer
        self.voices, self.voice_add = voices, voice_add

    # ---- the voice library (numpy and files only: the model's config and speaker names are plain values) --------
    def library(self) -> VoiceLibrary:
        return model_library(self.voices, self.engine.model)

    def voice(self, name: Optional[str]) -> Optional[Voice]:
        """The library's voice called ``name`` (None: the checkpoint's default); an unknown name (a path is none)
        is refused with the list of names."""
        if name is None:
            return None
        try:
            return self.library().get(name)
        except VoiceError as e:
            raise ClientEventError("invalid_value", str(e), "session.audio.output.voice")

    def voice_list(self) -> list[dict]:
        return [voice_json(v) for v in self.library().voices()]

    def add_voice(self, name: str, samples: np.ndarray) -> Voice:
        """Thread: check, trim and store a recording at the wire rate as a voice."""
        model = self.engine.model
        if model is None:
            raise ClientEventError("model_not_ready", "the model is not loaded yet; add the voice once it is",
                                   kind="server_error")
        try:
            return self.library().add(name, samples, RATE, config=model.config, source="realtime")
        except VoiceError as e:
            raise ClientEventError("invalid_value", str(e), "name")
        except AudioInputError as e:
            raise ClientEventError("invalid_audio", str(e), "audio")

    def release(self, name: str) -> None:
        """The connection ``name`` has let go of its conversation: the next one may have its slot."""
        if name in self.active:
            self.active.remove(name)
            self.leaving.discard(name)
            self.freed.set()
            self.freed = asyncio.Event()

    def notify(self, what: str, *args) -> None:
        """Tell the observer (if any) that a live session was ``opened``, ``heard`` audio or ``closed``."""
        if self.observer is not None:
            getattr(self.observer, what)(*args)

    def router(self) -> APIRouter:
        router = APIRouter()
        router.add_websocket_route(PATH, self.serve)  # plain Starlette route: the endpoint gets the WebSocket
        router.add_api_route(HEALTH_PATH, self.health, methods=["GET"])
        return router

    def health(self) -> JSONResponse:
        """For a load balancer: 200 while the model is ready and a conversation can open, else 503; the body says
        the engine's state and the conversations open against the maximum."""
        status = self.engine.status()
        ready = status.state == READY
        body = {"ready": ready, "state": status.state, "sessions": len(self.active),
                "max_sessions": self.engine.max_sessions}
        return JSONResponse(body, status_code=200 if ready and len(self.active) < self.engine.max_sessions else 503)

    def authorized(self, websocket) -> bool:
        """``Authorization: Bearer KEY`` (the SDKs), or the subprotocol ``openai-insecure-api-key.KEY`` (browsers);
        ``websocket`` may be any Starlette request (app.py's /live/tool asks the same)."""
        if not self.api_key:
            return True
        header = websocket.headers.get("authorization", "")
        offered = [header[7:]] if header[:7].lower() == "bearer " else []
        offered += [p[len(INSECURE_KEY_PROTOCOL):] for p in websocket.scope.get("subprotocols", [])
                    if p.startswith(INSECURE_KEY_PROTOCOL)]
        return any(hmac.compare_digest(key.encode(), self.api_key.encode()) for key in offered)

    async def serve(self, websocket) -> None:
        self.count += 1
        name = f"connection {self.count} from {websocket.client.host if websocket.client else '?'}"
        if not self.authorized(websocket):
            log.warning("%s: refused: no valid API key (send Authorization: Bearer KEY)", name)
            await websocket.close(CLOSE_POLICY_VIOLATION)
            return
        await websocket.accept(subprotocol="realtime" if "realtime" in websocket.scope.get("subprotocols", [])
                               else None)
        if len(self.active) >= self.engine.max_sessions and self.leaving:  # a closing one frees a slot in a moment
            await asyncio.gather(asyncio.wait_for(self.freed.wait(), LIVE_CLOSE_SECONDS), return_exceptions=True)
        if len(self.active) >= self.engine.max_sessions:
            log.warning("%s: server_busy: %s hold%s the model's %d conversation%s", name, ", ".join(self.active),
                        "s" if len(self.active) == 1 else "", len(self.active), "s" if len(self.active) > 1 else "")
            await websocket.send_text(event_text(error_event(ClientEventError(
                "server_busy", f"{len(self.active)} conversation{'s are' if len(self.active) > 1 else ' is'} running "
                "on this model, its maximum; try again later", kind="server_error"))))
            await websocket.close(CLOSE_TRY_AGAIN_LATER, "server busy")
            return
        self.active.append(name)
        log.info("%s: open", name)
        try:
            query = websocket.query_params.get("voicechat_frames", "")
            await Connection(self, websocket, name, frames_event=query.lower() in ("1", "true", "yes")).run()
        finally:
            self.release(name)


def voice_json(voice: Voice) -> dict:
    """A voice as the extension events list it."""
    return {"name": voice.name, "builtin": voice.builtin, "created": voice.created or None,
            "source": voice.source or None, "seconds": round(voice.seconds, 3)}


def create_app(engine, *, api_key: Optional[str] = None, model_name: str = "voicechat",
               idle_seconds: float = DEFAULT_IDLE_SECONDS, voices: Optional[Path] = None,
               voice_add: bool = False) -> FastAPI:
    app = FastAPI(title="voicechat realtime", docs_url=None, redoc_url=None, openapi_url=None)
    app.include_router(RealtimeServer(engine, api_key=api_key, model_name=model_name, idle_seconds=idle_seconds,
                                      voices=voices, voice_add=voice_add).router())
    return app


class ServeError(VoiceChatError):
    """The server cannot start (the model failed to load, the port is taken)."""


def loaded_engine(*, model: str, demo: bool, offline: bool, max_sessions: Optional[int] = None):
    """Start an engine for up to ``max_sessions`` conversations at once (None: as many as fit,
    voicechat.group.fitting_sessions) and wait until its model has loaded: (the engine, the model's name).
    ServeError if it failed. ``serve`` and each Ray Serve replica (voicechat/deploy.py) start theirs this way."""
    import tempfile
    import time

    from . import engine as eng

    if demo:
        loader, name = eng.demo_model(tempfile.mkdtemp(prefix="voicechat-demo-")), "voicechat-demo"
        print("Demo mode: a tiny model with random weights. Its answers are noise.", flush=True)
    else:
        loader, name = eng.hub_model(model, offline=offline), model
    engine = eng.Engine(loader, name=name, max_sessions=max_sessions).start()
    while engine.status().state not in (eng.READY, eng.FAILED):
        time.sleep(0.1)
    status = engine.status()
    if status.state == eng.FAILED:
        engine.close()
        raise ServeError(status.message)
    return engine, name


def serve(*, model: str, demo: bool, host: str, port: int, api_key: Optional[str], offline: bool,
          idle_seconds: float = DEFAULT_IDLE_SECONDS, max_sessions: Optional[int] = None,
          voices: Optional[Path] = None, voice_add: bool = False) -> None:
    """``python -m voicechat serve``: load the model, then serve ``/v1/realtime`` (up to ``max_sessions``
    conversations at once; None: as many as fit, voicechat.group.fitting_sessions) until interrupted."""
    import socket

    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    engine, name = loaded_engine(model=model, demo=demo, offline=offline, max_sessions=max_sessions)
    try:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # accepted connections inherit it: what the kernel holds for a client that does not read stays small, so
        # MAX_BEHIND_SECONDS is reached soon after (docs/limits.md §2)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        try:
            sock.bind((host, port))
            sock.listen(128)  # from here on connections wait in the backlog until uvicorn takes them
        except OSError as e:
            raise ServeError(f"cannot listen on {host}:{port} ({e.strerror}); pick another --port") from None
        if not api_key and host not in ("127.0.0.1", "localhost", "::1"):
            log.warning("listening on %s without --api-key: anyone who can reach it can use the model", host)
        print(f"{name} ready; Realtime API at ws://{host}:{sock.getsockname()[1]}{PATH} "
              f"(up to {engine.max_sessions} conversation{'s' if engine.max_sessions > 1 else ''} at once)", flush=True)
        app = create_app(engine, api_key=api_key, model_name=name, idle_seconds=idle_seconds, voices=voices,
                         voice_add=voice_add)
        config = uvicorn.Config(app, log_level="info",
                                ws_max_size=MAX_MESSAGE_BYTES)
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        engine.close()
