"""What the app serves of its files, and how much of the uploads it keeps (docs/limits.md, app.py ``--share``).

Gradio serves every file under the app's allowed paths, uploads included, with the type its name gives: an uploaded
``.html`` or ``.svg`` would open as a page of the app's own origin (a stored script for every visitor of a share
link). :class:`FileGuard`, an ASGI middleware, makes each file response either audio (played inline) or a download,
and cuts the uploads folder to a total size after each upload, oldest files first.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

FILE_ROUTE = "/file="  # Gradio's file route (/gradio_api/file=PATH)
UPLOAD_ROUTE = "/upload"  # Gradio's upload route (/gradio_api/upload)
UPLOADS_CAP_BYTES = 1024 ** 3  # 1 GiB: five of the largest uploads the app takes (200 MB, app.launch)
GUARD_HEADERS = {b"content-disposition", b"x-content-type-options", b"content-security-policy"}


def served_safely(headers: list) -> list:
    """A file response's headers: audio stays inline, anything else becomes an attachment; no type sniffing, and a
    sandbox in case a browser renders it anyway."""
    given = dict(headers)
    disposition = given.get(b"content-disposition", b"inline")
    if not given.get(b"content-type", b"").startswith(b"audio/"):
        disposition = b"attachment" + (disposition[len(b"inline"):] if disposition.startswith(b"inline") else b"")
    return [(k, v) for k, v in headers if k.lower() not in GUARD_HEADERS] + [
        (b"content-disposition", disposition), (b"x-content-type-options", b"nosniff"),
        (b"content-security-policy", b"sandbox")]


def prune(folder: Path, cap_bytes: int, keep: tuple = ()) -> list[Path]:
    """Remove the oldest files under ``folder`` (not under the ``keep`` subfolders) until the rest take at most
    ``cap_bytes``; returns what was removed. Folders left empty go too."""
    kept = [folder / name for name in keep]
    files = [p for p in folder.rglob("*") if p.is_file() and not any(k in p.parents for k in kept)]
    files.sort(key=lambda p: p.stat().st_mtime)
    total = sum(p.stat().st_size for p in files)
    removed = []
    for p in files:
        if total <= cap_bytes:
            break
        total -= p.stat().st_size
        p.unlink(missing_ok=True)
        removed.append(p)
        if p.parent != folder and not any(p.parent.iterdir()):
            shutil.rmtree(p.parent, ignore_errors=True)
    return removed


class FileGuard:
    """ASGI middleware: safe file responses (:func:`served_safely`) and the uploads folder kept under its cap."""

    def __init__(self, app, uploads: Path, cap_bytes: int = UPLOADS_CAP_BYTES, keep: tuple = ()):
        self.app, self.uploads, self.cap_bytes, self.keep = app, Path(uploads), cap_bytes, keep

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if FILE_ROUTE in scope["path"]:
            async def send_safely(message):
                if message["type"] == "http.response.start":
                    message = {**message, "headers": served_safely(list(message.get("headers", [])))}
                await send(message)
            return await self.app(scope, receive, send_safely)
        await self.app(scope, receive, send)
        if scope["method"] == "POST" and scope["path"].endswith(UPLOAD_ROUTE) and self.uploads.is_dir():
            await asyncio.to_thread(prune, self.uploads, self.cap_bytes, self.keep)
