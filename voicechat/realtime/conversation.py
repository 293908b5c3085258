"""One conversation's state on the wire: the model's frames mapped onto GA items and responses, the user's transcript
item, the client's tool results and cancels; every method returns the server events to send."""

from __future__ import annotations

import copy
import json
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Iterable, Optional

import numpy as np
import soxr

from ..config import FRAME_SECONDS, OUTPUT_SAMPLE_RATE
from .protocol import FORMATS, ClientEventError, encode_audio, expect, format_object, new_id


class AudioOut:
    """22.05 kHz float32 frames -> base64 audio in the session's output format (PCM16 at 24 kHz, or G.711 at 8 kHz).
    One stream resampler per conversation and format: the concatenated deltas equal the whole answer resampled at
    once (soxr's stream output is chunking-invariant, docs/platform.md §5)."""

    def __init__(self, fmt: str = "audio/pcm"):
        self.format = fmt
        self.stream = soxr.ResampleStream(OUTPUT_SAMPLE_RATE, FORMATS[fmt], 1, dtype="float32")

    def encode(self, samples: np.ndarray) -> tuple[str, Fraction]:
        """(the delta, its milliseconds, exact: clients round their sums up, docs/realtime.md "Clients")."""
        out = self.stream.resample_chunk(np.asarray(samples, dtype=np.float32))
        return encode_audio(out, self.format), Fraction(1000 * len(out), FORMATS[self.format])


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
    format: str  # the output audio format's type
    output: list = field(default_factory=list)

    @property
    def transcript(self) -> str:
        return self.message["content"][0]["transcript"]

    def ga(self, status: str, details: Optional[dict] = None) -> dict:
        """OAI ``realtime_response.py``."""
        return {"object": "realtime.response", "id": self.id, "status": status, "status_details": details,
                "output": copy.deepcopy(self.output), "output_modalities": ["audio"], "conversation_id": None,
                "audio": {"output": {"format": format_object(self.format)}}, "metadata": self.metadata,
                "usage": None}

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

    def __init__(self, frames_event: bool, extension_events: bool = False):
        self.frames_event = frames_event  # opt-in voicechat.frame per frame (ids, codes, stats, audio outside turns)
        self.extension_events = extension_events or frames_event  # opt-in voicechat.* events (docs/realtime.md)
        self.audio = AudioOut()
        self.response: Optional[Response] = None
        self.user: Optional[dict] = None  # the open user message item
        self.user_previous: Optional[str] = None  # the item before it
        self.user_frames = (0, 0)  # first and last timeline position of the open user item's transcript
        self.muted = False  # after response.cancel, until the model's turn ends
        self.items: OrderedDict[str, dict] = OrderedDict()  # the conversation's items by id, in order
        # assistant message id -> (where each frame's audio ends in ms, its transcript's length then): truncation
        self.spoken: dict[str, list[tuple[Fraction, int]]] = {}
        self.metadata: Optional[dict] = None  # from response.create: tags the next response
        self.waiting: dict[str, dict] = {}  # call_id -> function_call item whose output the session waits for

    def output_format(self, fmt: str) -> None:
        """session.update's output format: frames from now on leave in it."""
        if fmt != self.audio.format:
            self.audio = AudioOut(fmt)

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
        audio, ms = self.audio.encode(frame.audio)
        response = self.response
        if response is not None:
            out.append({"type": "response.output_audio.delta", **response.part(delta=audio)})
            if frame.text:
                response.message["content"][0]["transcript"] += frame.text
                out.append({"type": "response.output_audio_transcript.delta", **response.part(delta=frame.text)})
            spoken = self.spoken[response.message["id"]]
            spoken.append((ms + (spoken[-1][0] if spoken else 0), len(response.transcript)))
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
        self.response = response = Response(new_id("resp"), message, self.metadata, self.audio.format, [message])
        self.metadata = None
        self.spoken[message["id"]] = []
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
                if self.extension_events:
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
        self.items[item["id"]] = item
        return event

    @property
    def last_item(self) -> Optional[str]:
        """The newest item's id (previous_item_id of the next one)."""
        return next(reversed(self.items), None)

    def item(self, item_id) -> dict:
        """The item ``item_id`` of this conversation (ClientEventError naming ``item_id`` if there is none)."""
        if expect(item_id, str, "item_id") not in self.items:
            raise ClientEventError("invalid_value", f"the conversation has no item {item_id}", "item_id")
        return self.items[item_id]

    # ---- client requests ---------------------------------------------------------------------------------------
    def commit(self) -> list[dict]:
        """input_audio_buffer.commit: the open user item (an empty one if the model heard no words yet) is done."""
        out = [] if self.user is not None else self.open_user(self.user_frames[1])
        committed = {"type": "input_audio_buffer.committed", "item_id": self.user["id"],
                     "previous_item_id": self.user_previous}
        return out + [committed, *self.close_user()]

    def retrieve(self, item_id) -> list[dict]:
        return [{"type": "conversation.item.retrieved", "item": copy.deepcopy(self.item(item_id))}]

    def delete(self, item_id) -> list[dict]:
        """conversation.item.delete: the item leaves the server's record of the conversation (clients keep theirs in
        step with it); the model heard what it heard (docs/realtime.md "How a full-duplex model maps")."""
        item = self.item(item_id)
        if item["status"] == "in_progress":
            raise ClientEventError("invalid_value", f"item {item_id} is still in progress; cancel its response or "
                                                    "commit first", "item_id")
        del self.items[item_id]
        self.spoken.pop(item_id, None)
        if item["type"] == "function_call":  # its output can no longer be given
            self.waiting.pop(item["call_id"], None)
        return [{"type": "conversation.item.deleted", "item_id": item_id}]

    def truncate(self, item_id, content_index, audio_end_ms) -> list[dict]:
        """conversation.item.truncate: the client played an assistant message only up to ``audio_end_ms`` (a barge-in).
        Its transcript keeps the words of the frames whose audio began before that, so the record holds only what was
        heard. A response still speaking goes on (clients cancel it with response.cancel, before or after); the model
        heard its own speech whole, as it spoke it."""
        item = self.item(item_id)
        if item_id not in self.spoken:
            raise ClientEventError("invalid_value", f"item {item_id} is not an assistant message", "item_id")
        if content_index != 0:
            raise ClientEventError("invalid_value", "content_index must be 0: the message has one audio part",
                                   "content_index")
        if isinstance(audio_end_ms, bool) or not isinstance(audio_end_ms, int) or audio_end_ms < 0:
            raise ClientEventError("invalid_value", "audio_end_ms must be a whole number of milliseconds, 0 or more",
                                   "audio_end_ms")
        spoken = self.spoken[item_id]
        sent = math.ceil(spoken[-1][0]) if spoken else 0  # the SDKs count whole milliseconds, rounded up
        if audio_end_ms > sent:
            raise ClientEventError("invalid_value", f"audio_end_ms {audio_end_ms} is past the {sent} ms of audio "
                                                    f"item {item_id} has", "audio_end_ms")
        starts = [0] + [end for end, _ in spoken[:-1]]
        heard = [length for start, (_, length) in zip(starts, spoken) if start < audio_end_ms]
        item["content"][0]["transcript"] = item["content"][0]["transcript"][:heard[-1] if heard else 0]
        del spoken[len(heard):]
        return [{"type": "conversation.item.truncated", "item_id": item_id, "content_index": 0,
                       "audio_end_ms": audio_end_ms}]

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
    live displays, to clients that ask for it (``?voicechat_frames=1``: the OpenAI Agents SDK reports an error for
    any event type OpenAI does not define, docs/realtime.md "Clients"). ``audio`` (in the session's output format)
    only for frames outside a response: a response's audio is in its response.output_audio.delta."""
    return {"type": "voicechat.frame", "position": frame.position, "response_id": response_id,
            "text_id": int(frame.text_id), "function_id": int(frame.function_id),
            "codes": np.asarray(frame.codes).tolist(), "text": frame.text, "function_text": frame.function_text,
            "transcript": frame.transcript, "turn": frame.turn,
            "compute_ms": {stage: round(1000 * s, 3) for stage, s in frame.seconds.items()},
            "backlog_ms": round(1000 * backlog_seconds, 1), "audio": audio,
            "events": [{"kind": e.kind, "position": e.position,
                        "calls": [{"call_id": c.call_id, "name": c.name, "arguments": c.arguments, "error": c.error}
                                  for c in e.calls]} for e in frame.events]}
