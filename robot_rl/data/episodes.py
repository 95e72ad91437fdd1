"""Episode datasets on disk: zarr 3 in the diffusion_policy layout, crash-safe appends, validating reader.

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

Group attributes hold ``schema_version``, ``fps``, ``task``, ``robot``, the observation and action specs.

Crash safety: an episode is buffered in RAM and written when it ends. Every array is written first; the
commit point is the ``num_episodes`` attribute of ``meta``, a single file replaced atomically by zarr's local
store. A writer killed mid-episode or mid-write leaves the committed episodes intact; steps written past the
last commit are ignored by readers (reported as ``uncommitted_steps``) and truncated when a writer reopens.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from robot_rl.types import ArraySpec

SCHEMA_VERSION = 1
STEP_KEYS = ("action", "reward", "terminated", "truncated", "intervention", "timestamp")
_STEP_DTYPES = {
    "reward": np.float32,
    "terminated": np.bool_,
    "truncated": np.bool_,
    "intervention": np.bool_,
    "timestamp": np.float64,
}
_SCALAR_CHUNK = 4096
_IMAGE_CHUNK_BYTES = 2 * 1024 * 1024


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


class EpisodeWriter:
    """Appends episodes to a dataset; each episode is committed atomically when it ends."""

    def __init__(
        self,
        path: str | Path,
        observation_spec: Mapping[str, ArraySpec],
        action_spec: ArraySpec,
        *,
        fps: float,
        task: str,
        robot: str = "robot_rl_panda_sim",
        attrs: Mapping[str, Any] | None = None,
    ):
        self.path = Path(path)
        self.observation_spec = dict(observation_spec)
        self.action_spec = action_spec
        self.fps = float(fps)
        step_specs = self._step_specs()
        if (self.path / "zarr.json").exists():
            self.root = zarr.open_group(str(self.path), mode="r+")
            self._check_compatible(task)
            self._truncate_uncommitted()
        else:
            self.root = zarr.open_group(str(self.path), mode="w")
            self.root.attrs.update(
                {
                    "schema_version": SCHEMA_VERSION,
                    "fps": self.fps,
                    "task": task,
                    "robot": robot,
                    "observation_spec": {k: s.to_json() for k, s in self.observation_spec.items()},
                    "action_spec": action_spec.to_json(),
                    "created": time.time(),
                    **dict(attrs or {}),
                }
            )
            for name, spec in step_specs.items():
                self._create(f"data/{name}", spec)
                if name.startswith("obs/"):
                    self._create(f"meta/final_{name}", spec)
            self._create("meta/episode_ends", ArraySpec((), "int64"))
            self._create("meta/success", ArraySpec((), "bool"))
            self._create("meta/start_time", ArraySpec((), "float64"))
            self.root["meta"].attrs["num_episodes"] = 0
        self._arrays = {name: self.root[f"data/{name}"] for name in step_specs}
        self._buffer: list[dict[str, Any]] = []
        self._episode_start = time.time()

    def _step_specs(self) -> dict[str, ArraySpec]:
        specs = {f"obs/{key}": spec for key, spec in self.observation_spec.items()}
        specs["action"] = self.action_spec
        specs.update({key: ArraySpec((), np.dtype(dtype).name) for key, dtype in _STEP_DTYPES.items()})
        return specs

    def _create(self, name: str, spec: ArraySpec) -> None:
        compressors = (
            zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle") if spec.is_image else "auto"
        )
        self.root.create_array(
            name, shape=(0, *spec.shape), chunks=_chunks_for(spec), dtype=spec.dtype, compressors=compressors
        )

    def _check_compatible(self, task: str) -> None:
        attrs = dict(self.root.attrs)
        if attrs.get("schema_version") != SCHEMA_VERSION:
            raise DatasetError(
                f"{self.path}: schema_version {attrs.get('schema_version')!r} != {SCHEMA_VERSION}; cannot append"
            )
        stored_obs = {k: ArraySpec.from_json(v) for k, v in attrs["observation_spec"].items()}
        if stored_obs != self.observation_spec:
            raise DatasetError(
                f"{self.path}: observation spec differs from the dataset's; stored {stored_obs}, "
                f"given {self.observation_spec}"
            )
        if ArraySpec.from_json(attrs["action_spec"]) != self.action_spec:
            raise DatasetError(f"{self.path}: action spec differs: stored {attrs['action_spec']}, given {self.action_spec}")
        if attrs.get("task") != task:
            raise DatasetError(f"{self.path}: dataset task is {attrs.get('task')!r}, not {task!r}")

    def _truncate_uncommitted(self) -> None:
        """Drop anything written after the last commit (a writer killed mid-write)."""
        meta = self.root["meta"]
        num_episodes = int(meta.attrs["num_episodes"])
        ends = meta["episode_ends"]
        committed_steps = int(ends[num_episodes - 1]) if num_episodes else 0
        for name in self._step_specs():
            arr = self.root[f"data/{name}"]
            if arr.shape[0] != committed_steps:
                arr.resize((committed_steps, *arr.shape[1:]))
        for arr in _meta_arrays(meta):
            if arr.shape[0] != num_episodes:
                arr.resize((num_episodes, *arr.shape[1:]))
        for partial in self.path.rglob("*.partial"):
            partial.unlink(missing_ok=True)

    @property
    def num_episodes(self) -> int:
        return int(self.root["meta"].attrs["num_episodes"])

    @property
    def pending_steps(self) -> int:
        return len(self._buffer)

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
        if not self._buffer:
            self._episode_start = time.time()
        action = np.asarray(action, dtype=self.action_spec.dtype)
        if action.shape != self.action_spec.shape:
            raise DatasetError(f"action has shape {action.shape}, dataset expects {self.action_spec.shape}")
        if not np.all(np.isfinite(action)):
            raise DatasetError(f"action {action} is not finite; refusing to record it (step {len(self._buffer)})")
        step = {f"obs/{key}": self._checked_obs(key, obs, "obs") for key in self.observation_spec}
        step.update(
            action=action,
            reward=float(reward),
            terminated=bool(terminated),
            truncated=bool(truncated),
            intervention=bool(intervention),
            timestamp=float(time.time() - self._episode_start if timestamp is None else timestamp),
        )
        self._buffer.append(step)

    def _checked_obs(self, key: str, obs: Mapping[str, np.ndarray], where: str) -> np.ndarray:
        if key not in obs:
            raise DatasetError(f"{where} is missing key {key!r}; dataset expects {sorted(self.observation_spec)}")
        spec = self.observation_spec[key]
        value = np.asarray(obs[key])
        if value.shape != spec.shape:
            raise DatasetError(f"{where}[{key!r}] has shape {value.shape}, dataset expects {spec.shape}")
        return value.astype(spec.dtype, copy=False)

    def end_episode(self, final_obs: Mapping[str, np.ndarray], success: bool) -> int:
        """Write the buffered episode and commit it; returns its index."""
        if not self._buffer:
            raise DatasetError("end_episode called with no steps recorded")
        final = {key: self._checked_obs(key, final_obs, "final_obs") for key in self.observation_spec}
        meta = self.root["meta"]
        index = self.num_episodes
        start = int(meta["episode_ends"][index - 1]) if index else 0
        length = len(self._buffer)
        for name, arr in self._arrays.items():
            values = np.stack([step[name] for step in self._buffer]).astype(arr.dtype, copy=False)
            arr.resize((start + length, *arr.shape[1:]))
            arr[start : start + length] = values
        for key, value in final.items():
            _append(meta[f"final_obs/{key}"], index, value[None])
        _append(meta["episode_ends"], index, np.array([start + length], dtype=np.int64))
        _append(meta["success"], index, np.array([bool(success)]))
        _append(meta["start_time"], index, np.array([self._episode_start]))
        meta.attrs["num_episodes"] = index + 1  # commit point
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


def _meta_arrays(meta) -> list:
    arrays = [meta[name] for name in ("episode_ends", "success", "start_time")]
    final = meta["final_obs"]
    arrays += [final[name] for name in _array_paths(final)]
    return arrays


def _array_paths(group, prefix: str = "") -> list[str]:
    paths = [f"{prefix}{name}" for name in group.array_keys()]
    for name in group.group_keys():
        paths += _array_paths(group[name], f"{prefix}{name}/")
    return paths


class EpisodeDataset:
    """A validated dataset loaded into RAM: per-step arrays, episode boundaries and metadata."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not (self.path / "zarr.json").exists():
            raise DatasetError(f"{self.path}: not a robot_rl dataset (no zarr.json)")
        try:
            root = zarr.open_group(str(self.path), mode="r")
        except Exception as exc:  # zarr raises several types for unreadable metadata
            raise DatasetError(f"{self.path}: cannot open dataset: {exc}") from exc
        self.attrs = dict(root.attrs)
        if self.attrs.get("schema_version") != SCHEMA_VERSION:
            raise DatasetError(
                f"{self.path}: schema_version {self.attrs.get('schema_version')!r} is not {SCHEMA_VERSION}"
            )
        for required in ("observation_spec", "action_spec", "fps", "task"):
            if required not in self.attrs:
                raise DatasetError(f"{self.path}: attribute {required!r} is missing")
        self.observation_spec = {k: ArraySpec.from_json(v) for k, v in self.attrs["observation_spec"].items()}
        self.action_spec = ArraySpec.from_json(self.attrs["action_spec"])
        self.fps = float(self.attrs["fps"])
        self.task = str(self.attrs["task"])

        meta = self._group(root, "meta")
        self.num_episodes = int(meta.attrs.get("num_episodes", -1))
        if self.num_episodes < 0:
            raise DatasetError(f"{self.path}: meta attribute 'num_episodes' is missing")
        self.episode_ends = self._read(root, "meta/episode_ends", (), "int64")[: self.num_episodes]
        if len(self.episode_ends) < self.num_episodes:
            raise DatasetError(
                f"{self.path}: meta/episode_ends has {len(self.episode_ends)} entries, {self.num_episodes} committed"
            )
        if np.any(np.diff(np.concatenate([[0], self.episode_ends])) <= 0):
            raise DatasetError(f"{self.path}: meta/episode_ends is not strictly increasing: {self.episode_ends}")
        self.num_steps = int(self.episode_ends[-1]) if self.num_episodes else 0

        self.data: dict[str, np.ndarray] = {}
        self.uncommitted_steps = 0
        specs = {f"obs/{k}": s for k, s in self.observation_spec.items()}
        specs["action"] = self.action_spec
        specs.update({k: ArraySpec((), np.dtype(d).name) for k, d in _STEP_DTYPES.items()})
        for name, spec in specs.items():
            full = self._read(root, f"data/{name}", spec.shape, spec.dtype)
            if len(full) < self.num_steps:
                raise DatasetError(
                    f"{self.path}: data/{name} has {len(full)} steps but episode_ends says {self.num_steps} (truncated)"
                )
            self.uncommitted_steps = max(self.uncommitted_steps, len(full) - self.num_steps)
            self.data[name] = full[: self.num_steps]
        self.final_obs = {
            key: self._read(root, f"meta/final_obs/{key}", spec.shape, spec.dtype)[: self.num_episodes]
            for key, spec in self.observation_spec.items()
        }
        self.success = self._read(root, "meta/success", (), "bool")[: self.num_episodes]
        self.start_time = self._read(root, "meta/start_time", (), "float64")[: self.num_episodes]
        for name, values in [*self.final_obs.items(), ("success", self.success)]:
            if len(values) < self.num_episodes:
                raise DatasetError(f"{self.path}: meta/{name} has {len(values)} entries, {self.num_episodes} committed")

    def _group(self, root, name: str):
        try:
            return root[name]
        except KeyError as exc:
            raise DatasetError(f"{self.path}: group {name!r} is missing") from exc

    def _read(self, root, name: str, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        try:
            arr = root[name]
        except KeyError as exc:
            raise DatasetError(f"{self.path}: array {name!r} is missing") from exc
        if tuple(arr.shape[1:]) != tuple(shape) or np.dtype(arr.dtype) != np.dtype(dtype):
            raise DatasetError(
                f"{self.path}: array {name!r} is {arr.dtype}{tuple(arr.shape[1:])}, schema says {dtype}{tuple(shape)}"
            )
        try:
            return np.asarray(arr[:])
        except Exception as exc:  # a corrupt or missing chunk surfaces as a codec or store error
            raise DatasetError(f"{self.path}: array {name!r} is corrupt or unreadable: {exc}") from exc

    @property
    def episode_starts(self) -> np.ndarray:
        return np.concatenate([[0], self.episode_ends[:-1]]).astype(np.int64)

    @property
    def episode_lengths(self) -> np.ndarray:
        return np.diff(np.concatenate([[0], self.episode_ends])).astype(np.int64)

    def _check_index(self, index: int) -> int:
        if not -self.num_episodes <= index < self.num_episodes:
            raise IndexError(f"episode {index} out of range: dataset has {self.num_episodes} episodes")
        return index % self.num_episodes

    def observations(self, prefix: str = "obs/") -> dict[str, np.ndarray]:
        return {name[len(prefix) :]: value for name, value in self.data.items() if name.startswith(prefix)}

    def episode(self, index: int) -> dict[str, Any]:
        """One episode: `obs` dict, per-step arrays and `final_obs`, `success`."""
        index = self._check_index(index)
        start, end = int(self.episode_starts[index]), int(self.episode_ends[index])
        episode: dict[str, Any] = {
            "obs": {key: value[start:end] for key, value in self.observations().items()},
            "final_obs": {key: value[index] for key, value in self.final_obs.items()},
            "success": bool(self.success[index]),
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
        sizes = {f"data/{name}": _dir_bytes(self.path / "data" / name) for name in self.data}
        sizes["meta"] = _dir_bytes(self.path / "meta")
        lengths = self.episode_lengths
        return {
            "path": str(self.path),
            "task": self.task,
            "robot": self.attrs.get("robot"),
            "fps": self.fps,
            "episodes": self.num_episodes,
            "steps": self.num_steps,
            "success_rate": float(self.success.mean()) if self.num_episodes else 0.0,
            "intervention_rate": float(self.data["intervention"].mean()) if self.num_steps else 0.0,
            "episode_length": {
                "min": int(lengths.min()) if len(lengths) else 0,
                "mean": float(lengths.mean()) if len(lengths) else 0.0,
                "max": int(lengths.max()) if len(lengths) else 0,
            },
            "uncommitted_steps": self.uncommitted_steps,
            "keys": {
                name: {"shape": list(value.shape), "dtype": str(value.dtype)} for name, value in self.data.items()
            },
            "bytes_on_disk": sizes,
            "total_bytes": _dir_bytes(self.path),
        }


def _dir_bytes(path: Path) -> int:
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())
