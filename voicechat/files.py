"""The files voicechat writes for a user (docs/limits.md §4): each output path checked before the long run, and
written so that no reader ever sees half of it (the CLI's answers and records, every WAV, every file of
``voicechat batch``)."""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path
from typing import Optional

from .errors import OutputError, VoiceChatError

TEMPORARY = ".tmp"  # what a file being written ends in: ``.<name>.<random>.tmp`` beside its target
OUTPUTS = "outputs"  # the command line's default folder, in the current one (git-ignored in a checkout; the app's too)


def checked_output(path: Optional[str], option: str, overwrite: bool = False) -> Optional[Path]:
    """An output path checked before the long run: a regular file or a new name (never a folder, FIFO or device) in a
    folder where a file can be created now (a read-only file system is found here, not after the run); a file that
    is there already only with ``overwrite`` (the command's --overwrite)."""
    if path is None:
        return None
    p = Path(path).expanduser()
    if p.is_dir():
        raise OutputError(f"{option} {path} is a folder; give a file name in it")
    if not p.parent.is_dir():
        raise OutputError(f"{option} {path}: the folder {p.parent} does not exist; create it first")
    if p.exists() and not p.is_file():
        raise OutputError(f"{option} {path} is not a regular file (a FIFO, device or socket); give a file name")
    if p.exists() and not overwrite:
        raise OutputError(f"{option} {path} exists; give --overwrite to replace it, or another name")
    check_writable(p.parent, option, path)
    return p


def checked_folder(path: str, option: str, names: tuple = (), overwrite: bool = False) -> Path:
    """A folder that the files ``names`` go into, made at the end if missing: not a file, writable where it is (or
    where it will be made), and holding none of those files unless ``overwrite``."""
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise OutputError(f"{option} {path} is not a folder; give a folder for the files")
    there = [name for name in names if (p / name).exists()]
    if there and not overwrite:
        raise OutputError(f"{option} {path} holds {there[0]} already; give --overwrite to replace it, or another "
                          "folder")
    check_writable(next(q for q in (p, *p.parents) if q.is_dir()), option, path)
    return p


def check_writable(folder: Path, option: str, path: str) -> None:
    """A file can be created in ``folder`` now (permissions, a read-only or special file system)."""
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".voicechat-", suffix=TEMPORARY):
            pass
    except OSError as e:
        raise OutputError(f"{option} {path}: cannot write in {folder} ({e.strerror})") from None


def distinct_files(named: dict) -> None:
    """No output may be the input or another output (same path, or the same file by another name)."""
    seen: dict = {}
    for option, p in named.items():
        if p is None:
            continue
        key = p.resolve()
        for other, q in seen.items():
            if key == q.resolve() or (p.exists() and q.exists() and os.path.samefile(p, q)):
                raise OutputError(f"{option} and {other} are the same file ({p}); give {option} another name")
        seen[option] = p


def new_temporary(path: Path) -> Path:
    """A new empty file ``.<name>.<random>.tmp`` beside ``path``, made as open() makes a file: mode 0666 less the
    umask (tempfile's are 0600 whatever the umask, and the rename would keep that)."""
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}{TEMPORARY}"
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:
            continue


def write_atomically(path: Path, data: bytes) -> None:
    """Write through a temporary file in the same folder, renamed over ``path`` only once all of it is written: a full
    disk or an interrupted run never leaves a half-written file, nor destroys the one that was there."""
    path = Path(path)
    tmp = None
    try:
        tmp = new_temporary(path)
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise VoiceChatError(f"could not write {path} ({e.strerror}); nothing was written there") from None
    except BaseException:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise
