"""Episode datasets on disk: zarr 3 in the diffusion_policy layout, crash-safe appends, verified reads.

Layout of a dataset (a zarr group directory)::

    data/obs/<key>        (T, ...)   observations, concatenated over every step of every episode
    data/action           (T, A)     float32, the executed action (the human's during an intervention)
    data/reward           (T,)       float32
    data/terminated       (T,)       bool
    data/truncated        (T,)       bool
    data/intervention     (T,)       bool, True where a human's action was executed
    data/timestamp        (T,)       float64, seconds since the episode started
    meta/episode_ends     (E,)       int64, exclusive end index of each episode in data/
    meta/final_obs/<key>  (E, ...)   the observation after the last step of each episode
    meta/success          (E,)       bool
    meta/start_time       (E,)       float64, unix time the episode started
    meta/seed             (E,)       int64, the seed the episode was reset with (-1: none, e.g. a real robot)
    meta/checksums        (E, K)     uint32, CRC-32 of each episode's values in each of the K arrays named by
                                     its ``arrays`` attribute (every array above but itself)

Group attributes hold ``schema_version``, ``fps``, ``task``, ``robot``, the observation and action specs.

Crash safety: an episode is buffered in RAM and written when it ends. Every array is written first, the checksums
last; the commit point is the ``num_episodes`` attribute of ``meta``, a single file replaced atomically by zarr's
local store (as is every chunk, so rewriting the chunk an episode shares with the next one never exposes a
half-written chunk). A writer killed mid-episode or mid-write leaves the committed episodes intact; steps written
past the last commit are ignored by readers (reported as ``uncommitted_steps``) and truncated when a writer reopens.
A new dataset is created under a temporary name and renamed into place, so a failed recording leaves no
half-made folder. One writer at a time: a writer holds an exclusive ``flock`` on the root ``zarr.json``, and a second
one (two recordings into the same dataset) is refused rather than overwriting the first one's episodes.

Integrity: every chunk is written, even one holding only fill values, so a committed range with a missing chunk
file is damage, found by a cheap ``stat`` (`DatasetReader.missing_chunks`). The checksums, computed at commit
from the exact values written, find altered chunks (`DatasetReader.verify`); `EpisodeDataset` and
`DatasetReader.read_episode` check them on every read and name the array, the episode and the chunk. Schema 1
datasets (no checksums, fill-value chunks omitted) stay readable, unverified.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import logging
import math
import os
import shutil
import time
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import zarr

from robot_rl.core import interrupts
from robot_rl.core.types import ArraySpec

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2
READABLE_SCHEMA_VERSIONS = (1, 2)
STEP_KEYS = ("action", "reward", "terminated", "truncated", "intervention", "timestamp")
UNKNOWN_SEED = -1
CHECKSUMS = "meta/checksums"
_STEP_DTYPES = {
    "reward": np.float32,
    "terminated": np.bool_,
    "truncated": np.bool_,
    "intervention": np.bool_,
    "timestamp": np.float64,
}
_EPISODE_ARRAYS = {"episode_ends": "int64", "success": "bool", "start_time": "float64", "seed": "int64"}
_SCALAR_CHUNK = 4096
_IMAGE_CHUNK_BYTES = 2 * 1024 * 1024
_WRITE_EVERY_CHUNK = {"write_empty_chunks": True}


class DatasetError(Exception):
    """A dataset is missing, corrupt, truncated or does not match what was asked of it."""


def specs_from_spaces(observation_space, action_space) -> tuple[dict[str, ArraySpec], ArraySpec]:
    """Observation and action specs from gymnasium spaces (a Dict of Boxes and a Box)."""
    obs_specs = {
        key: ArraySpec(tuple(space.shape), np.dtype(space.dtype).name)
        for key, space in observation_space.spaces.items()
    }
    return obs_specs, ArraySpec(tuple(action_space.shape), np.dtype(action_space.dtype).name)


def _chunks_for(spec: ArraySpec) -> tuple[int, ...]:
    frame_bytes = int(np.prod(spec.shape, dtype=np.int64)) * np.dtype(spec.dtype).itemsize
    steps = _SCALAR_CHUNK if frame_bytes <= 64 else max(1, min(_SCALAR_CHUNK, _IMAGE_CHUNK_BYTES // frame_bytes))
    return (steps, *spec.shape)


def _step_specs(observation_spec: Mapping[str, ArraySpec], action_spec: ArraySpec) -> dict[str, ArraySpec]:
    """Every per-step array under data/, by name relative to data/."""
    specs = {f"obs/{key}": spec for key, spec in observation_spec.items()}
    specs["action"] = action_spec
    specs.update({key: ArraySpec((), np.dtype(dtype).name) for key, dtype in _STEP_DTYPES.items()})
    return specs


def _covered_specs(observation_spec: Mapping[str, ArraySpec], action_spec: ArraySpec) -> dict[str, ArraySpec]:
    """Every array a checksum covers, by its path in the dataset: per-step data/ first, then per-episode meta/."""
    specs = {f"data/{name}": spec for name, spec in _step_specs(observation_spec, action_spec).items()}
    specs.update({f"meta/final_obs/{key}": spec for key, spec in observation_spec.items()})
    specs.update({f"meta/{name}": ArraySpec((), dtype) for name, dtype in _EPISODE_ARRAYS.items()})
    return specs


def spec_text(spec: ArraySpec) -> str:
    """E.g. "64x64x3 uint8" (a scalar: "uint8")."""
    return " ".join(filter(None, ("x".join(map(str, spec.shape)), spec.dtype)))


def _observation_differences(stored: Mapping[str, ArraySpec], given: Mapping[str, ArraySpec]) -> str:
    """Why observations cannot be appended to a dataset: only the entries that differ, and the option to fix."""
    parts, sizes = [], set()
    for key in sorted(stored.keys() | given.keys()):
        if key not in given:
            parts.append(f"{key} is stored but not given")
        elif key not in stored:
            parts.append(f"{key} is given but not stored")
        elif stored[key] != given[key]:
            parts.append(f"{key} is {spec_text(stored[key])} in the dataset, {spec_text(given[key])} here")
            if stored[key].is_image and given[key].is_image and stored[key].shape[2] == given[key].shape[2]:
                sizes.add(stored[key].shape[0])
    hint = (f"record with --image-size {sizes.pop()}" if len(sizes) == 1 and stored.keys() == given.keys()
            else "record with the dataset's --obs-mode and --image-size")
    return f"observations differ from the dataset's ({'; '.join(parts)}): {hint}, or into another dataset"


def checksum(values: np.ndarray, crc: int = 0) -> int:
    """CRC-32 of an array's values (little-endian bytes, C order), continuing from `crc`."""
    values = np.ascontiguousarray(values)
    if values.dtype.byteorder == ">":
        values = values.astype(values.dtype.newbyteorder("<"))
    return zlib.crc32(values.reshape(-1).view(np.uint8), crc)


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


class EpisodeWriter:
    """Appends episodes to a dataset; each episode is committed atomically when it ends.

    One writer at a time: a writer holds an exclusive lock (`flock`) on the dataset's root ``zarr.json`` until
    `close()` (or its process ends), and a second writer, in this process or another, is refused with a
    DatasetError instead of overwriting the first one's episodes. Readers need no lock.
    """

    def __init__(
        self,
        path: str | Path,
        observation_spec: Mapping[str, ArraySpec],
        action_spec: ArraySpec,
        *,
        fps: float,
        task: str,
        robot: str = "sim_panda",
        attrs: Mapping[str, Any] | None = None,
    ):
        self.path = Path(path)
        self.observation_spec = dict(observation_spec)
        self.action_spec = action_spec
        if not (math.isfinite(fps) and fps > 0):
            raise DatasetError(f"{self.path}: fps must be a positive number, got {fps}")
        self.fps = float(fps)
        self.task = task
        self._specs = _covered_specs(self.observation_spec, action_spec)
        self._new_attrs = {
            "schema_version": SCHEMA_VERSION,
            "fps": self.fps,
            "task": task,
            "robot": robot,
            "observation_spec": {k: s.to_json() for k, s in self.observation_spec.items()},
            "action_spec": action_spec.to_json(),
            **dict(attrs or {}),
        }
        self.root = None
        self._lock_file: BinaryIO | None = None
        self._closed = False
        self._buffer: list[dict[str, Any]] = []
        self._episode_start = time.time()
        if (self.path / "zarr.json").exists():
            existing = DatasetReader(self.path)  # the metadata and the episode table, validated
            self._check_compatible(existing.attrs, task)
            self._lock(self.path / "zarr.json")  # before anything is changed (truncation included)
            try:
                damage = existing.missing_chunks()
                if damage:  # appending would bury it (and truncating past a lost table could drop episodes)
                    raise DatasetError(
                        f"{self.path} is damaged, not appending: {damage[0]} (`robot-rl info` lists all)")
                self.root = zarr.open_group(str(self.path), mode="r+")
                self._bind_arrays()
                self._truncate_uncommitted()
            except BaseException:
                self.close()
                raise
        elif self.path.exists() and (not self.path.is_dir() or any(self.path.iterdir())):
            raise DatasetError(f"{self.path} exists and is not a robot_rl dataset (no zarr.json); choose another path")

    def _lock(self, root_metadata: Path) -> None:
        """Take the writer lock on the dataset's root zarr.json (never rewritten after creation, so the lock
        stays on the file every writer opens), or raise DatasetError if another writer holds it."""
        file = open(root_metadata, "rb")  # held open: the lock lives as long as the file
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.close()
            raise DatasetError(
                f"{self.path} is being written by another writer (a `robot-rl record` or a recording node); "
                "wait until it finishes, or record into another dataset"
            ) from None
        except OSError as exc:  # a file system without flock (some network mounts): write unguarded
            file.close()
            log.warning(f"{self.path}: cannot lock it against a second writer ({exc.strerror}); make sure only "
                        "one recording writes to it at a time")
            return
        self._lock_file = file

    def close(self) -> None:
        """Release the dataset for other writers; steps of an episode that was not ended are dropped."""
        self._closed = True
        self._buffer.clear()
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    def __enter__(self) -> EpisodeWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_lock_file", None) is not None:
            self._lock_file.close()

    def _check_open(self) -> None:
        if self._closed:
            raise DatasetError(f"{self.path}: this writer was closed; open a new EpisodeWriter to append")

    # ----- creation and reopening --------------------------------------------------------------------------------
    def _create(self) -> None:
        """Create the empty dataset under a temporary name, then rename it into place."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        staging = self.path.with_name(f".{self.path.name}.creating-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        try:
            root = zarr.open_group(str(staging), mode="w")
            root.attrs.update({**self._new_attrs, "created": time.time()})
            for name, spec in self._specs.items():
                compressors = (
                    zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle") if spec.is_image else "auto"
                )
                root.create_array(
                    name, shape=(0, *spec.shape), chunks=_chunks_for(spec), dtype=spec.dtype, compressors=compressors
                )
            checksums = root.create_array(
                CHECKSUMS, shape=(0, len(self._specs)), chunks=(_SCALAR_CHUNK, len(self._specs)), dtype="uint32"
            )
            checksums.attrs.update({"algorithm": "crc32", "arrays": list(self._specs)})
            root["meta"].attrs["num_episodes"] = 0
            self._lock(staging / "zarr.json")  # the lock moves with the folder: no moment without it
            try:
                os.rename(staging, self.path)  # replaces an empty directory, refuses a non-empty one
            except OSError as exc:
                self.close()
                raise DatasetError(f"{self.path}: cannot create the dataset there: {exc.strerror}") from None
        except OSError as exc:  # the staging folder beside it could not be made: name the path the user gave
            raise DatasetError(f"{self.path}: cannot create the dataset there: {exc.strerror or exc}") from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self.root = zarr.open_group(str(self.path), mode="r+")
        self._bind_arrays()

    def _bind_arrays(self) -> None:
        self._arrays = {name: self.root[name].with_config(_WRITE_EVERY_CHUNK) for name in self._specs}
        self._checksums = self.root[CHECKSUMS].with_config(_WRITE_EVERY_CHUNK)
        self._meta = self.root["meta"]

    def _check_compatible(self, attrs: Mapping[str, Any], task: str) -> None:
        version = attrs.get("schema_version")
        if version != SCHEMA_VERSION:
            hint = (
                "; it has no checksums or seeds: record into a new dataset"
                if version in READABLE_SCHEMA_VERSIONS else ""
            )
            raise DatasetError(
                f"{self.path}: schema_version {version!r} != {SCHEMA_VERSION}; cannot append{hint}"
            )
        if attrs.get("task") != task:
            raise DatasetError(f"{self.path}: dataset task is {attrs.get('task')!r}, not {task!r}; record {task} "
                               "into another dataset")
        stored_obs = {k: ArraySpec.from_json(v) for k, v in attrs["observation_spec"].items()}
        if stored_obs != self.observation_spec:
            raise DatasetError(f"{self.path}: {_observation_differences(stored_obs, self.observation_spec)}")
        stored_action = ArraySpec.from_json(attrs["action_spec"])
        if stored_action != self.action_spec:
            raise DatasetError(f"{self.path}: actions are {spec_text(stored_action)} in the dataset, "
                               f"{spec_text(self.action_spec)} here")
        if not math.isclose(float(attrs["fps"]), self.fps, rel_tol=1e-6):
            raise DatasetError(f"{self.path}: dataset is recorded at {attrs['fps']} fps, not {self.fps:g}")

    def _truncate_uncommitted(self) -> None:
        """Drop anything written after the last commit (a writer killed mid-write)."""
        num_episodes = self.num_episodes
        ends = self._arrays["meta/episode_ends"]
        committed_steps = int(ends[num_episodes - 1]) if num_episodes else 0
        for name, arr in [*self._arrays.items(), (CHECKSUMS, self._checksums)]:
            rows = committed_steps if name.startswith("data/") else num_episodes
            if arr.shape[0] != rows:
                arr.resize((rows, *arr.shape[1:]))
        for partial in self.path.rglob("*.partial"):
            partial.unlink(missing_ok=True)

    # ----- state -------------------------------------------------------------------------------------------------
    @property
    def num_episodes(self) -> int:
        return int(self._meta.attrs["num_episodes"]) if self.root is not None else 0

    @property
    def pending_steps(self) -> int:
        return len(self._buffer)

    @property
    def seeds(self) -> np.ndarray:
        """The seed of every committed episode (-1 where none was given)."""
        if self.root is None or not self.num_episodes:
            return np.zeros(0, dtype=np.int64)
        return np.asarray(self._arrays["meta/seed"][: self.num_episodes])

    @property
    def next_seed(self) -> int:
        """One past the largest stored seed (0 for a new dataset): where a continued recording starts."""
        known = self.seeds[self.seeds != UNKNOWN_SEED]
        return int(known.max()) + 1 if len(known) else 0

    # ----- recording ---------------------------------------------------------------------------------------------
    def add_step(
        self,
        obs: Mapping[str, np.ndarray],
        action: np.ndarray,
        reward: float,
        terminated: bool,
        truncated: bool,
        intervention: bool = False,
        timestamp: float | None = None,
    ) -> None:
        """Buffer one step; nothing reaches disk until `end_episode`."""
        self._check_open()
        if not self._buffer:
            self._episode_start = time.time()
        action = np.asarray(action, dtype=self.action_spec.dtype)
        if action.shape != self.action_spec.shape:
            raise DatasetError(f"action has shape {action.shape}, dataset expects {self.action_spec.shape}")
        if not np.all(np.isfinite(action)):
            raise DatasetError(f"action {action} is not finite; refusing to record it (step {len(self._buffer)})")
        step = {f"data/obs/{key}": self._checked_obs(key, obs, "obs") for key in self.observation_spec}
        step.update({
            "data/action": action,
            "data/reward": float(reward),
            "data/terminated": bool(terminated),
            "data/truncated": bool(truncated),
            "data/intervention": bool(intervention),
            "data/timestamp": float(time.time() - self._episode_start if timestamp is None else timestamp),
        })
        self._buffer.append(step)

    def _checked_obs(self, key: str, obs: Mapping[str, np.ndarray], where: str) -> np.ndarray:
        if key not in obs:
            raise DatasetError(f"{where} is missing key {key!r}; dataset expects {sorted(self.observation_spec)}")
        spec = self.observation_spec[key]
        value = np.asarray(obs[key])
        if value.shape != spec.shape:
            raise DatasetError(f"{where}[{key!r}] has shape {value.shape}, dataset expects {spec.shape}")
        return value.astype(spec.dtype, copy=False)

    def end_episode(self, final_obs: Mapping[str, np.ndarray], success: bool, seed: int | None = None) -> int:
        """Write the buffered episode and commit it; returns its index. `seed`: what the episode was reset with.
        A Ctrl-C / SIGTERM of the `robot-rl` command during it is raised once the episode is committed (a dataset
        created for it is then never left empty, nor its staging folder behind)."""
        self._check_open()
        if not self._buffer:
            raise DatasetError("end_episode called with no steps recorded")
        final = {key: self._checked_obs(key, final_obs, "final_obs") for key in self.observation_spec}
        with interrupts.uninterrupted():
            return self._commit_episode(final, success, seed)

    def _commit_episode(self, final: dict[str, np.ndarray], success: bool, seed: int | None) -> int:
        if self.root is None:
            self._create()
        index = self.num_episodes
        ends = self._arrays["meta/episode_ends"]
        start = int(ends[index - 1]) if index else 0
        length = len(self._buffer)
        rows: dict[str, np.ndarray] = {}
        for name, arr in self._arrays.items():
            if name.startswith("data/"):
                values = np.stack([step[name] for step in self._buffer]).astype(arr.dtype, copy=False)
                arr.resize((start + length, *arr.shape[1:]))
                arr[start : start + length] = values
                rows[name] = values
        episode_rows = {f"meta/final_obs/{key}": value[None] for key, value in final.items()}
        episode_rows.update({
            "meta/episode_ends": np.array([start + length], dtype=np.int64),
            "meta/success": np.array([bool(success)]),
            "meta/start_time": np.array([self._episode_start], dtype=np.float64),
            "meta/seed": np.array([UNKNOWN_SEED if seed is None else int(seed)], dtype=np.int64),
        })
        for name, values in episode_rows.items():
            arr = self._arrays[name]
            values = values.astype(arr.dtype, copy=False)
            _append(arr, index, values)
            rows[name] = values
        crcs = np.array([[checksum(rows[name]) for name in self._specs]], dtype=np.uint32)
        _append(self._checksums, index, crcs)
        self._meta.attrs["num_episodes"] = index + 1  # commit point
        self._buffer.clear()
        return index

    def discard_episode(self) -> int:
        """Drop the buffered steps of the current episode; returns how many were dropped."""
        dropped = len(self._buffer)
        self._buffer.clear()
        return dropped


def _append(arr, index: int, values: np.ndarray) -> None:
    arr.resize((index + len(values), *arr.shape[1:]))
    arr[index : index + len(values)] = values


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

        specs = _covered_specs(self.observation_spec, self.action_spec)
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
