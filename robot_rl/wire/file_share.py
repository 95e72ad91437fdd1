"""Files that cross between hosts once, verified by sha256: bundles, their manifests, chunks and the receiving cache.

A *bundle* is a file or a folder (recursive: a zarr dataset, a policy folder) offered under a *name* (the path string
as the user gave it). Its :class:`Manifest` lists every file as (relative path, size, sha256), sorted by path, plus
the *target*: the relative path a user of the bundle opens. The bundle's digest is the sha256 of the manifest's
canonical JSON, so equal bytes give equal digests whatever the name, the host or the files' times, and one changed
byte anywhere changes it. A file bundle also carries its companions (``<file>.validation.json``, the deployment
gate's record of a policy file); a folder carries everything in it (a policy folder's ``validation.json`` too).

On the wire (robot_rl.ros.nodes.file_share_node) everything is msgpack, never pickle: an offer ``{name, digest, manifest}``, a
request ``{digest, want}`` (the whole bundle, or the chunks still missing), progress ``{digest, received}`` and chunks
``{digest, path, offset, data}`` of :data:`CHUNK_SIZE` bytes, at most :data:`WINDOW` bytes ahead of the progress.
A receiver (:class:`Assembly`) writes chunks into a private folder under the cache, checks each file's sha256 as it
completes and the manifest's digest at the end, and only then renames the folder to ``<cache>/<digest>``: a
half-received bundle never looks complete, and a complete one is reused (verified again) without a transfer. The cache is
``$ROBOT_RL_FILE_CACHE``, else ``$XDG_CACHE_HOME/robot_rl/files``, else ``~/.cache/robot_rl/files``.

Every problem is a :class:`FileShareError` with a one-line message naming the file and, for a mismatch, both hashes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from robot_rl.core.codec import CodecError, pack, unpack

CHUNK_SIZE = 32 * 1024
"""Bytes per chunk on the wire (the last chunk of a file is shorter). Small enough for one UDP datagram, so a chunk
is never a burst that overflows a slow link's queue (measured: 256 kB chunks paced at 10 Mbit/s over a 20 Mbit/s
link stalled for good, DDS repairing the same lost fragments; 32 kB chunks went through at the paced rate)."""
WINDOW = 96 * 1024
"""Bytes a sender keeps in flight unconfirmed by the receiver's progress messages: a link slower than the pace is
filled by at most this much (the sender runs at the link's rate, not above it)."""
PROGRESS_EVERY = 32 * 1024
"""A receiver confirms what has arrived each time this many more bytes have."""
MANIFEST_FORMAT = 1
PROTOCOL = 1
CACHE_ENV = "ROBOT_RL_FILE_CACHE"
COMPANION_SUFFIXES = (".validation.json",)
"""Files next to an offered file that travel with it (the deployment gate's validation record of a policy file)."""
MANIFEST_FILE = ".manifest.json"
"""The manifest of a complete bundle in the cache, beside its files (``<cache>/<digest>/.manifest.json``)."""
PARTIAL_DIR = ".partial"
SHORT = 16  # hex digits of a sha256 shown in messages


class FileShareError(Exception):
    """A bundle is missing, differs between hosts or arrived damaged; the message is one line naming the file."""


def short(digest: str) -> str:
    """The first hex digits of a sha256, as messages show it."""
    return f"{digest[:SHORT]}…"


def mismatch_message(what: str, name: str, here: str, there: str, whose: str, differing: Iterable[str] = ()) -> str:
    """The one line of a file that differs between two hosts (e.g. whose = "the learner's"), naming the files that
    differ if they are known."""
    differing = list(differing)
    more = f" and {len(differing) - 3} more" if len(differing) > 3 else ""
    files = f" (files that differ: {', '.join(differing[:3])}{more})" if differing else ""
    return (f"{what} {name}: this host's copy sha256 {short(here)} differs from {whose} {short(there)}{files}: put "
            f"the same files on both hosts, or remove this host's copy to fetch it")


def differing_files(here: Manifest, there: Manifest) -> list[str]:
    """The files (relative to the offered file or folder) whose size or sha256 differ, or that only one side has."""
    a = {e.path.split("/", 1)[-1]: e for e in here.entries}
    b = {e.path.split("/", 1)[-1]: e for e in there.entries}
    return sorted(n for n in set(a) | set(b) if a.get(n) is None or b.get(n) is None
                  or (a[n].size, a[n].sha256) != (b[n].size, b[n].sha256))


# ----- manifests and bundles -----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Entry:
    """One file of a bundle: its path relative to the bundle's root (POSIX form), size and sha256."""

    path: str
    size: int
    sha256: str


def _safe_relative(path: Any, what: str) -> str:
    """`path` if it is a plain relative POSIX path inside its root (no absolute path, no ``..``), else an error."""
    if not isinstance(path, str) or not path or "\\" in path or "\0" in path:
        raise FileShareError(f"{what}: invalid path {path!r}")
    parts = PurePosixPath(path).parts
    if PurePosixPath(path).is_absolute() or any(p in ("..", ".", "") for p in parts) or path != "/".join(parts):
        raise FileShareError(f"{what}: path {path!r} is not a plain relative path")
    return path


@dataclasses.dataclass(frozen=True)
class Manifest:
    """What a bundle holds: the path its user opens (`target`) and every file with its size and sha256."""

    target: str
    entries: tuple[Entry, ...]

    def canonical(self) -> bytes:
        """The bytes the digest is taken of: compact, key-sorted ASCII JSON, entries sorted by path."""
        return json.dumps({"format": MANIFEST_FORMAT, "target": self.target,
                           "entries": [[e.path, e.size, e.sha256] for e in self.entries]},
                          sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.canonical()).hexdigest()

    @property
    def size(self) -> int:
        return sum(e.size for e in self.entries)

    def entry(self, path: str) -> Entry | None:
        return self._by_path.get(path)

    @property
    def _by_path(self) -> dict[str, Entry]:
        cached = self.__dict__.get("_index")
        if cached is None:
            cached = {e.path: e for e in self.entries}
            object.__setattr__(self, "_index", cached)
        return cached

    def to_wire(self) -> dict[str, Any]:
        return {"format": MANIFEST_FORMAT, "target": self.target,
                "entries": [[e.path, e.size, e.sha256] for e in self.entries]}

    @classmethod
    def from_wire(cls, value: Any, what: str = "manifest") -> Manifest:
        """A manifest from its wire / file form; FileShareError if malformed (unsafe paths, unsorted, duplicates)."""
        if not isinstance(value, Mapping) or value.get("format") != MANIFEST_FORMAT:
            raise FileShareError(f"{what}: not a format-{MANIFEST_FORMAT} manifest")
        target, raw = value.get("target"), value.get("entries")
        if not isinstance(raw, list) or not raw:
            raise FileShareError(f"{what}: no entries")
        entries = []
        for item in raw:
            if (not isinstance(item, (list, tuple)) or len(item) != 3 or not isinstance(item[1], int)
                    or isinstance(item[1], bool) or item[1] < 0 or not isinstance(item[2], str)
                    or len(item[2]) != 64 or any(c not in "0123456789abcdef" for c in item[2])):
                raise FileShareError(f"{what}: malformed entry {item!r:.80}")
            entries.append(Entry(_safe_relative(item[0], what), int(item[1]), item[2]))
        paths = [e.path for e in entries]
        if paths != sorted(set(paths)):
            raise FileShareError(f"{what}: entries are not sorted and unique")
        if target != "" and not isinstance(target, str):
            raise FileShareError(f"{what}: invalid target {target!r}")
        if target:
            _safe_relative(target, what)
            if target not in paths and not any(p.startswith(target + "/") for p in paths):
                raise FileShareError(f"{what}: target {target!r} is none of its files or folders")
        return cls(target, tuple(entries))


def file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 of a file's bytes (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


@dataclasses.dataclass(frozen=True)
class Bundle:
    """A local file or folder offered under `name`: its manifest, where its files are (`root`) and their stamps."""

    name: str
    root: Path
    manifest: Manifest
    stamps: Mapping[str, tuple[int, int]] = dataclasses.field(default_factory=dict, compare=False)
    """(size, mtime_ns) of each file when it was hashed: a file changed since is not sent."""

    @property
    def digest(self) -> str:
        return self.manifest.digest

    @property
    def path(self) -> Path:
        """What a user of the bundle opens: the file or folder that was offered (or its received copy)."""
        return self.root / self.manifest.target if self.manifest.target else self.root


def _files_of(path: Path) -> list[Path]:
    """The regular files of `path` (itself, or everything under the folder, symbolic links to files followed)."""
    if path.is_file():
        return [path]
    files = []
    for folder, dirs, names in os.walk(path):
        dirs.sort()
        for name in names:
            full = Path(folder) / name
            if full.is_file():
                files.append(full)
    return files


def bundle_of(path: str | os.PathLike[str], name: str | None = None) -> Bundle:
    """The bundle of a local file (with its companions) or folder; `name` defaults to the path as given."""
    given = Path(path)
    if not given.exists():
        raise FileShareError(f"{given} does not exist")
    given = given.resolve()
    root = given.parent
    if given.is_dir():
        files = _files_of(given)
        if not files:
            raise FileShareError(f"folder {given} holds no files")
    elif given.is_file():
        files = [given] + [c for c in (given.with_name(given.name + s) for s in COMPANION_SUFFIXES) if c.is_file()]
    else:
        raise FileShareError(f"{given} is neither a file nor a folder")
    entries, stamps = [], {}
    for file in files:
        relative = file.relative_to(root).as_posix()
        before = file.stat()
        sha = file_sha256(file)
        after = file.stat()
        if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns):
            raise FileShareError(f"{relative} in {root} changed while it was hashed (still being written?)")
        entries.append(Entry(relative, after.st_size, sha))
        stamps[relative] = (after.st_size, after.st_mtime_ns)
    entries.sort(key=lambda e: e.path)
    return Bundle(str(name if name is not None else path), root, Manifest(given.name, tuple(entries)), stamps)


def read_chunks(bundle: Bundle, want: Mapping[str, Iterable[int] | None] | None = None
                ) -> Iterator[tuple[str, int, bytes]]:
    """(path, offset, data) of every chunk of the bundle's files, or of the chunks `want` names (path -> offsets,
    None: all of that file's; empty files need none); FileShareError for a file that changed since it was hashed
    (its bytes would not match the offer)."""
    entries = bundle.manifest.entries if want is None else [bundle.manifest.entry(p) for p in want]
    for entry in entries:
        if entry is None or entry.size == 0:
            continue
        chosen = None if want is None else want[entry.path]
        offsets = range(0, entry.size, CHUNK_SIZE) if chosen is None else sorted(
            o for o in set(chosen) if 0 <= o < entry.size and o % CHUNK_SIZE == 0)
        file = bundle.root / entry.path
        try:
            stat = file.stat()
            handle = open(file, "rb")
        except OSError as error:
            raise FileShareError(f"{bundle.name}: {entry.path} is gone since it was offered ({error.strerror})") \
                from None
        with handle:
            if (stat.st_size, stat.st_mtime_ns) != bundle.stamps.get(entry.path, (entry.size, stat.st_mtime_ns)):
                raise FileShareError(f"{bundle.name}: {entry.path} changed since it was offered")
            for offset in offsets:
                handle.seek(offset)
                data = handle.read(min(CHUNK_SIZE, entry.size - offset))
                if len(data) != min(CHUNK_SIZE, entry.size - offset):
                    raise FileShareError(f"{bundle.name}: {entry.path} changed since it was offered (shorter)")
                yield entry.path, offset, data


# ----- wire messages (msgpack) ---------------------------------------------------------------------------------

def _message(payload: bytes | bytearray | memoryview, kind: str) -> dict[str, Any]:
    try:
        message = unpack(payload)
    except CodecError as error:
        raise FileShareError(f"undecodable {kind} message: {error}") from None
    if not isinstance(message, dict) or message.get("kind") != kind or message.get("protocol") != PROTOCOL:
        raise FileShareError(f"not a protocol-{PROTOCOL} {kind} message")
    return message


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise FileShareError(f"{what} must be text, got {type(value).__name__}")
    return value


@dataclasses.dataclass(frozen=True)
class Offer:
    """A peer's bundle as announced: its name, manifest and the digest it claims (checked against the manifest)."""

    name: str
    digest: str
    manifest: Manifest


def encode_offers(peer: str, host: str, node: str, bundles: Iterable[Bundle]) -> bytes:
    """One node's offer message: every bundle it offers, by name."""
    return pack({"kind": "file_offer", "protocol": PROTOCOL, "peer": peer, "host": host, "node": node,
                 "bundles": [{"name": b.name, "digest": b.digest, "manifest": b.manifest.to_wire()}
                             for b in bundles]})


def decode_offers(payload: bytes | bytearray | memoryview) -> tuple[str, str, str, list[Offer]]:
    """(peer, host, node, offers) of an offer message; a bundle whose digest is not its manifest's is an error."""
    message = _message(payload, "file_offer")
    offers = []
    for item in message.get("bundles") or []:
        if not isinstance(item, dict):
            raise FileShareError("file_offer: malformed bundle")
        name = _text(item.get("name"), "file_offer name")
        manifest = Manifest.from_wire(item.get("manifest"), f"offer of {name}")
        if item.get("digest") != manifest.digest:
            raise FileShareError(f"offer of {name}: digest {item.get('digest')!r:.20} is not its manifest's "
                                 f"{short(manifest.digest)}")
        offers.append(Offer(name, manifest.digest, manifest))
    return (_text(message.get("peer"), "file_offer peer"), _text(message.get("host", ""), "file_offer host"),
            _text(message.get("node", ""), "file_offer node"), offers)


@dataclasses.dataclass(frozen=True)
class Request:
    """A receiver's message to one peer: send the bundle (`want` None: all of it; else path -> chunk offsets), or,
    if `progress`, only how many of its bytes have arrived (`received`: the sender keeps at most a window of bytes
    unconfirmed)."""

    requester: str
    server: str
    digest: str
    want: dict[str, list[int]] | None = None
    received: int = 0
    progress: bool = False


def encode_request(requester: str, server: str, digest: str, want: Mapping[str, Iterable[int]] | None = None,
                   received: int = 0) -> bytes:
    """Ask peer `server` for the bundle `digest`: all of it, or the chunks `want` names (path -> offsets), saying
    how many of its bytes have arrived here so far."""
    return pack({"kind": "file_request", "protocol": PROTOCOL, "requester": requester, "server": server,
                 "digest": digest, "want": None if want is None else {p: list(o) for p, o in want.items()},
                 "received": int(received)})


def encode_progress(requester: str, server: str, digest: str, received: int) -> bytes:
    """Tell peer `server` that `received` bytes of the bundle `digest` have arrived here."""
    return pack({"kind": "file_request", "protocol": PROTOCOL, "requester": requester, "server": server,
                 "digest": digest, "received": int(received), "progress": True})


def decode_request(payload: bytes | bytearray | memoryview) -> Request:
    """The :class:`Request` of a request or progress message."""
    message = _message(payload, "file_request")
    want, received = message.get("want"), message.get("received", 0)
    if want is not None:
        if not isinstance(want, dict) or not all(
                isinstance(o, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in o)
                for o in want.values()):
            raise FileShareError("file_request want must map paths to chunk offsets")
        want = {_safe_relative(p, "file_request"): o for p, o in want.items()}
    if not isinstance(received, int) or isinstance(received, bool) or received < 0:
        raise FileShareError("file_request received must be a byte count")
    return Request(_text(message.get("requester"), "requester"), _text(message.get("server"), "server"),
                   _text(message.get("digest"), "digest"), want, received, message.get("progress") is True)


def encode_chunk(digest: str, path: str, offset: int, data: bytes | memoryview) -> bytes:
    return pack({"kind": "file_chunk", "protocol": PROTOCOL, "digest": digest, "path": path, "offset": int(offset),
                 "data": bytes(data)})


def encode_refusal(digest: str, peer: str, reason: str) -> bytes:
    """A chunk-topic message saying the bundle `digest` will not come from `peer` (it changed, or is gone)."""
    return pack({"kind": "file_chunk", "protocol": PROTOCOL, "digest": digest, "peer": peer, "error": reason})


def decode_chunk(payload: bytes | bytearray | memoryview) -> dict[str, Any]:
    """{digest, path, offset, data} of a chunk, or {digest, peer, error} of a refusal."""
    message = _message(payload, "file_chunk")
    _text(message.get("digest"), "file_chunk digest")
    if "error" in message:
        _text(message["error"], "file_chunk error")
        _text(message.get("peer"), "file_chunk peer")
        return message
    _safe_relative(message.get("path"), "file_chunk")
    if not isinstance(message.get("offset"), int) or not isinstance(message.get("data"), bytes):
        raise FileShareError("file_chunk: malformed offset or data")
    return message


# ----- the receiving side: cache and assembly ------------------------------------------------------------------

def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """Where received bundles are kept (see the module doc)."""
    env = os.environ if env is None else env
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV]).expanduser()
    base = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "robot_rl" / "files"


def verify_folder(folder: Path, manifest: Manifest, what: str) -> None:
    """FileShareError (one line, both hashes) unless every file of `manifest` is in `folder` with its bytes."""
    for entry in manifest.entries:
        file = folder / entry.path
        try:
            size = file.stat().st_size
        except OSError:
            raise FileShareError(f"{what}: {entry.path} is missing") from None
        if size != entry.size:
            raise FileShareError(f"{what}: {entry.path} has {size} bytes, the manifest says {entry.size}")
        actual = file_sha256(file)
        if actual != entry.sha256:
            raise FileShareError(f"{what}: {entry.path} has sha256 {short(actual)}, the manifest says "
                                 f"{short(entry.sha256)}")


def cached(digest: str, root: Path | None = None) -> Bundle | None:
    """The complete bundle `digest` in the cache, verified again (a damaged copy is removed: fetch it anew)."""
    folder = (root or cache_root()) / digest
    try:
        manifest = Manifest.from_wire(json.loads((folder / MANIFEST_FILE).read_text()), f"cached {digest[:16]}")
        if manifest.digest != digest:
            raise FileShareError(f"cached bundle {short(digest)} holds the manifest of {short(manifest.digest)}")
        verify_folder(folder, manifest, f"cached bundle {short(digest)}")
    except (OSError, ValueError, FileShareError):
        if folder.exists():  # changed by hand, or damaged: move it out of the way atomically, then remove it
            _discard(folder)
        return None
    return Bundle(digest, folder, manifest)


def _discard(folder: Path) -> None:
    trash = folder.parent / PARTIAL_DIR / f"stale-{folder.name}-{secrets.token_hex(4)}"
    try:
        trash.parent.mkdir(parents=True, exist_ok=True)
        os.rename(folder, trash)
    except OSError:
        trash = folder
    shutil.rmtree(trash, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


class Assembly:
    """Receives one bundle's chunks into a private folder, verifies it and makes it appear whole in the cache."""

    def __init__(self, name: str, manifest: Manifest, root: Path | None = None, what: str = "file"):
        self.name, self.manifest, self.what = name, manifest, what
        self.digest = manifest.digest
        self.cache = root or cache_root()
        self.final = self.cache / self.digest
        partial = self.cache / PARTIAL_DIR
        partial.mkdir(parents=True, exist_ok=True)
        for old in partial.glob(f"{self.digest}-*"):  # left by a receiver that died
            pid = old.name.split("-")[1]
            if pid.isdigit() and not _pid_alive(int(pid)):
                shutil.rmtree(old, ignore_errors=True)
        free = shutil.disk_usage(partial).free
        if manifest.size > free:
            raise FileShareError(f"{what} {name}: needs {manifest.size / 1e6:.1f} MB, {free / 1e6:.1f} MB free "
                                 f"in {self.cache} (set {CACHE_ENV} to another disk)")
        self.folder = partial / f"{self.digest}-{os.getpid()}-{secrets.token_hex(4)}"
        self.folder.mkdir()
        self._received: dict[str, set[int]] = {}
        self._hash: dict[str, Any] = {}  # running sha256 of files received in order
        self._next: dict[str, int] = {}
        self._done: set[str] = set()
        self.bytes_received = 0
        self.started = time.monotonic()
        for entry in manifest.entries:
            file = self.folder / entry.path
            file.parent.mkdir(parents=True, exist_ok=True)
            with open(file, "wb") as handle:
                handle.truncate(entry.size)
            self._received[entry.path] = set()
            self._hash[entry.path] = hashlib.sha256()
            self._next[entry.path] = 0
            if entry.size == 0:
                self._complete(entry)

    @property
    def complete(self) -> bool:
        return len(self._done) == len(self.manifest.entries)

    def missing(self) -> list[str]:
        """The files not yet received whole."""
        return [e.path for e in self.manifest.entries if e.path not in self._done]

    def wanted(self) -> dict[str, list[int]]:
        """The chunks not yet received, path -> offsets (what a renewed request asks for)."""
        return {e.path: [o for o in range(0, e.size, CHUNK_SIZE) if o not in self._received[e.path]]
                for e in self.manifest.entries if e.path not in self._done}

    def add(self, path: str, offset: int, data: bytes) -> bool:
        """Write one chunk; True if it was new. FileShareError for a chunk the manifest has no place for, or a file
        whose bytes, once complete, are not its sha256."""
        entry = self.manifest.entry(path)
        if entry is None:
            raise FileShareError(f"{self.what} {self.name}: a chunk of {path!r}, which is not in the bundle")
        expected = min(CHUNK_SIZE, entry.size - offset)
        if offset % CHUNK_SIZE or offset < 0 or (entry.size and offset >= entry.size) or len(data) != max(expected, 0):
            raise FileShareError(f"{self.what} {self.name}: malformed chunk of {path} ({len(data)} bytes at "
                                 f"{offset} of {entry.size})")
        if path in self._done or offset in self._received[path]:
            return False
        fd = os.open(self.folder / path, os.O_WRONLY)
        try:
            os.pwrite(fd, data, offset)
        finally:
            os.close(fd)
        self._received[path].add(offset)
        self.bytes_received += len(data)
        if self._hash[path] is not None and offset == self._next[path]:
            self._hash[path].update(data)
            self._next[path] += len(data)
        else:
            self._hash[path] = None  # out of order (a renewed request): read back once complete
        if len(self._received[path]) * CHUNK_SIZE >= entry.size:
            self._complete(entry)
        return True

    def _complete(self, entry: Entry) -> None:
        running = self._hash[entry.path]
        actual = running.hexdigest() if running is not None else file_sha256(self.folder / entry.path)
        if actual != entry.sha256:
            raise FileShareError(f"{self.what} {self.name}: {entry.path} arrived with sha256 {short(actual)}, the "
                                 f"offer says {short(entry.sha256)}")
        self._done.add(entry.path)

    def finish(self) -> Bundle:
        """The complete, verified bundle, renamed into place (or the copy another receiver put there first)."""
        if not self.complete:
            raise FileShareError(f"{self.what} {self.name}: {len(self.missing())} files still missing")
        entries = tuple(Entry(e.path, (self.folder / e.path).stat().st_size, e.sha256) for e in self.manifest.entries)
        if Manifest(self.manifest.target, entries).digest != self.digest:
            raise FileShareError(f"{self.what} {self.name}: the received files make a bundle other than "
                                 f"{short(self.digest)}")
        (self.folder / MANIFEST_FILE).write_text(json.dumps(self.manifest.to_wire()))
        try:
            os.rename(self.folder, self.final)
        except OSError:  # another receiver finished first (the folder exists): use its copy if it is whole
            self.abandon()
            bundle = cached(self.digest, self.cache)
            if bundle is None:
                raise FileShareError(f"{self.what} {self.name}: cannot move the received copy to {self.final}") \
                    from None
            return dataclasses.replace(bundle, name=self.name)
        return Bundle(self.name, self.final, self.manifest)

    def abandon(self) -> None:
        """Remove what was received (the bundle is not complete, or will not be used)."""
        shutil.rmtree(self.folder, ignore_errors=True)


# ----- pacing --------------------------------------------------------------------------------------------------

class RateLimiter:
    """A token bucket: `wait_s(n)` says how long to wait before sending n bytes at `rate` bytes/s (0: no limit)."""

    def __init__(self, rate: float, burst: int = CHUNK_SIZE, clock=time.monotonic):
        self.rate, self.burst, self.clock = float(rate), int(burst), clock
        self._tokens, self._at = float(burst), clock()

    def wait_s(self, size: int) -> float:
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
        self._at = now
        need = min(float(size), float(self.burst)) - 1e-3  # float slack: never a wait too short for the clock
        return 0.0 if self._tokens >= need else (need - self._tokens) / self.rate + 1e-6

    def spend(self, size: int) -> None:
        if self.rate > 0:
            self._tokens -= size
