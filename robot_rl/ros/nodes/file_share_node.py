"""Files that cross between hosts once, verified by sha256: the ROS 2 shell of robot_rl.wire.file_share, and its node.

Topics (absolute, shared by every node; std_msgs/UInt8MultiArray with msgpack payloads, robot_rl.ros.qos):

=================  =====  ===================================================================================
/files/offer       latch  each node's bundles ``{name, digest, manifest}`` (transient-local: a late node sees them)
/files/request     ->     ``{requester, server, digest, want, received}``: one peer is asked for a bundle (or the
                          chunks lost); ``{..., received, progress}``: what has arrived (the sender's window)
/files/chunk       <-     ``{digest, path, offset, data}`` (32 kB), or ``{digest, peer, error}``: it will not come
=================  =====  ===================================================================================

The rule for a node given a path (:meth:`FileShare.resolve`): if the path exists on this host it is used, unless
the digest the node expects (learner weights carry their base's, ``WeightsMessage.files``) or a peer's offer of the
same name differs: then one line names the file and both hashes, and the node stops. If it does not exist, the node
waits for an offer of that name (or of the expected digest) for at most ``$ROBOT_RL_FILE_WAIT_S`` (120 s; a log
line every 10 s says what it waits for), fetches it once into the cache (robot_rl.wire.file_share), verifies every file and
the bundle, and uses the cached copy; a complete copy already in the cache, or one this node offers, is used without
a transfer. A fetch that stalls (3 s without a chunk) asks again for exactly the chunks it lacks, from another peer
if one offers the bundle too.

Chunks (32 kB) are sent at most at ``$ROBOT_RL_FILE_RATE_MB_S`` MB/s (default 1.25 MB/s = 10 Mbit/s: half of a
20 Mbit/s link, the rest for transitions and weights), and at most 96 kB ahead of what the receiver confirmed: on a
link slower than the pace the sender runs at the link's rate instead of filling its queue. Measured between two
simulated hosts on a veth link shaped to 20 Mbit/s, with 25 kB "transitions" at 10 Hz beside it: 4.2 MB at the default
pace in 3.4 s (1.24 MB/s), transitions' latency p99 23 ms (12 ms without the transfer); paced at 4 MB/s, above the
link, 2.1 MB/s and p99 49 ms, nothing lost. On loopback: 42 MB/s with no pace to speak of (100 MB). A worker thread
sends, and writes and hashes what is received: the node's executor only queues messages, so an actor's control loop
never waits on a transfer.

The ``file_share`` node offers files of this host to the other::

    python -m robot_rl.ros.nodes.file_share_node --ros-args -p offer:=demos/pick.zarr

``offer``: paths (files or folders; comma-separated), each offered under the string as given; ``rate_mb_s``: its
sending rate (0: the environment's or the default). A path that does not exist is one error line, exit status 2.
"""

from __future__ import annotations

if __name__ == "__main__":  # a program's start, before the heavy imports below
    from robot_rl.core.startup import program_start

    program_start()

import collections
import dataclasses
import os
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from robot_rl.wire.file_share import (
    CHUNK_SIZE, PROGRESS_EVERY, WINDOW, Assembly, Bundle, FileShareError, Manifest, RateLimiter, bundle_of, cached,
    decode_chunk, decode_offers, decode_request, encode_chunk, encode_offers, encode_progress, encode_refusal,
    differing_files, encode_request, mismatch_message, read_chunks, short,
)
from robot_rl.ros import qos

NODE_NAME = "file_share"
RATE_ENV = "ROBOT_RL_FILE_RATE_MB_S"
WAIT_ENV = "ROBOT_RL_FILE_WAIT_S"
DEFAULT_RATE_MB_S = 1.25
DEFAULT_WAIT_S = 120.0
RETRY_S = 3.0  # no chunk for this long: ask again for the missing chunks
SETTLE_S = 1.0  # the first request waits for a new chunk subscription to match a peer's publisher, at most this
TICK_S = 0.1
LOG_EVERY_S = 10.0

PARAMETERS: tuple[tuple[str, object, str], ...] = (
    ("offer", "", "paths to offer (files or folders, comma-separated), each under the string as given"),
    ("rate_mb_s", 0.0, f"sending rate [MB/s] (0: ${RATE_ENV}, else {DEFAULT_RATE_MB_S})"),
)


def _env_float(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, "") or default)
    except ValueError:
        raise FileShareError(f"{name}={os.environ[name]!r} must be a number") from None
    if not (value > 0 and value < float("inf")):
        raise FileShareError(f"{name}={value} must be a number > 0")
    return value


@dataclasses.dataclass
class Resolution:
    """Where a path stands: `path` once usable, `problem` (one line) if it cannot be, else what it waits for."""

    path: Path | None = None
    problem: str | None = None
    waiting: str = ""

    @property
    def done(self) -> bool:
        return self.path is not None or self.problem is not None


@dataclasses.dataclass
class _PeerOffer:
    peer: str
    host: str
    node: str
    name: str
    digest: str
    manifest: Manifest
    seq: int

    @property
    def whose(self) -> str:
        return f"the {self.node.rsplit('/', 1)[-1] or 'node'}'s (host {self.host})"

    @property
    def where(self) -> str:
        return f"node {self.node} on host {self.host}"


class _Fetch:
    def __init__(self, assembly: Assembly, offer: _PeerOffer):
        self.assembly, self.offer = assembly, offer
        self.asked_at: float | None = None
        self.first_asked: float | None = None
        self.progress_at = time.monotonic()
        self.refused: dict[str, str] = {}  # peer -> why it will not send
        self.confirmed = 0  # bytes received when the sender was last told


class _Job:
    """Sending one bundle to one requester: files (and chunk offsets) still to send, bytes sent and confirmed."""

    def __init__(self, bundle: Bundle, pending, received: int):
        self.bundle = bundle
        self.pending = collections.deque(pending)
        self.chunks = None  # the current file's chunks
        self.base = self.confirmed = received  # what the requester had when it asked
        self.sent = 0

    def room(self) -> bool:
        return self.base + self.sent - self.confirmed < WINDOW


class _Need:
    def __init__(self, name: str, what: str, expected: str | None, locate, expected_from: str):
        self.name, self.what, self.expected, self.locate = name, what, expected, locate
        self.expected_from = expected_from
        self.started = time.monotonic()
        self.local = Path(name).exists()
        self.local_bundle: Bundle | None = None
        self.hashing = False
        self.hash_error: str | None = None
        self.digest: str | None = None  # the bundle being resolved (not local)
        self.cache_checked: str | None = None
        self.cache_hit: Bundle | None = None
        self.fetch: _Fetch | None = None
        self.result = Resolution()
        self.callbacks: list[Callable[[Resolution], None]] = []
        self.reported = False
        self.logged_at = time.monotonic()


class FileShare:
    """Offers this node's files and fetches other nodes' over /files/offer, /files/request and /files/chunk."""

    def __init__(self, node, *, rate_mb_s: float | None = None, wait_s: float | None = None,
                 cache: Path | None = None, on_conflict: Callable[[str], None] | None = None):
        from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
        from std_msgs.msg import UInt8MultiArray

        self.node, self._log = node, node.get_logger()
        self.rate_mb_s = _env_float(RATE_ENV, DEFAULT_RATE_MB_S) if rate_mb_s is None else float(rate_mb_s)
        self.wait_s = _env_float(WAIT_ENV, DEFAULT_WAIT_S) if wait_s is None else float(wait_s)
        if not (self.rate_mb_s > 0 and self.wait_s > 0):
            raise FileShareError(f"file share rate {self.rate_mb_s} MB/s and wait {self.wait_s} s must be > 0")
        self.cache = cache
        self.on_conflict = on_conflict
        self.host = socket.gethostname()
        self.peer = f"{self.host}:{os.getpid()}:{node.get_fully_qualified_name()}"
        self._chunk_sub = None
        self._chunk_sub_since = 0.0
        self._idle_since: float | None = None
        self._chunk_sub_matched = 0  # chunk publishers matched (this node's own among them)
        self._lock = threading.RLock()
        self._own: dict[str, Bundle] = {}
        self._unofferable: set[str] = set()
        self._offers: dict[str, list[_PeerOffer]] = {}  # peer -> its bundles
        self._offer_seq = 0
        self._needs: dict[str, _Need] = {}
        self._fetches: dict[str, _Fetch] = {}  # digest -> the one fetch of it
        self.problems: list[str] = []
        self._conflicts: list[str] = []  # found under the lock, told to on_conflict outside it
        self.sent_bytes = 0
        self.received_bytes = 0
        self.requests_sent = 0  # one per fetch, more when chunks were lost (asked again) or a peer refused
        self.transfers: list[dict] = []  # each finished fetch: name, digest, bytes, seconds
        self._jobs: collections.OrderedDict[tuple[str, str], _Job] = collections.OrderedDict()  # (requester, digest)
        self._limiter = RateLimiter(self.rate_mb_s * 1e6)
        self._inbox: queue.Queue = queue.Queue()
        self._closed = False
        # Every field above is set before a callback can come (the node may already be spun by another thread).
        self._msg = UInt8MultiArray
        latched = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self._offer_pub = node.create_publisher(UInt8MultiArray, qos.FILES_OFFER, latched)
        self._request_pub = node.create_publisher(UInt8MultiArray, qos.FILES_REQUEST,
                                                  qos.topic_qos(qos.FILES_REQUEST))
        self._chunk_pub = node.create_publisher(UInt8MultiArray, qos.FILES_CHUNK, qos.topic_qos(qos.FILES_CHUNK))
        self._subscriptions = [
            node.create_subscription(UInt8MultiArray, qos.FILES_OFFER, self._on_offer,
                                     qos.topic_qos(qos.FILES_OFFER)),
            node.create_subscription(UInt8MultiArray, qos.FILES_REQUEST, self._on_request,
                                     qos.topic_qos(qos.FILES_REQUEST))]
        self._worker = threading.Thread(target=self._run, name="file-share", daemon=True)
        self._worker.start()
        self._timer = node.create_timer(TICK_S, self._tick)

    # ----- offering ---------------------------------------------------------------------------------------------
    def offer(self, name: str, path: str | os.PathLike[str] | None = None) -> Bundle:
        """Offer the file or folder `path` (default: `name`) under `name` from now on; hashed now (FileShareError)."""
        bundle = bundle_of(name if path is None else path, name)
        self.offer_bundle(bundle)
        return bundle

    def offer_bundle(self, bundle: Bundle) -> None:
        with self._lock:
            self._own[bundle.name] = bundle
            payload = encode_offers(self.peer, self.host, self.node.get_fully_qualified_name(), self._own.values())
        self._offer_pub.publish(self._to_msg(payload))

    def offered(self, name: str) -> Bundle | None:
        with self._lock:
            return self._own.get(name)

    def weights_files(self, weights) -> dict[str, str]:
        """{name: digest} of the base `weights` name (a learner's head), offered by this node from then on (hashed
        once); {} for weights without a base, or a base this host cannot offer (logged once)."""
        return self._base_files((getattr(weights, "policy_config", None) or {}).get("base"))

    def weights_payload(self, payload: bytes) -> bytes:
        """An encoded weights message with `files` naming its base's digest (decoded without robot_rl.core.types, so
        without JAX); unchanged without a base, or if it is not a weights message."""
        from robot_rl.core.codec import CodecError, pack, unpack

        try:
            message = unpack(payload)
        except CodecError:
            return payload
        if not isinstance(message, dict) or message.get("kind") != "weights":
            return payload
        config = message.get("policy_config")
        files = self._base_files(config.get("base") if isinstance(config, dict) else None)
        return pack({**message, "files": files}) if files else payload

    def _base_files(self, base) -> dict[str, str]:
        if not isinstance(base, str) or not base or not Path(base).exists():  # none, or one still to be fetched
            return {}
        with self._lock:
            bundle, unofferable = self._own.get(base), base in self._unofferable
        if bundle is None and not unofferable:
            try:
                bundle = self.offer(base, policy_location(base))
            except (FileShareError, OSError, ValueError) as error:
                with self._lock:
                    self._unofferable.add(base)
                self._log.warning(f"cannot offer the base {base} to other hosts: {error}")
        return {base: bundle.digest} if bundle is not None else {}

    # ----- resolving --------------------------------------------------------------------------------------------
    def resolve(self, name: str, what: str = "file", expected: str | None = None, *, locate=None,
                on_done: Callable[[Resolution], None] | None = None,
                expected_from: str = "the learner's") -> Resolution:
        """Where `name` stands (see the module doc); starts resolving it on the first call. `expected`: the digest
        it must have (`expected_from` says whose it is); `locate`: the path whose bundle stands for `name` (a run
        folder's policy); `on_done` is called once, from the node's executor, when it is usable or cannot be."""
        with self._lock:
            need = self._needs.get(name)
            if need is None or (expected is not None and need.expected != expected):
                if need is not None:
                    self._drop_fetch(need)
                need = self._needs[name] = _Need(name, what, expected, locate or (lambda p: p), expected_from)
            if on_done is not None and on_done not in need.callbacks:
                need.callbacks.append(on_done)
                need.reported = False  # (again) at the next tick, if it is done already
            return dataclasses.replace(need.result)

    def fetch(self, name: str, what: str = "file", expected: str | None = None, *, locate=None,
              should_stop: Callable[[], bool] | None = None) -> Path:
        """`resolve`, waiting until done (another thread spins the node); FileShareError with the one line."""
        while True:
            resolution = self.resolve(name, what, expected, locate=locate)
            if resolution.problem:
                raise FileShareError(resolution.problem)
            if resolution.path is not None:
                return resolution.path
            if should_stop is not None and should_stop():
                raise FileShareError(f"{what} {name}: stopped while waiting for it")
            time.sleep(0.05)

    # ----- callbacks (the node's executor: queue, never wait) ----------------------------------------------------
    def _to_msg(self, payload: bytes):
        from robot_rl.ros.convert import bytes_to_msg

        return bytes_to_msg(payload)

    def _on_offer(self, msg) -> None:
        from robot_rl.ros.convert import msg_to_bytes

        try:
            peer, host, node, offers = decode_offers(msg_to_bytes(msg))
        except FileShareError as error:
            self._log.warning(f"dropped a malformed file offer: {error}", throttle_duration_sec=5.0)
            return
        if peer == self.peer:
            return
        with self._lock:
            self._offer_seq += 1
            self._offers[peer] = [_PeerOffer(peer, host, node, o.name, o.digest, o.manifest, self._offer_seq)
                                  for o in offers]

    def _on_request(self, msg) -> None:
        from robot_rl.ros.convert import msg_to_bytes

        self._inbox.put(("request", msg_to_bytes(msg)))

    def _on_chunk_matched(self, info) -> None:
        self._chunk_sub_matched = info.current_count

    def _on_chunk(self, msg) -> None:
        from robot_rl.ros.convert import msg_to_bytes

        self._inbox.put(("chunk", msg_to_bytes(msg)))

    def _tick(self) -> None:
        """Advance every resolution: hash local copies, check the cache, pick a peer, ask (again), time out."""
        now = time.monotonic()
        done = []
        with self._lock:
            fetching = bool(self._fetches)
            for need in list(self._needs.values()):
                if not need.result.done:
                    try:
                        self._advance(need, now)
                    except FileShareError as error:
                        self._fail(need, str(error))
                    except OSError as error:  # the cache's disk or folder
                        self._fail(need, f"{need.what} {need.name}: {error}")
                elif need.local and need.expected is None and need.local_bundle is not None:
                    self._watch(need)
                if need.result.done and not need.reported:
                    need.reported = True
                    done.append(need)
            fetching = fetching or bool(self._fetches)
            conflicts, self._conflicts = self._conflicts, []
        # Chunks reach this node only while it fetches (every node's chunks share the topic).
        if fetching:
            self._idle_since = None
            if self._chunk_sub is None:
                from rclpy.event_handler import SubscriptionEventCallbacks

                self._chunk_sub_matched = 0
                events = SubscriptionEventCallbacks(matched=self._on_chunk_matched)
                self._chunk_sub = self.node.create_subscription(self._msg, qos.FILES_CHUNK, self._on_chunk,
                                                                qos.topic_qos(qos.FILES_CHUNK),
                                                                event_callbacks=events)
                self._chunk_sub_since = now
        elif self._chunk_sub is not None:
            self._idle_since = self._idle_since or now
            if now - self._idle_since > 2.0:
                self.node.destroy_subscription(self._chunk_sub)
                self._chunk_sub = None
        for need in done:
            for callback in need.callbacks:
                callback(dataclasses.replace(need.result))
        for line in conflicts:
            if self.on_conflict is not None:
                self.on_conflict(line)

    def _fail(self, need: _Need, problem: str) -> None:
        """The need cannot be met: its users get the one line (they log it)."""
        need.result = Resolution(problem=problem)
        self._drop_fetch(need)

    def _ready(self, need: _Need, path: Path, how: str) -> None:
        need.result = Resolution(path=Path(path))
        self._log.info(f"{need.what} {need.name}: {how}")

    def _wait(self, need: _Need, now: float, waiting: str, bounded_since: float | None = None,
              timeout: str | None = None) -> None:
        need.result = Resolution(waiting=waiting)
        since = need.started if bounded_since is None else bounded_since
        if now - since > self.wait_s:
            raise FileShareError(timeout or f"{need.what} {need.name}: not on this host, and {waiting} after "
                                 f"{self.wait_s:.0f} s (is the other host's node up and reachable?)")
        if now - need.logged_at >= LOG_EVERY_S:
            need.logged_at = now
            self._log.warning(f"waiting for {need.what} {need.name}: {waiting} ({now - need.started:.0f} s)")

    def _hash_local(self, need: _Need) -> None:
        try:
            bundle = bundle_of(need.locate(need.name), need.name)
        except (FileShareError, OSError, ValueError) as error:
            with self._lock:
                need.hash_error = f"{need.what} {need.name}: {error}"
            return
        with self._lock:
            need.local_bundle = bundle

    def _check_cache(self, need: _Need, digest: str) -> None:
        bundle = cached(digest, self.cache)
        with self._lock:
            need.cache_hit, need.cache_checked = bundle, digest

    def _peer_offers(self) -> list[_PeerOffer]:
        return sorted((o for offers in self._offers.values() for o in offers), key=lambda o: o.seq)

    def _advance(self, need: _Need, now: float) -> None:
        if need.local:
            if need.hash_error:
                if need.expected is not None:  # its bytes cannot be compared with the expected ones
                    raise FileShareError(need.hash_error)
                self._log.warning(f"{need.hash_error}: using it as it is")  # its user says what is wrong with it
                self._ready(need, Path(need.name), "this host's copy, unchecked")
                return
            if need.local_bundle is None:
                if not need.hashing:
                    need.hashing = True
                    threading.Thread(target=self._hash_local, args=(need,), name="file-share-hash",
                                     daemon=True).start()
                need.result = Resolution(waiting="hashing this host's copy")
                return
            here = need.local_bundle
            if need.expected is not None and need.expected != here.digest:
                there = next((o for o in self._peer_offers() if o.digest == need.expected), None)
                differing = differing_files(here.manifest, there.manifest) if there is not None else ()
                raise FileShareError(mismatch_message(need.what, need.name, here.digest, need.expected,
                                                      need.expected_from, differing))
            conflict = self._watch(need) if need.expected is None else None
            if conflict:
                need.result = Resolution(problem=conflict)
                return
            self._ready(need, Path(need.name), f"this host's copy (sha256 {short(here.digest)})")
            return
        offers = self._peer_offers()
        digest = need.expected or next((o.digest for o in reversed(offers) if o.name == need.name), None)
        if digest is None:
            self._wait(need, now, "no node offers it yet")
            return
        if digest != need.digest:  # a first, or a newer, offer
            self._drop_fetch(need)
            need.digest = digest
        own = next((b for b in self._own.values() if b.digest == digest), None)
        if own is not None:
            self._ready(need, own.path, f"the copy this node offers ({own.path})")
            return
        if need.cache_checked != digest:
            if need.cache_checked != "checking":
                need.cache_checked = "checking"
                threading.Thread(target=self._check_cache, args=(need, digest), name="file-share-cache",
                                 daemon=True).start()
            need.result = Resolution(waiting="checking the cache")
            return
        if need.cache_hit is not None:
            self._ready(need, need.cache_hit.path, f"the cached copy {need.cache_hit.path} (sha256 {short(digest)})")
            return
        fetch = need.fetch
        if fetch is None:
            candidates = [o for o in offers if o.digest == digest]
            if not candidates:
                self._wait(need, now, f"no node offers sha256 {short(digest)} yet")
                return
            offer = self._pick(candidates, {})
            fetch = need.fetch = self._fetches.get(digest) or _Fetch(
                Assembly(need.name, offer.manifest, self.cache, need.what), offer)
            self._fetches[digest] = fetch
            manifest = offer.manifest
            self._log.info(f"fetching {need.what} {need.name} (sha256 {short(digest)}, {len(manifest.entries)} files, "
                           f"{manifest.size / 1e6:.1f} MB) from {offer.where}")
        assembly = fetch.assembly
        if assembly.complete:
            bundle = assembly.finish()
            self._fetches.pop(digest, None)
            need.fetch = None
            seconds = max(time.monotonic() - (fetch.first_asked or assembly.started), 1e-6)
            self.transfers.append({"name": need.name, "digest": digest, "bytes": assembly.bytes_received,
                                   "seconds": round(seconds, 3)})
            self._ready(need, bundle.path, f"fetched {assembly.bytes_received / 1e6:.1f} MB in {seconds:.1f} s "
                                           f"({assembly.bytes_received / 1e6 / seconds:.1f} MB/s), verified; using "
                                           f"{bundle.path}")
            return
        if self._chunk_sub is None or (self._chunk_sub_matched < 2 and now - self._chunk_sub_since < SETTLE_S):
            need.result = Resolution(waiting="subscribing to chunks")
            return
        if fetch.offer.peer in fetch.refused:
            others = [o for o in offers if o.digest == digest and o.peer not in fetch.refused]
            if not others:
                why = "; ".join(fetch.refused.values())
                if need.expected is None:
                    self._wait(need, now, f"a new offer ({why})", fetch.progress_at)
                    return
                raise FileShareError(f"{need.what} {need.name}: no node sends sha256 {short(digest)} ({why})")
            fetch.offer, fetch.asked_at = self._pick(others, fetch.refused), None
        if fetch.asked_at is None or now - max(fetch.asked_at, fetch.progress_at) >= RETRY_S:
            if fetch.asked_at is not None:  # stalled: another peer if one offers it too
                fetch.offer = self._pick([o for o in offers if o.digest == digest] or [fetch.offer], {},
                                         after=fetch.offer.peer)
            want = assembly.wanted() if fetch.asked_at is not None else None
            self._request_pub.publish(self._to_msg(encode_request(self.peer, fetch.offer.peer, digest, want,
                                                                  assembly.bytes_received)))
            fetch.confirmed = assembly.bytes_received
            fetch.asked_at = now
            fetch.first_asked = fetch.first_asked or now
            self.requests_sent += 1
        received = f"{assembly.bytes_received / 1e6:.1f} of {assembly.manifest.size / 1e6:.1f} MB"
        self._wait(need, now, f"fetching: {received} from {fetch.offer.where}", fetch.progress_at,
                   timeout=f"{need.what} {need.name}: nothing arrived from {fetch.offer.where} for "
                           f"{self.wait_s:.0f} s ({received} received; is that host still reachable?)")

    def _pick(self, offers: list[_PeerOffer], refused: dict, after: str | None = None) -> _PeerOffer:
        """A peer to ask: on this host if one is, else the newest; `after`: the next one after that peer."""
        offers = [o for o in offers if o.peer not in refused] or offers
        if after is not None and len(offers) > 1:
            peers = [o.peer for o in offers]
            if after in peers:
                return offers[(peers.index(after) + 1) % len(offers)]
        local = [o for o in offers if o.host == self.host]
        return (local or offers)[-1]

    def _watch(self, need: _Need) -> str | None:
        """A local copy used without an expected digest: a peer offering the same name with other bytes is a
        conflict, logged once as one line and told to `on_conflict` (e.g. to stop the node); returns the line."""
        here = need.local_bundle
        for offer in self._peer_offers():
            if offer.name == need.name and offer.digest != here.digest:
                line = mismatch_message(need.what, need.name, here.digest, offer.digest, offer.whose,
                                        differing_files(here.manifest, offer.manifest))
                if line not in self.problems:
                    self.problems.append(line)
                    self._conflicts.append(line)
                    self._log.error(line)
                return line
        return None

    def _drop_fetch(self, need: _Need) -> None:
        fetch, need.fetch = need.fetch, None
        if fetch is not None and not any(n.fetch is fetch for n in self._needs.values()):
            self._fetches.pop(fetch.assembly.digest, None)
            fetch.assembly.abandon()

    # ----- the worker: receive chunks, serve requests (paced) ----------------------------------------------------
    def _run(self) -> None:
        while True:
            sendable = any(job.room() for job in self._jobs.values())
            timeout = self._limiter.wait_s(CHUNK_SIZE) if sendable else 0.2
            try:
                item = self._inbox.get(timeout=timeout) if timeout > 0 else self._inbox.get_nowait()
            except queue.Empty:
                item = None
            if item == ("close", None):
                return
            try:
                if item is not None:
                    kind, payload = item
                    self._on_chunk_payload(payload) if kind == "chunk" else self._on_request_payload(payload)
                if self._limiter.wait_s(CHUNK_SIZE) == 0:
                    self._send_one()
            except Exception as error:  # noqa: BLE001 - a message must never end the worker
                self._log.warning(f"file share: {type(error).__name__}: {error}", throttle_duration_sec=5.0)

    def _on_chunk_payload(self, payload: bytes) -> None:
        try:
            chunk = decode_chunk(payload)
        except FileShareError as error:
            self._log.warning(f"dropped a malformed file chunk: {error}", throttle_duration_sec=5.0)
            return
        with self._lock:
            fetch = self._fetches.get(chunk["digest"])
            if fetch is None:
                return
            if "error" in chunk:
                fetch.refused[str(chunk.get("peer", ""))] = chunk["error"]
                return
            try:
                assembly = fetch.assembly
                if assembly.add(chunk["path"], chunk["offset"], chunk["data"]):
                    fetch.progress_at = time.monotonic()
                    self.received_bytes += len(chunk["data"])
                    if assembly.bytes_received - fetch.confirmed >= PROGRESS_EVERY or assembly.complete:
                        fetch.confirmed = assembly.bytes_received
                        self._request_pub.publish(self._to_msg(encode_progress(
                            self.peer, fetch.offer.peer, assembly.digest, assembly.bytes_received)))
            except (FileShareError, OSError) as error:
                for need in [n for n in self._needs.values() if n.fetch is fetch]:
                    self._fail(need, str(error) if isinstance(error, FileShareError) else
                               f"{need.what} {need.name}: cannot write what arrived: {error}")

    def _on_request_payload(self, payload: bytes) -> None:
        try:
            request = decode_request(payload)
        except FileShareError as error:
            self._log.warning(f"dropped a malformed file request: {error}", throttle_duration_sec=5.0)
            return
        if request.server != self.peer:
            return
        key = (request.requester, request.digest)
        if request.progress:
            job = self._jobs.get(key)
            if job is not None:
                job.confirmed = max(job.confirmed, request.received)
            return
        with self._lock:
            bundle = next((b for b in self._own.values() if b.digest == request.digest), None)
        if bundle is None:
            self._refuse(request.digest, "this node no longer offers it")
            return
        if request.want is None:  # the whole bundle
            if key in self._jobs:
                return
            self._jobs[key] = _Job(bundle, ((e.path, None) for e in bundle.manifest.entries), request.received)
            requester = request.requester
            self._log.info(f"sending {bundle.name} (sha256 {short(bundle.digest)}, {bundle.manifest.size / 1e6:.1f} "
                           f"MB) to {requester.split(':', 2)[-1]} on host {requester.split(':', 1)[0]}")
        else:  # asked again: exactly the chunks still missing there
            self._jobs[key] = _Job(bundle, request.want.items(), request.received)

    def _refuse(self, digest: str, why: str) -> None:
        self._chunk_pub.publish(self._to_msg(encode_refusal(digest, self.peer, why)))

    def _send_one(self) -> None:
        """Send the next chunk of the next job with room in its window (round robin over requesters)."""
        key = next((k for k, job in self._jobs.items() if job.room()), None)
        if key is None:
            return
        job = self._jobs[key]
        self._jobs.move_to_end(key)
        digest = key[1]
        with self._lock:
            offered = any(b.digest == digest for b in self._own.values())
        try:
            if not offered:
                raise FileShareError("this node no longer offers it")
            while True:
                if job.chunks is None:
                    if not job.pending:
                        del self._jobs[key]
                        return
                    path, offsets = job.pending.popleft()
                    job.chunks = read_chunks(job.bundle, {path: offsets})
                item = next(job.chunks, None)
                if item is not None:
                    break
                job.chunks = None
        except FileShareError as error:
            self._jobs.pop(key, None)
            self._refuse(digest, str(error))
            if offered:
                self._log.warning(f"{error}: offering it again (hashed anew)")
                self._reoffer(job.bundle)
            return
        path, offset, data = item
        self._chunk_pub.publish(self._to_msg(encode_chunk(digest, path, offset, data)))
        self._limiter.spend(len(data))
        job.sent += len(data)
        self.sent_bytes += len(data)

    def _reoffer(self, bundle: Bundle) -> None:
        try:
            fresh = bundle_of(bundle.path, bundle.name)
        except FileShareError as error:
            self._log.error(f"no longer offering {bundle.name}: {error}")
            with self._lock:
                self._own.pop(bundle.name, None)
            return
        self.offer_bundle(fresh)

    def close(self) -> None:
        """Stop the worker and remove what was received of unfinished fetches."""
        if self._closed:
            return
        self._closed = True
        self._inbox.put(("close", None))
        self._worker.join(timeout=2.0)
        with self._lock:
            for fetch in self._fetches.values():
                fetch.assembly.abandon()
            self._fetches.clear()


def policy_location(path: str) -> Path:
    """The policy folder or file a base path stands for (a run folder stands for its policy): what is offered."""
    from robot_rl.wire.policy_file import PolicyFileError
    from robot_rl.actor.deploy_gate import policy_location as locate

    try:
        return locate(path)
    except PolicyFileError as error:
        raise FileShareError(str(error)) from None


def with_base(weights, path: Path):
    """`weights` naming `path` as their base (this host's copy of the bundle they name)."""
    return dataclasses.replace(weights, policy_config={**weights.policy_config, "base": str(path)})


class PolicyFiles:
    """The actor's side: learner weights naming a base this host lacks wait here until it is fetched (or fail)."""

    def __init__(self, node, ready: Callable[[object], None], failed: Callable[[str], None],
                 share: FileShare | None = None):
        self.share = share or FileShare(node)
        self._ready, self._failed = ready, failed
        self._pending = None
        self._resolved: dict[tuple[str, str | None], Path] = {}
        self._asked: set[tuple[str, str | None]] = set()

    def local(self, weights):
        """`weights` naming this host's copy of their base, or None while it is checked / fetched (then `ready` is
        called with them, or `failed` with the one line)."""
        base = str(weights.policy_config["base"])
        key = (base, weights.files.get(base))
        if key in self._resolved:
            return with_base(weights, self._resolved[key])
        self._pending = weights
        if key not in self._asked:
            self._asked.add(key)
            self.share.resolve(base, "base", key[1], locate=policy_location,
                               on_done=lambda resolution: self._done(key, resolution))
        return None

    def _done(self, key, resolution: Resolution) -> None:
        if resolution.problem:
            self._failed(resolution.problem)
            return
        self._resolved[key] = resolution.path
        weights, self._pending = self._pending, None
        if weights is not None:
            ready = self.local(weights)  # newer weights may name another base: resolved in turn
            if ready is not None:
                self._ready(ready)


# ----- the file_share node -----------------------------------------------------------------------------------------

class FileShareNode:
    """The `file_share` node: offers the files given in its `offer` parameter (see the module doc)."""

    def __init__(self, *, node_name: str = NODE_NAME, context=None, cli_args: list[str] | None = None):
        import rclpy

        from robot_rl.ros.node_util import NodeStartupError, declare_parameters

        self.node = rclpy.create_node(node_name, context=context, cli_args=cli_args)
        param = declare_parameters(self.node, PARAMETERS)
        rate = float(param("rate_mb_s"))
        if not rate >= 0:
            raise NodeStartupError(f"rate_mb_s={rate} must be >= 0 (0: ${RATE_ENV}, else {DEFAULT_RATE_MB_S})")
        names = [p.strip() for p in str(param("offer")).split(",") if p.strip()]
        try:
            self.share = FileShare(self.node, rate_mb_s=rate or None)
            for name in names:
                bundle = self.share.offer(name)
                self.node.get_logger().info(
                    f"offering {name} (sha256 {short(bundle.digest)}, {len(bundle.manifest.entries)} files, "
                    f"{bundle.manifest.size / 1e6:.1f} MB) at <= {self.share.rate_mb_s:g} MB/s")
        except FileShareError as error:
            raise NodeStartupError(f"offer: {error}") from None
        if not names:
            self.node.get_logger().info("offering nothing (offer:=PATH[,PATH...])")

    def destroy(self) -> None:
        self.share.close()
        self.node.destroy_node()


def main(argv: list[str] | None = None) -> int:
    """Run the file_share node until SIGINT / SIGTERM; returns the exit status."""
    from robot_rl.ros.node_util import run_node

    return run_node(FileShareNode, list(sys.argv if argv is None else argv), NODE_NAME, PARAMETERS)


if __name__ == "__main__":
    sys.exit(main())
