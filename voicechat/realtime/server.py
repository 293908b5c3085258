"""The server: ``GET /v1/realtime`` (also at ``/realtime``), ``GET /v1/models`` and ``GET /health`` on one engine
(``RealtimeServer``), the FastAPI app, and ``python -m voicechat serve``."""

from __future__ import annotations

import asyncio
import hmac
import logging
from pathlib import Path
from typing import Callable, Optional

import numpy as np
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from .. import metrics
from ..engine import READY
from ..errors import AudioInputError, VoiceChatError
from ..limits import DEFAULT_AHEAD_SECONDS, DEFAULT_DRAIN_SECONDS, DEFAULT_IDLE_SECONDS
from ..voices import Voice, VoiceError, VoiceLibrary, model_library
from .drain import CLOSING_SECONDS, DrainingServer
from .connection import (CLOSE_GOING_AWAY, CLOSE_POLICY_VIOLATION, CLOSE_TRY_AGAIN_LATER, LIVE_CLOSE_SECONDS,
                         MAX_MESSAGE_BYTES, Connection, asked)
from .protocol import RATE, ClientEventError, error_event, event_text, voice_json
from .sockets import connection_cap, guarded_http
from .webrtc import CALLS_PATH, Calls, http_error

log = logging.getLogger("voicechat.realtime")  # one logger for the package

PATH = "/v1/realtime"
ALIAS_PATH = "/realtime"  # what NVIDIA's NIM also answers, for Pipecat (docs/realtime.md "Clients")
MODELS_PATH = "/v1/models"
HEALTH_PATH = "/health"
SEND_BUFFER_BYTES = 256 * 1024  # kernel send buffer of serve's connections: a few seconds of answer (docs/limits.md §2)
INSECURE_KEY_PROTOCOL = "openai-insecure-api-key."  # browsers cannot set headers: the key rides a subprotocol


class RealtimeServer:
    """``GET /v1/realtime`` on one engine: as many live conversations at once as the engine steps together
    (``engine.max_sessions``), and ``GET /health``. Mount ``router()`` in any FastAPI app
    (``python -m voicechat serve``, and app.py beside the Gradio page).

    ``observer`` (optional) hears of each live session by its connection's session id: ``opened(session_id)``,
    ``heard(session_id, samples, rate)`` (each append's int16 samples at its rate, once they went to the model) and
    ``closed(session_id, live)`` (the engine has let go: ``live.result()`` is the conversation). The app's Talk live
    tab (voicechat/webui/talk.py) saves conversations with it.

    ``voices``: the voice library's folder (None: the checkpoint's voices only); ``voice_add`` lets clients add
    voices to it (``voicechat.voice.add``), only with an ``api_key``. ``ahead_seconds``: how far ahead of real time
    a client's audio may run (0: no limit; docs/limits.md §2)."""

    def __init__(self, engine, *, api_key: Optional[str] = None, model_name: str = "voicechat", observer=None,
                 idle_seconds: float = DEFAULT_IDLE_SECONDS, voices: Optional[Path] = None, voice_add: bool = False,
                 ahead_seconds: float = DEFAULT_AHEAD_SECONDS):
        if voice_add and not (api_key and voices):
            raise ServeError("adding voices over the API needs an API key and a voice library folder")
        self.engine, self.api_key, self.model_name = engine, api_key, model_name
        self.idle_seconds = idle_seconds  # 0: no idle timeout
        self.ahead_seconds = ahead_seconds  # 0: no limit
        self.active: list[str] = []  # the connections that hold a conversation
        self.connections: dict[str, Connection] = {}  # each of them by name, for the drain
        self.draining = False  # set on SIGTERM: no new conversation is admitted (docs/operations.md §3)
        self.loop: Optional[asyncio.AbstractEventLoop] = None  # the connections' loop, for a drain from elsewhere
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

    def add_voice(self, name: str, samples: np.ndarray, keep: Callable[[], None]) -> Voice:
        """Thread: check, trim and store a recording at the wire rate as a voice (``keep``: its time limit's, called
        before it is stored)."""
        model = self.engine.model
        if model is None:
            raise ClientEventError("model_not_ready", "the model is not loaded yet; add the voice once it is",
                                   kind="server_error")
        try:
            return self.library().add(name, samples, RATE, config=model.config, source="realtime", keep=keep)
        except VoiceError as e:
            raise ClientEventError("invalid_value", str(e), "name")
        except AudioInputError as e:
            raise ClientEventError("invalid_audio", str(e), "audio")

    def release(self, name: str) -> None:
        """The connection ``name`` has let go of its conversation: the next one may have its slot."""
        if name in self.active:
            self.active.remove(name)
            self.connections.pop(name, None)
            self.leaving.discard(name)
            self.freed.set()
            self.freed = asyncio.Event()

    def notify(self, what: str, *args) -> None:
        """Tell the observer (if any) that a live session was ``opened``, ``heard`` audio or ``closed``."""
        if self.observer is not None:
            getattr(self.observer, what)(*args)

    def router(self) -> APIRouter:
        router = APIRouter()
        for path in (PATH, ALIAS_PATH):  # plain Starlette routes: the endpoint gets the WebSocket
            router.add_websocket_route(path, self.serve)
        router.add_api_route(HEALTH_PATH, self.health, methods=["GET"])
        router.add_api_route(MODELS_PATH, self.models, methods=["GET"])
        router.add_api_route(CALLS_PATH, Calls(self).create, methods=["POST"])  # WebRTC (docs/realtime.md)
        router.add_api_route(metrics.PATH, scrape, methods=["GET"])
        return router

    def models(self, request: Request) -> JSONResponse:
        """OpenAI's model list (``client.models.list()``): the one model this server runs, under the same API key
        as the WebSocket."""
        if not self.authorized(request):
            return http_error(ClientEventError("invalid_api_key", "no valid API key: send Authorization: Bearer KEY"),
                              401)
        return JSONResponse({"object": "list", "data": [{"id": self.model_name, "object": "model", "created": 0,
                                                         "owned_by": "voicechat"}]})

    def health(self) -> JSONResponse:
        """For a load balancer: 200 while the model is ready and a conversation can open, else 503; the body says
        the engine's state (``draining`` once SIGTERM came), the conversations open against the maximum and a
        conversation's cap in minutes (``--max-minutes``; null: the timeline's limit)."""
        status = self.engine.status()
        ready = status.state == READY and not self.draining
        body = {"ready": ready, "state": "draining" if self.draining else status.state, "sessions": len(self.active),
                "max_sessions": self.engine.max_sessions, "max_minutes": self.engine.max_minutes}
        return JSONResponse(body, status_code=200 if ready and len(self.active) < self.engine.max_sessions else 503)

    async def drain(self, seconds: float) -> None:
        """Stop admitting; let the open conversations go on for ``seconds`` (or until they end), then tell each
        ``server_shutting_down`` and close it with 1001, and wait (``CLOSING_SECONDS`` at most) until they have let
        go of the model (docs/operations.md §3)."""
        self.draining = True
        log.info("draining: %d conversation%s open; they close in %g s", len(self.active),
                 "" if len(self.active) == 1 else "s", seconds)
        await self.until_idle(seconds)
        for connection in list(self.connections.values()):
            connection.shut_down()
        await self.until_idle(CLOSING_SECONDS)

    async def until_idle(self, seconds: float) -> None:
        """Wait until no connection holds a conversation, ``seconds`` at most."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while self.active and (left := deadline - loop.time()) > 0:
            await asyncio.gather(asyncio.wait_for(self.freed.wait(), left), return_exceptions=True)

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

    async def admit(self, name: str) -> Optional[ClientEventError]:
        """Take a conversation slot for ``name`` (a WebSocket or a WebRTC call), or say why not (server_busy, or
        server_shutting_down once the server drains: docs/operations.md §3)."""
        if self.draining:
            log.warning("%s: server_shutting_down: the server is draining", name)
            metrics.refused("draining")
            return ClientEventError("server_shutting_down", "the server is shutting down; connect to another",
                                    kind="server_error")
        if len(self.active) >= self.engine.max_sessions and self.leaving:  # a closing one frees a slot in a moment
            await asyncio.gather(asyncio.wait_for(self.freed.wait(), LIVE_CLOSE_SECONDS), return_exceptions=True)
        if len(self.active) >= self.engine.max_sessions:
            log.warning("%s: server_busy: %s hold%s the model's %d conversation%s", name, ", ".join(self.active),
                        "s" if len(self.active) == 1 else "", len(self.active), "s" if len(self.active) > 1 else "")
            metrics.refused("server_busy")
            return ClientEventError("server_busy", f"{len(self.active)} conversation"
                                    f"{'s are' if len(self.active) > 1 else ' is'} running on this model, its maximum; "
                                    "try again later", kind="server_error")
        self.active.append(name)
        log.info("%s: open", name)
        return None

    async def serve(self, websocket) -> None:
        self.count += 1
        self.loop = asyncio.get_running_loop()
        name = f"connection {self.count} from {websocket.client.host if websocket.client else '?'}"
        if not self.authorized(websocket):
            log.warning("%s: refused: no valid API key (send Authorization: Bearer KEY)", name)
            metrics.refused("auth")
            await websocket.close(CLOSE_POLICY_VIOLATION)
            return
        await websocket.accept(subprotocol="realtime" if "realtime" in websocket.scope.get("subprotocols", [])
                               else None)
        refused = await self.admit(name)
        if refused is not None:
            close = CLOSE_GOING_AWAY if refused.code == "server_shutting_down" else CLOSE_TRY_AGAIN_LATER
            await refuse(websocket, refused, close)
            return
        try:
            self.connections[name] = Connection(self, websocket, name,
                                                frames_event=asked(websocket, "voicechat_frames"),
                                                extension_events=asked(websocket, "voicechat_events"))
            await self.connections[name].run()
        finally:
            self.release(name)


async def refuse(websocket, error: ClientEventError, close_code: int) -> None:
    """An accepted connection that gets no conversation: one GA ``error`` event, then the close."""
    metrics.error_sent(error.code)
    await websocket.send_text(event_text(error_event(error)))
    await websocket.close(close_code, error.code.replace("_", " "))


def scrape() -> Response:
    """``GET /metrics``: the process's metrics in Prometheus' text format (docs/operations.md §1)."""
    body, content_type = metrics.scrape()
    return Response(body, media_type=content_type)


def create_app(engine, *, api_key: Optional[str] = None, model_name: str = "voicechat",
               idle_seconds: float = DEFAULT_IDLE_SECONDS, voices: Optional[Path] = None,
               voice_add: bool = False, ahead_seconds: float = DEFAULT_AHEAD_SECONDS) -> FastAPI:
    app = FastAPI(title="voicechat realtime", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.realtime = RealtimeServer(engine, api_key=api_key, model_name=model_name, idle_seconds=idle_seconds,
                                        voices=voices, voice_add=voice_add,
                                        ahead_seconds=ahead_seconds)  # its drain, on SIGTERM
    app.include_router(app.state.realtime.router())
    return app


class ServeError(VoiceChatError):
    """The server cannot start (the model failed to load, the port is taken)."""


def loaded_engine(*, model: str, demo: bool, offline: bool, max_sessions: Optional[int] = None,
                  max_minutes: Optional[float] = None):
    """Start an engine for up to ``max_sessions`` conversations at once (None: as many as fit,
    voicechat.timeline.admission.fitting_sessions), each of ``max_minutes`` at most (None: the timeline's limit), and
    wait until its model has loaded: (the engine, the model's name).
    ServeError if it failed. ``serve`` and each Ray Serve replica (voicechat/deploy.py) start theirs this way."""
    import time

    from .. import engine as eng

    if demo:
        loader, name = eng.demo_model(), "voicechat-demo"
        print("Demo mode: a tiny model with random weights. Its answers are noise.", flush=True)
    else:
        loader, name = eng.hub_model(model, offline=offline), model
    engine = eng.Engine(loader, name=name, max_sessions=max_sessions, max_minutes=max_minutes).start()
    while engine.status().state not in (eng.READY, eng.FAILED):
        time.sleep(0.1)
    status = engine.status()
    if status.state == eng.FAILED:
        engine.close()
        raise ServeError(status.message)
    return engine, name


def serve(*, model: str, demo: bool, host: str, port: int, api_key: Optional[str], offline: bool,
          idle_seconds: float = DEFAULT_IDLE_SECONDS, max_sessions: Optional[int] = None,
          voices: Optional[Path] = None, voice_add: bool = False, ahead_seconds: float = DEFAULT_AHEAD_SECONDS,
          max_minutes: Optional[float] = None, drain_seconds: float = DEFAULT_DRAIN_SECONDS) -> int:
    """``python -m voicechat serve``: load the model, then serve ``/v1/realtime`` (up to ``max_sessions``
    conversations at once; None: as many as fit, voicechat.timeline.admission.fitting_sessions) until SIGTERM
    (drained for ``drain_seconds``) or SIGINT; -> the exit status (docs/operations.md §3)."""
    import socket

    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    engine, name = loaded_engine(model=model, demo=demo, offline=offline, max_sessions=max_sessions,
                                 max_minutes=max_minutes)
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
                         voice_add=voice_add, ahead_seconds=ahead_seconds)
        # a request's deadline and a cap on open connections below the descriptor limit (docs/limits.md §2)
        config = uvicorn.Config(app, log_level="info", ws_max_size=MAX_MESSAGE_BYTES,
                                http=guarded_http(connection_cap()), timeout_graceful_shutdown=CLOSING_SECONDS)
        server = DrainingServer(config, app.state.realtime, drain_seconds)
        server.run(sockets=[sock])
        return server.exit_status()
    finally:
        engine.close()
