"""The sockets of ``serve`` and of the app (docs/limits.md §2): uvicorn times out neither a connection that sends
nothing nor one that sends half a request, and accepts until the process runs out of file descriptors.
``guarded_http`` wraps uvicorn's HTTP protocol: a request must be whole within REQUEST_SECONDS and REQUEST_BYTES, and
at most ``cap`` connections are open at once; past it, new ones are closed at once, with one log line. ``serve``
gives it to its uvicorn.Config; app.py, whose uvicorn Gradio starts, to the running server (``guard``)."""

from __future__ import annotations

import logging
import resource
import time

log = logging.getLogger("voicechat.realtime")  # one logger for the package

# nginx waits 60 s for a request's headers (client_header_timeout); a client of this server sends one line and a
# few headers, so a few seconds are plenty
REQUEST_SECONDS = 5.0
REQUEST_BYTES = 64 * 1024  # of one request: serve's only request body is a WebRTC offer (webrtc.MAX_OFFER_BYTES)
RESERVED_DESCRIPTORS = 128  # for the model's files, the engine and the log: connections get the rest
CAP_LOG_SECONDS = 60.0  # "the cap is reached" is logged at most this often


def connection_cap() -> int:
    """Open connections allowed: the process's descriptor limit, less what the rest of the server needs."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft = 1 << 20 if soft == resource.RLIM_INFINITY else soft
    return max(1, soft - RESERVED_DESCRIPTORS)


def guard(server) -> None:
    """Bound a uvicorn server that someone else configured and started (Gradio's, for app.py): uvicorn builds each
    new connection's protocol from ``config.http_protocol_class`` when it arrives, so every connection from now on
    has the request deadline and counts against the cap."""
    server.config.http_protocol_class = guarded_http(connection_cap())


def guarded_http(cap: int) -> type:
    """uvicorn's HTTP protocol class with the request deadline and the connection cap (``uvicorn.Config(http=)``)."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    logged = [-CAP_LOG_SECONDS]

    class Guarded(AutoHTTPProtocol):
        refused = False
        request_bytes = 0
        seen = None  # the request cycle at the last check (uvicorn makes one per request)

        def connection_made(self, transport) -> None:
            if len(self.connections) >= cap:  # uvicorn's own count: HTTP connections and WebSockets
                self.refused = True
                transport.abort()
                if time.monotonic() - logged[0] >= CAP_LOG_SECONDS:
                    logged[0] = time.monotonic()
                    log.warning("%d connections are open, the cap (the descriptor limit less %d): new ones are "
                                "closed until some end", cap, RESERVED_DESCRIPTORS)
                return
            super().connection_made(transport)
            self.loop.call_later(REQUEST_SECONDS, self.check_request)

        def connection_lost(self, exc) -> None:
            if not self.refused:
                super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            """Bytes that do not begin a request (a head not yet whole) count against REQUEST_BYTES; a request's body
            and the requests before it on a kept-alive connection do not."""
            heading = self.waiting()
            super().data_received(data)
            if heading and self.waiting():
                self.request_bytes += len(data)
                if self.request_bytes > REQUEST_BYTES:
                    self.transport.close()

        def waiting(self) -> bool:
            """No new request since the last check (nor a response on its way)."""
            cycle = self.cycle
            return cycle is self.seen and (cycle is None or cycle.response_complete)

        def check_request(self) -> None:
            """Every REQUEST_SECONDS until the upgrade to a WebSocket: a connection on which no request began in the
            last period, and none is answered, is closed (a half request, or nothing sent)."""
            if self.transport.is_closing() or self.transport.get_protocol() is not self:
                return
            if self.waiting():
                self.transport.close()
                return
            self.seen, self.request_bytes = self.cycle, 0
            self.loop.call_later(REQUEST_SECONDS, self.check_request)

    return Guarded
