"""The Realtime (GA) WebSocket server, driven by the official ``openai`` SDK against ``python -m voicechat serve
--demo`` running in its own process.

Every GA event the server sends is validated against the SDK's own pydantic models (the SDK itself parses without
validation, so this is the stricter check). Bad input is sent through the SDK's raw send or a bare socket.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

openai = pytest.importorskip("openai", reason="the Realtime tests need `pip install openai[realtime]`")
pytest.importorskip("websockets", reason="the Realtime server needs `pip install websockets`")
from openai.types.realtime import RealtimeServerEvent  # noqa: E402
from pydantic import TypeAdapter  # noqa: E402
from websockets.exceptions import ConnectionClosed, InvalidStatus  # noqa: E402

from voicechat import realtime  # noqa: E402
from voicechat.timeline.conversation import Frame, Session  # noqa: E402
from voicechat.tools import Tool  # noqa: E402
from voicechat.tools.channel import MAX_RESULT_CHARS  # noqa: E402

GA_EVENT = TypeAdapter(RealtimeServerEvent)
TIMEOUT = 60.0  # seconds to wait for one server event (the CI machine is slow and shared)
MODEL = "voicechat-demo"


# ---------------------------------------------------------------------------------------------------------------
# the server process
# ---------------------------------------------------------------------------------------------------------------
class Server:
    """``python -m voicechat serve --demo --port 0 ARGS``: its URLs and its log. Its clients may send audio ahead
    of real time (a whole recording at once) unless ARGS set ``--max-ahead-seconds``."""

    def __init__(self, tmp: Path, *args: str, **popen):
        self.log = tmp / "serve.log"
        self.out = open(self.log, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "voicechat", "serve", "--demo", "--port", "0",
                                      "--max-ahead-seconds", "0", *args],
                                     stdout=subprocess.PIPE, stderr=self.out, text=True,
                                     env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp / "hf")},
                                     cwd=Path(__file__).parent.parent, **popen)
        line = self.proc.stdout.readline()
        while line and "Realtime API at" not in line:
            line = self.proc.stdout.readline()
        assert line, f"the server did not start:\n{self.log.read_text()}"
        self.ws_url = re.search(r"ws://\S+", line).group(0)
        self.base_url = self.ws_url.replace("ws://", "http://").removesuffix("/realtime")  # what SDK users pass

    def log_text(self) -> str:
        self.out.flush()
        return self.log.read_text()

    def mark(self) -> int:
        return len(self.log_text())

    def wait_for_log(self, pattern: str, since: int = 0, timeout: float = TIMEOUT) -> str:
        """The first log line after offset ``since`` matching ``pattern`` (the server writes it when it has acted)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(f".*{pattern}.*", self.log_text()[since:])
            if found:
                return found.group(0)
            time.sleep(0.05)
        raise AssertionError(f"no log line matches {pattern!r}:\n{self.log_text()[since:]}")

    def wait_idle(self, timeout: float = TIMEOUT) -> None:
        """Until every admitted connection has closed (each logs ": open" and, once it let go, ": closed")."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            log = self.log_text()
            if log.count(": open\n") == log.count(": closed\n"):
                return
            time.sleep(0.05)
        raise AssertionError(f"a connection is still open:\n{self.log_text()}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self.out.close()

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("serve"), "--max-sessions", "1") as s:  # one conversation at a time
        yield s


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("serve-key"), "--api-key", "sesame") as s:
        yield s


# ---------------------------------------------------------------------------------------------------------------
# client helpers
# ---------------------------------------------------------------------------------------------------------------
def client(server: Server, api_key: str = "unused") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key=api_key, base_url=server.base_url)


async def receive(conn) -> dict:
    """The next server event as JSON; GA types must validate against the SDK's models."""
    event = json.loads(await asyncio.wait_for(conn.recv_bytes(), TIMEOUT))
    if not event["type"].startswith("voicechat."):
        GA_EVENT.validate_python(event)
    return event


async def receive_until(conn, kind: str) -> list[dict]:
    """Events up to and including the first of type ``kind``."""
    events = [await receive(conn)]
    while events[-1]["type"] != kind:
        events.append(await receive(conn))
    return events


async def expect_error(conn, code: str, param: str | None = None, event_id: str | None = None) -> dict:
    event = await receive(conn)
    assert event["type"] == "error", event
    assert event["error"]["code"] == code, event
    if param is not None:
        assert event["error"]["param"] == param, event
    assert event["error"]["event_id"] == event_id
    return event["error"]


async def still_answers(conn) -> None:
    """The connection still works after an error: a clear is acknowledged."""
    await conn.input_audio_buffer.clear()
    assert (await receive(conn))["type"] == "input_audio_buffer.cleared"


def run(coro):
    return asyncio.run(coro)


async def close(conn) -> None:
    """Close while still reading: a websockets client stops reading when 16 unread messages wait (flow control),
    and then never sees the server's close reply."""
    async def drain():
        try:
            while True:
                await conn.recv_bytes()
        except ConnectionClosed:
            pass
    reader = asyncio.create_task(drain())
    await conn.close()
    await asyncio.wait_for(reader, TIMEOUT)


async def open_session(server: Server, **query):
    """Connect with the SDK and read session.created; returns (manager, connection, session)."""
    server.wait_idle()
    manager = client(server).realtime.connect(model=MODEL, extra_query=query)
    conn = await manager.enter()
    created = await receive(conn)
    assert created["type"] == "session.created"
    return manager, conn, created["session"]


def serves_next_connection(server: Server) -> None:
    """Once the previous connections have let go of the model, a new one is admitted."""
    server.wait_idle()

    async def scenario():
        async with client(server).realtime.connect(model=MODEL) as conn:
            assert (await receive(conn))["type"] == "session.created"
    run(scenario())


# ---------------------------------------------------------------------------------------------------------------
# protocol layer (no server)
# ---------------------------------------------------------------------------------------------------------------
def test_pcm16_is_decoded_little_endian_and_checked():
    samples = [0, 1, -1, 32767, -32768, 1234]
    event = {"type": "input_audio_buffer.append", "audio": base64.b64encode(struct.pack("<6h", *samples)).decode()}
    assert realtime.decode_audio(event).tolist() == samples
    for audio, code in (("not base64!", "invalid_audio"), (base64.b64encode(b"\x01\x02\x03").decode(), "invalid_audio"),
                        ("A" * (15 * 2 ** 20 + 4), "audio_too_large")):
        with pytest.raises(realtime.ClientEventError) as e:
            realtime.decode_audio({"audio": audio})
        assert e.value.code == code
    with pytest.raises(realtime.ClientEventError) as e:
        realtime.decode_audio({})
    assert (e.value.code, e.value.param) == ("missing_required_parameter", "audio")
    x = np.array([0.0, 0.5, -0.5, 1.5, -1.5], np.float32)  # beyond full scale: clipped
    assert struct.unpack("<5h", base64.b64decode(realtime.encode_audio(x))) == (0, 16384, -16384, 32767, -32767)


def test_session_update_is_partial_and_validated():
    cfg = realtime.SessionConfig().updated({"type": "realtime", "instructions": "Be brief."})
    tool = {"type": "function", "name": "get_time", "description": "the time",
            "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}
    cfg = cfg.updated({"type": "realtime", "audio": {"output": {"voice": "Aria", "format": dict(realtime.PCM)},
                                                     "input": {"format": {"type": "audio/pcm", "rate": 24000},
                                                               "turn_detection": {"type": "server_vad"}}},
                       "tools": [tool]})
    assert (cfg.instructions, cfg.voice) == ("Be brief.", "Aria")
    assert cfg.tools == (Tool("get_time", "the time", {"type": "object", "properties": {"zone": {"type": "string"}}}),)
    assert cfg.tools[0].fn is None  # the client runs it
    ga = cfg.ga("sess_1", MODEL)
    GA_EVENT.validate_python({"type": "session.updated", "event_id": "e", "session": ga})
    assert ga["tools"] == [tool]
    assert cfg.updated({"type": "realtime", "instructions": "Hi."}).tools == cfg.tools  # partial: tools stay
    # OpenAI's voice names (LiveKit sends "marin" unless told otherwise) mean the checkpoint's own voice
    assert cfg.updated({"type": "realtime", "audio": {"output": {"voice": "marin"}}}).voice is None
    bad = [({"instructions": "x"}, "invalid_value", "session.type"),
           ({"type": "transcription"}, "invalid_value", "session.type"),
           ({"type": "realtime", "instructions": 3}, "invalid_value", "session.instructions"),
           ({"type": "realtime", "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}},
            "invalid_value", "session.audio.input.format"),
           ({"type": "realtime", "audio": {"output": {"format": {"type": "audio/pcmu", "rate": 24000}}}},
            "invalid_value", "session.audio.output.format"),
           ({"type": "realtime", "audio": {"output": {"format": {"type": "audio/opus"}}}},
            "invalid_value", "session.audio.output.format"),
           ({"type": "realtime", "output_modalities": ["text"]}, "invalid_value", "session.output_modalities"),
           ({"type": "realtime", "tools": [{"type": "mcp", "server_label": "x"}]}, "invalid_value",
            "session.tools[0].type"),
           ({"type": "realtime", "tools": [{"type": "function"}]}, "missing_required_parameter",
            "session.tools[0].name"),
           ({"type": "realtime", "tools": [{"type": "function", "name": "no spaces"}]}, "invalid_value",
            "session.tools[0]"),
           ({"type": "realtime", "tools": [{**tool, "name": f"t{i}"} for i in range(6)]}, "invalid_value",
            "session.tools"),
           ({"type": "realtime", "tool_choice": "required"}, "invalid_value", "session.tool_choice")]
    for session, code, param in bad:
        with pytest.raises(realtime.ClientEventError) as e:
            cfg.updated(session)
        assert (e.value.code, e.value.param) == (code, param), session


def test_client_events_are_parsed_or_rejected_with_ga_codes():
    assert realtime.parse_client_event('{"type": "response.cancel"}') == {"type": "response.cancel"}
    for text, code in (("{oops", "invalid_json"), ("[1, 2]", "invalid_json"), ('{"audio": ""}',
                                                                              "missing_required_parameter")):
        with pytest.raises(realtime.ClientEventError) as e:
            realtime.parse_client_event(text)
        assert e.value.code == code
    for kind, code in (("response.dance", "invalid_value"), ("output_audio_buffer.clear", "unsupported_event")):
        with pytest.raises(realtime.ClientEventError) as e:
            realtime.event_kind({"type": kind})
        assert (e.value.code, e.value.param) == (code, "type")


# ---------------------------------------------------------------------------------------------------------------
# frames -> GA events (hand-made frames: the tiny random model never says BOS or EOS)
# ---------------------------------------------------------------------------------------------------------------
def frame(position: int, text: str = "", turn: str | None = None, transcript: str = "") -> Frame:
    audio = np.sin(np.arange(1764 * position, 1764 * (position + 1)) * 0.05).astype(np.float32) * 0.5
    text_id = {"start": 1, "end": 2}.get(turn, 100 + position if text else 12)
    return Frame(position, text_id, 12, np.full(31, position, np.int32), audio, text, "", transcript, turn,
                 {"total": 0.01})


def mapped(conversation: realtime.RealtimeConversation, frames) -> list[dict]:
    events = [e for f in frames for e in conversation.frame(f, 0.0)]
    for e in events:
        if not e["type"].startswith("voicechat."):
            GA_EVENT.validate_python({"event_id": "event_x", **e})
    return events


def types(events) -> list[str]:
    return [e["type"] for e in events]


RESPONSE_OPENS = ["response.created", "response.output_item.added", "conversation.item.added",
                  "response.content_part.added"]
RESPONSE_CLOSES = ["response.output_audio.done", "response.output_audio_transcript.done", "response.content_part.done",
                   "response.output_item.done", "conversation.item.done", "response.done"]
USER_CLOSES = ["conversation.item.input_audio_transcription.completed", "conversation.item.done"]


def test_a_turn_from_bos_to_eos_is_one_response_and_the_users_words_one_item():
    c = realtime.RealtimeConversation(frames_event=False)
    events = mapped(c, [frame(0, transcript="hel"), frame(1, transcript="lo")])
    assert types(events) == ["conversation.item.added"] + ["conversation.item.input_audio_transcription.delta"] * 2
    user = events[0]["item"]
    assert (user["role"], user["content"][0]["type"]) == ("user", "input_audio")
    events = mapped(c, [frame(2, turn="start")])
    assert types(events) == USER_CLOSES + RESPONSE_OPENS + ["response.output_audio.delta"]
    assert events[0]["transcript"] == "hello" and events[0]["item_id"] == user["id"]
    assert events[4]["previous_item_id"] == user["id"]  # the assistant's message follows the user's
    response_id = events[2]["response"]["id"]
    events = mapped(c, [frame(3, "Hi"), frame(4, " there"), frame(5, turn="end"), frame(6)])
    assert types(events) == (["response.output_audio.delta", "response.output_audio_transcript.delta"] * 2
                             + ["response.output_audio.delta"] + RESPONSE_CLOSES)  # frame 6: outside, no events
    assert {e["response_id"] for e in events if "response_id" in e} == {response_id}
    done = events[-1]["response"]
    assert done["status"] == "completed" and done["output"][0]["content"][0]["transcript"] == "Hi there"
    assert done["output"][0]["status"] == "completed"


def test_text_without_bos_opens_a_response_and_a_bos_inside_one_starts_the_next():
    c = realtime.RealtimeConversation(frames_event=False)
    assert types(mapped(c, [frame(0, "Hm")]))[:4] == RESPONSE_OPENS
    first = c.response.id
    events = mapped(c, [frame(1, turn="start")])
    assert types(events) == RESPONSE_CLOSES + RESPONSE_OPENS + ["response.output_audio.delta"]
    assert events[5]["response"]["id"] == first and c.response.id != first


def test_cancel_ends_the_response_and_the_rest_of_the_turn_belongs_to_none():
    c = realtime.RealtimeConversation(frames_event=False)
    mapped(c, [frame(0, turn="start"), frame(1, "One")])
    response_id = c.response.id
    with pytest.raises(realtime.ClientEventError) as e:
        c.cancel("resp_other")
    assert e.value.code == "response_cancel_not_active"
    events = c.cancel(response_id)
    assert types(events) == RESPONSE_CLOSES
    assert events[-1]["response"]["status"] == "cancelled"
    assert events[-1]["response"]["status_details"] == {"type": "cancelled", "reason": "client_cancelled"}
    assert mapped(c, [frame(2, " two"), frame(3, turn="end")]) == []  # the model finishes its turn unheard
    assert types(mapped(c, [frame(4, "Next")]))[:4] == RESPONSE_OPENS
    with pytest.raises(realtime.ClientEventError):
        realtime.RealtimeConversation(frames_event=False).cancel(None)


def test_truncate_keeps_the_words_played_and_delete_and_retrieve_work_on_the_record():
    """A barge-in's truncate cuts an assistant message's transcript to the frames whose audio began before
    ``audio_end_ms`` (and leaves its response running); delete drops finished items; retrieve returns one."""
    c = realtime.RealtimeConversation(frames_event=False)
    events = mapped(c, [frame(0, transcript="hi"), frame(1, turn="start"), frame(2, "One"), frame(3, " two")])
    user, message = (e["item"]["id"] for e in events if e["type"] == "conversation.item.added")
    samples = [len(base64.b64decode(e["delta"])) // 2 for e in events if e["type"] == "response.output_audio.delta"]
    played = sum(samples) * 1000 / realtime.RATE
    for item_id, index, end, param in (("item_x", 0, 0, "item_id"), (user, 0, 0, "item_id"),
                                       (message, 1, 0, "content_index"), (message, 0, -1, "audio_end_ms"),
                                       (message, 0, int(played) + 2, "audio_end_ms")):
        with pytest.raises(realtime.ClientEventError) as e:
            c.truncate(item_id, index, end)
        assert (e.value.code, e.value.param) == ("invalid_value", param)
    with pytest.raises(realtime.ClientEventError) as e:
        c.delete(message)  # still speaking
    assert (e.value.code, e.value.param) == ("invalid_value", "item_id")
    heard = int(sum(samples[:-1]) * 1000 / realtime.RATE)  # the last frame (" two") began at or after this
    events = c.truncate(message, 0, heard)  # the frames of BOS and "One" were played
    assert events == [{"type": "conversation.item.truncated", "item_id": message, "content_index": 0,
                       "audio_end_ms": heard}]
    assert c.retrieve(message)[0]["item"]["content"][0]["transcript"] == "One"
    assert c.response is not None  # the response goes on until response.cancel
    assert types(c.cancel(None)) == RESPONSE_CLOSES
    assert types(c.delete(user)) == ["conversation.item.deleted"]
    with pytest.raises(realtime.ClientEventError):
        c.retrieve(user)
    assert c.retrieve(message)[0]["type"] == "conversation.item.retrieved"


def test_commit_closes_the_users_item_even_before_any_words():
    c = realtime.RealtimeConversation(frames_event=False)
    events = c.commit()
    assert types(events) == ["conversation.item.added", "input_audio_buffer.committed"] + USER_CLOSES
    first = events[0]["item"]["id"]
    assert events[1]["item_id"] == first and events[1]["previous_item_id"] is None
    assert events[2]["transcript"] == ""
    events = mapped(c, [frame(0, transcript="yes")]) + c.commit()
    assert types(events) == ["conversation.item.added", "conversation.item.input_audio_transcription.delta",
                             "input_audio_buffer.committed"] + USER_CLOSES
    assert events[2]["item_id"] == events[0]["item"]["id"] != first
    assert events[0]["previous_item_id"] == events[2]["previous_item_id"] == first
    assert events[3]["transcript"] == "yes"


def test_every_frames_audio_leaves_once_resampled_like_the_whole_answer():
    """In-response audio in response.output_audio.delta, the rest in voicechat.frame: together they are the whole
    answer resampled to 24 kHz at once (soxr), as PCM16."""
    import soxr

    c = realtime.RealtimeConversation(frames_event=True)
    frames = [frame(0), frame(1, "A"), frame(2, "b"), frame(3, turn="end"), frame(4), frame(5, turn="start"),
              frame(6)]
    events = mapped(c, frames)
    pcm = b"".join(base64.b64decode(e["delta"] if e["type"] == "response.output_audio.delta" else e["audio"])
                   for e in events if e["type"] == "response.output_audio.delta"
                   or (e["type"] == "voicechat.frame" and e["audio"] is not None))
    got = np.frombuffer(pcm, "<i2")
    whole = soxr.resample(np.concatenate([f.audio for f in frames]), 22050, 24000)
    expected = np.round(np.clip(whole, -1, 1) * 32767).astype(np.int16)
    assert 0 < len(expected) - len(got) < 1920  # soxr works in blocks: it holds back under one frame (<= 42 ms)
    assert np.array_equal(got, expected[:len(got)])
    per_frame = [e for e in events if e["type"] == "voicechat.frame"]
    assert [e["position"] for e in per_frame] == list(range(7))
    assert [e["response_id"] is None for e in per_frame] == [True, False, False, False, True, False, False]
    assert per_frame[2]["codes"] == [2] * 31 and per_frame[2]["text_id"] == 102 and per_frame[2]["text"] == "b"


# ---------------------------------------------------------------------------------------------------------------
# the server: connection, bad input, busy, auth
# ---------------------------------------------------------------------------------------------------------------
def test_sdk_connects_and_gets_a_ga_session(server):
    async def scenario():
        manager, conn, session = await open_session(server)
        try:
            assert session["type"] == "realtime" and session["model"] == MODEL
            assert session["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
            assert session["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": 24000}
        finally:
            await close(conn)
    run(scenario())


def test_each_bad_input_gets_an_error_and_the_connection_goes_on(server):
    async def scenario():
        manager, conn, _ = await open_session(server)
        try:
            await conn.send_raw("{this is not json")
            await expect_error(conn, "invalid_json")
            await conn.send_raw(b"\x00\x01binary")
            await expect_error(conn, "invalid_json")
            await conn.send_raw(json.dumps({"type": "response.dance", "event_id": "evt_1"}))
            assert "response.dance" in (await expect_error(conn, "invalid_value", "type", "evt_1"))["message"]
            await conn.send_raw(json.dumps({"type": "output_audio_buffer.clear"}))
            await expect_error(conn, "unsupported_event", "type")
            for kind in ("truncate", "delete", "retrieve"):
                await conn.send_raw(json.dumps({"type": f"conversation.item.{kind}", "item_id": "x", "content_index": 0,
                                                "audio_end_ms": 0}))
                await expect_error(conn, "invalid_value", "item_id")
            pcm = base64.b64encode(np.zeros(2400, "<i2").tobytes()).decode()
            await conn.send_raw(json.dumps({"type": "input_audio_buffer.append", "audio": pcm, "event_id": "evt_2"}))
            await expect_error(conn, "session_not_configured", event_id="evt_2")
            await conn.send_raw(json.dumps({"type": "input_audio_buffer.append", "audio": "A" * (15 * 2 ** 20 + 4)}))
            await expect_error(conn, "audio_too_large", "audio")
            await conn.send_raw(json.dumps({"type": "input_audio_buffer.append", "audio": "AA=="}))  # 1 byte
            await expect_error(conn, "invalid_audio", "audio")
            await conn.session.update(session={"type": "realtime", "audio": {
                "input": {"format": {"type": "audio/pcm", "rate": 16000}}}})
            await expect_error(conn, "invalid_value", "session.audio.input.format")
            await conn.session.update(session={"type": "realtime",
                                               "audio": {"input": {"format": {"type": "audio/pcmu", "rate": 16000}}}})
            await expect_error(conn, "invalid_value", "session.audio.input.format")
            await conn.input_audio_buffer.commit()
            await expect_error(conn, "input_audio_buffer_commit_empty")
            await conn.response.cancel()
            await expect_error(conn, "response_cancel_not_active")
            await conn.conversation.item.create(item={"type": "message", "role": "user",
                                                      "content": [{"type": "input_text", "text": "hi"}]})
            await expect_error(conn, "invalid_value", "item.type")
            await still_answers(conn)
        finally:
            await close(conn)
    run(scenario())
    log = server.log_text()
    for code in ("invalid_json", "invalid_value", "unsupported_event", "session_not_configured", "audio_too_large",
                 "invalid_audio", "input_audio_buffer_commit_empty", "response_cancel_not_active"):
        assert re.search(f"connection \\d+ from \\S+: {code}: ", log), code  # the log says why
    serves_next_connection(server)


def test_a_message_over_the_websocket_limit_closes_that_connection_cleanly(server):
    mark = server.mark()

    async def scenario():
        manager, conn, _ = await open_session(server)
        with pytest.raises(ConnectionClosed) as closed:
            await conn.send_raw(json.dumps({"type": "input_audio_buffer.append",
                                            "audio": "A" * (realtime.MAX_MESSAGE_BYTES + 1)}))
            await asyncio.wait_for(conn.recv_bytes(), TIMEOUT)
        assert closed.value.rcvd.code == 1009  # "message too big"
    run(scenario())
    server.wait_for_log("closed: the client sent a message over the 16 MiB WebSocket limit", mark)
    serves_next_connection(server)


def handshake(port: int) -> socket.socket:
    """A bare-socket WebSocket upgrade of /v1/realtime (a client we can make vanish at any byte)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET {realtime.PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    reply = b""
    while b"\r\n\r\n" not in reply:
        reply += sock.recv(4096)
    assert reply.startswith(b"HTTP/1.1 101"), reply
    return sock


def vanish_mid_frame(sock: socket.socket, server: Server, mark: int) -> None:
    """The client dies mid-frame (a masked text frame that announces 1000 payload bytes, of which 10 arrive, then a
    reset, no goodbye); the server says so and closes that connection."""
    sock.sendall(bytes([0x81, 0x80 | 126]) + struct.pack(">H", 1000) + os.urandom(4) + b"x" * 10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
    name = re.match(r".*(connection \d+ from \S+): the client vanished without a close frame",
                    server.wait_for_log("the client vanished without a close frame", mark)).group(1)
    server.wait_for_log(f"{name}: closed", mark)


def test_a_client_that_vanishes_mid_frame_frees_the_model(server):
    port = int(re.search(r":(\d+)/", server.ws_url).group(1))
    mark = server.mark()
    vanish_mid_frame(handshake(port), server, mark)
    serves_next_connection(server)


def test_a_second_connection_is_refused_with_server_busy_and_1013(server):
    server.wait_idle()
    mark = server.mark()

    async def scenario():
        first_manager, first, _ = await open_session(server)
        try:
            async with client(server).realtime.connect(model=MODEL) as second:
                assert (await expect_error(second, "server_busy"))["type"] == "server_error"
                with pytest.raises(ConnectionClosed) as closed:
                    await asyncio.wait_for(second.recv_bytes(), TIMEOUT)
                assert closed.value.rcvd.code == realtime.CLOSE_TRY_AGAIN_LATER
            await still_answers(first)  # the first conversation is untouched
        finally:
            await close(first)
    run(scenario())
    server.wait_for_log("server_busy: connection", mark)
    serves_next_connection(server)


def test_api_key_is_required_when_set(keyed_server):
    async def refused(api_key):
        with pytest.raises(InvalidStatus) as e:
            async with client(keyed_server, api_key).realtime.connect(model=MODEL):
                pass
        assert e.value.response.status_code == 403

    async def accepted_with_header():
        async with client(keyed_server, "sesame").realtime.connect(model=MODEL) as conn:
            assert (await receive(conn))["type"] == "session.created"

    async def accepted_with_browser_subprotocol():
        from websockets.asyncio.client import connect

        async with connect(keyed_server.ws_url, subprotocols=["realtime", "openai-insecure-api-key.sesame"]) as ws:
            assert ws.subprotocol == "realtime"
            assert json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))["type"] == "session.created"

    async def refused_without_key():
        from websockets.asyncio.client import connect

        with pytest.raises(InvalidStatus) as e:
            async with connect(keyed_server.ws_url):
                pass
        assert e.value.response.status_code == 403

    run(refused("wrong"))
    run(refused_without_key())
    keyed_server.wait_for_log("refused: no valid API key")  # the log says why
    run(accepted_with_header())
    run(accepted_with_browser_subprotocol())


def test_models_lists_the_model_under_the_api_key(server, keyed_server):
    """``GET /v1/models`` as OpenAI's SDK reads it: the one model served; a keyed server wants the key (401)."""
    async def scenario():
        assert [(m.id, m.object) for m in (await client(server).models.list()).data] == [(MODEL, "model")]
        assert [m.id for m in (await client(keyed_server, "sesame").models.list()).data] == [MODEL]
        with pytest.raises(openai.AuthenticationError):
            await client(keyed_server, "wrong").models.list()
    run(scenario())


def test_realtime_without_v1_answers_as_v1_realtime(server, keyed_server):
    """``/realtime`` (NVIDIA's NIM serves it for Pipecat) is the same endpoint: a GA session, the same errors, the
    same API key."""
    from websockets.asyncio.client import connect

    async def scenario():
        server.wait_idle()
        async with connect(server.ws_url.replace("/v1/realtime", "/realtime")) as ws:
            assert json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))["type"] == "session.created"
            await ws.send("{oops")
            error = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
            assert (error["type"], error["error"]["code"]) == ("error", "invalid_json")
        with pytest.raises(InvalidStatus) as e:
            async with connect(keyed_server.ws_url.replace("/v1/realtime", "/realtime")):
                pass
        assert e.value.response.status_code == 403
    run(scenario())


# ---------------------------------------------------------------------------------------------------------------
# a conversation through the SDK, compared with the same session run here
# ---------------------------------------------------------------------------------------------------------------
WAV = Path(__file__).parent / "fixtures" / "nemo" / "question_16k.wav"
PROMPT = "Be brief."
CHUNK = 2400  # 100 ms at 24 kHz: appends do not line up with the model's 80 ms frames


def pcm16_24k(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """What a GA client sends for a recording: (the original at its rate as float, 24 kHz PCM16)."""
    import soundfile as sf
    import soxr

    x, rate = sf.read(str(path), dtype="float32")
    return x, np.round(np.clip(soxr.resample(x, rate, realtime.RATE), -1, 1) * 32767).astype(np.int16)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """The demo model, built here the way ``serve --demo`` builds it (same seed, same weights)."""
    import voicechat
    from voicechat.random_checkpoint import write_tiny_checkpoint

    return voicechat.load(write_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), seed=0), offline=True)


def session_frames(model, chunks, rate) -> tuple[list, int]:
    """A session fed ``chunks`` at ``rate``: (its frames, its prompt length)."""
    session = model.session(system_prompt=PROMPT)
    return [f for chunk in chunks for f in session.feed(chunk, rate)], session.prompt_frames


def decoded(events, kind: str, field: str = "delta") -> list:
    return [e[field] for e in events if e["type"] == kind]


async def read_until_frame(conn, events: list, position: int) -> list:
    """``events`` and those after them, up to the ``voicechat.frame`` of timeline ``position``."""
    while not (events[-1]["type"] == "voicechat.frame" and events[-1]["position"] == position):
        events.append(await receive(conn))
    return events


def answer_pieces(events) -> list[str]:
    """The whole answer's audio, one base64 piece per frame in order: a response's audio deltas, and between turns
    the audio of ``voicechat.frame``."""
    return [e["delta"] if e["type"] == "response.output_audio.delta" else e["audio"] for e in events
            if e["type"] == "response.output_audio.delta" or (e["type"] == "voicechat.frame" and e["audio"])]


def test_sdk_conversation_carries_exactly_the_sessions_frames(server, tiny_model):
    """Stream a WAV as a GA client does; the ids, codes, texts and audio that come back are the session's for the
    same audio, and the resampling to 24 kHz and back is all the transport changes."""
    import soxr

    original, pcm = pcm16_24k(WAV)
    sent = np.concatenate([pcm, np.zeros(realtime.RATE, np.int16)])  # then 1 s of silence
    chunks = [sent[i:i + CHUNK] for i in range(0, len(sent), CHUNK)]
    expected, prompt_frames = session_frames(tiny_model, chunks, realtime.RATE)

    async def scenario():
        manager, conn, _ = await open_session(server, voicechat_frames="1")
        try:
            await conn.session.update(session={"type": "realtime", "instructions": PROMPT})
            events = await receive_until(conn, "session.updated")
            assert events[-1]["session"]["instructions"] == PROMPT
            for chunk in chunks:
                await conn.input_audio_buffer.append(audio=base64.b64encode(chunk.astype("<i2").tobytes()).decode())
            await conn.input_audio_buffer.commit()
            return await read_until_frame(conn, events, expected[-1].position)
        finally:
            await close(conn)

    events = run(scenario())
    kinds = types(events)
    ready = events[kinds.index("voicechat.session.ready")]
    assert ready["prompt_frames"] == prompt_frames
    frames = [e for e in events if e["type"] == "voicechat.frame"]
    assert [f["position"] for f in frames] == [f.position for f in expected]
    assert [f["text_id"] for f in frames] == [f.text_id for f in expected]
    assert [f["function_id"] for f in frames] == [f.function_id for f in expected]
    assert all(f["codes"] == e.codes.tolist() for f, e in zip(frames, expected))
    # the texts: the assistant's words in its responses (this random model never ends a turn), the user's in items
    assert "".join(decoded(events, "response.output_audio_transcript.delta")) == "".join(f.text for f in expected)
    heard = "".join(decoded(events, "conversation.item.input_audio_transcription.delta"))
    assert heard == "".join(f.transcript for f in expected) != ""
    assert "input_audio_buffer.committed" in kinds
    # every audio delta belongs to the response that was created before it, on its message item
    created = {e["response"]["id"]: e["response"] for e in events if e["type"] == "response.created"}
    items = {e["response_id"]: e["item"]["id"] for e in events if e["type"] == "response.output_item.added"}
    deltas = [e for e in events if e["type"] == "response.output_audio.delta"]
    assert deltas and all(d["response_id"] in created and d["item_id"] == items[d["response_id"]] for d in deltas)
    first_audio = kinds.index("response.output_audio.delta")
    assert kinds.index("response.created") < first_audio
    # the audio: one piece per frame, in order, equal to the session's answer resampled to 24 kHz at once
    pieces = answer_pieces(events)
    assert len(pieces) == len(expected)
    got = np.frombuffer(b"".join(base64.b64decode(p) for p in pieces), "<i2")
    whole = soxr.resample(np.concatenate([f.audio for f in expected]), 22050, 24000)
    assert np.array_equal(got, np.round(np.clip(whole, -1, 1) * 32767).astype(np.int16)[:len(got)])
    assert 0 < len(whole) - len(got) < 1920  # soxr's stream holds back under one frame
    # what the 24 kHz PCM16 transport costs: the input differs from the 16 kHz original only above soxr's passband
    # (7 kHz of 8) and by PCM16 rounding; how far that moves a model's ids is the model's own sensitivity (a random
    # one sits near its decision boundaries), so it is measured and printed
    direct, _ = session_frames(tiny_model, [np.concatenate([original, np.zeros(16000, np.float32)])], 16000)
    common = min(len(direct), len(expected))
    moved = sum(a.text_id != b.text_id or not np.array_equal(a.codes, b.codes)
                for a, b in zip(direct[:common], expected[:common]))
    back = soxr.resample(pcm.astype(np.float32) / 32767, realtime.RATE, 16000)[:len(original)]
    in_band = np.fft.rfftfreq(len(original), 1 / 16000) <= 7000
    signal = np.sum(np.abs(np.fft.rfft(original)[in_band]) ** 2)
    snr = 10 * np.log10(signal / np.sum(np.abs(np.fft.rfft(back - original)[in_band]) ** 2))
    rms = np.sqrt(np.mean(original ** 2))
    rounding_limit = 20 * np.log10(rms / (1 / 32767 / np.sqrt(12)))  # PCM16 rounding noise over the full band
    print(f"\n24 kHz PCM16 round trip: in-band SNR {snr:.1f} dB (PCM16 rounding alone: {rounding_limit:.1f} dB); "
          f"the random tiny model's text id or codes differ from the 16 kHz original's at {moved} of {common} frames")
    assert snr >= rounding_limit


@pytest.fixture
def fresh_server(tmp_path):
    """A server of its own: the memory it measures is not what earlier tests left (15 MiB appends, ...)."""
    with Server(tmp_path, "--max-sessions", "1") as s:
        yield s


def bad_requests() -> list:
    """One bad request of each kind a client can send before its conversation (docs/limits.md), with the error code
    and param each must get: (raw message, code, param)."""
    pcm = base64.b64encode(np.zeros(2400, "<i2").tobytes()).decode()

    def update(**session) -> str:
        return json.dumps({"type": "session.update", "session": {"type": "realtime", **session}})

    return [
        ("{this is not json", "invalid_json", None),
        (b"\x00\x01binary", "invalid_json", None),
        (json.dumps({"type": "response.dance"}), "invalid_value", "type"),
        (json.dumps({"type": "input_audio_buffer.clear", "event_id": "evt\ud800"}), "invalid_value", "event_id"),
        (update(instructions="y" * 100_000), "invalid_value", "session.instructions"),
        (update(instructions=LONG_PROMPT), "invalid_value", "session.instructions"),
        (update(instructions="caf\udce9"), "invalid_value", "session.instructions"),
        (update(tools=[{"type": "function", "description": "no name"}]), "missing_required_parameter",
         "session.tools[0].name"),
        (json.dumps({"type": "input_audio_buffer.append", "audio": "not base64!"}), "invalid_audio", "audio"),
        (json.dumps({"type": "input_audio_buffer.append", "audio": "AA=="}), "invalid_audio", "audio"),
        (json.dumps({"type": "input_audio_buffer.append", "audio": pcm}), "session_not_configured", None),
        (json.dumps({"type": "conversation.item.create", "item": {"type": "function_call_output", "call_id": "c1",
                                                                   "output": "{}"}}), "invalid_value", "item.call_id"),
    ]


# a prompt under the character cap that takes more than MAX_PROMPT_POSITIONS positions with any tokenizer
LONG_PROMPT = " ".join(f"w{i}" for i in range(4000))


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_soak_fifty_conversations_with_bad_requests_then_five_at_once_leave_the_server_as_it_was(fresh_server):
    """50 conversations one after another, each after a bad request of one kind (cycling through them all), then 5
    simultaneous connection attempts (one is admitted, four are told server_busy): the server's resident memory,
    threads and file descriptors afterwards are those after the first two conversations (memory within
    SOAK_MEMORY_BOUND_KIB, threads and descriptors exactly)."""
    server = fresh_server
    half_second = base64.b64encode(np.zeros(realtime.RATE // 2, "<i2").tobytes()).decode()
    bad = bad_requests()

    async def conversation(i: int):
        manager, conn, _ = await open_session(server, voicechat_frames="1")
        try:
            message, code, param = bad[i % len(bad)]
            await conn.send_raw(message)
            assert (await expect_error(conn, code, param))["message"]
            await conn.session.update(session={"type": "realtime", "instructions": PROMPT})
            await conn.input_audio_buffer.append(audio=half_second)
            await receive_until(conn, "voicechat.frame")
        finally:
            await close(conn)

    async def attempt():
        async with client(server).realtime.connect(model=MODEL) as conn:
            first = await receive(conn)
            if first["type"] == "session.created":
                await asyncio.sleep(1.0)  # hold the model while the others knock
            return first["type"] if first["type"] != "error" else first["error"]["code"]

    async def five_at_once():
        return sorted(await asyncio.gather(*(attempt() for _ in range(5))))

    for i in range(2):  # warm-up: the first conversations allocate what every later one reuses
        run(conversation(i))
        server.wait_idle()
    pid = server.proc.pid
    before = {**process_status(pid), "Threads": settled_threads(pid), "fds": fd_count(pid)}
    for i in range(50):
        run(conversation(i))
        server.wait_idle()
    assert run(five_at_once()) == ["server_busy"] * 4 + ["session.created"]
    server.wait_idle()
    after = {**process_status(pid), "Threads": settled_threads(pid), "fds": fd_count(pid)}
    print(f"\nserver after two conversations / after 50 more and 5 attempts: memory {before['VmRSS'] / 1024:.1f} / "
          f"{after['VmRSS'] / 1024:.1f} MiB, threads {before['Threads']} / {after['Threads']}, "
          f"descriptors {before['fds']} / {after['fds']}")
    assert abs(after["VmRSS"] - before["VmRSS"]) <= SOAK_MEMORY_BOUND_KIB
    assert (after["Threads"], after["fds"]) == (before["Threads"], before["fds"])
    serves_next_connection(server)


def test_conversations_leave_no_threads_behind(server):
    """MLX keeps a stream's thread for the life of the process: sessions share the model's streams."""
    half_second = base64.b64encode(np.zeros(realtime.RATE // 2, "<i2").tobytes()).decode()

    async def conversation():
        manager, conn, _ = await open_session(server)
        try:
            await conn.session.update(session={"type": "realtime", "instructions": PROMPT})
            await conn.input_audio_buffer.append(audio=half_second)
            await receive_until(conn, "response.output_audio.delta")
        finally:
            await close(conn)

    run(conversation())
    server.wait_idle()
    before = settled_threads(server.proc.pid)
    for _ in range(3):
        run(conversation())
        server.wait_idle()
    assert settled_threads(server.proc.pid) == before


def settled_threads(pid: int, reads: int = 10, timeout: float = TIMEOUT) -> int:
    """The process's thread count once it holds still for ``reads`` reads 50 ms apart: a connection logs ": closed"
    a moment before the threads that served it have returned (measured once in CI: 14, then 13)."""
    deadline, seen = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        seen = (seen + [process_status(pid)["Threads"]])[-reads:]
        if len(seen) == reads and len(set(seen)) == 1:
            return seen[0]
        time.sleep(0.05)
    raise AssertionError(f"the thread count did not settle: {seen}")


# 0.3 MiB per connection over the 55: far less than one conversation's session state, so a conversation that is not
# freed shows; allocator noise stays below it (measured: 1-3 MiB; the Python heap itself grows by ~0.1 MiB)
SOAK_MEMORY_BOUND_KIB = 16 * 1024


def process_status(pid: int) -> dict:
    """Resident memory (KiB) and thread count of a process (Linux /proc)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return {key: int(re.search(rf"{key}:\s+(\d+)", status).group(1)) for key in ("VmRSS", "Threads")}


# ---------------------------------------------------------------------------------------------------------------
# scripted channels: the tiny model, its text or function ids fixed by the session's ``script`` seam, served here
# ---------------------------------------------------------------------------------------------------------------
LOOKUP = {"type": "function", "name": "lookup", "description": "Looks something up.",
          "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}
CALL = '<TOOLCALL>[{"name": "lookup", "arguments": {"q": "tides"}}]</TOOLCALL>'
PAD, BOS, EOS = 12, 1, 2


class Scripted:
    """The real tiny model; each session it makes follows a script: ``calls`` written on the function channel
    (``ScriptedHead`` of test_tools.py, the first ``call_at`` positions after the prompt), and/or on the text
    channel ``words`` (PAD, then BOS, the words and EOS, counted in positions after the prompt) or ``text`` (a
    function of that count: the id). The engine runs it as it runs any model; ``made`` keeps its sessions."""

    def __init__(self, model, calls=(), words: tuple[int, list[int]] | None = None, text=None, call_at: int = 5):
        self.model, self.calls, self.words, self.text, self.call_at = model, list(calls), words, text, call_at
        self.made: list[Session] = []

    def __getattr__(self, name):
        return getattr(self.model, name)

    def text_id(self, offset: int) -> int:
        if self.text is not None:
            return self.text(offset)
        start, ids = self.words
        turn = [BOS, *ids, EOS]
        return turn[offset - start] if start <= offset < start + len(turn) else PAD

    def sessions(self, max_sessions, max_minutes=None):
        """The engine's group: its conversations follow the script too."""
        from voicechat.timeline.loop import SessionGroup

        scripted = self

        class Group(SessionGroup):
            def session(self, system_prompt="", seed=0, speaker=None, config=None, tools=()):
                return scripted.session(system_prompt, seed, speaker, config, tools, group=self)

        return Group(self.model, max_sessions, max_minutes)

    def session(self, system_prompt="", seed=0, speaker=None, config=None, tools=(), group=None):
        from test_tools import ScriptedHead

        head = ScriptedHead(self.model.tokenizer, self.calls, first=self.call_at)
        texts = self.words or self.text

        def script(t):
            if head.session is None or t < head.session.prompt_frames:
                return None, None  # the prompt
            return (self.text_id(t - head.session.prompt_frames) if texts else None,
                    head.function_id() if head.session.tool_channel is not None else None)

        head.session = Session(self.model, system_prompt, seed, speaker, config, tools, script=script, group=group)
        self.made.append(head.session)
        return head.session


def serve_here(model):
    """``RealtimeServer`` on an engine running ``model``, served by uvicorn on a thread of this process; yields the
    base URL, then stops both."""
    import threading

    import uvicorn

    from voicechat import engine as eng

    engine = eng.Engine(lambda progress_bar: model, name=MODEL).start()
    while engine.status().state != eng.READY:
        time.sleep(0.05)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    app = realtime.create_app(engine, model_name=MODEL, ahead_seconds=0)  # the scripts' audio is sent at once
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    server.should_exit = True
    thread.join(30)
    engine.close()


@pytest.fixture(scope="module")
def scripted_server(tiny_model):
    yield from serve_here(Scripted(tiny_model, calls=[CALL]))


TURN_START = 4  # positions after the prompt
WORDS = " Hello there"


@pytest.fixture(scope="module")
def turn_server(tiny_model):
    yield from serve_here(Scripted(tiny_model, words=(TURN_START, tiny_model.tokenizer.encode(WORDS))))


CLEANED_WORDS = " it is n't so ' s ."  # transformers' space clean-up joins " n" + "'t", "  ' s" and " ." across ids


@pytest.fixture(scope="module")
def cleaned_model(tmp_path_factory):
    """The demo model, its tokenizer_config.json asking for transformers' space clean-up."""
    import voicechat
    from voicechat.random_checkpoint import write_tiny_checkpoint

    directory = write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-cleaned"), seed=0)
    for settings in directory.rglob("tokenizer_config.json"):
        settings.write_text(json.dumps({**json.loads(settings.read_text()), "clean_up_tokenization_spaces": True}))
    model = voicechat.load(directory, offline=True)
    assert model.tokenizer.clean_up_spaces
    return model


@pytest.fixture(scope="module")
def cleaned_turn_server(cleaned_model):
    yield from serve_here(Scripted(cleaned_model, words=(TURN_START, cleaned_model.tokenizer.encode(CLEANED_WORDS))))


def test_sdk_transcript_deltas_never_take_text_back(cleaned_turn_server, cleaned_model):
    """With the space clean-up, later tokens change the end of the text before them (" is n" + "'t" -> " isn't"):
    the response's transcript deltas, appended as a GA client appends them, are its done transcript, and that is
    the decode of the turn's tokens (NVIDIA's string), nothing shown twice."""
    tok = cleaned_model.tokenizer
    words = tok.encode(CLEANED_WORDS)
    assert any(not tok.decode(words[:n + 1]).startswith(tok.decode(words[:n])) for n in range(len(words)))
    events, _ = turn_events(cleaned_turn_server, len(words))
    done = next(e for e in events if e["type"] == "response.done")
    deltas = decoded(events, "response.output_audio_transcript.delta")
    assert done["response"]["output"][0]["content"][0]["transcript"] == "".join(deltas) == tok.decode(words)
    assert tok.decode(words) == " it isn't so's."


def turn_events(url: str, words: int) -> tuple[list, int]:
    """A GA client's events until the frame after the scripted turn's EOS (``words`` tokens after the BOS), and the
    prompt's positions."""
    audio = np.round(np.random.default_rng(1).standard_normal(realtime.RATE * 2) * 3000).astype("<i2")
    last = TURN_START + words + 1  # the EOS, after the prompt

    async def scenario():
        conn = await openai.AsyncOpenAI(api_key="unused", base_url=url).realtime.connect(
            model=MODEL, extra_query={"voicechat_frames": "1"}).enter()
        try:
            await conn.session.update(session={"type": "realtime", "instructions": PROMPT})
            events = await receive_until(conn, "voicechat.session.ready")
            prompt = events[-1]["prompt_frames"]
            await conn.input_audio_buffer.append(audio=base64.b64encode(audio.tobytes()).decode())
            while not (events[-1]["type"] == "voicechat.frame" and events[-1]["position"] > prompt + last):
                events.append(await receive(conn))
            return events, prompt
        finally:
            await close(conn)

    return run(scenario())


def test_sdk_a_turn_from_bos_to_eos_is_one_response(turn_server, tiny_model):
    """The model's own turn-taking on the text channel (scripted: BOS, the words, EOS) is one response: it opens
    at the BOS frame, carries that turn's audio and words, and is done at the EOS frame."""
    words = tiny_model.tokenizer.encode(WORDS)
    last = TURN_START + len(words) + 1  # the EOS, after the prompt
    events, prompt = turn_events(turn_server, len(words))
    frames = {e["position"] - prompt: e for e in events if e["type"] == "voicechat.frame"}
    created = next(e for e in events if e["type"] == "response.created")
    done = next(e for e in events if e["type"] == "response.done")
    response_id = created["response"]["id"]
    assert [frames[k]["text_id"] for k in range(TURN_START, last + 1)] == [BOS, *words, EOS]
    assert [frames[k]["response_id"] for k in sorted(frames)] == \
        [response_id if TURN_START <= k <= last else None for k in sorted(frames)]
    assert done["response"]["id"] == response_id and done["response"]["status"] == "completed"
    message = done["response"]["output"][0]
    assert message["content"][0]["transcript"] == WORDS == "".join(
        decoded(events, "response.output_audio_transcript.delta"))
    deltas = [e for e in events if e["type"] == "response.output_audio.delta"]
    assert len(deltas) == last - TURN_START + 1 and {d["response_id"] for d in deltas} == {response_id}
    kinds = types(events)
    assert kinds.index("response.created") < kinds.index("response.output_audio.delta")
    assert kinds.index("response.done") > max(i for i, k in enumerate(kinds) if k == "response.output_audio.delta")


def test_sdk_tool_call_round_trip(scripted_server, tiny_model):
    """The model's call reaches the client as a GA function_call (after response.created, with call_id, name and
    arguments; the response ends there), the client's function_call_output goes back into the model's function
    channel, and the conversation goes on. A call id nobody waits for is refused without harming the session."""
    audio = np.round(np.random.default_rng(0).standard_normal(realtime.RATE * 3) * 3000).astype("<i2")

    async def scenario():
        conn = await openai.AsyncOpenAI(api_key="unused", base_url=scripted_server).realtime.connect(
            model=MODEL, extra_query={"voicechat_frames": "1"}).enter()
        try:
            assert (await receive(conn))["type"] == "session.created"
            await conn.session.update(session={"type": "realtime", "instructions": PROMPT, "tools": [LOOKUP]})
            events = await receive_until(conn, "session.updated")
            assert events[-1]["session"]["tools"] == [LOOKUP]
            for i in range(0, len(audio), CHUNK):
                await conn.input_audio_buffer.append(audio=base64.b64encode(audio[i:i + CHUNK].tobytes()).decode())
            events += await receive_until(conn, "response.function_call_arguments.done")
            call = events[-1]
            await conn.conversation.item.create(item={"type": "function_call_output", "call_id": "call_nobody",
                                                      "output": "{}"})
            after = [await receive(conn)]
            while after[-1]["type"] != "error":
                after.append(await receive(conn))
            assert (after[-1]["error"]["code"], after[-1]["error"]["param"]) == ("invalid_value", "item.call_id")
            # an output longer than the model can read is refused before the engine parses or tokenizes it (the
            # engine thread tokenized it in full: 1.7 s per MiB for every conversation); the call still waits
            await conn.conversation.item.create(item={"type": "function_call_output", "call_id": call["call_id"],
                                                      "output": "x" * (MAX_RESULT_CHARS + 1)})
            after.append(await receive(conn))
            while after[-1]["type"] != "error":
                after.append(await receive(conn))
            assert (after[-1]["error"]["code"], after[-1]["error"]["param"]) == ("invalid_value", "item.output")
            assert f"{MAX_RESULT_CHARS + 1} characters" in after[-1]["error"]["message"]
            await conn.conversation.item.create(item={"type": "function_call_output", "call_id": call["call_id"],
                                                      "output": '{"high": "6am"}'})
            while not (after[-1]["type"] == "voicechat.frame"
                       and any(e["kind"] == "end" for e in after[-1]["events"])):
                after.append(await receive(conn))
            return events, call, after
        finally:
            await close(conn)

    events, call, after = run(scenario())
    kinds = types(events)
    assert (call["name"], json.loads(call["arguments"])) == ("lookup", {"q": "tides"})
    assert call["call_id"].startswith("call_") and len(call["call_id"]) <= 32  # OpenAI's cap (LiveKit enforces it)
    response_id = call["response_id"]
    assert kinds.index("response.created") < kinds.index("response.function_call_arguments.done")
    added = next(e for e in events if e["type"] == "response.output_item.added"
                 and e["item"]["type"] == "function_call")
    assert (added["item"]["call_id"], added["response_id"]) == (call["call_id"], response_id)
    assert added["item"]["status"] == "in_progress"
    assert "".join(decoded(events, "response.function_call_arguments.delta")) == call["arguments"]
    done = next(e for e in events + after if e["type"] == "response.output_item.done"
                and e["item"]["type"] == "function_call")
    assert done["item"] == {**added["item"], "status": "completed", "arguments": call["arguments"]}
    ended = next(e for e in events + after if e["type"] == "response.done" and e["response"]["id"] == response_id)
    assert [i["type"] for i in ended["response"]["output"]] == ["message", "function_call"]
    echoed = next(e for e in after if e["type"] == "conversation.item.added")
    assert (echoed["item"]["type"], echoed["item"]["call_id"]) == ("function_call_output", call["call_id"])
    # the output entered the model: the function channel of the positions after the call carries it, then EOTR
    frames = [e for e in events + after if e["type"] == "voicechat.frame"]
    result = next(f for f in frames if any(e["kind"] == "result" for e in f["events"]))
    injected = tiny_model.tokenizer.encode('<TOOL_RESPONSE>[{"high": "6am"}]</TOOL_RESPONSE>')
    start = result["position"]
    by_position = {f["position"]: f for f in frames}
    assert [by_position[start + i]["function_id"] for i in range(len(injected))] == injected
    assert frames[-1]["position"] == start + len(injected)  # the "end" position: the exchange is over


def test_the_readme_example_streams_a_wav_and_saves_the_answer(server, tmp_path):
    import soundfile as sf

    server.wait_idle()
    example = Path(__file__).parent.parent / "docs" / "examples" / "realtime_wav.py"
    out = subprocess.run([sys.executable, str(example), str(WAV), "--url", server.base_url, "--tail", "1",
                          "--out", str(tmp_path / "answer.wav"), "--texts", str(tmp_path / "answer.json")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    texts = json.loads((tmp_path / "answer.json").read_text())
    info = sf.info(str(tmp_path / "answer.wav"))
    assert (info.samplerate, info.channels, info.subtype) == (24000, 1, "PCM_16")
    assert info.duration > 1.0 and texts["answer_seconds"] == round(info.frames / 24000, 2)
    assert texts["user_transcript"] and texts["assistant"]  # the random model hears and says something
    assert f"you said:  {texts['user_transcript']}" in out.stdout


def test_a_voice_is_a_name_of_the_library_never_a_path(server):
    """An unknown name and a server path (even of a file that exists) get invalid_value with the library's names;
    OpenAI's default names and the checkpoint's voice are accepted; adding voices is off without the flag."""
    async def scenario():
        manager, conn, _ = await open_session(server)
        try:
            for voice in ("Nobody", str(WAV), "../../etc/passwd"):
                await conn.session.update(session={"type": "realtime", "audio": {"output": {"voice": voice}}})
                error = await expect_error(conn, "invalid_value", "session.audio.output.voice")
                assert error["message"] == f"no voice called {voice!r}; the voices are: Aria"
            for voice, shown in (("marin", None), ("Aria", "Aria")):
                await conn.session.update(session={"type": "realtime", "audio": {"output": {"voice": voice}}})
                updated = await receive_until(conn, "session.updated")
                assert updated[-1]["session"]["audio"]["output"]["voice"] == shown
            await conn.send({"type": "voicechat.voice.add", "name": "Me", "audio": ""})
            events = await receive_until(conn, "error")
            assert (events[-1]["error"]["code"], events[-1]["error"]["param"]) == ("unsupported_event", "type")
            await conn.send({"type": "voicechat.voice.list"})
            listed = await receive_until(conn, "voicechat.voice.list")
            assert [v["name"] for v in listed[-1]["voices"]] == ["Aria"]
        finally:
            await close(conn)
    run(scenario())
    serves_next_connection(server)


@pytest.fixture(scope="module")
def voice_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve-voices")
    with Server(tmp, "--api-key", "sesame", "--allow-voice-add", "--voices", str(tmp / "voices")) as s:
        s.voices = tmp / "voices"
        yield s


def test_sdk_adds_a_voice_and_the_conversation_speaks_in_it(voice_server, tiny_model, tmp_path):
    """voicechat.voice.add (base64 PCM16 at 24 kHz) refuses a silent recording in one line, stores a good one, and
    a session in that voice carries exactly the frames of a local session with the same voice."""
    from voicechat.voices import VoiceLibrary, checkpoint_voices

    _, speaker = pcm16_24k(Path(__file__).parent / "fixtures" / "nemo" / "speaker_22k.wav")
    wire = base64.b64encode(speaker.astype("<i2").tobytes()).decode()
    silent = base64.b64encode(np.zeros(3 * realtime.RATE, "<i2").tobytes()).decode()
    _, pcm = pcm16_24k(WAV)
    chunks = [pcm[i:i + CHUNK] for i in range(0, len(pcm), CHUNK)]
    local = VoiceLibrary(tmp_path, checkpoint_voices(tiny_model)).add("Fixture", speaker, realtime.RATE,
                                                                      config=tiny_model.config)
    session = tiny_model.session(system_prompt=PROMPT, speaker=local)
    expected = [f for chunk in chunks for f in session.feed(chunk, realtime.RATE)]
    in_aria = tiny_model.session(system_prompt=PROMPT)
    aria = [f for chunk in chunks for f in in_aria.feed(chunk, realtime.RATE)]
    assert any(not np.array_equal(a.codes, e.codes) for a, e in zip(aria, expected))  # the voice is heard

    async def scenario():
        voice_server.wait_idle()
        manager = client(voice_server, "sesame").realtime.connect(model=MODEL, extra_query={"voicechat_frames": "1"})
        conn = await manager.enter()
        try:
            assert (await receive(conn))["type"] == "session.created"
            await conn.send({"type": "voicechat.voice.add", "name": "Quiet", "audio": silent})
            refused = await expect_error(conn, "invalid_audio", "audio")
            await conn.send({"type": "voicechat.voice.add", "name": "Fixture", "audio": wire})
            added = await receive_until(conn, "voicechat.voice.added")
            await conn.send({"type": "voicechat.voice.add", "name": "fixture", "audio": wire})
            taken = await expect_error(conn, "invalid_value", "name")
            await conn.session.update(session={"type": "realtime", "instructions": PROMPT,
                                               "audio": {"output": {"voice": "Fixture"}}})
            events = await receive_until(conn, "session.updated")
            for chunk in chunks:
                await conn.input_audio_buffer.append(audio=base64.b64encode(chunk.astype("<i2").tobytes()).decode())
            while not (events[-1]["type"] == "voicechat.frame" and events[-1]["position"] == expected[-1].position):
                events.append(await receive(conn))
            return refused, added[-1], taken, events
        finally:
            await close(conn)

    refused, added, taken, events = run(scenario())
    assert refused["message"].startswith("the recording is silent") and "\n" not in refused["message"]
    assert added["voice"]["name"] == "Fixture" and added["voice"]["source"] == "realtime"
    assert [v["name"] for v in added["voices"]] == ["Aria", "Fixture"]
    assert taken["message"] == "there is already a voice called Fixture; choose another name"
    assert (voice_server.voices / "Fixture" / "prompt.wav").is_file()
    assert events[0]["session"]["audio"]["output"]["voice"] == "Fixture"
    frames = [e for e in events if e["type"] == "voicechat.frame"]
    assert [f["position"] for f in frames] == [f.position for f in expected]
    assert [f["text_id"] for f in frames] == [f.text_id for f in expected]
    assert all(f["codes"] == e.codes.tolist() for f, e in zip(frames, expected))
    serves_next_connection_with_key(voice_server)


def serves_next_connection_with_key(server: Server) -> None:
    server.wait_idle()

    async def scenario():
        async with client(server, "sesame").realtime.connect(model=MODEL) as conn:
            assert (await receive(conn))["type"] == "session.created"
    run(scenario())


def test_adding_voices_needs_an_api_key(tmp_path):
    p = subprocess.run([sys.executable, "-m", "voicechat", "serve", "--demo", "--allow-voice-add"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    assert p.returncode == 2
    assert p.stderr == "error: --allow-voice-add lets clients write voices into the library: give --api-key too\n"


def test_the_prompt_can_change_until_audio_starts_then_it_is_locked(server, tiny_model):
    pcm = base64.b64encode(np.zeros(CHUNK, "<i2").tobytes()).decode()
    long_prompt = "You are a helpful assistant. Answer in one short sentence."

    async def scenario():
        manager, conn, _ = await open_session(server, voicechat_events="1")
        try:
            await conn.session.update(session={"type": "realtime", "instructions": PROMPT})
            first = await receive_until(conn, "voicechat.session.ready")
            await conn.session.update(session={"type": "realtime", "instructions": long_prompt})
            second = await receive_until(conn, "voicechat.session.ready")  # a new live session, the new prompt
            await conn.input_audio_buffer.append(audio=pcm)
            await conn.session.update(session={"type": "realtime", "instructions": PROMPT})
            locked = await receive_until(conn, "error")
            await conn.session.update(session={"type": "realtime", "instructions": long_prompt})  # unchanged: fine
            unchanged = await receive_until(conn, "session.updated")
            return first, second, locked, unchanged
        finally:
            await close(conn)

    first, second, locked, unchanged = run(scenario())
    prompt_frames = {p: tiny_model.session(system_prompt=p).prompt_frames for p in (PROMPT, long_prompt)}
    assert first[-1]["prompt_frames"] == prompt_frames[PROMPT]
    assert second[-1]["prompt_frames"] == prompt_frames[long_prompt] > prompt_frames[PROMPT]
    assert (locked[-1]["error"]["code"], locked[-1]["error"]["param"]) == ("session_locked", "session")
    assert "error" not in types(unchanged) and unchanged[-1]["session"]["instructions"] == long_prompt
    serves_next_connection(server)


# ---------------------------------------------------------------------------------------------------------------
# hardening (issue 25, docs/limits.md): no request crashes, stalls or holds the model
# ---------------------------------------------------------------------------------------------------------------
def test_lone_surrogates_get_an_error_event_and_the_connection_goes_on(server):
    """A string the server would echo (an event id, instructions, a voice, a tool description) with a lone UTF-16
    surrogate killed the connection's writer (close 1006, nothing logged); a valid pair is text like any other."""
    cases = [({"type": "input_audio_buffer.clear", "event_id": "evt\ud800"}, "event_id"),
             ({"type": "session.update", "session": {"type": "realtime", "instructions": "hi \udc00"}},
              "session.instructions"),
             ({"type": "session.update", "session": {"type": "realtime", "audio": {"output": {"voice": "\ud83d"}}}},
              "session.audio.output.voice"),
             ({"type": "session.update",
               "session": {"type": "realtime", "tools": [{**LOOKUP, "description": "\udfff"}]}},
              "session.tools[0].description")]

    async def scenario():
        manager, conn, _ = await open_session(server, voicechat_events="1")
        try:
            for event, param in cases:
                await conn.send_raw(json.dumps(event))  # json escapes the surrogate: "\ud800"
                assert "lone UTF-16 surrogate" in (await expect_error(conn, "invalid_value", param))["message"]
            await conn.send_raw(json.dumps({"type": "input_audio_buffer.clear", "event_id": "evt \U0001F600"}))
            assert (await receive(conn))["type"] == "input_audio_buffer.cleared"
            await conn.session.update(session={"type": "realtime", "instructions": "Smile \U0001F600."})
            events = await receive_until(conn, "voicechat.session.ready")
            assert events[0]["session"]["instructions"] == "Smile \U0001F600."
            await still_answers(conn)
        finally:
            await close(conn)
    run(scenario())
    serves_next_connection(server)


def test_instructions_past_the_limits_are_refused_before_any_model_work(server):
    """100 KB of instructions made the prefill ask for tens of GB (the process died); a prompt past the cap of
    positions tied the model up for minutes. Both get an error event at once; no live session was opened."""
    async def scenario():
        manager, conn, _ = await open_session(server, voicechat_events="1")
        try:
            await conn.session.update(session={"type": "realtime", "instructions": "y" * 100_000})
            error = await expect_error(conn, "invalid_value", "session.instructions")
            assert "100000 characters; the limit is 32768" in error["message"]
            await conn.session.update(session={"type": "realtime", "instructions": LONG_PROMPT})
            error = await expect_error(conn, "invalid_value", "session.instructions")
            assert "timeline positions; the limit is 2048" in error["message"]
            refused = server.log_text()
            await conn.session.update(session={"type": "realtime", "instructions": PROMPT})
            events = await receive_until(conn, "voicechat.session.ready")  # the next update works
            assert events[0]["session"]["instructions"] == PROMPT
            return refused
        finally:
            await close(conn)
    mark = server.mark()
    refused = run(scenario())
    assert "live session opened" not in refused[mark:]  # neither refusal reached the engine
    serves_next_connection(server)


def test_a_reconnect_right_after_a_clean_close_is_served(server):
    """The slot is free for the next client at once: a client that reconnects as soon as it has sent its close got
    server_busy while the server let go of the previous conversation (~25 ms); now the new connection waits for it."""
    pcm = base64.b64encode(np.zeros(CHUNK, "<i2").tobytes()).decode()
    three_seconds = base64.b64encode(np.zeros(3 * realtime.RATE, "<i2").tobytes()).decode()

    async def scenario():
        firsts, closing = [], None
        for _ in range(5):
            conn = await client(server).realtime.connect(model=MODEL, extra_query={"voicechat_events": "1"}).enter()
            if closing is not None:
                await closing
            first = await receive(conn)
            firsts.append(first["type"] if first["type"] != "error" else first["error"]["code"])
            if first["type"] == "session.created":
                await conn.session.update(session={"type": "realtime", "instructions": PROMPT})
                await conn.input_audio_buffer.append(audio=pcm)
                await receive_until(conn, "voicechat.session.ready")  # the engine holds this conversation ...
                await conn.input_audio_buffer.append(audio=three_seconds)  # ... and is busy with it at the close
            closing = asyncio.create_task(close(conn))  # the close frame goes out; the next connection at once
            await asyncio.sleep(0)
        await closing
        return firsts

    server.wait_idle()
    assert run(scenario()) == ["session.created"] * 5


@pytest.fixture(scope="module")
def strict_server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("serve-strict"), "--idle-timeout", "2") as s:
        yield s


def test_a_client_that_sends_no_audio_is_closed_after_the_idle_timeout(strict_server):
    """A client that answers pings but sends nothing held the model forever."""
    server = strict_server

    async def scenario():
        manager, conn, _ = await open_session(server, voicechat_events="1")
        await conn.session.update(session={"type": "realtime", "instructions": PROMPT})
        await receive_until(conn, "voicechat.session.ready")  # it holds the model, then says nothing
        error = await expect_error(conn, "idle_timeout")
        assert error["type"] == "server_error" and "no audio for 2 s" in error["message"]
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(conn.recv_bytes(), TIMEOUT)
        assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1000, "idle timeout")
    run(scenario())
    server.wait_for_log("idle_timeout: no audio for 2 s")
    serves_next_connection(server)


def test_a_client_is_not_idle_while_the_model_still_hears_its_audio(strict_server):
    """A client that sent a minute of audio at once and then only reads is not idle while the model has its audio
    still to hear (its frames come with a backlog): the idle timeout's clock starts once the backlog is heard (the
    2 s of CI's slowest ticks closed such a client mid-answer before, and the test below with it)."""
    from websockets.asyncio.client import connect

    server = strict_server
    second = base64.b64encode(np.zeros(realtime.RATE, "<i2").tobytes()).decode()

    async def scenario():
        async with connect(server.ws_url, max_size=None) as ws:
            await ws.send(json.dumps({"type": "session.update",
                                      "session": {"type": "realtime", "instructions": PROMPT}}))
            for _ in range(60):  # 750 positions to hear: many seconds of ticks even for the tiny model
                await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": second}))
            last_append = time.monotonic()
            heard, heard_late = 0, 0  # positions heard (a transcription delta each); more than 2.5 s after the last
            while True:
                event = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
                if event["type"] == "conversation.item.input_audio_transcription.delta":
                    heard += 1
                    heard_late += time.monotonic() - last_append > 2.5
                elif event["type"] == "error":
                    assert event["error"]["code"] == "idle_timeout", event
                    return heard, heard_late

    heard, heard_late = run(scenario())
    assert heard == 750 and heard_late > 0  # the whole minute heard (80 ms a position), the close only after it
    serves_next_connection(server)


def test_a_client_that_does_not_read_is_dropped_and_the_next_one_is_served(strict_server):
    """A client that sends audio but never reads held the model while the server's queue grew (+50 MB in two
    minutes). It is dropped once MAX_BEHIND_SECONDS of its answer wait unsent; the model is free at once."""
    from websockets.asyncio.client import connect

    server = strict_server
    second = base64.b64encode(np.zeros(realtime.RATE, "<i2").tobytes()).decode()
    host, port = re.match(r"ws://([^:/]+):(\d+)", server.ws_url).groups()

    async def scenario():
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # what the kernel reads for it stays small
        ws = await connect(server.ws_url, sock=sock, max_queue=1)  # reads 1 message, then nothing
        await ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime", "instructions": PROMPT}}))
        for _ in range(120):  # two minutes of audio, as fast as the server takes it: far more answer than the bound
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": second}))
            await asyncio.sleep(0.05)
            if "does not read" in server.log_text()[mark:]:
                break
        # the client stays (and reads nothing) until the server has dropped it, however slow the machine is
        await asyncio.to_thread(server.wait_for_log, "closed: the client does not read", mark)
        ws.transport.abort()

    server.wait_idle()
    mark = server.mark()
    run(scenario())
    line = server.wait_for_log("closed: the client does not read what the server sends", mark)
    assert "of its answer unsent, the limit is 10 s" in line
    serves_next_connection(server)


def test_serve_refuses_a_port_out_of_range_in_one_line():
    p = subprocess.run([sys.executable, "-m", "voicechat", "serve", "--demo", "--port", "70000"], capture_output=True,
                       text=True, timeout=60, cwd=Path(__file__).parent.parent)
    assert p.returncode == 2 and p.stderr == ("error: --port 70000 is not a TCP port: give one of 1-65535 (0 picks a "
                                              "free one)\n")


# ---------------------------------------------------------------------------------------------------------------
# several conversations at once on one model (docs/batching.md)
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server4(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("serve4"), "--max-sessions", "4") as s:
        yield s


def test_health_says_ready_and_the_sessions_open(server4):
    import urllib.request

    with urllib.request.urlopen(server4.base_url.removesuffix("/v1") + realtime.HEALTH_PATH, timeout=TIMEOUT) as r:
        assert r.status == 200
        assert json.loads(r.read()) == {"ready": True, "state": "ready", "sessions": 0, "max_sessions": 4,
                                          "max_minutes": None}


def test_four_clients_at_once_each_get_their_solo_conversation(server4, tiny_model):
    """Four SDK clients stream different audio at the same time with different instructions; each one's ids and
    codes are those of its conversation run alone here. A fifth gets server_busy (1013); once a client that held a
    slot vanishes mid-frame, the next connection is admitted."""
    _, pcm = pcm16_24k(WAV)
    sounds = [np.concatenate([np.roll(pcm, 3000 * i), np.zeros(realtime.RATE // 2, np.int16)]) for i in range(3)]
    prompts = ["Be brief.", "", "Talk like a pirate."]
    plans = [[s[j:j + CHUNK] for j in range(0, len(s), CHUNK)] for s in sounds]

    def alone(prompt, chunks):
        session = tiny_model.session(system_prompt=prompt)
        return [f for chunk in chunks for f in session.feed(chunk, realtime.RATE)]

    expected = [alone(p, c) for p, c in zip(prompts, plans)]
    port = int(re.search(r":(\d+)/", server4.ws_url).group(1))
    server4.wait_idle()
    mark = server4.mark()

    async def talk(prompt, chunks, last, release):
        conn = await client(server4).realtime.connect(model=MODEL, extra_query={"voicechat_frames": "1"}).enter()
        try:
            assert (await receive(conn))["type"] == "session.created"
            await conn.session.update(session={"type": "realtime", "instructions": prompt})
            events = await receive_until(conn, "session.updated")
            for chunk in chunks:
                await conn.input_audio_buffer.append(audio=base64.b64encode(chunk.astype("<i2").tobytes()).decode())
                await asyncio.sleep(0)  # the clients' appends interleave
            while not (events[-1]["type"] == "voicechat.frame" and events[-1]["position"] == last):
                events.append(await receive(conn))
            await release.wait()  # its slot stays taken until the fifth client has been refused
            return [e for e in events if e["type"] == "voicechat.frame"]
        finally:
            await close(conn)

    async def scenario():
        held = handshake(port)  # the fourth slot: a client that will vanish mid-frame
        server4.wait_for_log("127.0.0.1: open", mark)
        release = asyncio.Event()
        runs = [asyncio.create_task(talk(p, c, e[-1].position, release)) for p, c, e in zip(prompts, plans, expected)]
        while server4.log_text()[mark:].count("127.0.0.1: open\n") < 4:
            await asyncio.sleep(0.05)
        async with client(server4).realtime.connect(model=MODEL) as fifth:
            assert (await expect_error(fifth, "server_busy"))["type"] == "server_error"
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(fifth.recv_bytes(), TIMEOUT)
            assert closed.value.rcvd.code == realtime.CLOSE_TRY_AGAIN_LATER
        vanish_mid_frame(held, server4, mark)
        async with client(server4).realtime.connect(model=MODEL) as next_one:  # its slot is free again
            assert (await receive(next_one))["type"] == "session.created"
        release.set()
        return await asyncio.gather(*runs)

    got = run(scenario())
    for frames, solo in zip(got, expected):
        assert [f["position"] for f in frames] == [f.position for f in solo]
        assert [f["text_id"] for f in frames] == [f.text_id for f in solo]
        assert [f["function_id"] for f in frames] == [f.function_id for f in solo]
        assert all(f["codes"] == e.codes.tolist() for f, e in zip(frames, solo))
    server4.wait_idle()
