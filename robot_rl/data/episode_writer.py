"""Appending episodes to a dataset (its layout: robot_rl.data.episode_format): `EpisodeWriter`.

Crash safety: an episode is buffered in RAM and written when it ends. Every array is written first, the checksums
last; the commit point is the ``num_episodes`` attribute of ``meta``, a single file replaced atomically by zarr's
local store (as is every chunk, so rewriting the chunk an episode shares with the next one never exposes a
half-written chunk). A writer killed mid-episode or mid-write leaves the committed episodes intact; steps written
past the last commit are ignored by readers (reported as ``uncommitted_steps``) and truncated when a writer reopens.
A new dataset is created under a temporary name and renamed into place, so a failed recording leaves no
half-made folder. One writer at a time: a writer holds an exclusive ``flock`` on the root ``zarr.json``, and a second
one (two recordings into the same dataset) is refused rather than overwriting the first one's episodes.
"""

from __future__ import annotations

import fcntl
import logging
import math
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import zarr

from robot_rl.core import interrupts
from robot_rl.core.types import ArraySpec
from robot_rl.data.episode_format import (
    CHECKSUMS,
    READABLE_SCHEMA_VERSIONS,
    SCHEMA_VERSION,
    UNKNOWN_SEED,
    checksum,
    covered_specs,
    spec_text,
)
from robot_rl.data.episodes import DatasetError, DatasetReader

log = logging.getLogger(__name__)

_SCALAR_CHUNK = 4096
_IMAGE_CHUNK_BYTES = 2 * 1024 * 1024
_WRITE_EVERY_CHUNK = {"write_empty_chunks": True}


def _chunks_for(spec: ArraySpec) -> tuple[int, ...]:
    frame_bytes = int(np.prod(spec.shape, dtype=np.int64)) * np.dtype(spec.dtype).itemsize
    steps = _SCALAR_CHUNK if frame_bytes <= 64 else max(1, min(_SCALAR_CHUNK, _IMAGE_CHUNK_BYTES // frame_bytes))
    return (steps, *spec.shape)


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
        self._specs = covered_specs(self.observation_spec, action_spec)
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
