"""Writing an output so that no reader ever sees half of it (docs/limits.md §4): the CLI's answers and records, and
every file of ``voicechat batch``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import VoiceChatError

TEMPORARY = ".tmp"  # what a file being written ends in: ``.<name>.<random>.tmp`` beside its target


def write_atomically(path: Path, data: bytes) -> None:
    """Write through a temporary file in the same folder, renamed over ``path`` only once all of it is written: a full
    disk or an interrupted run never leaves a half-written file, nor destroys the one that was there."""
    tmp = None
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=TEMPORARY, delete=False) as f:
            tmp = Path(f.name)
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise VoiceChatError(f"could not write {path} ({e.strerror}); nothing was written there") from None
    except BaseException:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise
