"""The learner's write-ahead `TransitionLog`: what it accepted (`LoggedBatch`) and the episodes it closed without
their last step (`ClosedEpisodes`), one fsynced msgpack file per entry before anything is acknowledged, so an
acknowledged transition survives a crash."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from robot_rl.core.codec import pack
from robot_rl.core.files import atomic_write_bytes, make_dirs_durably
from robot_rl.wire.protocol import PROTOCOL_VERSION, TransportError, as_integer, as_source, decode_payload
from robot_rl.wire.transitions import StampedTransition, encode_transitions, transitions_of


class LoggedBatch(NamedTuple):
    """A transition log entry: transitions of one source, as accepted."""

    source: str
    items: list[StampedTransition]


class ClosedEpisodes(NamedTuple):
    """A transition log entry: the learner closed these (source, episode) pairs without their last step (their
    actor went silent); logged so that a restart closes them at the same point of the log."""

    episodes: tuple[tuple[str, int], ...]


def encode_closed_episodes(entry: ClosedEpisodes) -> bytes:
    return pack({"kind": "closed", "protocol": PROTOCOL_VERSION,
                 "episodes": [[as_source(source), int(episode)] for source, episode in entry.episodes]})


def decode_log_entry(payload: bytes | bytearray | memoryview) -> LoggedBatch | ClosedEpisodes:
    """A transition log entry (transitions or closed episodes); TransportError names what is wrong."""
    message = decode_payload(payload, "transitions", "closed")
    return _closed_episodes(message) if message["kind"] == "closed" else LoggedBatch(*transitions_of(message))


def _closed_episodes(message: dict[str, Any]) -> ClosedEpisodes:
    episodes = message.get("episodes")
    if not isinstance(episodes, list) or not all(isinstance(e, list) and len(e) == 2 for e in episodes):
        raise TransportError("closed-episodes payload has no list of [source, episode] pairs")
    return ClosedEpisodes(tuple((as_source(source), as_integer(episode, "closed episode"))
                                for source, episode in episodes))


class TransitionLog:
    """Write-ahead log of the learner: one msgpack file per entry (a `LoggedBatch` of accepted transitions or a
    `ClosedEpisodes` decision), fsynced before the transitions are acknowledged.

    A checkpoint records the index of the last entry it contains; after a crash the learner restores the checkpoint
    and replays the entries after that index, so nothing it acknowledged is lost.
    """

    SUFFIX = ".msgpack"

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        make_dirs_durably(self.directory)  # its entries are acknowledged: the folder must outlast a power cut too
        indices = self.indices()
        self.next_index = (indices[-1] + 1) if indices else 0

    def continue_after(self, index: int) -> None:
        """Number new entries after `index` (a checkpoint's last entry), even if the log was emptied since."""
        self.next_index = max(self.next_index, int(index) + 1)

    def indices(self) -> list[int]:
        return sorted(int(p.stem) for p in self.directory.glob(f"*{self.SUFFIX}") if p.stem.isdigit())

    def _path(self, index: int) -> Path:
        return self.directory / f"{index:012d}{self.SUFFIX}"

    def append(self, source: str, items: Sequence[StampedTransition]) -> int:
        """Persist one batch of transitions; returns its index."""
        return self._write(encode_transitions(source, items))

    def append_closed(self, entry: ClosedEpisodes) -> int:
        """Persist a decision to close episodes; returns its index."""
        return self._write(encode_closed_episodes(entry))

    def _write(self, payload: bytes) -> int:
        """Atomically (temp file, fsync, rename) write the next entry."""
        index = self.next_index
        atomic_write_bytes(self._path(index), payload, fsync=True)
        self.next_index = index + 1
        return index

    def replay(self, after: int = -1) -> Iterator[tuple[int, LoggedBatch | ClosedEpisodes]]:
        """(index, entry) of every logged entry with index > `after`, in order."""
        for index in self.indices():
            if index > after:
                try:
                    entry = decode_log_entry(self._path(index).read_bytes())
                except TransportError as error:
                    raise TransportError(f"transition log {self._path(index)} is corrupt ({error}): move that file "
                                         "out of the log to go on without its transitions") from None
                yield index, entry

    def truncate(self, through: int) -> int:
        """Delete the entries with index <= `through` (they are in a checkpoint); returns how many."""
        return self._delete(lambda index: index <= through)

    def discard_after(self, index: int) -> int:
        """Delete the entries with index > `index` (a checkpoint's last entry), for an actor restarted from that
        checkpoint with its learner, which collects them again; returns how many."""
        return self._delete(lambda entry: entry > index)

    def _delete(self, chosen: Callable[[int], bool]) -> int:
        removed = 0
        for index in self.indices():
            if chosen(index):
                self._path(index).unlink(missing_ok=True)
                removed += 1
        return removed
