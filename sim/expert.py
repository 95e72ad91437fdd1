"""Scripted experts for the MuJoCo tasks, driven by privileged simulator state (so they work in any obs mode).

Each expert is a stateless function of the current simulator state (plus its noise generator): started from any
mid-episode state it simply continues, which is what demos and human-like interventions need.
"""

from __future__ import annotations

import numpy as np

from robot_rl.sim.env import NOMINAL_TCP_QUAT, RobotEnv, _quat_conj, _quat_mul, _rotvec_from_quat
from robot_rl.sim.robot_adapter import commanded_target_pose
from robot_rl.sim.tasks import PegInsertEnv, PickCubeEnv


class ScriptedExpert:
    """Base expert: turns a desired target position (and gripper command) into a valid action in [-1, 1]."""

    def __init__(self, env: RobotEnv, noise: float = 0.0, seed: int | None = None, wrapped=None):
        if not np.isfinite(noise) or noise < 0:
            raise ValueError(f"noise={noise!r} must be a finite, non-negative action std")
        self.env = env
        self.wrapped = env if wrapped is None else wrapped
        """The env as the robot runs it (a perturbation wrapper may hold commands back: see `target`)."""
        self.noise = float(noise)
        self._seed = seed
        self.rng = np.random.default_rng(seed)

    def reset(self) -> None:
        """Restart the noise stream (the expert logic itself keeps no episode state)."""
        self.rng = np.random.default_rng(self._seed)

    def act(self, obs=None) -> np.ndarray:
        """Action for the env's current state (`obs` is accepted for API symmetry and not used)."""
        goal_target, gripper, yaw = self._plan()
        env = self.env
        target_position, target_quat = self.target()
        translation = np.clip((goal_target - target_position) / env.max_translation, -1.0, 1.0)
        parts = [translation]
        if env.control_rotation:
            parts.append(self._rotation_action(target_quat, yaw))
        parts.append([gripper])
        action = np.concatenate(parts)
        if self.noise > 0:
            action = action + self.rng.normal(0.0, self.noise, size=action.shape)
        return np.clip(action, -1.0, 1.0).astype(np.float32)

    def target(self) -> tuple[np.ndarray, np.ndarray]:
        """The target the expert's next step starts from: its last command's (under action latency the controller's
        own target still lags it), as a policy's step starts from its last command on a robot."""
        return commanded_target_pose(self.wrapped)

    def _rotation_action(self, target_quat: np.ndarray, yaw: float) -> np.ndarray:
        """Rotate the target towards the nominal orientation turned by `yaw` about world z."""
        desired = _quat_mul(np.array([np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]), NOMINAL_TCP_QUAT)
        error = _rotvec_from_quat(_quat_mul(desired, _quat_conj(target_quat)))
        return np.clip(error / self.env.max_rotation, -1.0, 1.0)

    def _plan(self) -> tuple[np.ndarray, float, float]:
        """(goal target position, gripper command, goal yaw) for the current state."""
        raise NotImplementedError


class PickCubeExpert(ScriptedExpert):
    """Hover above the cube, descend open, close, lift; re-approach whenever the grasp is lost."""

    HOVER_ABOVE = 0.08
    ALIGN_TOLERANCE = 0.01

    def _plan(self):
        env: PickCubeEnv = self.env
        cube_position, cube_quat = env.cube_pose()
        tcp = env.tcp_pose()[0]
        width = env.gripper_width()
        cube_size = 2 * env.CUBE_HALF_SIZE
        cube_yaw = 2 * np.arctan2(cube_quat[3], cube_quat[0])
        yaw = float((cube_yaw + np.pi / 4) % (np.pi / 2) - np.pi / 4) if env.control_rotation else 0.0
        grasp_z = max(cube_position[2], env.workspace_low[2])
        hover_z = cube_position[2] + self.HOVER_ABOVE
        xy_error = np.linalg.norm(cube_position[:2] - tcp[:2])
        cube_between_pads = xy_error < 0.015 and abs(tcp[2] - cube_position[2]) < 0.02
        grasped = cube_between_pads and env.gripper_command > 0 and 0.6 * cube_size < width < 1.5 * cube_size
        if grasped:
            lift_z = env.CUBE_HALF_SIZE + env.LIFT_HEIGHT + 0.04
            return np.array([tcp[0], tcp[1], lift_z]), 1.0, yaw
        if xy_error > self.ALIGN_TOLERANCE:
            if tcp[2] < cube_position[2] + 0.05 and xy_error > 0.02:
                # Too low to move sideways without hitting the cube: rise first.
                return np.array([tcp[0], tcp[1], hover_z]), -1.0, yaw
            return np.array([cube_position[0], cube_position[1], max(hover_z, min(tcp[2], hover_z + 0.1))]), -1.0, yaw
        goal = np.array([cube_position[0], cube_position[1], grasp_z])
        at_grasp_height = tcp[2] < grasp_z + 0.008
        if not at_grasp_height:
            return goal, -1.0, yaw
        if env.gripper_command > 0 and width < 0.6 * cube_size:
            # Closed on nothing: open and try again.
            return goal, -1.0, yaw
        return goal, 1.0, yaw


class PegInsertExpert(ScriptedExpert):
    """Align the peg tip over the hole, descend, and push in while correcting the tip's lateral error."""

    APPROACH_ABOVE = 0.012
    ALIGN_TOLERANCE = 0.0007

    def _plan(self):
        env: PegInsertEnv = self.env
        tip = env.peg_tip()
        hole = env.hole_top()
        # Corrections of the tip's observed error start from the controller's target, which the tip follows; the
        # moves still on their way (action latency) are in the last command, which `act` steps from.
        target = env.target_pose()[0]
        lateral = hole[:2] - tip[:2]
        lateral_error = float(np.linalg.norm(lateral))
        height = tip[2] - hole[2]
        goal = target.copy()
        goal[:2] += lateral
        inside = height < 0.0 and np.all(np.abs(lateral) < env.PEG_HALF_WIDTH + env.CLEARANCE / 2)
        over_the_mouth = np.all(np.abs(lateral) < env.CLEARANCE / 2)  # within the play: it goes in from here
        if inside:
            goal[2] = target[2] - 0.012
        elif height < 0.002 and not over_the_mouth:
            # Tip beside the hole at or below its top: lift clear before moving sideways.
            goal[:2] = target[:2]
            goal[2] = target[2] + (self.APPROACH_ABOVE - height)
        elif lateral_error > self.ALIGN_TOLERANCE:
            goal[2] = target[2] + (self.APPROACH_ABOVE - height) if lateral_error > 0.004 else target[2]
        else:
            goal[2] = target[2] - min(0.012, height + 0.01)
        return goal, 1.0, 0.0


def make_expert(env, noise: float = 0.0, seed: int | None = None) -> ScriptedExpert:
    """Scripted expert for a robot_rl sim env (wrapped or not); `noise` is the std of Gaussian action noise."""
    base = env.unwrapped
    if isinstance(base, PickCubeEnv):
        return PickCubeExpert(base, noise=noise, seed=seed, wrapped=env)
    if isinstance(base, PegInsertEnv):
        return PegInsertExpert(base, noise=noise, seed=seed, wrapped=env)
    raise TypeError(f"no scripted expert for {type(base).__name__}; expected PickCubeEnv or PegInsertEnv")
