"""The record-and-run answer, heard while it is generated: the handler opens an :class:`AnswerStream` when its run
starts, pushes each frame's new samples (``engine.Event.frame.audio``) and ends it; the page's player
(voicechat/webui/static/stream.js, the Talk live tab's player and jitter buffer) reads it over
``WS /live/answer/{token}``.

A stream plays as it comes only on a machine that keeps up: after its first frames it decides, from the engine's
clock at each of them, between ``live`` (each frame goes out as it is made) and ``whole`` (slower than real time:
playing frames as they trickle in would stutter, so the answer goes out, and plays, once it is complete). Either way no
sample is dropped (the player's overflow rule is off for an answer).
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from typing import Optional

import numpy as np
from fastapi import APIRouter
from starlette.websockets import WebSocket, WebSocketDisconnect

from voicechat.config import FRAME_SECONDS

PATH = "/live/answer/{token}"
DECIDE_AFTER = 6  # frame intervals measured before deciding (from the first frame on: set-up is not counted)
KEEP_S = 120.0  # an ended stream stays this long for a page that connects late, then goes
WAIT_S = 1.0  # how long the sender waits for news before checking that the page is still there


class AnswerStream:
    """One answer's samples (float32 at ``rate``), written by one thread and read by the page's WebSocket."""

    def __init__(self, rate: int):
        self.token = secrets.token_urlsafe(12)
        self.rate = rate
        self.chunks: list[np.ndarray] = []
        self.times: list[float] = []  # the engine's clock when each frame was done (seconds)
        self.mode: Optional[str] = None  # "live" or "whole", once decided
        self.ended: Optional[float] = None  # time.monotonic() of the end
        self.news = threading.Condition()

    def push(self, samples: np.ndarray, done_at: float) -> None:
        """One frame's new samples, and when the engine had finished it (``engine.Event.seconds``: the engine's clock,
        not this thread's, which may read events in bursts)."""
        with self.news:
            self.chunks.append(np.asarray(samples, np.float32))
            self.times.append(float(done_at))
            if self.mode is None and len(self.times) > DECIDE_AFTER:
                per_frame = (self.times[-1] - self.times[0]) / (len(self.times) - 1)
                self.mode = "live" if per_frame <= FRAME_SECONDS else "whole"
            self.news.notify_all()

    def end(self) -> None:
        with self.news:
            self.mode = self.mode or "whole"
            self.ended = time.monotonic()
            self.news.notify_all()

    def wait(self, sent: int, told: Optional[str], timeout: float) -> tuple[list[np.ndarray], Optional[str], bool]:
        """(chunks from ``sent`` on that may go out now, the mode, ended) once there is news for a reader who has
        ``sent`` chunks and knows mode ``told``, or after ``timeout``."""
        with self.news:
            self.news.wait_for(lambda: self.ended is not None or self.mode != told
                               or (self.mode == "live" and len(self.chunks) > sent), timeout)
            ready = self.mode == "live" or self.ended is not None
            return (self.chunks[sent:] if ready else []), self.mode, self.ended is not None


class AnswerStreams:
    """The open streams, by token; ``routes()`` serve them."""

    def __init__(self):
        self.streams: dict[str, AnswerStream] = {}
        self.lock = threading.Lock()

    def open(self, rate: int) -> AnswerStream:
        stream = AnswerStream(rate)
        with self.lock:
            now = time.monotonic()
            for token in [t for t, s in self.streams.items() if s.ended is not None and now - s.ended > KEEP_S]:
                del self.streams[token]
            self.streams[stream.token] = stream
        return stream

    def routes(self) -> list:
        router = APIRouter()
        router.add_websocket_route(PATH, self.serve)
        return list(router.routes)

    async def serve(self, websocket: WebSocket) -> None:
        """{"rate"}, then {"mode"} once decided, binary float32 little-endian chunks, and {"end": true}."""
        stream = self.streams.get(websocket.path_params["token"])
        await websocket.accept()
        if stream is None:
            await websocket.close(1008, "no such answer (it ended more than two minutes ago)")
            return
        await websocket.send_json({"rate": stream.rate})
        sent, told = 0, None
        try:
            while True:
                chunks, mode, ended = await asyncio.to_thread(stream.wait, sent, told, WAIT_S)
                if mode != told:
                    await websocket.send_json({"mode": mode})
                    told = mode
                if chunks:
                    await websocket.send_bytes(np.concatenate(chunks).astype("<f4").tobytes())
                    sent += len(chunks)
                if ended and sent == len(stream.chunks):
                    await websocket.send_json({"end": True})
                    await websocket.close()
                    return
        except WebSocketDisconnect:  # the page went away or started another answer
            return


ANSWERS = AnswerStreams()  # the app's streams (voicechat.webui.talk serves their route)


def player_html(stream: Optional[AnswerStream]) -> str:
    """The record-and-run tab's player element: which answer to play (none: the element waits)."""
    if stream is None:
        return '<div class="vc-answer-stream" data-stream=""></div>'
    return (f'<div class="vc-answer-stream" data-stream="{stream.token}"><span class="vc-answer-stream-text">'
            'Getting the answer ready…</span></div>')


# gr.HTML(js_on_load=...): the module watches the element's value for a new answer
MOUNT_JS = "import('/webui/stream.js').then((m) => m.mountAnswer(element, watch));"
