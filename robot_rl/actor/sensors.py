"""Latest sensor readings -> the policy's observation dict, with staleness checks. Pure (no ROS): the actor node feeds
it decoded messages, a test feeds it arrays.

Observation keys and the sensors they are built from (the same layout as the sim env's observations, so a policy
trained in-process runs on the ROS graph and on the robot unchanged):

- ``state`` (14,) float32 = tcp position (3), tcp quaternion wxyz (4) [``tcp_pose``], tcp linear (3) and angular (3)
  velocity [``tcp_twist``], gripper opening width [``gripper``];
- ``images/<camera>`` (H, W, 3) uint8 [``camera/<camera>``];
- ``object_state`` [``object_state``]: privileged task state, published by the sim node only.

For drivers that publish differently: :func:`finger_opening` (gripper opening from finger joints of a JointState)
and :class:`TwistEstimator` (TCP twist from successive poses, for arms with no velocity topic).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from robot_rl.core.rotations import ScalarOps, quat_conjugate, quat_multiply, rotvec_from_quat

# The sim env's state layout and quaternion sign convention (robot_rl.sim.env.STATE_SIZE / NOMINAL_TCP_QUAT), kept
# here so that this module (and the actor node) does not import the simulator.
STATE_SIZE = 14
NOMINAL_TCP_QUAT = np.array([0.0, 1.0, 0.0, 0.0])  # wxyz: TCP pointing down

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


def finger_opening(names: Sequence[str], positions, finger_joints: Sequence[str], opening_per_unit: float) -> float:
    """Gripper opening [m] = opening_per_unit * sum of the `finger_joints` positions found in a JointState's
    (`names`, `positions`); ValueError names missing joints or non-finite values."""
    names = tuple(names)
    positions = np.asarray(positions, dtype=np.float64).reshape(-1)
    if positions.shape[0] != len(names):
        raise ValueError(f"joint state has {positions.shape[0]} positions for {len(names)} names")
    if not finger_joints:
        raise ValueError("no finger joints given")
    index = {name: i for i, name in enumerate(names)}
    missing = [joint for joint in finger_joints if joint not in index]
    if missing:
        raise ValueError(f"finger joints {missing} not in the joint state (it has {list(names)})")
    values = positions[[index[joint] for joint in finger_joints]]
    if not np.all(np.isfinite(values)):
        raise ValueError(f"finger joint positions must be finite, got {dict(zip(finger_joints, values.tolist()))}")
    opening = float(opening_per_unit) * float(values.sum())
    if not math.isfinite(opening):
        raise ValueError(f"gripper opening is not finite (opening_per_unit={opening_per_unit!r})")
    return opening


class TwistEstimator:
    """TCP twist from successive poses (for arms that publish no velocity): finite differences of the last two.

    `update` returns the current estimate (linear [m/s], angular [rad/s], a world-frame rotation vector rate), or None
    while there is none: after the first pose, and after a pose that follows a gap longer than `max_gap_s` (the
    estimate starts over). A pose whose stamp is not newer than the last one is ignored (the estimate is unchanged).
    """

    def __init__(self, max_gap_s: float = 1.0):
        if not (math.isfinite(max_gap_s) and max_gap_s > 0):
            raise ValueError(f"max_gap_s={max_gap_s!r} must be positive")
        self.max_gap_s = float(max_gap_s)
        self._last: tuple[float, np.ndarray, np.ndarray] | None = None
        self._twist: tuple[np.ndarray, np.ndarray] | None = None

    def reset(self) -> None:
        """Forget the poses (the next update returns None)."""
        self._last = self._twist = None

    def update(self, stamp: float, position, quat) -> tuple[np.ndarray, np.ndarray] | None:
        """Add a pose (position (3,), unit quaternion wxyz (4,)) stamped `stamp` seconds; ValueError if non-finite."""
        stamp = float(stamp)
        position = np.asarray(position, dtype=np.float64).reshape(3)
        quat = np.asarray(quat, dtype=np.float64).reshape(4)
        norm = float(np.linalg.norm(quat))
        if not (math.isfinite(stamp) and np.all(np.isfinite(position)) and math.isfinite(norm) and norm > 0):
            raise ValueError(f"pose must be finite with a non-zero quaternion, got stamp={stamp}, "
                             f"position={position.tolist()}, quat={quat.tolist()}")
        quat = quat / norm
        last = self._last
        if last is not None and stamp <= last[0]:
            return self._twist
        self._last = (stamp, position, quat)
        if last is None or stamp - last[0] > self.max_gap_s:
            self._twist = None
            return None
        dt = stamp - last[0]
        rotation = np.array(rotvec_from_quat(ScalarOps, quat_multiply(quat, quat_conjugate(last[2]))))
        self._twist = ((position - last[1]) / dt, rotation / dt)
        return self._twist
