"""Latest sensor readings -> the policy's observation dict, with staleness checks. Pure (no ROS): the actor node feeds
it decoded messages, a test feeds it arrays.

Observation keys and the sensors they are built from (the same layout as the sim env's observations, so a policy
trained in-process runs on the ROS graph and on the robot unchanged):

- ``state`` (14,) float32 = tcp position (3), tcp quaternion wxyz (4) [``tcp_pose``], tcp linear (3) and angular (3)
  velocity [``tcp_twist``], gripper opening width [``gripper``];
- ``images/<camera>`` (H, W, 3) uint8 [``camera/<camera>``];
- ``object_state`` [``object_state``]: privileged task state, published by the sim node only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

import numpy as np

from robot_rl.sim.env import NOMINAL_TCP_QUAT, STATE_SIZE

STATE_SENSORS = ("tcp_pose", "tcp_twist", "gripper")


def sensors_for(observation_keys: Iterable[str]) -> tuple[str, ...]:
    """The sensors an observation with these keys needs, in a stable order."""
    needed: list[str] = []
    for key in observation_keys:
        if key == "state":
            names = STATE_SENSORS
        elif key.startswith("images/") and len(key) > len("images/"):
            names = (f"camera/{key[len('images/'):]}",)
        elif key == "object_state":
            names = ("object_state",)
        else:
            raise ValueError(f"observation key {key!r} has no sensor source; known: state, images/<camera>, "
                             "object_state")
        needed.extend(n for n in names if n not in needed)
    return tuple(needed)


class MissingSensors(RuntimeError):
    """Some sensors the observation needs are missing or stale; `reasons` names each (e.g. ``stale:tcp_pose``)."""

    def __init__(self, reasons: tuple[str, ...]):
        super().__init__(", ".join(reasons))
        self.reasons = reasons


@dataclasses.dataclass
class _Reading:
    value: object
    stamp: float


class SensorCache:
    """Keeps the newest reading of each sensor and assembles observations from readings no older than `max_age_s`."""

    def __init__(self, observation_keys: Iterable[str], max_age_s: float = 0.2,
                 shapes: Mapping[str, tuple[int, ...]] | None = None):
        self.observation_keys = tuple(observation_keys)
        self.required = sensors_for(self.observation_keys)
        if max_age_s <= 0:
            raise ValueError(f"max_age_s={max_age_s} must be positive")
        self.max_age_s = float(max_age_s)
        self.shapes = dict(shapes or {})
        self._readings: dict[str, _Reading] = {}

    def update(self, sensor: str, value, stamp: float) -> None:
        """Store a reading (older than the one held: ignored). Values: tcp_pose (position, quat), tcp_twist (linear,
        angular), gripper width [m], camera image array, object_state vector."""
        current = self._readings.get(sensor)
        if current is None or stamp >= current.stamp:
            self._readings[sensor] = _Reading(value, float(stamp))

    def stamps(self) -> dict[str, float]:
        return {name: reading.stamp for name, reading in self._readings.items()}

    def stamp(self, sensor: str) -> float | None:
        reading = self._readings.get(sensor)
        return None if reading is None else reading.stamp

    def problems(self, now: float) -> tuple[str, ...]:
        """`missing:<sensor>` / `stale:<sensor>` for each required sensor without a fresh reading."""
        out = []
        for sensor in self.required:
            reading = self._readings.get(sensor)
            if reading is None:
                out.append(f"missing:{sensor}")
            elif not abs(now - reading.stamp) <= self.max_age_s:
                out.append(f"stale:{sensor}")
        return tuple(out)

    def tcp_pose(self) -> tuple[np.ndarray, np.ndarray] | None:
        reading = self._readings.get("tcp_pose")
        return None if reading is None else reading.value

    def observation(self, now: float) -> dict[str, np.ndarray]:
        """The observation from the newest readings; raises MissingSensors if any needed one is missing or stale."""
        problems = self.problems(now)
        if problems:
            raise MissingSensors(problems)
        obs = {}
        for key in self.observation_keys:
            if key == "state":
                obs[key] = self._state()
            elif key == "object_state":
                obs[key] = np.asarray(self._readings["object_state"].value, dtype=np.float32).reshape(-1)
            else:
                image = np.asarray(self._readings[f"camera/{key[len('images/'):]}"].value)
                obs[key] = image
            expected = self.shapes.get(key)
            if expected is not None and tuple(obs[key].shape) != tuple(expected):
                raise MissingSensors((f"shape:{key}:{tuple(obs[key].shape)}!={tuple(expected)}",))
        return obs

    def _state(self) -> np.ndarray:
        position, quat = self._readings["tcp_pose"].value
        linear, angular = self._readings["tcp_twist"].value
        width = self._readings["gripper"].value
        quat = np.asarray(quat, dtype=np.float64)
        if np.dot(quat, NOMINAL_TCP_QUAT) < 0:  # the sim env's sign convention
            quat = -quat
        state = np.concatenate([np.asarray(position, dtype=np.float64).reshape(3), quat.reshape(4),
                                np.asarray(linear, dtype=np.float64).reshape(3),
                                np.asarray(angular, dtype=np.float64).reshape(3), [float(width)]])
        assert state.shape == (STATE_SIZE,)
        return state.astype(np.float32)
