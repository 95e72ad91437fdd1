"""The robot behind the sim node (robot_rl.sim.node), without ROS: `SimRobot` takes absolute TCP, joint and gripper
commands, steps the env one control step at a time and reports the robot's state and camera images; a command it
cannot apply raises `CommandError`; `rgb_to_encoding` converts its renders into the image encodings a robot file's
camera driver publishes (driver mode).
"""

from __future__ import annotations

import math

import numpy as np

RAW_ENCODINGS = ("rgb8", "bgr8", "rgba8", "bgra8", "mono8", "mono16")
"""Image encodings the sim renders into (driver mode)."""
COMPRESSED_FORMATS = ("jpeg", "png")
"""CompressedImage formats the sim encodes into (driver mode)."""
JOINT_LIMIT_TOLERANCE = 1e-3  # rad: a joint command this far outside a limit is still accepted (rounding)


class CommandError(ValueError):
    """A command cannot be applied (non-finite, malformed, wrong frame); the message says why."""


class SimRobot:
    """The env behind the node, without ROS: absolute-pose commands, one control step at a time, the robot's state.

    Steps go through the wrapped gym env (time limit included) with a zero Cartesian delta, so the target set by
    :meth:`set_target_pose` is what the controller tracks; the gripper part of the action is the stored target.
    """

    def __init__(self, task: str, obs_mode: str = "pixels", image_size: int = 64):
        import mujoco

        from robot_rl.sim.loop import make_env
        from robot_rl.sim import robot as robot_model

        self.env = make_env(task, obs_mode=obs_mode, image_size=image_size)
        self.base = self.env.unwrapped
        self.joint_names = tuple(robot_model.JOINT_NAMES)
        self.joint_limits = np.asarray(robot_model.JOINT_LIMITS, dtype=np.float64)
        self.max_opening = 2.0 * robot_model.FINGER_TRAVEL
        self.control_dt = float(self.base.control_dt)
        self._fk_data = mujoco.MjData(self.base.model)  # forward kinematics of joint commands, apart from the physics
        self._gripper_action = -1.0  # env convention: -1 open .. +1 closed
        self.obs: dict[str, np.ndarray] = {}
        self.reward = 0.0
        self.success = False
        self.terminated = False
        self.truncated = False
        self.episode = 0
        self.step_index = 0
        from robot_rl.sim.expert import make_expert

        self._expert = make_expert(self.env)

    # ----- episode ---------------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, *, episode: int | None = None) -> None:
        """A new episode (numbered `episode`, default the next one)."""
        self.obs, info = self.env.reset(seed=seed)
        self._gripper_action = float(self.base.gripper_command)
        self.reward, self.success = 0.0, bool(info.get("success", False))
        self.terminated = self.truncated = False
        self.episode = self.episode + 1 if episode is None else int(episode)
        self.step_index = 0

    def step(self) -> None:
        action = np.zeros(self.base.action_space.shape, dtype=np.float32)
        action[-1] = self._gripper_action
        self.obs, reward, terminated, truncated, info = self.env.step(action)
        self.reward, self.success = float(reward), bool(info.get("success", False))
        self.terminated, self.truncated = bool(terminated), bool(truncated)
        self.step_index += 1

    # ----- commands --------------------------------------------------------------------------------------------
    def set_target_pose(self, position, quaternion_wxyz) -> tuple[np.ndarray, np.ndarray]:
        """Clip an absolute TCP target into the workspace / rotation limits and hand it to the controller."""
        from robot_rl.sim.env import NOMINAL_TCP_QUAT

        position = np.asarray(position, dtype=np.float64).reshape(-1)
        quat = np.asarray(quaternion_wxyz, dtype=np.float64).reshape(-1)
        if position.shape != (3,) or quat.shape != (4,):
            raise CommandError(
                f"target pose needs position (3,) and quaternion (4,), got {position.shape}, {quat.shape}")
        if not (np.isfinite(position).all() and np.isfinite(quat).all()):
            raise CommandError(f"target pose is not finite: position {position.tolist()}, quaternion {quat.tolist()}")
        norm = float(np.linalg.norm(quat))
        if not 0.5 < norm < 1.5:
            raise CommandError(f"target orientation is not a unit quaternion (norm {norm:.4g})")
        quat = quat / norm
        if np.dot(quat, NOMINAL_TCP_QUAT) < 0:
            quat = -quat
        return self.base.set_target_pose(position, quat)

    def set_target_joints(self, positions) -> tuple[np.ndarray, np.ndarray]:
        """A joint-space target (the 7 arm joints, base to tip, [rad]) becomes the TCP target by forward kinematics
        of the sim's model, then is applied like :meth:`set_target_pose` (clipped). Returns the applied target."""
        q = np.asarray(positions, dtype=np.float64).reshape(-1)
        if q.shape != (len(self.joint_names),):
            raise CommandError(f"joint target needs {len(self.joint_names)} positions, got {q.shape[0]}")
        if not np.isfinite(q).all():
            raise CommandError(f"joint target is not finite: {q.tolist()}")
        low, high = self.joint_limits[:, 0], self.joint_limits[:, 1]
        outside = np.flatnonzero((q < low - JOINT_LIMIT_TOLERANCE) | (q > high + JOINT_LIMIT_TOLERANCE))
        if outside.size:
            i = int(outside[0])
            raise CommandError(f"{self.joint_names[i]} = {q[i]:.4g} rad is outside its limits "
                               f"[{low[i]:.4g}, {high[i]:.4g}]")
        return self.set_target_pose(*self.forward_kinematics(q))

    def forward_kinematics(self, positions) -> tuple[np.ndarray, np.ndarray]:
        """TCP (position [m], quaternion wxyz) of the 7 arm joint positions, by the sim's own model."""
        import mujoco

        from robot_rl.sim.env import NOMINAL_TCP_QUAT

        base, data = self.base, self._fk_data
        data.qpos[base._arm_qpos_adr] = np.asarray(positions, dtype=np.float64)
        mujoco.mj_kinematics(base.model, data)
        quat = np.empty(4)
        mujoco.mju_mat2Quat(quat, data.site_xmat[base._tcp_site_id])
        if np.dot(quat, NOMINAL_TCP_QUAT) < 0:
            quat = -quat
        return data.site_xpos[base._tcp_site_id].copy(), quat

    def set_gripper(self, opening: float) -> float:
        """Gripper target in [0 closed, 1 open] (clipped); applied from the next step on. Returns the clipped value."""
        try:
            opening = float(opening)
        except (TypeError, ValueError):
            raise CommandError(f"gripper command {opening!r} is not a number") from None
        if not math.isfinite(opening):
            raise CommandError(f"gripper command {opening!r} is not finite")
        opening = min(max(opening, 0.0), 1.0)
        self._gripper_action = 1.0 - 2.0 * opening
        return opening

    # ----- state -----------------------------------------------------------------------------------------------
    def joint_positions(self) -> np.ndarray:
        return self.base.data.qpos[self.base._arm_qpos_adr].copy()

    def joint_velocities(self) -> np.ndarray:
        return self.base.data.qvel[self.base._arm_dof_adr].copy()

    def finger_positions(self) -> np.ndarray:
        """Each finger's travel [m] (their sum is the opening)."""
        return self.base.data.qpos[self.base._finger_qpos_adr].copy()

    def finger_velocities(self) -> np.ndarray:
        return self.base.data.qvel[self.base._finger_dof_adr].copy()

    def tcp_pose(self) -> tuple[np.ndarray, np.ndarray]:
        return self.base.tcp_pose()

    def gripper_state(self) -> tuple[float, float, float]:
        """(opening [m], opening velocity [m/s], actuator force [N])."""
        base = self.base
        velocity = float(base.data.qvel[base._finger_dof_adr].sum())
        effort = float(base.data.actuator_force[base._gripper_actuator_id])
        return base.gripper_width(), velocity, effort

    def tcp_twist(self) -> tuple[np.ndarray, np.ndarray]:
        """(linear [m/s], angular [rad/s]) TCP velocity in the base frame, as in the env's proprio state."""
        state = self.obs["state"]
        return state[7:10].astype(np.float64), state[10:13].astype(np.float64)

    def object_state(self) -> np.ndarray:
        """Privileged task state (sim only)."""
        return np.asarray(self.base.object_state(), dtype=np.float32)

    def expert_action(self) -> np.ndarray:
        """The scripted expert's action for the current state (sim only: the scripted teleop's hands)."""
        return np.asarray(self._expert.act(), dtype=np.float32)

    def imminent_failure(self) -> str:
        """The failure the hand's current target is about to cause ('' for none; sim only: the scripted teleop's
        eyes)."""
        return self.base.imminent_failure(self.base.target_pose()[0]) or ""

    def image(self, camera: str) -> np.ndarray:
        return self.obs[f"images/{camera}"]

    def render(self, camera: str, width: int, height: int) -> np.ndarray:
        """`camera` (front | wrist) now, RGB uint8 (height, width, 3)."""
        return self.base.camera_image(camera, width, height)

    def close(self) -> None:
        self.env.close()


def rgb_to_encoding(rgb: np.ndarray, encoding: str) -> np.ndarray:
    """An RGB uint8 (H, W, 3) image in a sensor_msgs/Image `encoding` (one of RAW_ENCODINGS)."""
    import cv2

    conversions = {"bgr8": cv2.COLOR_RGB2BGR, "rgba8": cv2.COLOR_RGB2RGBA, "bgra8": cv2.COLOR_RGB2BGRA,
                   "mono8": cv2.COLOR_RGB2GRAY, "mono16": cv2.COLOR_RGB2GRAY}
    if encoding == "rgb8":
        return rgb
    if encoding not in conversions:
        raise ValueError(f"cannot render into image encoding {encoding!r}; supported: {', '.join(RAW_ENCODINGS)}")
    image = cv2.cvtColor(rgb, conversions[encoding])
    return image.astype(np.uint16) * 257 if encoding == "mono16" else image
