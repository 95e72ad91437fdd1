"""Atomic file writes: a reader, or the file after a crash, holds the old content or the new one whole, never part;
and the durable steps (fsync of files and folders, renames and removals made durable) that crash-safe writers are
built from (the transition log, checkpoints, the replay store)."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
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
    if fsync:  # the rename itself is durable only once the folder holding it is
        fsync_dir(Path(path).parent)
    return Path(path)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write `text` to `path` atomically (as `Path.write_text` would, but never half a file). Returns the path."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Flush a folder's entries (files made, renamed or removed in it) to the disk."""
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def fsync_file(path: str | os.PathLike[str]) -> None:
    """Flush a file's contents to the disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def fsync_tree(path: str | os.PathLike[str]) -> None:
    """Flush every file and folder under `path` (and `path` itself) to the disk, deepest first."""
    for folder, _, names in os.walk(path, topdown=False):
        for name in names:
            fsync_file(os.path.join(folder, name))
        fsync_dir(folder)


def make_dirs_durably(path: str | os.PathLike[str]) -> Path:
    """`mkdir -p path`, each folder it makes made durable in its parent. Returns the path."""
    folder = Path(path).absolute()
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing):
        folder.mkdir(exist_ok=True)
        fsync_dir(folder.parent)
    return Path(path)


def rename_durably(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> Path:
    """Rename `source` to `target` (a file, or a folder onto a missing or empty one) and flush the folders holding
    both names. Returns the target."""
    source, target = Path(source), Path(target)
    os.rename(source, target)
    fsync_dir(target.parent)
    if source.parent != target.parent:
        fsync_dir(source.parent)
    return target


def remove_tree_durably(path: str | os.PathLike[str]) -> None:
    """Remove a folder and everything in it (nothing if it is missing), and flush its parent's entries."""
    path = Path(path)
    if path.exists():
        shutil.rmtree(path)
        fsync_dir(path.parent)
