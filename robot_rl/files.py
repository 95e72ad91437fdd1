"""Atomic file writes: a reader, or the file after a crash, holds the old content or the new one whole, never part."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path next to `path` to write the new file to: renamed over `path` when the block ends, removed if
    it raises. Its hidden name is unique to the process and the call, so writers never share one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, fsync: bool = False) -> Path:
    """Write `data` to `path` atomically; `fsync` flushes it to the disk before the rename (for files whose loss
    after a crash would lose what was already acknowledged). Returns the path."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as file:
            file.write(data)
            if fsync:
                file.flush()
                os.fsync(file.fileno())
    return Path(path)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write `text` to `path` atomically (as `Path.write_text` would, but never half a file). Returns the path."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)
