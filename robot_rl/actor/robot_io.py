"""A robot file's sensors and commands without ROS: decoded readings -> frames and observations, safe commands ->
what each command interface is sent.

:class:`RobotSensors` takes what a driver reports (a TCP pose or joint states through the arm's forward kinematics, a
measured or derived twist, the gripper from its own state or from finger joints, camera images, the sim's object
state) and gives the episode runner (robot_rl.actor.runner) the newest frame and the observation at the policy's image
size. :class:`DriverLink` adds the commands: a safe absolute command becomes the gripper's and the arm's messages'
contents (a pose, or joints by differential IK from the last commanded joints). The ROS actor node only decodes
and publishes.
"""

from __future__ import annotations

import math

import numpy as np

from robot_rl.actor.robot_config import RobotConfig
from robot_rl.actor.safety import SafeCommand
from robot_rl.actor.sensors import MissingSensors, SensorCache, TwistEstimator, finger_opening, sensors_for

DEFAULT_IMAGE_SIZE = 64  # the record / train default; a policy's own observation spec wins


def observed_sensors(robot: RobotConfig, obs_mode: str, observation_keys) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(observation keys, the sensors they need) of an actor: `obs_mode` (state | pixels | state+pixels: the state,
    the object state unless pixels only, every camera of the robot with pixels), else the keys given; ValueError
    names a key without a sensor or a camera the robot does not have."""
    if obs_mode:
        keys = ("state", *(("object_state",) if obs_mode != "pixels" else ()),
                *((f"images/{c}" for c in robot.camera_names) if "pixels" in obs_mode else ()))
    else:
        keys = tuple(str(k) for k in observation_keys)
    try:
        required = sensors_for(keys)
    except ValueError as error:
        raise ValueError(f"observation_keys: {error}") from None
    for sensor in required:
        if sensor.startswith("camera/") and sensor[len("camera/"):] not in robot.camera_names:
            raise ValueError(f"observation key images/{sensor[len('camera/'):]}: robot {robot.name} ({robot.path}) "
                             f"has no such camera (cameras: {list(robot.camera_names)})")
    return keys, required


class RobotSensors:
    """The newest readings of a robot file's sensors, assembled into observations (see the module doc).

    `lockstep`: frames carry the sim's wall-clock stamps and one frame is one control period (a derived twist uses
    that clock), and a frame is complete when every sensor carries one stamp.
    """

    def __init__(self, robot: RobotConfig, observation_keys, required: tuple[str, ...], *, max_age_s: float,
                 lockstep: bool, control_dt: float, image_size: int = 0, kinematics=None):
        self.robot = robot
        self.required = required
        self.lockstep = lockstep
        self.control_dt = control_dt
        self.image_size = image_size
        self.kinematics = kinematics
        self.cache = SensorCache(observation_keys, max_age_s=max_age_s)
        self.twist_estimator = TwistEstimator() if robot.arm.twist == "derived" else None
        self.joint_positions: np.ndarray | None = None  # measured arm joints, robot.arm.joint_names order
        self.policy_image_sizes: dict[str, int] = {}
        self.topics: dict[str, str] = {}  # sensor -> topic, for log lines
        self._image_transforms: dict[tuple[str, int], object] = {}
        self._last_pose_stamp, self._lockstep_clock = -math.inf, 0.0
        self._pending_object_state: np.ndarray | None = None

    # ----- readings ----------------------------------------------------------------------------------------------
    def image(self, sensor: str, rgb: np.ndarray, stamp: float) -> None:
        self.cache.update(sensor, rgb, stamp)

    def check_frame(self, frame_id: str) -> None:
        """ValueError unless a pose's frame is the robot's base frame (or unnamed)."""
        if frame_id not in ("", self.robot.base_frame):
            raise ValueError(f"pose in frame {frame_id!r}, expected the robot's base frame {self.robot.base_frame!r} "
                             "(frames.base in the robot file)")

    def set_tcp_pose(self, position, quat, stamp: float, twist=None) -> None:
        """A new TCP pose (measured, or forward kinematics of the joints); a derived twist follows it (`twist` from
        joint velocities when given, else finite differences of successive poses)."""
        self.cache.update("tcp_pose", (np.asarray(position, np.float64), np.asarray(quat, np.float64)), stamp)
        if self.twist_estimator is not None:
            clock = stamp
            if self.lockstep:  # frames carry the sim's wall-clock stamps: one frame is one control period
                if stamp != self._last_pose_stamp:
                    self._lockstep_clock += self.control_dt
                clock = self._lockstep_clock
            self._last_pose_stamp = stamp
            estimate = self.twist_estimator.update(clock, position, quat)
            twist = twist if twist is not None else estimate
            self.cache.update("tcp_twist", twist if twist is not None else (np.zeros(3), np.zeros(3)), stamp)

    def tcp_twist(self, linear, angular, stamp: float) -> None:
        self.cache.update("tcp_twist", (linear, angular), stamp)

    def gripper(self, positions, stamp: float) -> None:
        """The gripper's own JointState positions; ValueError unless it is one finite position."""
        positions = np.asarray(positions, dtype=np.float64)
        if positions.shape != (1,) or not np.isfinite(positions[0]):
            raise ValueError(f"gripper state needs one finite position, got {positions.tolist()}")
        self.cache.update("gripper", float(positions[0]), stamp)

    def joint_states(self, state) -> bool:
        """Arm joints -> TCP pose by forward kinematics (arm.state joint_states; also the IK seed for joint
        commands); finger joints -> gripper opening (gripper.state joint_states). Drivers may split the joints over
        several messages on one topic: each message is used for what it has. Returns whether it completed a frame
        (the arm's state); ValueError when it has nothing usable."""
        names = state.names
        arm, gripper, used = self.robot.arm, self.robot.gripper, False
        frame = False
        if self.kinematics is not None and all(name in names for name in arm.joint_names):
            index = [names.index(name) for name in arm.joint_names]
            q = np.asarray(state.positions, dtype=np.float64)[index]
            if not np.isfinite(q).all():
                raise ValueError(f"arm joint positions are not finite: {q.tolist()}")
            self.joint_positions, used = q.copy(), True
            if arm.state == "joint_states":
                position, quat = self.kinematics.forward(q)
                self.set_tcp_pose(position, quat, state.stamp, twist=self._joint_twist(q, state, index))
                frame = True
        if gripper.state == "joint_states" and all(name in names for name in gripper.finger_joints):
            opening = gripper.opening_offset + finger_opening(names, state.positions, gripper.finger_joints,
                                                              gripper.opening_per_unit)
            self.cache.update("gripper", opening, state.stamp)
            used = True
        if not used:
            wanted = [*(arm.joint_names if self.kinematics is not None else ()),
                      *(gripper.finger_joints if gripper.state == "joint_states" else ())]
            raise ValueError(f"none of the robot file's joints {wanted} (all of the arm's or all fingers) in a "
                             f"JointState with {list(names)}")
        return frame

    def _joint_twist(self, q: np.ndarray, state, index: list[int]) -> tuple[np.ndarray, np.ndarray] | None:
        """The derived TCP twist J(q) qdot where the JointState carries finite velocities of every arm joint (exact
        and instantaneous, like a measured twist); None otherwise (finite differences of poses then)."""
        if self.twist_estimator is None or len(state.velocities) != len(state.names):
            return None
        qdot = np.asarray(state.velocities, dtype=np.float64)[index]
        return self.kinematics.twist(q, qdot) if np.isfinite(qdot).all() else None

    def object_state(self, values: np.ndarray) -> None:
        """The sim's object state: it has no header and belongs to the frame whose arm state follows it."""
        self._pending_object_state = np.array(values, copy=True)

    # ----- the runner's view (robot_rl.actor.runner.RobotLink) --------------------------------------------------------
    def frame_stamp(self) -> float | None:
        """Stamp of the newest complete sensor frame (lock-step: every required sensor carries the same stamp)."""
        stamp = self.cache.stamp("tcp_pose")
        if stamp is None:
            return None
        if self.lockstep:
            for sensor in self.required:
                if sensor != "object_state" and self.cache.stamp(sensor) != stamp:
                    return None
        return stamp

    def pose_stamp(self) -> float | None:
        return self.cache.stamp("tcp_pose")

    def sensor_stamps(self) -> dict[str, float]:
        return self.cache.stamps()

    def tcp_pose(self) -> tuple[np.ndarray, np.ndarray] | None:
        return self.cache.tcp_pose()

    def reset_begun(self) -> None:
        if self.twist_estimator is not None:  # no finite difference across the reset's jump
            self.twist_estimator.reset()

    def observation(self, now: float) -> tuple[dict[str, np.ndarray] | None, tuple[str, ...]]:
        pending = self._pending_object_state
        if "object_state" in self.required and pending is not None:
            self.cache.update("object_state", pending, self.cache.stamp("tcp_pose"))
        try:
            obs = self.cache.observation(now)
        except MissingSensors as missing:
            return None, missing.reasons
        for key in obs:
            if key.startswith("images/"):
                try:
                    obs[key] = self.image_transform(key)(obs[key])
                except ValueError as error:  # vision.ImageError: e.g. a region of interest outside the frame
                    return None, (f"image:{key[len('images/'):]}: {error}",)
        return obs, ()

    def image_transform(self, key: str):
        """The camera's transform to the policy's image size (the policy's spec; `image_size`; 64)."""
        from robot_rl.core.vision import ImageTransform

        size = self.policy_image_sizes.get(key) or self.image_size or DEFAULT_IMAGE_SIZE
        transform = self._image_transforms.get((key, size))
        if transform is None:
            transform = ImageTransform.from_camera(self.robot.camera(key[len("images/"):]), size)
            self._image_transforms[(key, size)] = transform
        return transform

    def missing_sensors_text(self) -> str:
        stamps = self.cache.stamps()
        return "; ".join(f"{sensor} {'never received' if sensor not in stamps else f'stamp {stamps[sensor]:.3f}'} "
                         f"from {self.topics.get(sensor) or self.topics.get('joint_states', '?')}"
                         for sensor in self.required if sensor != "object_state")


class DriverLink(RobotSensors):
    """A robot reached through its drivers as the episode runner's `robot_rl.actor.runner.RobotLink`: the readings of
    `RobotSensors`, and each safe command sent in the robot file's command interfaces through the `publish_*`
    callbacks (the gripper first, then the arm: a pose, or joints by differential IK from the last commanded ones)."""

    def __init__(self, robot: RobotConfig, observation_keys, required: tuple[str, ...], *, now, publish_gripper,
                 publish_arm, announce, reset_service=None, **sensor_settings):
        super().__init__(robot, observation_keys, required, **sensor_settings)
        self.now = now
        self.publish_gripper, self.publish_arm, self.announce = publish_gripper, publish_arm, announce
        self.reset_service = reset_service
        self.time_from_start = robot.command.time_from_start_s or self.control_dt  # of joint trajectory points
        self._ik_seed: np.ndarray | None = None  # the last commanded joints (joint_trajectory commands)

    def start_gripper(self) -> float | None:
        return None  # the safety layer's initial gripper

    def episode_started(self, episode: int) -> None:
        self._ik_seed = None  # joint commands start from the measured joints
        self.announce(episode)

    def send(self, command: SafeCommand, stamp: float | None):
        """Publish the gripper's command (its opening in [0 closed, 1 open] for a Float64 command, else each command
        joint's position), then the arm's (a pose, or the joints reaching it); waits while joints are unknown."""
        opening = float((1.0 - command.gripper) / 2.0)
        gripper = self.robot.gripper
        if gripper.command == "Float64":
            self.publish_gripper(opening)
        else:
            per_joint = ((opening * gripper.max_opening - gripper.opening_offset) / len(gripper.command_joints)
                         / gripper.opening_per_unit)
            self.publish_gripper(np.full(len(gripper.command_joints), per_joint))
        if self.robot.command.interface == "pose":
            self.publish_arm(command.target_position, command.target_quat)
            return None
        seed = self._ik_seed if self._ik_seed is not None else self.joint_positions
        if seed is None:
            return ("joint_states", f"for arm joints ({self.robot.arm.joint_names[0]}, ...) on "
                    f"{self.topics.get('joint_states')}: a joint command needs them")
        self._ik_seed = np.asarray(self.kinematics.solve(seed, command.target_position, command.target_quat),
                                   dtype=np.float64)
        self.publish_arm(self._ik_seed)
        return None
