"""Small files that several processes may race to create: written whole, fsynced, linked into place."""
from __future__ import annotations

import os
import threading
from pathlib import Path


def create_exclusively(path: Path, text: str) -> bool:
    """Create `path` holding `text`, complete and durable the moment it appears, unless it exists.

    The text goes to a private temporary file first, then link() puts it in place: atomic and
    exclusive, so of racing creators exactly one wins and nobody ever sees a half-written file.
    The caller fsyncs the directory to make the new name durable.
    """
    tmp = path.parent / f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    write_durably(tmp, text)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def write_durably(path: Path, text: str) -> None:
    """Write `path` (created or truncated) and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
