"""The replay buffer on disk, grown by appending: rows in frame order, each made durable as it is written.

A row is one slot of a `robot_rl.data.replay.ReplayBuffer`: the frame of every observation key and the slot's
transition fields (`ROW_FIELDS`). Frame f of the buffer is row f of the store, so the store reads back into a
buffer of any history length: the last `capacity` rows, at the slots they had.

Layout of a store (a zarr group directory)::

    zarr.json                         group; attribute ``replay_store``: version, observation spec, action size
    rows-<first>-<end>.zip            one segment: rows [first, end) (12-digit numbers), a zarr group in a zip file
                                      (zarr's ZipStore) of
        frames/<key>   (n, ...)       the frames
        actions        (n, A)  float32
        rewards        (n,)    float32
        terminated, truncated, intervention, valid   (n,) bool
                                      and an attribute ``replay_rows``: first row, rows, CRC-32 of each array

Appending writes a new segment to a temporary file (``.tmp-...``), flushes it, renames it into place and flushes the
store's folder (DreamerV3's replay writes chunk files as they fill, the same way); one file per segment, so one
flush, where a segment folder would need one per file and folder in it. A crash mid-append leaves a temporary file
that the next writer removes; nothing a reader sees changes until the rename. Small segments (one episode each) are
merged once a checkpoint covers them (`append(..., merge_through=)`), eight at a time or into one of about
`SEGMENT_BYTES`: the merged one is renamed into place before the small ones are removed, and a segment inside another
is ignored (and removed by the next writer). Rows are never changed in place.

Only final rows are appended (`ReplayBuffer.final_frames`: none of the open episode's). Rows that left the buffer's
ring before they were appended are skipped: rows below a store's read-back window are never read again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import secrets
import shutil
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from robot_rl.core import files
from robot_rl.data.replay import ROW_FIELDS, ReplayBuffer
from robot_rl.core.types import ObservationSpec

STORE_VERSION = 1
SEGMENT_BYTES = 32 * 1024 * 1024
"""About how many bytes a full segment holds (one chunk of each array): appends this large are split, and small
segments are merged into segments this large."""
MAX_SEGMENT_ROWS = 4096
MIN_SEGMENT_ROWS = 64
MERGE_SEGMENTS = 8
"""Short segments (an episode each) merged into one once this many are in a row, so a store has at most about this
many short segments, whatever the episodes' sizes: reading back costs about 10 ms per segment."""
_SEGMENT_NAME = re.compile(r"rows-(\d{12})-(\d{12})\.zip")
_TEMPORARY_PREFIX = ".tmp-"
_IMAGE_COMPRESSOR = zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle")  # as the episode datasets
_WRITE_EVERY_CHUNK = {"write_empty_chunks": True}  # a missing chunk file is then damage, never "all zeros"


class ReplayStoreError(ValueError):
    """A replay store that cannot be read or written (a part missing or damaged, another observation spec)."""


@dataclasses.dataclass(frozen=True)
class Segment:
    """One segment file of a store: rows [start, end)."""

    start: int
    end: int
    path: Path

    @property
    def rows(self) -> int:
        return self.end - self.start


def row_specs(observation_spec: ObservationSpec, action_dim: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """{array name: (shape of one row, dtype)} of a store's rows."""
    specs = {f"frames/{key}": (tuple(entry.shape), np.dtype(entry.dtype)) for key, entry in observation_spec.entries}
    specs.update(actions=((int(action_dim),), np.dtype(np.float32)), rewards=((), np.dtype(np.float32)))
    specs.update({name: ((), np.dtype(bool)) for name in ROW_FIELDS if name not in specs})
    return specs


class ReplayStore:
    """Append-only zarr store of one replay buffer's rows in frame order (see the module doc)."""

    def __init__(self, path: str | os.PathLike, observation_spec: Any = None, action_dim: int | None = None, *,
                 create: bool = False):
        """Open the store at `path` (`create`: make it if missing; the spec and action size then needed; else they
        default to the store's). ReplayStoreError if it is damaged or holds rows of another observation spec or
        action size. Opening changes nothing on disk but a creation."""
        self.path = Path(path)
        exists = (self.path / "zarr.json").exists()
        if not exists and not create:
            raise ReplayStoreError(f"{self.path / 'zarr.json'} is missing: no replay store there")
        stored = self._read_metadata() if exists else None
        self.observation_spec = ObservationSpec.coerce(stored[0] if observation_spec is None else observation_spec)
        self.action_dim = int(stored[1] if action_dim is None else action_dim)
        if stored is None:
            self._create()
        elif stored != (self.observation_spec, self.action_dim):
            raise ReplayStoreError(f"{self.path} holds rows of another observation spec or action size")
        self.specs = row_specs(self.observation_spec, self.action_dim)
        row_bytes = sum(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize for shape, dtype in self.specs.values())
        self.segment_rows = int(np.clip(SEGMENT_BYTES // max(1, row_bytes), MIN_SEGMENT_ROWS, MAX_SEGMENT_ROWS))
        self.segments, self._redundant = self._read_segments()
        self._tidy_pending = True  # leftovers of a crash are removed before the first write

    # ----- reading -----------------------------------------------------------------------------------------------
    @property
    def end(self) -> int:
        """The number after the last row stored (the next row appended is this one or later)."""
        return self.segments[-1].end if self.segments else 0

    def read(self, start: int, stop: int) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """(first row, rows) pieces of rows [start, stop) in order; ReplayStoreError if one is missing or damaged."""
        position = start
        for segment in self.segments:
            if position >= stop or segment.start > position:
                break
            if segment.end <= position:
                continue
            upto = min(stop, segment.end)
            yield position, self._read_segment(segment, position - segment.start, upto - segment.start)
            position = upto
        if position < stop:
            raise ReplayStoreError(f"{self.path} lacks rows {position}..{stop - 1} (its {len(self.segments)} "
                                   f"segment files hold rows up to {self.end - 1})")

    def load(self, capacity: int, rows: int, tail: ReplayStore | None = None, frames_written: int | None = None,
             open_from: int | None = None) -> ReplayBuffer:
        """A buffer of `capacity` holding the last rows up to row `rows` of this store, then those of `tail` (the
        open episode a checkpoint held: rows [`rows` or later, `frames_written`)); ReplayStoreError if damaged."""
        frames_written = rows if frames_written is None else int(frames_written)
        buffer = ReplayBuffer(self.observation_spec, self.action_dim, capacity)
        oldest = max(0, frames_written - capacity)
        if oldest < rows:
            for first, piece in self.read(oldest, rows):
                buffer.put_rows(first, piece)
        if frames_written > max(rows, oldest):
            if tail is None:
                raise ReplayStoreError(f"{self.path}: rows {max(rows, oldest)}..{frames_written - 1} (an open "
                                       "episode) are in no store")
            for first, piece in tail.read(max(rows, oldest), frames_written):
                buffer.put_rows(first, piece)
        buffer.set_position(frames_written, open_from)
        return buffer

    def _read_segment(self, segment: Segment, start: int, stop: int) -> dict[str, np.ndarray]:
        try:
            with _zip_store(segment.path, "r") as store:
                return self._read_group(zarr.open_group(store, mode="r"), segment, start, stop)
        except ReplayStoreError:
            raise
        except Exception as error:  # zarr, zip, JSON and numpy each raise their own types for a damaged segment
            raise ReplayStoreError(f"replay store segment {segment.path} is damaged ({type(error).__name__}: "
                                   f"{error})") from None

    def _read_group(self, group: zarr.Group, segment: Segment, start: int, stop: int) -> dict[str, np.ndarray]:
        meta = dict(group.attrs["replay_rows"])
        if (int(meta["first_row"]), int(meta["rows"])) != (segment.start, segment.rows):
            raise ValueError(f"its attributes say rows {meta['first_row']} + {meta['rows']}")
        whole = start == 0 and stop == segment.rows
        rows = {}
        for name, (shape, dtype) in self.specs.items():
            array = group[name]
            if tuple(array.shape) != (segment.rows, *shape) or array.dtype != dtype:
                raise ValueError(f"{name} is {array.dtype}{tuple(array.shape)}, expected {dtype}"
                                 f"{(segment.rows, *shape)}")
            values = array[:]
            if zlib.crc32(np.ascontiguousarray(values)) != int(meta["crc32"][name]):
                raise ValueError(f"{name} does not match its checksum")
            rows[name] = values if whole else values[start:stop]
        return rows

    # ----- writing -----------------------------------------------------------------------------------------------
    def append(self, buffer: ReplayBuffer, *, merge_through: int | None = None) -> int:
        """Append `buffer`'s final rows after the store's last one (those no longer in its ring are skipped), each
        segment durable before this returns; then merge small segments below row `merge_through` (rows a
        checkpoint covers). Returns the rows appended."""
        self._tidy()
        start, stop = max(self.end, buffer.oldest_frame), buffer.final_frames
        appended = max(0, stop - start)
        while start < stop:
            upto = min(stop, start + self.segment_rows)
            self._write_segment(start, buffer.rows(start, upto))
            start = upto
        if merge_through is not None:
            self._merge(buffer, merge_through)
        return appended

    def write(self, start: int, rows: Mapping[str, np.ndarray]) -> Segment:
        """Append `rows` (a buffer's `rows(...)`) as rows from `start` (>= `end`) in one durable segment."""
        self._tidy()
        if start < self.end:
            raise ValueError(f"row {start} is before the store's end ({self.end}): rows are only appended")
        return self._write_segment(start, rows)

    def truncate(self, rows: int) -> int:
        """Remove every row from `rows` on (durably); returns how many segments went. ReplayStoreError if a segment
        holds rows on both sides (no checkpoint ends there)."""
        self._tidy()
        cut = [s for s in self.segments if s.end > rows]
        straddling = [s for s in cut if s.start < rows]
        if straddling:
            raise ReplayStoreError(f"replay store segment {straddling[0].path} holds rows on both sides of row {rows}, "
                                   "where the checkpoint's replay ends: the store does not belong to this checkpoint")
        for segment in cut:
            segment.path.unlink()
        if cut:
            files.fsync_dir(self.path)
        self.segments = [s for s in self.segments if s.end <= rows]
        return len(cut)

    def _create(self) -> None:
        """Make the empty store under a temporary name, durable, then rename it into place."""
        files.make_dirs_durably(self.path.parent)
        for leftover in self.path.parent.glob(f"{_TEMPORARY_PREFIX}{self.path.name}-*"):  # a creation cut short
            shutil.rmtree(leftover, ignore_errors=True)
        staging = self.path.with_name(f"{_TEMPORARY_PREFIX}{self.path.name}-{secrets.token_hex(4)}")
        try:
            group = zarr.open_group(str(staging), mode="w-")
            spec = [[key, list(entry.shape), entry.dtype] for key, entry in self.observation_spec.entries]
            group.attrs["replay_store"] = {"version": STORE_VERSION, "action_dim": self.action_dim,
                                           "observation_spec": spec}
            files.fsync_tree(staging)
            files.rename_durably(staging, self.path)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _read_metadata(self) -> tuple[ObservationSpec, int]:
        """(observation spec, action size) the store's metadata file records."""
        try:
            meta = dict(zarr.open_group(str(self.path), mode="r").attrs["replay_store"])
            version = meta["version"]
            spec = ObservationSpec.from_shapes({k: (tuple(shape), dtype) for k, shape, dtype in
                                                meta["observation_spec"]})
            action_dim = int(meta["action_dim"])
        except Exception as error:  # noqa: BLE001 - any damage of the metadata file is named the same way
            raise ReplayStoreError(f"{self.path / 'zarr.json'} is not a replay store's metadata "
                                   f"({type(error).__name__}: {error})") from None
        if version != STORE_VERSION:
            raise ReplayStoreError(f"{self.path / 'zarr.json'}: replay store version {version}, this code reads "
                                   f"{STORE_VERSION}")
        return spec, action_dim

    def _read_segments(self) -> tuple[list[Segment], list[Segment]]:
        """(the segments that hold the rows, in order; those inside another, left by a merge cut short)."""
        found = []
        for entry in os.scandir(self.path):
            match = _SEGMENT_NAME.fullmatch(entry.name)
            if match and entry.is_file():
                found.append(Segment(int(match[1]), int(match[2]), Path(entry.path)))
        found.sort(key=lambda s: (s.start, -s.end))
        segments, redundant = [], []
        for segment in found:
            if segments and segment.end <= segments[-1].end:
                redundant.append(segment)
            elif segments and segment.start < segments[-1].end:
                raise ReplayStoreError(f"replay store segments {segments[-1].path} and {segment.path} overlap")
            elif segment.end <= segment.start:
                raise ReplayStoreError(f"replay store segment {segment.path} holds no rows")
            else:
                segments.append(segment)
        return segments, redundant

    def _tidy(self) -> None:
        """Remove what a crash left: temporary files and segments inside another (durably)."""
        if not self._tidy_pending:
            return
        leftovers = [Path(e.path) for e in os.scandir(self.path) if e.name.startswith(_TEMPORARY_PREFIX)]
        for path in leftovers + [s.path for s in self._redundant]:
            path.unlink(missing_ok=True)
        if leftovers or self._redundant:
            files.fsync_dir(self.path)
        self._redundant = []
        self._tidy_pending = False

    def _write_segment(self, start: int, rows: Mapping[str, np.ndarray]) -> Segment:
        count = len(rows["valid"])
        segment = Segment(start, start + count, self.path / f"rows-{start:012d}-{start + count:012d}.zip")
        staging = self.path / f"{_TEMPORARY_PREFIX}{secrets.token_hex(4)}-{segment.path.name}"
        try:
            with _zip_store(staging, "w") as store:
                write_rows(store, start, rows, self.specs)
            files.fsync_file(staging)
            files.rename_durably(staging, segment.path)
        finally:
            staging.unlink(missing_ok=True)
        self.segments = sorted([s for s in self.segments if s.path != segment.path] + [segment],
                               key=lambda s: s.start)
        return segment

    def _merge(self, buffer: ReplayBuffer, through: int) -> None:
        """Merge the newest run of adjacent segments short of `segment_rows` below row `through` into one, once it
        holds a full segment's rows or `MERGE_SEGMENTS` segments (and its rows are all still in `buffer`'s ring)."""
        run: list[Segment] = []
        for segment in reversed([s for s in self.segments if s.end <= through]):
            if segment.rows >= self.segment_rows or (run and segment.end != run[0].start):
                break
            run.insert(0, segment)
        due = len(run) >= MERGE_SEGMENTS or (len(run) >= 2 and run[-1].end - run[0].start >= self.segment_rows)
        if not due or run[0].start < buffer.oldest_frame:
            return
        self._write_segment(run[0].start, buffer.rows(run[0].start, run[-1].end))
        for segment in run:
            segment.path.unlink()
        files.fsync_dir(self.path)
        self.segments = [s for s in self.segments if s not in run]


@contextlib.contextmanager
def _zip_store(path: Path, mode: str) -> Iterator[zarr.storage.ZipStore]:
    store = zarr.storage.ZipStore(path, mode=mode)
    try:
        yield store
    finally:
        if store._is_open:  # a ZipStore opens its file at its first use, and cannot close before
            store.close()


def write_rows(store: zarr.abc.store.Store, start: int, rows: Mapping[str, np.ndarray],
               specs: Mapping[str, tuple[tuple[int, ...], np.dtype]]) -> None:
    """Write rows starting at row `start` as the zarr group of an empty store (a segment's contents). Each entry is
    written once (a zip file cannot replace one): the attributes go in with the group."""
    count = len(rows["valid"])
    values = {}
    for name, (shape, dtype) in specs.items():
        values[name] = np.ascontiguousarray(rows[name], dtype=dtype)
        if values[name].shape != (count, *shape):
            raise ValueError(f"rows[{name!r}] has shape {values[name].shape}, expected {(count, *shape)}")
    checksums = {name: zlib.crc32(array) for name, array in values.items()}
    group = zarr.open_group(store, mode="w-", attributes={
        "replay_rows": {"first_row": int(start), "rows": int(count), "crc32": checksums}})
    for name, array in values.items():
        shape = array.shape[1:]
        chunk_rows = max(1, min(max(count, 1), SEGMENT_BYTES // max(1, array[:1].nbytes)))
        created = group.create_array(name, shape=array.shape, dtype=array.dtype, chunks=(chunk_rows, *shape),
                                     compressors=_IMAGE_COMPRESSOR if len(shape) == 3 else "auto",
                                     config=_WRITE_EVERY_CHUNK)
        if count:
            created[:] = array
