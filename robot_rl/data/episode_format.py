"""The episode dataset format: zarr 3 in the diffusion_policy layout, as the writer (robot_rl.data.episode_writer)
makes it and the reader (robot_rl.data.episodes) checks it.

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
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

import numpy as np

from robot_rl.core.types import ArraySpec

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


def specs_from_spaces(observation_space, action_space) -> tuple[dict[str, ArraySpec], ArraySpec]:
    """Observation and action specs from gymnasium spaces (a Dict of Boxes and a Box)."""
    obs_specs = {
        key: ArraySpec(tuple(space.shape), np.dtype(space.dtype).name)
        for key, space in observation_space.spaces.items()
    }
    return obs_specs, ArraySpec(tuple(action_space.shape), np.dtype(action_space.dtype).name)


def _step_specs(observation_spec: Mapping[str, ArraySpec], action_spec: ArraySpec) -> dict[str, ArraySpec]:
    """Every per-step array under data/, by name relative to data/."""
    specs = {f"obs/{key}": spec for key, spec in observation_spec.items()}
    specs["action"] = action_spec
    specs.update({key: ArraySpec((), np.dtype(dtype).name) for key, dtype in _STEP_DTYPES.items()})
    return specs


def covered_specs(observation_spec: Mapping[str, ArraySpec], action_spec: ArraySpec) -> dict[str, ArraySpec]:
    """Every array a checksum covers, by its path in the dataset: per-step data/ first, then per-episode meta/."""
    specs = {f"data/{name}": spec for name, spec in _step_specs(observation_spec, action_spec).items()}
    specs.update({f"meta/final_obs/{key}": spec for key, spec in observation_spec.items()})
    specs.update({f"meta/{name}": ArraySpec((), dtype) for name, dtype in _EPISODE_ARRAYS.items()})
    return specs


def spec_text(spec: ArraySpec) -> str:
    """E.g. "64x64x3 uint8" (a scalar: "uint8")."""
    return " ".join(filter(None, ("x".join(map(str, spec.shape)), spec.dtype)))


def checksum(values: np.ndarray, crc: int = 0) -> int:
    """CRC-32 of an array's values (little-endian bytes, C order), continuing from `crc`."""
    values = np.ascontiguousarray(values)
    if values.dtype.byteorder == ">":
        values = values.astype(values.dtype.newbyteorder("<"))
    return zlib.crc32(values.reshape(-1).view(np.uint8), crc)

