"""The app's API key (``app.py --api-key``, docs/limits.md §3): one guard before every route of the app, Gradio's
included (the page, its API endpoints, uploads, served files) and the Talk live tab's (``/live/*``,
``/v1/realtime``).

A request passes with ``Authorization: Bearer KEY`` (scripts, ``gradio_client.Client(url, headers=...)``), the
WebSocket subprotocol ``openai-insecure-api-key.KEY`` (the Realtime server's rule), or the cookie a browser gets from
the key form that every refused page shows. The cookie stands for the key: the guard passes such a request on with
``Authorization: Bearer KEY``, so the Talk live tab's own checks (the Realtime server's) see the key too. Anything
else (but the key form's post and ``LAUNCH_CALL``) gets 401 (a WebSocket: 403) and reaches nothing of the app.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import json
from typing import Callable
from urllib.parse import parse_qs

from starlette.requests import HTTPConnection

KEY_FORM_PATH = "/voicechat-key"  # the key form posts here
# Gradio's own call at launch passes without the key: it runs the start-up events once and answers true or false,
# and launch fails without it
LAUNCH_CALL = ("GET", "/gradio_api/startup-events")
COOKIE = "voicechat-key"
MAX_FORM_BYTES = 4096  # the key form's body at most
REFUSED = "this app needs its API key: send Authorization: Bearer KEY"


def cookie_token(api_key: str) -> str:
    """What the browser's cookie holds: derived from the key, never the key itself."""
    return hmac.new(api_key.encode(), b"voicechat app cookie", hashlib.sha256).hexdigest()


def key_page(message: str, next_path: str) -> bytes:
    """The form a refused page shows: the key, then back to ``next_path``."""
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>VoiceChat: API key</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body style="font-family: system-ui, sans-serif; max-width: 32em; margin: 4em auto;">
<h1>VoiceChat</h1><p>{html.escape(message)}</p>
<form method="post" action="{KEY_FORM_PATH}"><input type="hidden" name="next" value="{html.escape(next_path)}">
<label>API key <input type="password" name="key" autofocus autocomplete="current-password"></label>
<button type="submit">Open</button></form></body></html>""".encode()


def local_path(path: str) -> str:
    """Where the form may send the browser back to: a path of this app, never another site."""
    return path if path.startswith("/") and not path.startswith("//") and "\\" not in path else "/"


class KeyGuard:
    """ASGI middleware: every HTTP and WebSocket request of the app needs the key (see the module's docstring).
    ``authorized(connection)``: the Realtime server's check of the header and the subprotocol."""

    def __init__(self, app, api_key: str, authorized: Callable[[HTTPConnection], bool]):
        self.app, self.api_key, self.authorized = app, api_key, authorized
        self.token = cookie_token(api_key)

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        connection = HTTPConnection(scope)
        if hmac.compare_digest(connection.cookies.get(COOKIE, "").encode(), self.token.encode()):
            return await self.app(self.with_key(scope), receive, send)
        if self.authorized(connection):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":  # closed before it is accepted: the client sees HTTP 403
            return await send({"type": "websocket.close", "code": 1008})
        if scope["path"] == KEY_FORM_PATH and scope["method"] == "POST":
            return await self.key_form(receive, send)
        if (scope["method"], scope["path"]) == LAUNCH_CALL:
            return await self.app(scope, receive, send)
        if scope["method"] == "GET" and "text/html" in connection.headers.get("accept", ""):
            path = scope["path"] + (f"?{scope['query_string'].decode()}" if scope["query_string"] else "")
            return await refuse(send, key_page("This app needs its API key.", local_path(path)), "text/html")
        return await refuse(send, json.dumps({"detail": REFUSED}).encode(), "application/json")

    def with_key(self, scope) -> dict:
        """The request as if it had come with ``Authorization: Bearer KEY``."""
        headers = [(k, v) for k, v in scope["headers"] if k != b"authorization"]
        return {**scope, "headers": [*headers, (b"authorization", f"Bearer {self.api_key}".encode())]}

    async def key_form(self, receive, send) -> None:
        """The form's answer: the right key sets the cookie and goes back; a wrong one shows the form again."""
        body = await read_body(receive, MAX_FORM_BYTES)
        fields = parse_qs(body.decode("utf-8", "replace")) if body is not None else {}
        back = local_path(fields.get("next", ["/"])[0])
        if not hmac.compare_digest(fields.get("key", [""])[0].encode(), self.api_key.encode()):
            return await refuse(send, key_page("That is not the app's API key.", back), "text/html")
        cookie = f"{COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict"
        await send({"type": "http.response.start", "status": 303,
                    "headers": [(b"location", back.encode()), (b"set-cookie", cookie.encode()),
                                (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})


async def read_body(receive, limit: int):
    """The request's body, or None once it passes ``limit`` bytes (the rest is not read)."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        if not message.get("more_body"):
            return body


async def refuse(send, body: bytes, kind: str) -> None:
    """A refusal: 401 with the scheme the key goes in (Gradio's own check of its launch takes 401 as "the app is
    up")."""
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", kind.encode()), (b"content-length", str(len(body)).encode()),
                            (b"www-authenticate", b'Bearer realm="voicechat"')]})
    await send({"type": "http.response.body", "body": body})
