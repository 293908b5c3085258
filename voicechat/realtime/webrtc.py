"""WebRTC calls: ``POST /v1/realtime/calls`` (OpenAI's GA shape, docs/realtime.md "WebRTC"). The SDP offer comes as
``application/sdp`` or as a multipart form (``sdp``, optional ``session``); the answer is 201 with the SDP answer and
a ``Location``. The caller's Opus track is decoded by aiortc, resampled to the wire rate and fed where
``input_audio_buffer.append`` feeds; the answer's audio leaves on an outgoing Opus track at real time; the Realtime
events travel on the ``oai-events`` data channel through the same ``Connection`` as a WebSocket's."""

from __future__ import annotations

import asyncio
import fractions
import json
import logging
from typing import Optional

import av
import numpy as np
import soxr
from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.exceptions import InvalidAccessError, InvalidStateError
from aiortc.mediastreams import MediaStreamError
from aiortc.sdp import SessionDescription
from fastapi import Request
from fastapi.responses import JSONResponse, Response

from ..audio import to_int16
from ..config import OUTPUT_SAMPLE_RATE
from .connection import CLOSE_NORMAL, Connection, asked
from .protocol import RATE, ClientEventError, SessionConfig, error_event, new_id

log = logging.getLogger("voicechat.realtime")  # one logger for the package

CALLS_PATH = "/v1/realtime/calls"
EVENTS_CHANNEL = "oai-events"  # the data channel OpenAI's WebRTC clients open for the events
OPUS_RATE = 48000  # Opus's RTP clock (RFC 7587): aiortc decodes to and encodes from 48 kHz
PACKET_SAMPLES = 960  # 20 ms at 48 kHz, the packet the outgoing track paces
MAX_OFFER_BYTES = 32 * 1024  # an offer is a few KiB; with headers it stays under REQUEST_BYTES (docs/limits.md §2)
CONNECT_SECONDS = 15.0  # an answered call whose events channel has not opened by then is ended (docs/limits.md §2)
SDP_TYPES = ("application/sdp", "multipart/form-data")
DISCONNECT = {"type": "websocket.disconnect", "code": CLOSE_NORMAL}


def http_error(error: ClientEventError, status: int) -> JSONResponse:
    """An HTTP answer of OpenAI's error shape (the WebSocket's ``error`` event's ``error`` object)."""
    return JSONResponse({"error": error_event(error)["error"]}, status_code=status)


class ChannelSocket:
    """The three calls ``Connection`` makes of its WebSocket (``receive``, ``send_text``, ``close``), carried by a
    call's ``oai-events`` data channel: one protocol implementation serves both transports."""

    def __init__(self, pc: RTCPeerConnection):
        self.pc = pc
        self.inbox: asyncio.Queue = asyncio.Queue()  # Starlette's WebSocket messages: receive or disconnect
        self.channel = None
        self.opened = asyncio.Event()  # the channel is open, or the call has ended without one

    def attach(self, channel) -> None:
        if channel.label != EVENTS_CHANNEL or self.channel is not None:
            return
        self.channel = channel
        channel.on("message", lambda message: self.inbox.put_nowait(
            {"type": "websocket.receive", "text": message if isinstance(message, str) else None}))
        channel.on("close", self.ended)
        self.opened.set()

    def ended(self) -> None:
        self.inbox.put_nowait(DISCONNECT)
        self.opened.set()

    async def receive(self) -> dict:
        return await self.inbox.get()

    async def send_text(self, text: str) -> None:
        try:
            await asyncio.wait_for(self.opened.wait(), CONNECT_SECONDS)
        except asyncio.TimeoutError:
            raise ConnectionError(f"no events channel within {CONNECT_SECONDS:g} s") from None
        if self.channel is None or self.channel.readyState != "open":
            raise ConnectionError("the call has no open events channel")
        self.channel.send(text)

    async def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        await self.pc.close()


class AnswerTrack(MediaStreamTrack):
    """The outgoing audio track: the model's 22.05 kHz answer resampled to 48 kHz, handed to aiortc's Opus encoder
    in 20 ms packets at real time; silence while the model has nothing queued."""

    kind = "audio"

    def __init__(self):
        super().__init__()
        self.stream = soxr.ResampleStream(OUTPUT_SAMPLE_RATE, OPUS_RATE, 1, dtype="float32")
        self.pending = np.zeros(0, np.int16)
        self.sent = 0  # samples handed out so far: the next packet's timestamp
        self.start: Optional[float] = None

    def play(self, samples: np.ndarray) -> None:
        """Queue the model's answer audio (float32 at 22.05 kHz)."""
        out = to_int16(self.stream.resample_chunk(np.asarray(samples, dtype=np.float32)))
        self.pending = np.concatenate([self.pending, out])

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        loop = asyncio.get_running_loop()
        if self.start is None:
            self.start = loop.time()
        wait = self.start + self.sent / OPUS_RATE - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
        packet = np.zeros(PACKET_SAMPLES, np.int16)
        take = self.pending[:PACKET_SAMPLES]
        packet[:len(take)], self.pending = take, self.pending[len(take):]
        frame = av.AudioFrame.from_ndarray(packet.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate, frame.pts, frame.time_base = OPUS_RATE, self.sent, fractions.Fraction(1, OPUS_RATE)
        self.sent += PACKET_SAMPLES
        return frame


def mono(frame: av.AudioFrame) -> np.ndarray:
    """A decoded frame's samples as float32 mono [N] in [-1, 1]."""
    data = frame.to_ndarray().astype(np.float32) / 32768.0
    channels = len(frame.layout.channels)
    data = data if frame.format.is_planar else data.reshape(-1, channels).T
    return data.mean(axis=0)


async def listen(track, connection: Connection) -> None:
    """The caller's microphone -> the model, at the wire rate through ``Connection.hear`` (an append's path). Audio
    before the session is configured (session.update, or the offer's ``session``) is not heard, as an append then
    would be refused."""
    stream, rate = None, None
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        if frame.sample_rate != rate:
            stream, rate = soxr.ResampleStream(frame.sample_rate, RATE, 1, dtype="float32"), frame.sample_rate
        samples = to_int16(stream.resample_chunk(mono(frame)))
        if connection.configured and not connection.setup_error and len(samples):
            try:
                await connection.hear(samples, RATE)
            except ClientEventError as e:  # model_not_ready: the caller hears nothing yet, the events say why
                log.debug("%s: microphone audio not heard: %s", connection.name, e.message)


async def read_offer(request: Request) -> tuple[str, Optional[dict]]:
    """(the SDP offer, the form's ``session`` object or None); ClientEventError for anything else."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind not in SDP_TYPES:
        raise ClientEventError("invalid_request", f"send the SDP offer as {' or '.join(SDP_TYPES)}, not "
                                                  f"{kind or 'no Content-Type'}", "sdp")
    if int(request.headers.get("content-length") or 0) > MAX_OFFER_BYTES:
        raise ClientEventError("invalid_request", f"the offer is over {MAX_OFFER_BYTES // 1024} KiB", "sdp")
    if kind == "application/sdp":
        return (await request.body()).decode("utf-8", "replace"), None
    form = await request.form()
    sdp, session = form.get("sdp"), form.get("session")
    if not isinstance(sdp, str):
        raise ClientEventError("missing_required_parameter", "the form needs an 'sdp' field with the SDP offer", "sdp")
    if session is None:
        return sdp, None
    try:
        session = json.loads(session) if isinstance(session, str) else None
    except json.JSONDecodeError as e:
        raise ClientEventError("invalid_json", f"'session' is not JSON: {e}", "session")
    if not isinstance(session, dict):
        raise ClientEventError("invalid_value", "'session' must be a JSON object (session.update's session)",
                               "session")
    SessionConfig().updated(session)  # refused here, before a call is set up
    return sdp, session


def check_offer(sdp: str) -> None:
    """ClientEventError unless ``sdp`` parses as SDP with an audio section that offers Opus."""
    try:
        description = SessionDescription.parse(sdp)
    except Exception as e:  # aiortc's parser raises what the malformed line makes it, often a bare assertion
        raise ClientEventError("invalid_offer", "the SDP offer cannot be parsed" + (f": {e}" if str(e) else ""),
                               "sdp")
    audio = [media for media in description.media if media.kind == "audio"]
    if not any(codec.mimeType.lower() == "audio/opus" for media in audio for codec in media.rtp.codecs):
        raise ClientEventError("invalid_offer", "the SDP offer has no audio section with Opus (opus/48000/2), "
                                                "the codec this server speaks", "sdp")


class Call:
    """One call's peer connection and conversation: the events channel, the outgoing track, the microphone's
    listener."""

    def __init__(self, server, name: str, session: Optional[dict], extension_events: bool):
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))  # host addresses only: no STUN lookups
        self.socket, self.track = ChannelSocket(self.pc), AnswerTrack()
        self.connection = Connection(server, self.socket, name, frames_event=False,
                                     extension_events=extension_events, audio_out=self.track.play)
        if session is not None:  # the offer's session is the first session.update the conversation reads
            self.socket.inbox.put_nowait({"type": "websocket.receive",
                                          "text": json.dumps({"type": "session.update", "session": session})})
        self.listeners: list[asyncio.Task] = []
        self.pc.on("datachannel", self.socket.attach)
        self.pc.on("track", self.heard)
        self.pc.on("connectionstatechange", self.changed)
        self.pc.addTrack(self.track)

    def heard(self, remote) -> None:
        if remote.kind == "audio":
            self.listeners.append(asyncio.create_task(listen(remote, self.connection)))

    def changed(self) -> None:
        if self.pc.connectionState in ("failed", "closed"):
            self.socket.ended()

    async def offered(self, sdp: str) -> None:
        """ClientEventError when aiortc cannot take the offer."""
        try:
            await self.pc.setRemoteDescription(RTCSessionDescription(sdp, "offer"))
        except (ValueError, KeyError, InvalidAccessError, InvalidStateError) as e:  # aiortc's words for it
            raise ClientEventError("invalid_offer", f"the SDP offer cannot be answered: {e}", "sdp")

    async def answer(self) -> str:
        await self.pc.setLocalDescription(await self.pc.createAnswer())
        return self.pc.localDescription.sdp

    async def converse(self) -> None:
        """The conversation, until the caller hangs up or the server ends it; the slot is freed after."""
        try:
            await self.connection.run()
        finally:
            await self.end()

    async def end(self) -> None:
        for task in self.listeners:
            task.cancel()
        await self.pc.close()
        self.connection.server.release(self.connection.name)


class Calls:
    """``POST /v1/realtime/calls`` for one RealtimeServer: the same API key, admission and limits as its WebSocket."""

    def __init__(self, server):
        self.server = server
        self.running: dict[str, asyncio.Task] = {}  # call name -> its conversation

    async def create(self, request: Request) -> Response:
        if not self.server.authorized(request):
            return http_error(ClientEventError("invalid_api_key", "no valid API key: send Authorization: Bearer "
                                                                  "KEY"), 401)
        call_id = new_id("rtc")
        name = f"call {call_id} from {request.client.host if request.client else '?'}"
        call = None
        try:
            sdp, session = await read_offer(request)
            check_offer(sdp)
            call = Call(self.server, name, session, asked(request, "voicechat_events"))
            await call.offered(sdp)
        except ClientEventError as e:
            log.warning("%s: refused: %s: %s", name, e.code, e.message)
            if call is not None:
                await call.end()
            return http_error(e, 400)
        busy = await self.server.admit(name)
        if busy is not None:
            await call.end()
            return http_error(busy, 503)
        try:
            answer = await call.answer()
        except BaseException:  # a bug: the slot is not kept
            await call.end()
            raise
        task = asyncio.create_task(call.converse())
        self.running[name] = task
        task.add_done_callback(lambda _: self.running.pop(name, None))
        return Response(answer, status_code=201, media_type="application/sdp",
                        headers={"Location": f"{CALLS_PATH}/{call_id}"})
