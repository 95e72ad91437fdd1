"""The safety layer every command to the robot goes through: workspace box, step limits, orientation limits,
NaN guard, stale-sensor watchdog and a latching e-stop. Pure Python/numpy, no ROS.

It is built around the *absolute* target it produces (what leaves the actor as a PoseStamped + gripper command):

- ``Safety.filter`` maps a policy action (a delta in [-1, 1]) to the next absolute end-effector target;
- ``Safety.filter_absolute`` validates an absolute command (teleop device, base policy) against the same limits;
- ``Safety.filter_batch`` / ``filter_absolute_batch`` do the same for N commands at once (numpy, no Python loop).

Frames and conventions: positions [m] and orientations in the robot base frame; quaternions are wxyz; an orientation
is described by its rotation vector ``r`` relative to the nominal (pointing-down) orientation in the world frame,
``q = exp(r) * nominal``, and rotation steps are world-frame rotation vectors ``q_next = exp(w) * q_current`` (the sim
env's action convention).

Guarantees for every command that is not held, given a current target inside the limits (up to floating-point
rounding, relative 1e-9): the target lies in the workspace box; its orientation vector lies in the orientation box;
the step from the current target is within ``max_translation`` / ``max_rotation`` (per axis or Euclidean norm, see
``SafetyConfig.step_bound``); the gripper command is in ``[gripper_low, gripper_high]``; every value is finite.
A held command repeats the current target and gripper exactly. If the *current* target is outside the limits (for
example a robot started outside the box), the step limits win: the target is brought back at most one step per call
(reason ``outside_workspace`` / ``outside_orientation_limits``) instead of jumping.

Reasons (``SafeCommand.reasons`` and ``Safety.counters``): holds -- ``estop:<why>``, ``stale:<sensor>``,
``non_finite_action`` (delta path), ``non_finite_command`` / ``invalid_quaternion`` (absolute path); clips --
``action_clipped`` (a component outside [-1, 1]), ``translation_step_limited``, ``rotation_step_limited``,
``workspace_clipped``, ``orientation_clipped``, ``gripper_clipped``, ``outside_workspace``,
``outside_orientation_limits``.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.core.rotations import ArrayOps, ScalarOps, quat_conjugate, quat_from_rotvec, quat_multiply, rotvec_from_quat

logger = logging.getLogger(__name__)

STEP_BOUNDS = ("per_axis", "norm")
ACTION_DIMS = (4, 7)
# Relative slack for the step-limit checks, so float rounding of `current + step` does not count as a violation.
_STEP_SLACK = 1e-9
_BISECTION_ITERATIONS = 24  # fraction of the orientation segment resolved to 6e-8
_QUAT_NORM_TOLERANCE = 1e-3


@dataclasses.dataclass(frozen=True)
class SafetyConfig:
    """Limits the safety layer enforces (SI units, robot base frame); defaults mirror the PickCube sim at 10 Hz."""

    workspace_low: tuple[float, float, float] = (0.35, -0.22, 0.015)
    workspace_high: tuple[float, float, float] = (0.65, 0.22, 0.30)
    max_translation: float = 0.03  # m per step
    max_rotation: float = 0.15  # rad per step
    # "per_axis": each component of the step is bounded (the action convention: component * max); "norm": the
    # Euclidean norm of the step (translation, and rotation angle) is bounded.
    step_bound: str = "per_axis"
    nominal_quat: tuple[float, float, float, float] = (0.0, 1.0, 0.0, 0.0)  # wxyz, TCP pointing down
    # Orientation box: rotation vector [rad] of the target relative to `nominal_quat` (world frame), per axis.
    rotation_low: tuple[float, float, float] = (-0.3, -0.3, -math.pi / 4)
    rotation_high: tuple[float, float, float] = (0.3, 0.3, math.pi / 4)
    gripper_low: float = -1.0  # -1 fully open
    gripper_high: float = 1.0  # +1 fully closed
    action_dim: int = 4  # 4: (dx, dy, dz, gripper); 7: (dx, dy, dz, drx, dry, drz, gripper)
    control_period: float = 0.1  # s
    stale_timeout: float = 0.2  # s: a required sensor older than this (or missing) holds the robot
    required_sensors: tuple[str, ...] = ()
    initial_gripper: float = -1.0  # the gripper a hold repeats before any command was issued

    def __post_init__(self) -> None:
        for name, size in (("workspace_low", 3), ("workspace_high", 3), ("rotation_low", 3),
                           ("rotation_high", 3), ("nominal_quat", 4)):
            value = tuple(float(v) for v in np.asarray(getattr(self, name), dtype=np.float64).reshape(-1))
            if len(value) != size or not all(math.isfinite(v) for v in value):
                raise ValueError(f"SafetyConfig.{name}={getattr(self, name)!r} must be {size} finite numbers")
            object.__setattr__(self, name, value)
        for name in ("max_translation", "max_rotation", "gripper_low", "gripper_high", "control_period",
                     "stale_timeout", "initial_gripper"):
            value = float(getattr(self, name))
            if not math.isfinite(value):
                raise ValueError(f"SafetyConfig.{name}={value!r} must be finite")
            object.__setattr__(self, name, value)
        object.__setattr__(self, "required_sensors", tuple(str(s) for s in self.required_sensors))
        if not all(lo < hi for lo, hi in zip(self.workspace_low, self.workspace_high)):
            raise ValueError(f"workspace_low {self.workspace_low} must be below workspace_high {self.workspace_high}")
        if not all(lo <= hi for lo, hi in zip(self.rotation_low, self.rotation_high)):
            raise ValueError(f"rotation_low {self.rotation_low} must not exceed rotation_high {self.rotation_high}")
        farthest = math.sqrt(sum(max(abs(lo), abs(hi)) ** 2 for lo, hi in zip(self.rotation_low, self.rotation_high)))
        if farthest >= math.pi:
            raise ValueError(f"orientation box reaches {farthest:.3f} rad from nominal; it must stay below pi "
                             "(rotation vectors wrap around beyond that)")
        if abs(math.sqrt(sum(v * v for v in self.nominal_quat)) - 1.0) > 1e-6:
            raise ValueError(f"nominal_quat {self.nominal_quat} must be a unit quaternion (wxyz)")
        if self.max_translation <= 0 or self.max_rotation <= 0:
            raise ValueError("max_translation and max_rotation must be positive")
        if self.step_bound not in STEP_BOUNDS:
            raise ValueError(f"step_bound={self.step_bound!r}; expected one of {STEP_BOUNDS}")
        if not -1.0 <= self.gripper_low < self.gripper_high <= 1.0:
            raise ValueError(f"gripper range [{self.gripper_low}, {self.gripper_high}] must be inside [-1, 1]")
        if not self.gripper_low <= self.initial_gripper <= self.gripper_high:
            raise ValueError(f"initial_gripper={self.initial_gripper} is outside the gripper range")
        if self.action_dim not in ACTION_DIMS:
            raise ValueError(f"action_dim={self.action_dim!r}; expected one of {ACTION_DIMS}")
        if self.control_period <= 0 or self.stale_timeout <= 0:
            raise ValueError("control_period and stale_timeout must be positive")


@dataclasses.dataclass(frozen=True, eq=False)
class SafeCommand:
    """The absolute command that may leave the actor: target pose, gripper in range, and why it was held/clipped."""

    target_position: np.ndarray  # (3,) float64, m
    target_quat: np.ndarray  # (4,) float64, wxyz
    gripper: float
    held: bool
    reasons: tuple[str, ...]


@dataclasses.dataclass(frozen=True, eq=False)
class SafeCommandBatch:
    """N safe commands; `reasons` maps each reason that occurred to a (N,) bool mask of the rows it applies to."""

    target_positions: np.ndarray  # (N, 3)
    target_quats: np.ndarray  # (N, 4)
    grippers: np.ndarray  # (N,)
    held: np.ndarray  # (N,) bool
    reasons: dict[str, np.ndarray]


# ----- component-wise math, shared by the scalar (per-call) and the numpy (batch) paths --------------------------
# Quaternions and vectors are tuples of components: Python floats on the per-call path (a few microseconds) or (N,)
# arrays on the batch path (robot_rl.core.rotations.ScalarOps / ArrayOps), so both paths run the very same formulas.

def _step_size(ops, step_bound: str, v):
    if step_bound == "per_axis":
        return ops.maximum(ops.maximum(ops.absolute(v[0]), ops.absolute(v[1])), ops.absolute(v[2]))
    return ops.sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2])


def _limit_vector(ops, step_bound: str, v, limit: float):
    """Bound a step vector: per axis, or scale it down to the limit norm. Returns (bounded, was_limited)."""
    x, y, z = v
    if step_bound == "per_axis":
        limited = (ops.absolute(x) > limit) | (ops.absolute(y) > limit) | (ops.absolute(z) > limit)
        return (ops.clip(x, -limit, limit), ops.clip(y, -limit, limit), ops.clip(z, -limit, limit)), limited
    norm = ops.sqrt(x * x + y * y + z * z)
    limited = norm > limit
    scale = ops.where(limited, limit / ops.where(limited, norm, 1.0), 1.0)
    return (x * scale, y * scale, z * scale), limited


def _outside(low, high, v, slack: float):
    return ((v[0] < low[0] - slack) | (v[0] > high[0] + slack) | (v[1] < low[1] - slack) | (v[1] > high[1] + slack)
            | (v[2] < low[2] - slack) | (v[2] > high[2] + slack))


def _constrain(ops, config: SafetyConfig, candidate_position, candidate_quat, current_position, current_quat,
               candidate_within_step: bool):
    """Clip a candidate absolute target into the limits and bound its step from the current target.

    `candidate_within_step`: the candidate is already one bounded step from the current target (the delta path), so
    only what the clipping moved needs the step check. Returns (position, quat, flags) with flags mapping
    reason -> bool (scalar path) or (N,) mask (batch path).
    """
    low, high = config.workspace_low, config.workspace_high
    max_translation, max_rotation, step_bound = config.max_translation, config.max_rotation, config.step_bound
    flags = {}

    # Position: project onto the box, then bound the step. Projection onto an interval that contains the current
    # target never lengthens the step, so the step bound only bites when the current target is outside the box.
    cx, cy, cz = candidate_position
    px, py, pz = current_position
    bx, by, bz = ops.clip(cx, low[0], high[0]), ops.clip(cy, low[1], high[1]), ops.clip(cz, low[2], high[2])
    flags["workspace_clipped"] = (bx != cx) | (by != cy) | (bz != cz)
    (sx, sy, sz), limited = _limit_vector(ops, step_bound, (bx - px, by - py, bz - pz),
                                          max_translation * (1 + _STEP_SLACK))
    if ops.any(limited):
        position = (ops.where(limited, px + sx, bx), ops.where(limited, py + sy, by), ops.where(limited, pz + sz, bz))
    else:
        position = (bx, by, bz)
    flags["translation_step_limited"] = limited
    flags["outside_workspace"] = _outside(low, high, current_position, 1e-9)

    # Orientation: clip the rotation vector from nominal into the orientation box; the box is convex in those
    # coordinates but angles between rotations are not Euclidean distances there, so a clipped target can land
    # slightly more than one step away: then walk the straight segment from the current orientation vector to the
    # clipped one (inside the box) and keep the farthest point that is verified to be within the step limit.
    nominal = config.nominal_quat
    nominal_conjugate = quat_conjugate(nominal)
    rlow, rhigh = config.rotation_low, config.rotation_high
    current_rotvec = rotvec_from_quat(ops, quat_multiply(current_quat, nominal_conjugate))
    rx, ry, rz = rotvec_from_quat(ops, quat_multiply(candidate_quat, nominal_conjugate))
    clipped_rotvec = (ops.clip(rx, rlow[0], rhigh[0]), ops.clip(ry, rlow[1], rhigh[1]),
                      ops.clip(rz, rlow[2], rhigh[2]))
    clipped = ((ops.absolute(clipped_rotvec[0] - rx) > 1e-12) | (ops.absolute(clipped_rotvec[1] - ry) > 1e-12)
               | (ops.absolute(clipped_rotvec[2] - rz) > 1e-12))
    flags["orientation_clipped"] = clipped
    flags["outside_orientation_limits"] = _outside(rlow, rhigh, current_rotvec, 1e-9)
    current_conjugate = quat_conjugate(current_quat)

    def orientation_at(rotvec):
        quat = quat_multiply(quat_from_rotvec(ops, rotvec), nominal)
        step_size = _step_size(ops, step_bound, rotvec_from_quat(ops, quat_multiply(quat, current_conjugate)))
        return quat, step_size

    if candidate_within_step and not ops.any(clipped):
        flags["rotation_step_limited"] = clipped  # all False
        return position, candidate_quat, flags
    quat, step_size = orientation_at(clipped_rotvec)
    if candidate_within_step:
        quat = tuple(ops.where(clipped, q, c) for q, c in zip(quat, candidate_quat))
        step_size = ops.where(clipped, step_size, 0.0)
    too_far = step_size > max_rotation * (1 + _STEP_SLACK)
    if ops.any(too_far):
        direction = tuple(c - r for c, r in zip(clipped_rotvec, current_rotvec))
        lowest, highest = 0.0 * step_size, 0.0 * step_size + 1.0  # fractions: verified-safe / known-too-far
        for _ in range(_BISECTION_ITERATIONS):
            middle = 0.5 * (lowest + highest)
            _, size = orientation_at(tuple(r + middle * d for r, d in zip(current_rotvec, direction)))
            ok = size <= max_rotation
            lowest, highest = ops.where(ok, middle, lowest), ops.where(ok, highest, middle)
        limited_quat, _ = orientation_at(tuple(r + lowest * d for r, d in zip(current_rotvec, direction)))
        quat = tuple(ops.where(too_far, lq, q) for lq, q in zip(limited_quat, quat))
    flags["rotation_step_limited"] = too_far
    return position, quat, flags


# ----- the layer ----------------------------------------------------------------------------------------------------

class Safety:
    """Maps policy actions / absolute commands to safe absolute targets; holds on NaN, stale sensors and e-stop."""

    def __init__(self, config: SafetyConfig = SafetyConfig()):
        self.config = config
        self.counters: collections.Counter[str] = collections.Counter()
        self._estop_reason: str | None = None
        self._last_gripper = config.initial_gripper
        self._warned: set[str] = set()

    # ----- e-stop -------------------------------------------------------------------------------------------------
    def engage_estop(self, reason: str = "requested") -> None:
        """Latch a hold of every command until `clear_estop()`; the first reason given is kept."""
        if self._estop_reason is None:
            self._estop_reason = str(reason)
            logger.warning("e-stop engaged (%s): holding the current target", reason)

    def clear_estop(self) -> None:
        if self._estop_reason is not None:
            logger.warning("e-stop cleared (was: %s)", self._estop_reason)
        self._estop_reason = None

    @property
    def estop_engaged(self) -> bool:
        return self._estop_reason is not None

    @property
    def last_gripper(self) -> float:
        """The gripper of the last command that was not held (what a hold repeats when no gripper is given)."""
        return self._last_gripper

    def reset_counters(self) -> None:
        self.counters.clear()

    def hold_reasons(self, now: float | None, sensor_stamps: Mapping[str, float] | None) -> tuple[str, ...]:
        """Reasons to hold regardless of the action: e-stop, and each required sensor that is stale or missing.

        A stamp further than the timeout in the *future* also counts as stale (the clocks disagree).
        """
        reasons = [] if self._estop_reason is None else [f"estop:{self._estop_reason}"]
        required = self.config.required_sensors
        if required:
            if now is None:
                raise ValueError(f"`now` is required to check the watched sensors {required}")
            stamps = sensor_stamps or {}
            timeout = self.config.stale_timeout
            for sensor in required:
                stamp = stamps.get(sensor)
                # `not <=` so that a NaN stamp is stale too
                if stamp is None or not abs(float(now) - float(stamp)) <= timeout:
                    reasons.append(f"stale:{sensor}")
        return tuple(reasons)

    # ----- per-call paths (pure-Python floats: a few microseconds) ------------------------------------------------
    def filter(self, action, current_target_position, current_target_quat, now: float | None = None,
               sensor_stamps: Mapping[str, float] | None = None, *,
               current_gripper: float | None = None) -> SafeCommand:
        """Policy action (delta in [-1, 1], shape (action_dim,)) -> the next safe absolute target."""
        config = self.config
        values = np.asarray(action, dtype=np.float64)
        if values.shape != (config.action_dim,):
            raise ValueError(f"action has shape {values.shape}; expected ({config.action_dim},)")
        values = values.tolist()
        position, quat = self._current_target(current_target_position, current_target_quat)
        hold = list(self.hold_reasons(now, sensor_stamps))
        if not all(math.isfinite(v) for v in values):
            hold.append("non_finite_action")
        if hold:
            return self._held(position, quat, current_gripper, tuple(hold))

        reasons = []
        if any(abs(v) > 1.0 for v in values):
            reasons.append("action_clipped")
            values = [min(max(v, -1.0), 1.0) for v in values]
        ops = ScalarOps
        translation, limited = _limit_vector(
            ops, config.step_bound, tuple(v * config.max_translation for v in values[:3]), config.max_translation)
        candidate_position = tuple(p + t for p, t in zip(position, translation))
        if limited:
            reasons.append("translation_step_limited")
        candidate_quat = quat
        if config.action_dim == 7:
            rotation, limited = _limit_vector(
                ops, config.step_bound, tuple(v * config.max_rotation for v in values[3:6]), config.max_rotation)
            candidate_quat = quat_multiply(quat_from_rotvec(ops, rotation), quat)
            if limited:
                reasons.append("rotation_step_limited")
        return self._finish(candidate_position, candidate_quat, values[-1], position, quat, reasons, True)

    def filter_absolute(self, target_position, target_quat, gripper: float, current_target_position,
                        current_target_quat, now: float | None = None,
                        sensor_stamps: Mapping[str, float] | None = None, *,
                        current_gripper: float | None = None) -> SafeCommand:
        """Absolute command (teleop, base policy) -> the same limits, with the step bounded from the current target."""
        target = np.asarray(target_position, dtype=np.float64)
        target_q = np.asarray(target_quat, dtype=np.float64)
        if target.shape != (3,) or target_q.shape != (4,):
            raise ValueError(f"target position/quat have shapes {target.shape}/{target_q.shape}; expected (3,)/(4,)")
        position, quat = self._current_target(current_target_position, current_target_quat)
        hold = list(self.hold_reasons(now, sensor_stamps))
        values = target.tolist() + target_q.tolist() + [float(gripper)]
        if not all(math.isfinite(v) for v in values):
            hold.append("non_finite_command")
        else:  # any non-zero quaternion names an orientation; divide by the largest component first (no overflow)
            largest = max(abs(v) for v in values[3:7])
            if largest == 0.0:
                hold.append("invalid_quaternion")
        if hold:
            return self._held(position, quat, current_gripper, tuple(hold))
        scaled = [v / largest for v in values[3:7]]
        norm = math.sqrt(sum(v * v for v in scaled))
        candidate_quat = tuple(v / norm for v in scaled)
        return self._finish(tuple(values[:3]), candidate_quat, values[7], position, quat, [], False)

    def _current_target(self, position, quat) -> tuple[tuple[float, ...], tuple[float, ...]]:
        position = np.asarray(position, dtype=np.float64)
        quat = np.asarray(quat, dtype=np.float64)
        if position.shape != (3,) or quat.shape != (4,):
            raise ValueError(f"current target position/quat have shapes {position.shape}/{quat.shape}; "
                             "expected (3,)/(4,)")
        position, quat = tuple(position.tolist()), tuple(quat.tolist())
        norm = math.sqrt(sum(v * v for v in quat))
        if not (all(math.isfinite(v) for v in position) and abs(norm - 1.0) <= _QUAT_NORM_TOLERANCE):
            raise ValueError(f"current target {position}, {quat} must be finite with a unit quaternion")
        return position, quat

    def _held(self, position, quat, current_gripper, reasons: tuple[str, ...]) -> SafeCommand:
        gripper = self._last_gripper if current_gripper is None else float(current_gripper)
        self._count(reasons, 1)
        self.counters["held"] += 1
        return SafeCommand(np.array(position), np.array(quat), gripper, True, reasons)

    def _finish(self, candidate_position, candidate_quat, gripper: float, position, quat, reasons,
                candidate_within_step: bool) -> SafeCommand:
        config = self.config
        target_position, target_quat, flags = _constrain(
            ScalarOps, config, candidate_position, candidate_quat, position, quat, candidate_within_step)
        reasons.extend(reason for reason, flagged in flags.items() if flagged and reason not in reasons)
        if not config.gripper_low <= gripper <= config.gripper_high:
            reasons.append("gripper_clipped")
            gripper = min(max(gripper, config.gripper_low), config.gripper_high)
        reasons = tuple(reasons)
        self._count(reasons, 1)
        self._last_gripper = gripper
        return SafeCommand(np.array(target_position), np.array(target_quat), gripper, False, reasons)

    def _count(self, reasons, count: int) -> None:
        self.counters["commands"] += count
        for reason in reasons:
            self.counters[reason] += count
            kind = reason.split(":", 1)[0]
            if kind in ("estop", "stale", "non_finite_action", "non_finite_command", "invalid_quaternion") \
                    and reason not in self._warned:
                self._warned.add(reason)
                logger.warning("safety hold: %s (logged once; see Safety.counters)", reason)

    # ----- batch paths (numpy, no Python loop over commands) ------------------------------------------------------
    def filter_batch(self, actions, current_target_positions, current_target_quats, now: float | None = None,
                     sensor_stamps: Mapping[str, float] | None = None, *,
                     current_grippers=None) -> SafeCommandBatch:
        """`filter` over N actions (N, action_dim) at once; current targets (N, 3)/(N, 4) or one (3,)/(4,) for all."""
        config = self.config
        actions = np.asarray(actions, dtype=np.float64)
        if actions.ndim != 2 or actions.shape[1] != config.action_dim:
            raise ValueError(f"actions have shape {actions.shape}; expected (N, {config.action_dim})")
        count = actions.shape[0]
        positions, quats, grippers = self._current_targets(
            current_target_positions, current_target_quats, current_grippers, count)
        finite = np.isfinite(actions).all(axis=1)
        clean = np.where(finite[:, None], actions, 0.0)
        reasons = {"action_clipped": (np.abs(clean) > 1.0).any(axis=1) & finite}
        clean = np.clip(clean, -1.0, 1.0)
        ops = ArrayOps
        translation, translation_limited = _limit_vector(
            ops, config.step_bound, tuple(clean[:, i] * config.max_translation for i in range(3)),
            config.max_translation)
        candidate_position = tuple(positions[:, i] + translation[i] for i in range(3))
        quat = tuple(quats[:, i] for i in range(4))
        candidate_quat = quat
        rotation_limited = np.zeros(count, dtype=bool)
        if config.action_dim == 7:
            rotation, rotation_limited = _limit_vector(
                ops, config.step_bound, tuple(clean[:, 3 + i] * config.max_rotation for i in range(3)),
                config.max_rotation)
            candidate_quat = quat_multiply(quat_from_rotvec(ops, rotation), quat)
        return self._finish_batch(candidate_position, candidate_quat, clean[:, -1], positions, quats, grippers,
                                  reasons, translation_limited, rotation_limited,
                                  invalid=("non_finite_action", ~finite), now=now, sensor_stamps=sensor_stamps,
                                  candidate_within_step=True)

    def filter_absolute_batch(self, target_positions, target_quats, grippers, current_target_positions,
                              current_target_quats, now: float | None = None,
                              sensor_stamps: Mapping[str, float] | None = None, *,
                              current_grippers=None) -> SafeCommandBatch:
        """`filter_absolute` over N commands: targets (N, 3), quats (N, 4), grippers (N,)."""
        targets = np.asarray(target_positions, dtype=np.float64)
        target_quats = np.asarray(target_quats, dtype=np.float64)
        commanded_grippers = np.asarray(grippers, dtype=np.float64)
        count = targets.shape[0] if targets.ndim == 2 else -1
        if targets.shape != (count, 3) or target_quats.shape != (count, 4) or commanded_grippers.shape != (count,):
            raise ValueError(f"targets/quats/grippers have shapes {targets.shape}/{target_quats.shape}/"
                             f"{commanded_grippers.shape}; expected (N, 3)/(N, 4)/(N,)")
        positions, quats, current = self._current_targets(
            current_target_positions, current_target_quats, current_grippers, count)
        finite = (np.isfinite(targets).all(axis=1) & np.isfinite(target_quats).all(axis=1)
                  & np.isfinite(commanded_grippers))
        largest = np.abs(np.where(finite[:, None], target_quats, 1.0)).max(axis=1)
        valid_quat = largest > 0.0
        usable = (finite & valid_quat)[:, None]
        target_quats = np.where(usable, target_quats / np.where(valid_quat, largest, 1.0)[:, None], quats)
        target_quats /= np.linalg.norm(target_quats, axis=1, keepdims=True)
        targets = np.where(finite[:, None], targets, positions)
        commanded_grippers = np.where(finite, commanded_grippers, 0.0)
        no = np.zeros(count, dtype=bool)
        return self._finish_batch(tuple(targets[:, i] for i in range(3)), tuple(target_quats[:, i] for i in range(4)),
                                  commanded_grippers, positions, quats, current, {}, no, no,
                                  invalid=("non_finite_command", ~finite),
                                  invalid_quaternion=finite & ~valid_quat, now=now, sensor_stamps=sensor_stamps,
                                  candidate_within_step=False)

    def _current_targets(self, positions, quats, grippers, count: int):
        positions = np.broadcast_to(np.asarray(positions, dtype=np.float64), (count, 3))
        quats = np.broadcast_to(np.asarray(quats, dtype=np.float64), (count, 4))
        gripper_values = self._last_gripper if grippers is None else grippers
        grippers = np.broadcast_to(np.asarray(gripper_values, dtype=np.float64), (count,))
        norms = np.linalg.norm(quats, axis=1)
        if not (np.isfinite(positions).all() and np.all(np.abs(norms - 1.0) <= _QUAT_NORM_TOLERANCE)):
            raise ValueError("current targets must be finite with unit quaternions")
        return positions, quats, grippers

    def _finish_batch(self, candidate_position, candidate_quat, commanded_grippers, positions, quats, grippers,
                      reasons, translation_limited, rotation_limited, *, invalid, now, sensor_stamps,
                      candidate_within_step: bool, invalid_quaternion=None) -> SafeCommandBatch:
        config = self.config
        count = positions.shape[0]
        target_position, target_quat, flags = _constrain(
            ArrayOps, config, candidate_position, candidate_quat,
            tuple(positions[:, i] for i in range(3)), tuple(quats[:, i] for i in range(4)), candidate_within_step)
        flags["translation_step_limited"] = flags["translation_step_limited"] | translation_limited
        flags["rotation_step_limited"] = flags["rotation_step_limited"] | rotation_limited
        reasons.update(flags)
        reasons["gripper_clipped"] = ((commanded_grippers < config.gripper_low)
                                      | (commanded_grippers > config.gripper_high))
        clipped_grippers = np.clip(commanded_grippers, config.gripper_low, config.gripper_high)

        invalid_name, invalid_rows = invalid
        held = invalid_rows.copy()
        if invalid_quaternion is not None:
            held |= invalid_quaternion
        global_hold = self.hold_reasons(now, sensor_stamps)
        if global_hold:
            held[:] = True
        for reason, mask in reasons.items():  # a held row was not clipped: it was not commanded at all
            reasons[reason] = mask & ~held
        reasons[invalid_name] = invalid_rows
        if invalid_quaternion is not None:
            reasons["invalid_quaternion"] = invalid_quaternion
        for reason in global_hold:
            reasons[reason] = np.ones(count, dtype=bool)

        out_positions = np.where(held[:, None], positions, np.stack(target_position, axis=1))
        out_quats = np.where(held[:, None], quats, np.stack(target_quat, axis=1))
        out_grippers = np.where(held, grippers, clipped_grippers)
        reasons = {name: mask for name, mask in reasons.items() if mask.any()}
        self.counters["commands"] += count
        self.counters["held"] += int(held.sum())
        for reason, mask in reasons.items():
            self.counters[reason] += int(mask.sum())
        return SafeCommandBatch(out_positions, out_quats, out_grippers, held, reasons)


# ----- the sim env --------------------------------------------------------------------------------------------------

def sim_safety_config(env: gym.Env, **overrides: Any) -> SafetyConfig:
    """A `SafetyConfig` with the limits of a robot_rl sim env (workspace, step limits, orientation box, action size)."""
    base = env.unwrapped
    values = dict(
        workspace_low=tuple(base.workspace_low), workspace_high=tuple(base.workspace_high),
        max_translation=base.max_translation, max_rotation=base.max_rotation,
        rotation_low=tuple(base.rotation_low), rotation_high=tuple(base.rotation_high),
        action_dim=int(base.action_space.shape[0]), control_period=float(base.control_dt),
        stale_timeout=2.0 * float(base.control_dt))
    values.update(overrides)
    return SafetyConfig(**values)


def check_sim_env(env: gym.Env, user: str) -> None:
    """TypeError unless `env` is a robot_rl sim env (a controller target that safe commands can move)."""
    base = env.unwrapped
    for attribute in ("target_pose", "gripper_command", "max_translation", "max_rotation"):
        if not hasattr(base, attribute):
            raise TypeError(f"{user} needs a robot_rl sim env ({type(base).__name__} lacks {attribute!r})")


def sim_env_action(env: gym.Env, command: SafeCommand, position, quat) -> np.ndarray:
    """The sim env's delta action that moves its controller target from (`position`, `quat`) to `command`'s target
    (and sets its gripper); the env reproduces the target up to float32 rounding of the action."""
    base = env.unwrapped
    parts = [(command.target_position - np.asarray(position, dtype=np.float64)) / base.max_translation]
    if env.action_space.shape[0] == 7:
        step = quat_multiply(tuple(command.target_quat), quat_conjugate(tuple(np.asarray(quat, np.float64))))
        parts.append(np.array(rotvec_from_quat(ScalarOps, step)) / base.max_rotation)
    parts.append([command.gripper])
    # The clip only matters if the safety limits are looser than the env's own (the env would clip anyway).
    return np.clip(np.concatenate(parts), -1.0, 1.0).astype(np.float32)
