"""Episode datasets on disk, read and verified (their layout: robot_rl.data.episode_format; robot_rl.data.episode_writer
appends to them): `DatasetReader` opens one and reads arrays and episodes on demand, `EpisodeDataset` loads one into
RAM; `DatasetError` is what either (and the writer) raises for a missing, damaged or mismatched dataset.

Integrity: every chunk is written, even one holding only fill values, so a committed range with a missing chunk
file is damage, found by a cheap ``stat`` (`DatasetReader.missing_chunks`). The checksums, computed at commit
from the exact values written, find altered chunks (`DatasetReader.verify`); `EpisodeDataset` and
`DatasetReader.read_episode` check them on every read and name the array, the episode and the chunk. Schema 1
datasets (no checksums, fill-value chunks omitted) stay readable, unverified.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from robot_rl.core.types import ArraySpec
from robot_rl.data.episode_format import (
    CHECKSUMS,
    READABLE_SCHEMA_VERSIONS,
    STEP_KEYS,
    UNKNOWN_SEED,
    checksum,
    covered_specs,
)


class DatasetError(Exception):
    """A dataset is missing, corrupt, truncated or does not match what was asked of it."""


def _check_metadata_files(path: Path) -> None:
    """Every zarr.json of the dataset must be JSON: name the first truncated or damaged one."""
    for directory, subdirs, files in os.walk(path):
        if "zarr.json" not in files:
            continue
        file = Path(directory) / "zarr.json"
        try:
            node = json.loads(file.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DatasetError(f"{file}: unreadable zarr metadata ({exc}); the file is truncated or damaged") from None
        if not isinstance(node, dict) or node.get("node_type") not in ("group", "array"):
            raise DatasetError(f"{file}: not zarr metadata (no node_type group/array)")
        if node["node_type"] == "array":
            subdirs[:] = []  # chunk folders hold no metadata


@dataclass(frozen=True)
class Damage:
    """One committed episode whose values in one array cannot be trusted."""

    array: str
    episode: int
    rows: tuple[int, int]
    reason: str

    def __str__(self) -> str:
        where = f" (steps {self.rows[0]}-{self.rows[1] - 1})" if self.array.startswith("data/") else ""
        return f"{self.array}: episode {self.episode}{where} {self.reason}"


class _ChunkError(Exception):
    def __init__(self, block: int, key: str, problem: str):
        super().__init__(f"chunk {key} {problem}")
        self.block = block


class DatasetReader:
    """An opened dataset: validated metadata and episode table; reads and verifies arrays and episodes on demand."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not (self.path / "zarr.json").exists():
            reason = "does not exist" if not self.path.exists() else "has no zarr.json"
            raise DatasetError(f"{self.path}: not a robot_rl dataset ({reason})")
        _check_metadata_files(self.path)
        try:
            self.root = zarr.open_group(str(self.path), mode="r")
        except Exception as exc:  # zarr raises several types for unusable metadata
            raise DatasetError(f"{self.path}: cannot open dataset: {exc}") from exc
        self.attrs = dict(self.root.attrs)
        self.schema_version = self.attrs.get("schema_version")
        if self.schema_version not in READABLE_SCHEMA_VERSIONS:
            raise DatasetError(
                f"{self.path}: schema_version {self.schema_version!r} is not one this version reads "
                f"({', '.join(map(str, READABLE_SCHEMA_VERSIONS))})"
            )
        for required in ("observation_spec", "action_spec", "fps", "task"):
            if required not in self.attrs:
                raise DatasetError(f"{self.path}: attribute {required!r} is missing")
        self.observation_spec = {k: ArraySpec.from_json(v) for k, v in self.attrs["observation_spec"].items()}
        self.action_spec = ArraySpec.from_json(self.attrs["action_spec"])
        self.fps = float(self.attrs["fps"])
        self.task = str(self.attrs["task"])
        try:
            meta = self.root["meta"]
        except KeyError:
            raise DatasetError(f"{self.path}: group 'meta' is missing") from None
        self.num_episodes = int(meta.attrs.get("num_episodes", -1))
        if self.num_episodes < 0:
            raise DatasetError(f"{self.path}: meta attribute 'num_episodes' is missing")

        specs = covered_specs(self.observation_spec, self.action_spec)
        if self.schema_version == 1:
            del specs["meta/seed"]
        self.arrays = {name: self._array(name, spec) for name, spec in specs.items()}
        self.notes: list[str] = []
        if self.schema_version == 1:
            self.notes.append(
                "schema 1 dataset: no checksums, so missing or altered chunks cannot be detected"
            )

        if self.arrays["meta/episode_ends"].shape[0] < self.num_episodes:
            raise DatasetError(
                f"{self.path}: meta/episode_ends has {self.arrays['meta/episode_ends'].shape[0]} entries, "
                f"{self.num_episodes} committed"
            )
        self.episode_ends = self._read_table("meta/episode_ends")
        if np.any(np.diff(np.concatenate([[0], self.episode_ends])) <= 0):
            raise DatasetError(f"{self.path}: meta/episode_ends is not strictly increasing: {self.episode_ends}")
        self.num_steps = int(self.episode_ends[-1]) if self.num_episodes else 0
        self.uncommitted_steps = 0
        for name, arr in self.arrays.items():
            committed = self._committed_rows(name)
            if arr.shape[0] < committed:
                unit = "steps" if name.startswith("data/") else "entries"
                raise DatasetError(
                    f"{self.path}: {name} has {arr.shape[0]} {unit} but episode_ends says {committed} (truncated)"
                )
            if name.startswith("data/"):
                self.uncommitted_steps = max(self.uncommitted_steps, arr.shape[0] - committed)

        self.checksums: np.ndarray | None = None
        self.checksum_arrays: list[str] = []
        if self.schema_version >= 2:
            checksums = self._array(CHECKSUMS, ArraySpec((len(specs),), "uint32"))
            self.checksum_arrays = list(checksums.attrs.get("arrays", []))
            if self.checksum_arrays != list(specs):
                raise DatasetError(
                    f"{self.path}: {CHECKSUMS} covers {self.checksum_arrays}, the dataset has {list(specs)}"
                )
            if checksums.shape[0] < self.num_episodes:
                raise DatasetError(
                    f"{self.path}: {CHECKSUMS} has {checksums.shape[0]} entries, {self.num_episodes} committed"
                )
            self.arrays[CHECKSUMS] = checksums
            self.checksums = self._read_table(CHECKSUMS)

    # ----- low level ---------------------------------------------------------------------------------------------
    def _array(self, name: str, spec: ArraySpec):
        try:
            arr = self.root[name]
        except KeyError:
            raise DatasetError(f"{self.path}: array {name!r} is missing") from None
        if not isinstance(arr, zarr.Array):
            raise DatasetError(f"{self.path}: {name!r} is a group, not an array")
        if tuple(arr.shape[1:]) != tuple(spec.shape) or np.dtype(arr.dtype) != np.dtype(spec.dtype):
            raise DatasetError(
                f"{self.path}: array {name!r} is {arr.dtype}{tuple(arr.shape[1:])}, schema says "
                f"{spec.dtype}{tuple(spec.shape)}"
            )
        return arr

    def _committed_rows(self, name: str) -> int:
        return self.num_steps if name.startswith("data/") else self.num_episodes

    def _episode_rows(self, name: str, episode: int) -> tuple[int, int]:
        if name.startswith("data/"):
            return (int(self.episode_ends[episode - 1]) if episode else 0), int(self.episode_ends[episode])
        return episode, episode + 1

    def _chunks(self, name: str, start: int, stop: int) -> list[tuple[int, str, Path]]:
        """(row block, key relative to the dataset, file) of every chunk holding rows [start, stop) of an array."""
        arr = self.arrays[name]
        row_chunk = arr.chunks[0]
        other = [range(math.ceil(size / chunk)) for size, chunk in zip(arr.shape[1:], arr.chunks[1:], strict=True)]
        chunks = []
        for block in range(start // row_chunk, math.ceil(stop / row_chunk)):
            for rest in itertools.product(*other):
                key = arr.metadata.encode_chunk_key((block, *rest))
                chunks.append((block, f"{name}/{key}", self.path / name / key))
        return chunks

    def _read_table(self, name: str) -> np.ndarray:
        """The committed rows of a per-episode array every read needs (episode ends, checksums): any damage is
        fatal, as no episode could be located or verified without it."""
        try:
            return self._read_checked(name, 0, self.num_episodes)
        except _ChunkError as exc:
            raise DatasetError(f"{self.path}: {name} is unreadable: {exc}") from None

    def _read_checked(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) of an array; a missing or undecodable chunk raises `_ChunkError` naming it."""
        arr = self.arrays[name]
        chunks = self._chunks(name, start, stop)
        if self.schema_version >= 2:  # schema 1 omitted fill-value chunks: their absence proves nothing
            for block, key, file in chunks:
                if not file.is_file():
                    raise _ChunkError(block, key, "is missing")
        try:
            return np.asarray(arr[start:stop])
        except Exception as exc:  # a corrupt chunk surfaces as a codec or store error
            failure = _ChunkError(chunks[0][0], chunks[0][1], f"cannot be decoded ({type(exc).__name__}: {exc})")
        row_chunk = arr.chunks[0]
        blocks = sorted({block for block, _, _ in chunks})
        for block in blocks if len(blocks) > 1 else ():  # find the chunk that fails
            self._read_checked(name, max(start, block * row_chunk), min(stop, (block + 1) * row_chunk))
        raise failure

    # ----- verification ------------------------------------------------------------------------------------------
    def _episodes_in(self, name: str, start: int, stop: int) -> range:
        """Committed episodes whose rows of array `name` overlap [start, stop)."""
        if not name.startswith("data/"):
            return range(start, min(stop, self.num_episodes))
        first = int(np.searchsorted(self.episode_ends, start, side="right"))
        last = int(np.searchsorted(self.episode_ends, stop - 1, side="right"))
        return range(first, min(last + 1, self.num_episodes))

    def _mismatch(self, name: str, episode: int, crc: int) -> Damage | None:
        if self.checksums is None or name == CHECKSUMS:
            return None
        stored = int(self.checksums[episode, self.checksum_arrays.index(name)])
        if crc == stored:
            return None
        rows = self._episode_rows(name, episode)
        chunks = ", ".join(key for _, key, _ in self._chunks(name, *rows))
        return Damage(name, episode, rows, f"fails its checksum (crc32 {crc:08x}, written {stored:08x}): "
                                          f"chunk {chunks} was altered")

    def _check_values(self, name: str, values: np.ndarray, episodes: Iterable[int], first_row: int) -> list[Damage]:
        """Compare episodes' rows of array `name` (held in `values`, starting at row `first_row`) with the
        stored checksums."""
        damage = []
        for episode in episodes:
            start, stop = self._episode_rows(name, episode)
            found = self._mismatch(name, episode, checksum(values[start - first_row : stop - first_row]))
            if found:
                damage.append(found)
        return damage

    def _mark(self, damage: dict, name: str, block: int, reason: str) -> None:
        """Record `reason` for every committed episode with rows in chunk row-block `block` of array `name`."""
        row_chunk = self.arrays[name].chunks[0]
        start, stop = block * row_chunk, min((block + 1) * row_chunk, self._committed_rows(name))
        for episode in self._episodes_in(name, start, stop):
            damage.setdefault((name, episode), Damage(name, episode, self._episode_rows(name, episode), reason))

    def missing_chunks(self) -> list[Damage]:
        """Every committed episode with a chunk file missing (a `stat` per chunk; schema 1: not detectable)."""
        if self.schema_version < 2:
            return []
        damage: dict[tuple[str, int], Damage] = {}
        for name in self.arrays:
            for block, key, file in self._chunks(name, 0, self._committed_rows(name)):
                if not file.is_file():
                    self._mark(damage, name, block, f"cannot be read: chunk {key} is missing")
        return sorted(damage.values(), key=lambda d: (d.episode, d.array))

    def verify(self, names: Iterable[str] | None = None) -> list[Damage]:
        """Read every committed chunk and check every episode's checksums; returns all damage found."""
        if self.schema_version < 2:
            raise DatasetError(f"{self.path}: {self.notes[0]}; there is nothing to verify against")
        damage: dict[tuple[str, int], Damage] = {}
        for name in self.arrays if names is None else names:
            committed = self._committed_rows(name)
            crcs = [0] * self.num_episodes
            row_chunk = self.arrays[name].chunks[0]
            for block in range(math.ceil(committed / row_chunk)):
                start, stop = block * row_chunk, min((block + 1) * row_chunk, committed)
                try:
                    values = self._read_checked(name, start, stop)
                except _ChunkError as exc:
                    self._mark(damage, name, exc.block, f"cannot be read: {exc}")
                    continue
                for episode in self._episodes_in(name, start, stop):
                    first, last = self._episode_rows(name, episode)
                    crcs[episode] = checksum(values[max(first, start) - start : min(last, stop) - start], crcs[episode])
            for episode in range(self.num_episodes):
                if (name, episode) not in damage:
                    found = self._mismatch(name, episode, crcs[episode])
                    if found:
                        damage[(name, episode)] = found
        return sorted(damage.values(), key=lambda d: (d.episode, d.array))

    def read_array(self, name: str) -> np.ndarray:
        """Every committed row of an array, verified against the checksums; damage raises `DatasetError`."""
        try:
            values = self._read_checked(name, 0, self._committed_rows(name))
        except _ChunkError as exc:
            damage = self.verify([name]) if self.schema_version >= 2 else []
            if not damage:
                raise DatasetError(f"{self.path}: array {name!r} is corrupt or unreadable: {exc}") from None
            raise self.error(damage) from None
        self.raise_for(self._check_values(name, values, range(self.num_episodes), 0))
        return values

    def read_episode(self, index: int, keys: Iterable[str] | None = None) -> dict[str, Any]:
        """One episode, verified: `obs` (only `keys` if given), the per-step arrays, `final_obs`, `success`, `seed`."""
        if not -self.num_episodes <= index < self.num_episodes:
            raise IndexError(f"episode {index} out of range: dataset has {self.num_episodes} episodes")
        index %= self.num_episodes
        wanted = [key for key in self.observation_spec if keys is None or key in set(keys)]
        names = [f"data/obs/{key}" for key in wanted] + [f"data/{key}" for key in STEP_KEYS]
        names += [f"meta/final_obs/{key}" for key in wanted] + ["meta/success"]
        names += ["meta/seed"] if "meta/seed" in self.arrays else []
        values: dict[str, np.ndarray] = {}
        for name in names:
            start, stop = self._episode_rows(name, index)
            try:
                values[name] = self._read_checked(name, start, stop)
            except _ChunkError as exc:
                raise self.error([Damage(name, index, (start, stop), f"cannot be read: {exc}")]) from None
            self.raise_for(self._check_values(name, values[name], [index], start))
        episode: dict[str, Any] = {
            "obs": {key: values[f"data/obs/{key}"] for key in wanted},
            "final_obs": {key: values[f"meta/final_obs/{key}"][0] for key in wanted},
            "success": bool(values["meta/success"][0]),
            "seed": int(values["meta/seed"][0]) if "meta/seed" in values else UNKNOWN_SEED,
        }
        episode.update({key: values[f"data/{key}"] for key in STEP_KEYS})
        return episode

    def error(self, damage: list[Damage]) -> DatasetError:
        more = f" (and {len(damage) - 1} more)" if len(damage) > 1 else ""
        return DatasetError(f"{self.path}: {damage[0]}{more}")

    def raise_for(self, damage: list[Damage]) -> None:
        if damage:
            raise self.error(damage)

    # ----- summary -----------------------------------------------------------------------------------------------
    @property
    def episode_lengths(self) -> np.ndarray:
        return np.diff(np.concatenate([[0], self.episode_ends])).astype(np.int64)

    def summary(self) -> dict[str, Any]:
        """Figures for `robot-rl info` (reads only the small per-step and per-episode arrays)."""
        lengths = self.episode_lengths
        success = self.read_array("meta/success")
        intervention = self.read_array("data/intervention")
        seeds = self.read_array("meta/seed") if "meta/seed" in self.arrays else np.zeros(0, dtype=np.int64)
        known = seeds[seeds != UNKNOWN_SEED]
        data = {name[len("data/") :]: arr for name, arr in self.arrays.items() if name.startswith("data/")}
        sizes = {f"data/{name}": _dir_bytes(self.path / "data" / name) for name in data}
        sizes["meta"] = _dir_bytes(self.path / "meta")
        return {
            "path": str(self.path),
            "schema_version": self.schema_version,
            "task": self.task,
            "robot": self.attrs.get("robot"),
            "fps": self.fps,
            "episodes": self.num_episodes,
            "steps": self.num_steps,
            "success_rate": float(success.mean()) if self.num_episodes else 0.0,
            "intervention_rate": float(intervention.mean()) if self.num_steps else 0.0,
            "episode_length": {
                "min": int(lengths.min()) if len(lengths) else 0,
                "mean": float(lengths.mean()) if len(lengths) else 0.0,
                "max": int(lengths.max()) if len(lengths) else 0,
            },
            "seeds": {"min": int(known.min()), "max": int(known.max()), "count": len(known)} if len(known) else None,
            "uncommitted_steps": self.uncommitted_steps,
            "keys": {
                name: {"shape": [self.num_steps, *arr.shape[1:]], "dtype": str(arr.dtype)} for name, arr in data.items()
            },
            "bytes_on_disk": sizes,
            "total_bytes": _dir_bytes(self.path),
            "notes": list(self.notes),
        }


class EpisodeDataset:
    """A dataset loaded into RAM and verified: per-step arrays, episode boundaries and metadata."""

    def __init__(self, path: str | Path):
        self.reader = reader = DatasetReader(path)
        self.path = reader.path
        self.attrs = reader.attrs
        self.schema_version = reader.schema_version
        self.observation_spec = reader.observation_spec
        self.action_spec = reader.action_spec
        self.fps = reader.fps
        self.task = reader.task
        self.num_episodes = reader.num_episodes
        self.episode_ends = reader.episode_ends
        self.num_steps = reader.num_steps
        self.uncommitted_steps = reader.uncommitted_steps
        self.notes = reader.notes
        reader.raise_for(reader.missing_chunks())  # cheap, and names every missing chunk before any decoding
        self.data: dict[str, np.ndarray] = {
            name[len("data/") :]: reader.read_array(name) for name in reader.arrays if name.startswith("data/")
        }
        self.final_obs = {key: reader.read_array(f"meta/final_obs/{key}") for key in self.observation_spec}
        self.success = reader.read_array("meta/success")
        self.start_time = reader.read_array("meta/start_time")
        self.seeds = (
            reader.read_array("meta/seed") if "meta/seed" in reader.arrays
            else np.full(self.num_episodes, UNKNOWN_SEED, dtype=np.int64)
        )
        self.verified = reader.checksums is not None

    @property
    def episode_starts(self) -> np.ndarray:
        return np.concatenate([[0], self.episode_ends[:-1]]).astype(np.int64)

    @property
    def episode_lengths(self) -> np.ndarray:
        return np.diff(np.concatenate([[0], self.episode_ends])).astype(np.int64)

    @property
    def image_size(self) -> int | None:
        """The side of the (square, equal-sized) camera images, or None if there are none or they differ."""
        sizes = {spec.shape[:2] for spec in self.observation_spec.values() if spec.is_image}
        if len(sizes) != 1:
            return None
        height, width = sizes.pop()
        return height if height == width else None

    def _check_index(self, index: int) -> int:
        if not -self.num_episodes <= index < self.num_episodes:
            raise IndexError(f"episode {index} out of range: dataset has {self.num_episodes} episodes")
        return index % self.num_episodes

    def observations(self, prefix: str = "obs/") -> dict[str, np.ndarray]:
        return {name[len(prefix) :]: value for name, value in self.data.items() if name.startswith(prefix)}

    def episode(self, index: int) -> dict[str, Any]:
        """One episode: `obs` dict, per-step arrays and `final_obs`, `success`, `seed`."""
        index = self._check_index(index)
        start, end = int(self.episode_starts[index]), int(self.episode_ends[index])
        episode: dict[str, Any] = {
            "obs": {key: value[start:end] for key, value in self.observations().items()},
            "final_obs": {key: value[index] for key, value in self.final_obs.items()},
            "success": bool(self.success[index]),
            "seed": int(self.seeds[index]),
        }
        episode.update({key: self.data[key][start:end] for key in STEP_KEYS})
        return episode

    def next_observation_index(self) -> np.ndarray:
        """For each step, the index of its next observation in data/, or -1 where it is the episode's final_obs."""
        next_index = np.arange(1, self.num_steps + 1, dtype=np.int64)
        next_index[self.episode_ends - 1] = -1
        return next_index

    def summary(self) -> dict[str, Any]:
        """Figures for `robot-rl info`."""
        return self.reader.summary()


def _dir_bytes(path: Path) -> int:
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())
