"""What the app serves of its files, and how much of the uploads it keeps (docs/limits.md, app.py ``--share``).

Gradio serves every file under the app's allowed paths, uploads included, with the type its name gives: an uploaded
``.html`` or ``.svg`` would open as a page of the app's own origin (a stored script for every visitor of a share
link). :class:`FileGuard`, an ASGI middleware, makes each file response either audio (played inline) or a download,
and cuts the uploads folder to a total size after each upload, oldest files first.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from pathlib import Path

FILE_ROUTE = "/file="  # Gradio's file route (/gradio_api/file=PATH)
UPLOAD_ROUTE = "/upload"  # Gradio's upload route (/gradio_api/upload)
UPLOADS_CAP_BYTES = 1024 ** 3  # 1 GiB: five of the largest uploads the app takes (200 MB, app.launch)
GUARD_HEADERS = {b"content-disposition", b"x-content-type-options", b"content-security-policy"}
MAX_NAME_BYTES = 120  # an upload's name kept, in UTF-8 (a file system takes 255: docs/limits.md §3)
MAX_SUFFIX_BYTES = 16  # its suffix kept (the decoders look at it); a longer one is no suffix


def upload_name(filename: str, fallback: str = "recording") -> str:
    """An uploaded file's name as a file here may carry it: its last part, printable characters only, cut to
    ``MAX_NAME_BYTES`` with its suffix kept; ``fallback`` (with the suffix) when nothing is left."""
    name = "".join(c for c in Path(filename or "").name if c.isprintable())
    suffix = Path(name).suffix if len(Path(name).suffix.encode()) <= MAX_SUFFIX_BYTES else ""
    stem = name[:len(name) - len(suffix)].encode()[:MAX_NAME_BYTES - len(suffix.encode())]
    stem = stem.decode(errors="ignore")  # a character cut in two goes
    return (stem if stem.strip(". ") else fallback) + suffix


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


def files_by_age(folder: Path, keep: tuple) -> list[tuple[float, int, Path]]:
    """(modification time, size, path) of each file under ``folder`` but not under its ``keep`` subfolders, oldest
    first; a file that goes while it is listed (another request's upload or clean-up) is left out."""
    found = []
    for root, dirs, names in os.walk(folder):  # os.walk skips a folder that vanishes
        if Path(root) == folder:
            dirs[:] = [d for d in dirs if d not in keep]
        for name in names:
            try:
                info = os.stat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            found.append((info.st_mtime, info.st_size, Path(root, name)))
    return sorted(found)


def prune(folder: Path, cap_bytes: int, keep: tuple = ()) -> list[Path]:
    """Remove the oldest files under ``folder`` (not under the ``keep`` subfolders) until the rest take at most
    ``cap_bytes``; returns what was removed. Folders left empty go too."""
    files = files_by_age(folder, keep)
    total = sum(size for _, size, _ in files)
    removed = []
    for _, size, p in files:
        if total <= cap_bytes:
            break
        total -= size
        p.unlink(missing_ok=True)
        removed.append(p)
        if p.parent != folder:
            with contextlib.suppress(OSError):  # not empty, or gone already
                p.parent.rmdir()
    return removed


class FileGuard:
    """ASGI middleware: safe file responses (:func:`served_safely`) and the uploads folder kept under its cap (cut
    before an upload's response goes out, one clean-up at a time)."""

    def __init__(self, app, uploads: Path, cap_bytes: int = UPLOADS_CAP_BYTES, keep: tuple = ()):
        self.app, self.uploads, self.cap_bytes, self.keep = app, Path(uploads), cap_bytes, keep
        self.pruning = threading.Lock()

    def prune(self) -> None:
        with self.pruning:
            if self.uploads.is_dir():
                prune(self.uploads, self.cap_bytes, self.keep)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if FILE_ROUTE in scope["path"]:
            async def send_safely(message):
                if message["type"] == "http.response.start":
                    message = {**message, "headers": served_safely(list(message.get("headers", [])))}
                await send(message)
            return await self.app(scope, receive, send_safely)
        if scope["method"] == "POST" and scope["path"].endswith(UPLOAD_ROUTE):
            async def send_after_pruning(message):
                if message["type"] == "http.response.start":  # the upload is on disk by now
                    await asyncio.to_thread(self.prune)
                await send(message)
            return await self.app(scope, receive, send_after_pruning)
        return await self.app(scope, receive, send)
