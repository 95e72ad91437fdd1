"""Teleop twist <-> policy action mapping: the pure conversion between a human's TCP velocity command and the
env / policy action, shared by the actor node (a teleop twist in) and the scripted teleop node (an expert action out).
"""

from __future__ import annotations

import math

import numpy as np


def vector3(values, what: str) -> np.ndarray:
    """`values` as a read-only float64 vector of 3 entries (ValueError naming `what` otherwise)."""
    vector = np.array(values, dtype=np.float64).reshape(-1)
    if vector.shape != (3,):
        raise ValueError(f"{what} must have 3 entries, got shape {vector.shape}")
    vector.setflags(write=False)
    return vector


def twist_to_action(linear, angular, gripper_opening: float, *, control_dt: float, max_translation: float,
                    max_rotation: float, action_dim: int) -> np.ndarray:
    """Human command -> env / policy action in [-1, 1] (float32).

    action_dim 4: ``(dx, dy, dz, gripper)``; 7: ``(dx, dy, dz, drx, dry, drz, gripper)``. A translation entry is the
    distance moved in one control step over ``max_translation`` (rotation likewise over ``max_rotation``); the
    gripper entry is ``1 - 2 * opening`` (env convention: -1 open .. +1 closed). Raises ValueError on non-finite input.
    """
    if action_dim not in (4, 7):
        raise ValueError(f"action_dim={action_dim!r} must be 4 (dx, dy, dz, gripper) or 7 (with drx, dry, drz)")
    for name, value in (("control_dt", control_dt), ("max_translation", max_translation),
                        ("max_rotation", max_rotation)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name}={value!r} must be a finite number > 0")
    linear, angular = vector3(linear, "linear velocity"), vector3(angular, "angular velocity")
    opening = float(gripper_opening)
    if not (np.isfinite(linear).all() and np.isfinite(angular).all() and math.isfinite(opening)):
        raise ValueError(f"teleop command is not finite: linear {linear.tolist()}, angular {angular.tolist()}, "
                         f"gripper {opening!r}")
    parts = [linear * control_dt / max_translation]
    if action_dim == 7:
        parts.append(angular * control_dt / max_rotation)
    parts.append([1.0 - 2.0 * min(max(opening, 0.0), 1.0)])
    return np.clip(np.concatenate(parts), -1.0, 1.0).astype(np.float32)


def action_to_twist(action, *, control_dt: float, max_translation: float,
                    max_rotation: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Env / policy action (4 or 7 entries, clipped to [-1, 1]) -> (linear [m/s], angular [rad/s], gripper opening).

    The inverse of :func:`twist_to_action` on [-1, 1]; a 4-entry action has zero angular velocity.
    """
    action = np.asarray(action, dtype=np.float64).reshape(-1)
    if action.shape[0] not in (4, 7):
        raise ValueError(f"action must have 4 or 7 entries, got {action.shape[0]}")
    if not np.isfinite(action).all():
        raise ValueError(f"action is not finite: {action.tolist()}")
    for name, value in (("control_dt", control_dt), ("max_translation", max_translation),
                        ("max_rotation", max_rotation)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name}={value!r} must be a finite number > 0")
    action = np.clip(action, -1.0, 1.0)
    linear = action[:3] * max_translation / control_dt
    angular = action[3:6] * max_rotation / control_dt if action.shape[0] == 7 else np.zeros(3)
    opening = float((1.0 - action[-1]) / 2.0)
    return linear, angular, opening
