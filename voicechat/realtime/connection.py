"""One connection (a WebSocket, or a WebRTC call's ``oai-events`` channel, voicechat/realtime/webrtc.py): reads
client events, feeds audio to the engine's live session, sends what its conversation maps the frames to, and closes
idle, unread or vanished clients."""

from __future__ import annotations

import asyncio
import logging
import threading
import traceback
from typing import Callable, Iterable, Optional

import numpy as np

from starlette.websockets import WebSocketDisconnect

from .. import metrics
from ..config import FRAME_SECONDS, MAX_LAG_SECONDS
from ..engine import READY, EngineBusy, LiveRequest
from ..errors import ToolError, VoiceChatError
from ..limits import SettingError, TimedOut, TimeLimit
from ..tools.channel import check_result
from .bounds import (MAX_EVENT_ID_CHARS, Pace, audio_seconds, check_message, check_size, check_tools,
                     unparsed_append)
from .conversation import RealtimeConversation
from .protocol import (FORMATS, SESSION_PARAMS, ClientEventError, SessionConfig, bounded, bytes_per_second,
                       decode_audio, error_event,
                       event_kind, event_text, expect, new_id, parse_client_event, voice_json)

log = logging.getLogger("voicechat.realtime")  # one logger for the package

MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # WebSocket frame limit (uvicorn's default): a 15 MiB append fits in it
# 1013 is "Try Again Later" in the IANA close-code registry (RFC 6455 §11.7); mlx-vlm uses it for its second
# connection (docs/live.md §3)
CLOSE_TRY_AGAIN_LATER = 1013
# a bad key (before accept uvicorn answers the upgrade with HTTP 403), a client not reading
CLOSE_POLICY_VIOLATION = 1008
LIVE_CLOSE_SECONDS = 60.0  # how long a closing connection waits for the engine to free the model
# A client that does not read what the server sends would hold the model while its answer piles up in memory: it is
# closed once this much of its answer's audio waits unsent (docs/limits.md).
MAX_BEHIND_SECONDS = 10.0
# ... or once this many events, or characters, of any kind wait unsent: a client that never reads but keeps sending bad
# events would otherwise queue error events without bound. 10 s of answer are about 480 events and 0.8 MB
# (measured on serve --demo with voicechat.frame events).
MAX_UNSENT_EVENTS = 4096
MAX_UNSENT_CHARS = 4 * 2 ** 20
CLOSE_NORMAL = 1000
# a conversation whose model is this far behind the client's audio is told so (voicechat.falling_behind), before the
# Talk live tab stops it at MAX_LAG_SECONDS (docs/app.md)
WARN_LAG_SECONDS = MAX_LAG_SECONDS / 2
CLOSE_GOING_AWAY = 1001  # RFC 6455 §7.4.1: the server is going down (docs/operations.md §3)
MAX_LOGGED_ERRORS = 20  # a connection's error events that the log says one by one; the rest are counted
DISCONNECTS = {1005: "the client vanished without a close frame", 1006: "the client vanished without a close frame",
               1009: f"closed: the client sent a message over the {MAX_MESSAGE_BYTES // 2 ** 20} MiB WebSocket limit"}


class Connection:
    """A client's conversation: reads client events, feeds audio to the engine's live session, and sends the GA
    events its frames map to. Three tasks: the reader, the writer (the only one that sends), and the follower of the
    live session's events (fed by a thread that waits on the engine). ``server``: the RealtimeServer that accepted it
    (this module stays below server.py, which imports it)."""

    def __init__(self, server, websocket, name: str, frames_event: bool, extension_events: bool = False,
                 audio_out: Optional[Callable[[np.ndarray], None]] = None):
        self.server, self.ws, self.name = server, websocket, name
        # a WebRTC call's outgoing track (voicechat/realtime/webrtc.py): the answer's 22.05 kHz audio goes there,
        # not into response.output_audio.delta events (docs/realtime.md "WebRTC")
        self.audio_out = audio_out
        self.config, self.configured = SessionConfig(), False
        self.conversation = RealtimeConversation(frames_event, extension_events)
        self.session_id = new_id("sess")
        self.live = None  # the engine's live session, once open
        self.follower: Optional[asyncio.Task] = None
        self.heard = False  # audio has reached the live session: its instructions, tools and voice are fixed
        self.appended = False  # audio since the last commit
        self.setup_error: Optional[str] = None  # why the last live session could not start (until session.update)
        self.outbox: asyncio.Queue = asyncio.Queue()  # (JSON text, seconds of answer audio in it), or (code, reason)
        self.unsent = 0.0  # seconds of answer audio in the outbox: how far behind real time the client reads
        self.unsent_chars = 0  # characters of the events in the outbox, all kinds
        self.idle_since = asyncio.get_running_loop().time()  # the idle timeout counts from here ...
        self.setting_up = False  # ... except while a live session is set up: then the model is slow, not the client
        self.dropped = asyncio.Event()  # set when the server gives up on a client that does not read
        self.end_reason = "client_closed"  # why the conversation ends, for its log line (docs/operations.md §2)
        self.started_at, self.frames, self.queued = 0.0, 0, False  # the live session's start, frames, hand-over
        self.lagging = False  # the last voicechat.falling_behind said so
        self.pace = Pace(server.ahead_seconds)  # how far ahead of real time its audio runs
        self.behind, self.last_frames = False, 0.0  # whether the model had its audio to hear at its last frames
        self.errors = 0  # error events sent

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
            if self.errors > MAX_LOGGED_ERRORS:
                log.warning("%s: %d error events in all", self.name, self.errors)
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
            self.end_reason = "idle_timeout"
            self.reject(ClientEventError("idle_timeout", f"no audio for {seconds:g} s: the connection is closed so "
                                                         "that the model is free for others", kind="server_error"),
                        None)
            self.close(CLOSE_NORMAL, "idle timeout")

    def model_behind(self, behind: bool) -> None:
        """At each frames event: the idle clock stood still since the last one if the model had the client's audio
        still to hear all along (the client is not idle, the model is behind it: docs/limits.md §2)."""
        now = asyncio.get_running_loop().time()
        if self.behind:
            self.idle_since = min(now, self.idle_since + now - self.last_frames)
        self.behind, self.last_frames = behind, now

    def session(self) -> dict:
        return self.config.ga(self.session_id, self.server.model_name)

    # ---- sending -----------------------------------------------------------------------------------------------
    def emit(self, event: dict, seconds: float = 0.0) -> None:
        """Queue an event carrying ``seconds`` of the answer's audio; a client that lets more than MAX_BEHIND_SECONDS
        of it wait, or more than MAX_UNSENT_EVENTS events or MAX_UNSENT_CHARS characters of any kind, is dropped."""
        if self.audio_out is not None and event["type"] == "response.output_audio.delta":
            return
        text = event_text(event)
        self.outbox.put_nowait((text, seconds))
        self.unsent += seconds
        self.unsent_chars += len(text)
        unread = self.unread()
        if unread and not self.dropped.is_set():
            log.warning("%s: closed: the client does not read what the server sends (%s)", self.name, unread)
            self.end_reason = "not_reading"
            self.dropped.set()

    def unread(self) -> str:
        """What waits unsent past its bound (docs/limits.md §2), in words; "" while within them."""
        if self.unsent > MAX_BEHIND_SECONDS:
            return f"{self.unsent:.1f} s of its answer unsent, the limit is {MAX_BEHIND_SECONDS:.0f} s"
        if self.outbox.qsize() > MAX_UNSENT_EVENTS or self.unsent_chars > MAX_UNSENT_CHARS:
            return (f"{self.outbox.qsize()} events of {self.unsent_chars} characters unsent, the limit is "
                    f"{MAX_UNSENT_EVENTS} events or {MAX_UNSENT_CHARS} characters")
        return ""

    def emit_extension(self, event: dict) -> None:
        """A voicechat.* event, to clients that asked for them only: some validate every server event against
        OpenAI's own types (docs/realtime.md "Clients")."""
        if self.conversation.extension_events:
            self.emit(event)

    def emit_all(self, events: Iterable[dict], seconds: float = 0.0) -> None:
        """Queue events that together carry ``seconds`` of answer audio (counted with the last one)."""
        events = list(events)
        for i, event in enumerate(events):
            self.emit(event, seconds if i == len(events) - 1 else 0.0)

    def reject(self, error: ClientEventError, event_id: Optional[str]) -> None:
        metrics.error_sent(error.code)
        self.errors += 1
        if self.errors <= MAX_LOGGED_ERRORS:  # docs/limits.md §2: a client's errors cannot flood the log
            log.warning("%s: %s: %s%s", self.name, error.code, error.message,
                        "" if self.errors < MAX_LOGGED_ERRORS else " (its further errors are only counted)")
        self.emit(error_event(error, event_id))

    def shut_down(self) -> None:
        """The server is leaving (docs/operations.md §3): the client hears why, then close 1001 (going away)."""
        self.end_reason = "server_shutting_down"
        self.reject(ClientEventError("server_shutting_down", "the server is shutting down; open a new connection "
                                                             "to talk again", kind="server_error"), None)
        self.close(CLOSE_GOING_AWAY, "server shutting down")

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
                self.unsent_chars -= len(item[0])
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
            await asyncio.sleep(0)  # the other connections' turn between two messages: a queue of them cannot hold
            # the event loop for their sum (docs/limits.md §2)

    async def handle(self, text: str) -> None:
        event_id = None
        try:
            span = check_message(text)  # docs/limits.md §2: bounded before it is parsed ...
            if unparsed_append(text, span):  # a large append too far ahead: refused before its audio is parsed
                self.pace.check(self.seconds(span[1] - span[0], text[span[1] - 2:span[1]]),
                                asyncio.get_running_loop().time())
            event = parse_client_event(text)
            check_size(text, event)  # ... and before anything else reads it
            event_id = event.get("event_id")[:MAX_EVENT_ID_CHARS] if isinstance(event.get("event_id"), str) else None
            await getattr(self, "on_" + event_kind(event).replace(".", "_"))(event)
        except ClientEventError as e:
            self.reject(e, event_id)
        except Exception as e:  # a bug: report it, keep the connection
            log.error("%s: internal error\n%s", self.name, bug_lines(e))
            self.reject(ClientEventError("internal_error", f"internal error: {type(e).__name__}: {e}",
                                         kind="server_error"), event_id)

    async def on_session_update(self, event: dict) -> None:
        check_tools(event.get("session"))  # their count, depth and size before any is built (docs/limits.md §2)
        new = self.config.updated(event.get("session"))
        self.server.voice(new.voice)  # a name of the library, or an error listing them
        if self.heard and new.input_format != self.config.input_format:  # the model's resampler has its rate
            raise ClientEventError("session_locked", "the input audio format is fixed once audio has started; open "
                                                     "a new connection to change it", "session.audio.input.format")
        if self.live is not None and new.model_inputs != self.config.model_inputs:
            if self.heard:
                raise ClientEventError("session_locked", "instructions, tools and voice are fixed once audio has "
                                                         "started; open a new connection to change them", "session")
            await self.close_live("restarted")  # not heard anything yet: start again with the new prompt
        previous = self.config, self.configured
        self.config, self.configured, self.setup_error = new, True, None
        try:
            await self.ensure_live(required=False)
        except ClientEventError:
            self.config, self.configured = previous
            raise
        self.conversation.output_format(new.output_format)
        self.emit({"type": "session.updated", "session": self.session()})

    async def on_input_audio_buffer_append(self, event: dict) -> None:
        audio = event.get("audio")
        if isinstance(audio, str):  # its length says its seconds: refused before it is decoded
            self.pace.admit(self.seconds(len(audio), audio[-2:]), asyncio.get_running_loop().time())
        await self.hear(decode_audio(event, self.config.input_format), FORMATS[self.config.input_format])

    def seconds(self, chars: int, end: str) -> float:
        """Seconds of base64 audio in the session's input format, from its ``chars`` and last two characters."""
        return audio_seconds(chars, end, bytes_per_second(self.config.input_format))

    async def hear(self, samples: np.ndarray, rate: int) -> None:
        """int16 samples at ``rate`` for the model: an append's, or a WebRTC call's microphone track."""
        now = asyncio.get_running_loop().time()
        if not self.configured:
            raise ClientEventError("session_not_configured", "send session.update (instructions, tools, voice) "
                                                             "before audio: the model reads its prompt first", "type")
        if self.setup_error:
            raise ClientEventError("session_setup_failed", f"the session could not start: {self.setup_error}; send "
                                                           "session.update with other settings", "session")
        if await self.ensure_live(required=True):
            self.live.send(samples, rate)  # the session resamples to 16 kHz with soxr's stream resampler
            # the idle clock goes back by the audio's seconds, not to now: a sample a minute holds no slot (§2)
            self.idle_since = min(now, self.idle_since + len(samples) / rate)
            self.heard = self.appended = True
            self.server.notify("heard", self.session_id, samples, rate)

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
        output_fits(item.get("output"))
        events = self.conversation.function_output(item)  # checks the call waits: a wrong id would end the session
        if self.live is None:
            raise ClientEventError("invalid_value", "the conversation has ended", "item.call_id")
        self.live.provide_tool_result(item["call_id"], item["output"])
        self.emit_all(events)

    async def on_conversation_item_truncate(self, event: dict) -> None:
        self.emit_all(self.conversation.truncate(event.get("item_id"), event.get("content_index"),
                                                 event.get("audio_end_ms")))

    async def on_conversation_item_delete(self, event: dict) -> None:
        self.emit_all(self.conversation.delete(event.get("item_id")))

    async def on_conversation_item_retrieve(self, event: dict) -> None:
        self.emit_all(self.conversation.retrieve(event.get("item_id")))

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
        limit = TimeLimit("making the voice")  # docs/limits.md §2
        try:
            voice = await limit.run(self.server.add_voice, name, samples, limit.keep)
        except TimedOut as e:
            raise ClientEventError("invalid_audio", str(e), "audio")
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
            metrics.refused("server_busy")
            self.reject(ClientEventError("server_busy", str(e), kind="server_error"), None)
            self.close(CLOSE_TRY_AGAIN_LATER, "server busy")
            return False
        except SettingError as e:
            metrics.refused("bad_request")
            raise ClientEventError("invalid_value", str(e), SESSION_PARAMS.get(e.param, "session"))
        except VoiceChatError as e:
            raise ClientEventError("invalid_value", str(e), "session")
        self.live, self.heard, self.setting_up = live, False, True
        self.started_at, self.frames = asyncio.get_running_loop().time(), 0
        metrics.conversation_started(self.session_id, self.name)
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
            self.hand_over(done=event.kind != "queued")
            if event.kind == "queued":  # handed to the engine: it joins the next tick (docs/batching.md §5)
                self.emit_extension({"type": "voicechat.session.queued", "jobs_ahead": event.position})
            elif event.kind == "ready":
                started = True
                metrics.JOIN.observe(event.setup_seconds)
                self.emit_extension({"type": "voicechat.session.ready", "setup_seconds": round(event.setup_seconds, 3),
                                     "prompt_frames": event.prompt_frames})
            elif event.kind == "frames":
                self.frames += len(event.frames)
                metrics.LAG.observe(event.backlog_seconds)
                self.watch_lag(event.backlog_seconds)
                if self.audio_out is not None:
                    self.audio_out(np.concatenate([frame.audio for frame in event.frames]))
                self.emit_all(self.conversation.frames(event.frames, event.backlog_seconds),
                              len(event.frames) * FRAME_SECONDS)
                self.model_behind(event.backlog_seconds > 0)
                self.pace.heard(event.backlog_seconds)
            elif event.kind == "error" and not started:  # the prompt or the voice could not be set up
                if self.live is live:
                    self.live, self.follower, self.setup_error = None, None, event.message
                    self.live_ended("setup_failed")
                self.reject(ClientEventError("session_setup_failed", f"the session could not start: {event.message}"
                                                                     "; send session.update with other settings",
                                             "session"), None)
            elif event.kind == "error":
                log.error("%s: the live session failed: %s", self.name, event.message)
                self.end_reason = "session_failed"
                self.emit_all(self.conversation.fail(event.message))
                self.reject(ClientEventError("session_failed", event.message, kind="server_error"), None)
                self.close(1011, "the live session failed")
            elif event.kind == "closed":
                return

    async def close_live(self, reason: Optional[str] = None) -> None:
        """Stop the live session and wait until the engine has let go of it (the next connection may need it)."""
        live, follower, self.live, self.follower = self.live, self.follower, None, None
        if live is None:
            return
        live.close()
        try:
            await asyncio.wait_for(asyncio.shield(follower), LIVE_CLOSE_SECONDS)
        except asyncio.TimeoutError:
            log.error("%s: the engine did not close the live session within %.0f s", self.name, LIVE_CLOSE_SECONDS)
        self.live_ended(reason or self.end_reason)
        self.server.notify("closed", self.session_id, live)

    def watch_lag(self, backlog_seconds: float) -> None:
        """``voicechat.falling_behind`` each time the model falls WARN_LAG_SECONDS behind the client's audio (a
        slow or crowded machine), and once it has caught up again; not while a tool call holds the audio on purpose
        (docs/tools.md §5)."""
        behind = backlog_seconds > WARN_LAG_SECONDS and not self.conversation.waiting
        if behind != self.lagging:
            self.lagging = behind
            self.emit_extension({"type": "voicechat.falling_behind", "falling_behind": behind,
                                 "behind_ms": round(1000 * backlog_seconds), "limit_ms": round(1000 * MAX_LAG_SECONDS)})

    def hand_over(self, done: bool) -> None:
        """The live session waits to join the engine's group (``done`` False) or no longer does: the queued gauge."""
        if self.queued == done:
            (metrics.QUEUED.dec if done else metrics.QUEUED.inc)()
            self.queued = not done

    def live_ended(self, reason: str) -> None:
        """A live session is over: its metrics and its log line (docs/operations.md §2)."""
        self.hand_over(done=True)
        metrics.conversation_ended(self.session_id, asyncio.get_running_loop().time() - self.started_at, self.frames,
                                   reason)


def asked(request, option: str) -> bool:
    """An opt-in of a WebSocket's or a call's URL query (``?voicechat_frames=1``)."""
    return request.query_params.get(option, "").lower() in ("1", "true", "yes")


def bug_lines(e: Exception) -> str:
    """A bug's traceback for the log: the server's frames, and its message (which may quote the client's input)
    bounded as an error event's is (docs/limits.md §2)."""
    return "".join(traceback.format_tb(e.__traceback__)) + bounded(f"{type(e).__name__}: {e}")


def output_fits(output) -> None:
    """A function_call_output's output is refused by its length before the engine parses or tokenizes it
    (docs/limits.md §1); the call still waits for a shorter one."""
    try:
        check_result(output)
    except ToolError as e:
        raise ClientEventError("invalid_value", str(e), "item.output")


def pump(live, loop: asyncio.AbstractEventLoop, events: asyncio.Queue) -> None:
    """Thread: forward the live session's events (blocking reads) into the connection's event loop."""
    for event in live:
        try:
            loop.call_soon_threadsafe(events.put_nowait, event)
        except RuntimeError:  # the event loop has stopped (server shutdown): let the engine go
            live.close()
