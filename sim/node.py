"""The sim node: the MuJoCo mirror behind the same ROS 2 topics, types, frames and commands as the real robot drivers.

Run::

    python -m robot_rl.sim.node --task PickCube-v0 --mode lockstep --obs-mode pixels --image-size 128 --seed 0 \
        [--ros-args -r __ns:=/robot1 -p seed:=3]

Every name is relative, so a namespace remap moves the whole node. Topics (names and QoS from robot_rl.ros.qos):

======================  =========================  ===  ==========================================================
name                    type                       dir  content
======================  =========================  ===  ==========================================================
camera/front/image_raw  sensor_msgs/Image          out  rgb8 (S, S, 3), frame ``front_camera`` (not with obs_mode state)
camera/wrist/image_raw  sensor_msgs/Image          out  rgb8 (S, S, 3), frame ``wrist_camera``
joint_states            sensor_msgs/JointState     out  joint1..joint7: position [rad], velocity [rad/s]
tcp_pose                geometry_msgs/PoseStamped  out  TCP in frame ``base``
tcp_twist               geometry_msgs/TwistStamped out  TCP linear [m/s] / angular [rad/s] velocity, frame ``base``
sim/object_state        std_msgs/Float32MultiArray out  privileged task state (sim only; for state-based sim runs)
sim/expert_action       std_msgs/Float32MultiArray out  scripted expert's action now (sim only; scripted teleop)
gripper/state           sensor_msgs/JointState     out  joint ``gripper``: opening [m], velocity [m/s], force [N]
task/reward             std_msgs/Float32           out  the task's per-step reward (1.0 on success)
task/success            std_msgs/Bool              out  the task's success flag of the same step
command/target_pose     geometry_msgs/PoseStamped  in   absolute TCP target, frame ``base`` (or empty)
command/gripper         std_msgs/Float64           in   gripper target in [0 closed, 1 open]
======================  =========================  ===  ==========================================================

Service ``reset`` (std_srvs/Trigger): resets the episode and publishes the new observation.

All sensor messages of one control step carry the same header stamp (the node clock after the step);
``tcp_pose`` is published last. The task stream is std_msgs (no bytes payload): ``task/reward`` then ``task/success``,
once per step (not after a reset).

Modes (parameter ``mode``):

- ``realtime``: a timer steps the physics at the control rate (1 / control_dt = 10 Hz) and publishes after each step;
  commands only move the controller target.
- ``lockstep``: each message on ``command/target_pose`` advances exactly one control step, then the node publishes
  (deterministic for tests). ``command/gripper`` only stores the gripper target, applied at the next step: send it
  before the pose. A rejected pose still advances one step holding the previous target, so a lock-step client always
  gets its step.

Commands are applied to the env's controller target: the position is clipped into the env's workspace box, the
orientation into its rotation limits around the nominal pointing-down orientation. A NaN / non-unit / wrongly framed
command is rejected with one log line (throttled) and the last target is held; the node never crashes on a command.

Parameters (:data:`PARAMETERS`): ``task``, ``obs_mode`` (pixels | state+pixels | state), ``image_size``, ``mode``
(realtime | lockstep), ``seed`` (>= 0: used by the node's start-up reset and by the first reset after each change of
the parameter; other resets continue the env's random stream, so a run is reproducible; -1: unseeded). ``task``,
``obs_mode``, ``image_size`` and ``mode`` are read at start-up. An unknown parameter or an invalid value is one log
line and exit status 2.

SIGINT / SIGTERM stop the node cleanly (exit status 0).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

import numpy as np

from robot_rl.ros import qos
from robot_rl.ros.node_util import NodeStartupError, declare_parameters, relative_name


NODE_NAME = "sim"
MODES = ("realtime", "lockstep")
OBS_MODES = ("pixels", "state+pixels", "state")
BASE_FRAME = "base"
CAMERA_FRAMES = {"front": "front_camera", "wrist": "wrist_camera"}
CAMERA_TOPICS = {"front": qos.CAMERA_FRONT_IMAGE, "wrist": qos.CAMERA_WRIST_IMAGE}
GRIPPER_JOINT_NAME = "gripper"
RESET_SERVICE = "reset"
ACCEPTED_COMMAND_FRAMES = ("", BASE_FRAME)


class CommandError(ValueError):
    """A command cannot be applied (non-finite, malformed, wrong frame); the message says why."""


@dataclass(frozen=True)
class SimNodeConfig:
    task: str = "PickCube-v0"
    obs_mode: str = "pixels"
    image_size: int = 64
    mode: str = "realtime"
    seed: int = -1

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode={self.mode!r} must be one of {MODES}")
        if self.obs_mode not in OBS_MODES:
            raise ValueError(f"obs_mode={self.obs_mode!r} must be one of {OBS_MODES}")
        if not isinstance(self.seed, int) or self.seed < -1:
            raise ValueError(f"seed={self.seed!r} must be an int >= 0, or -1 for unseeded")


class SimRobot:
    """The env behind the node, without ROS: absolute-pose commands, one control step at a time, the robot's state.

    Steps go through the wrapped gym env (time limit included) with a zero Cartesian delta, so the target set by
    :meth:`set_target_pose` is what the controller tracks; the gripper part of the action is the stored target.
    """

    def __init__(self, task: str, obs_mode: str = "pixels", image_size: int = 64):
        from robot_rl.loop import make_env
        from robot_rl.sim import robot as robot_model

        self.env = make_env(task, obs_mode=obs_mode, image_size=image_size)
        self.base = self.env.unwrapped
        self.joint_names = tuple(robot_model.JOINT_NAMES)
        self.control_dt = float(self.base.control_dt)
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
    def reset(self, seed: int | None = None) -> None:
        self.obs, info = self.env.reset(seed=seed)
        self._gripper_action = float(self.base.gripper_command)
        self.reward, self.success = 0.0, bool(info.get("success", False))
        self.terminated = self.truncated = False
        self.episode += 1
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

    def image(self, camera: str) -> np.ndarray:
        return self.obs[f"images/{camera}"]

    def close(self) -> None:
        self.env.close()


PARAMETERS: tuple[tuple[str, object, str], ...] = (
    ("task", SimNodeConfig.task, "task id, e.g. PickCube-v0 (read at start-up)"),
    ("obs_mode", SimNodeConfig.obs_mode, "pixels | state+pixels | state (no cameras; read at start-up)"),
    ("image_size", SimNodeConfig.image_size, "camera image side [px] (read at start-up)"),
    ("mode", SimNodeConfig.mode, "realtime | lockstep (read at start-up)"),
    ("seed", SimNodeConfig.seed, ">= 0 seeds the next reset (first one and after each change); -1 unseeded"),
)
"""The node's ROS parameters (name, default, description); the command line's options give their defaults."""


class SimNode:
    """The ROS 2 side: one rclpy node around a :class:`SimRobot` (see the module doc for topics and modes)."""

    def __init__(self, config: SimNodeConfig = SimNodeConfig(), *, node_name: str = NODE_NAME, context=None,
                 cli_args: list[str] | None = None):
        import rclpy
        from geometry_msgs.msg import PoseStamped, TwistStamped
        from sensor_msgs.msg import Image, JointState
        from std_msgs.msg import Bool, Float32, Float32MultiArray, Float64
        from std_srvs.srv import Trigger

        self._Float32, self._Bool = Float32, Bool
        self.node = rclpy.create_node(node_name, context=context, cli_args=cli_args)
        node = self.node
        param = declare_parameters(node, [(name, getattr(config, name), description)
                                          for name, _, description in PARAMETERS])
        try:
            self.config = SimNodeConfig(
                task=str(param("task")), obs_mode=str(param("obs_mode")), image_size=int(param("image_size")),
                mode=str(param("mode")), seed=int(param("seed")))
        except ValueError as error:
            raise NodeStartupError(str(error)) from None
        self._used_seed: int | None = None
        self._log = node.get_logger()

        self.robot = SimRobot(self.config.task, self.config.obs_mode, self.config.image_size)
        sensors = qos.qos_profile(qos.SENSORS)
        cameras = CAMERA_TOPICS if "pixels" in self.config.obs_mode else {}
        self._image_pubs = {camera: node.create_publisher(Image, relative_name(topic), sensors)
                            for camera, topic in cameras.items()}
        self._joint_pub = node.create_publisher(JointState, relative_name(qos.JOINT_STATES), sensors)
        self._gripper_pub = node.create_publisher(JointState, relative_name(qos.GRIPPER_STATE), sensors)
        self._tcp_pub = node.create_publisher(PoseStamped, relative_name(qos.TCP_POSE), sensors)
        self._twist_pub = node.create_publisher(TwistStamped, relative_name(qos.TCP_TWIST), sensors)
        self._object_pub = node.create_publisher(Float32MultiArray, relative_name(qos.SIM_OBJECT_STATE), sensors)
        self._expert_pub = node.create_publisher(Float32MultiArray, relative_name(qos.SIM_EXPERT_ACTION), sensors)
        events = qos.qos_profile(qos.EVENTS)
        self._reward_pub = node.create_publisher(Float32, relative_name(qos.TASK_REWARD), events)
        self._success_pub = node.create_publisher(Bool, relative_name(qos.TASK_SUCCESS), events)
        commands = qos.qos_profile(qos.COMMANDS)
        node.create_subscription(PoseStamped, relative_name(qos.COMMAND_TARGET_POSE), self._on_target_pose, commands)
        node.create_subscription(Float64, relative_name(qos.COMMAND_GRIPPER), self._on_gripper, commands)
        node.create_service(Trigger, RESET_SERVICE, self._on_reset)
        self._last_stamp = 0.0
        self._reported_episode_end = False

        self._reset_episode()
        self._publish(with_task=False)
        if self.config.mode == "realtime":
            node.create_timer(self.robot.control_dt, self._on_timer)
        self._log.info(
            f"sim node up: task={self.config.task} mode={self.config.mode} obs_mode={self.config.obs_mode} "
            f"image_size={self.config.image_size} control_dt={self.robot.control_dt:.3f}s "
            f"namespace={node.get_namespace()}")

    # ----- callbacks -------------------------------------------------------------------------------------------
    def _on_target_pose(self, msg) -> None:
        from robot_rl.ros.convert import MessageError, pose_from_msg

        try:
            frame = msg.header.frame_id
            if frame not in ACCEPTED_COMMAND_FRAMES:
                raise CommandError(f"frame {frame!r} is not {BASE_FRAME!r}")
            position, quat = pose_from_msg(msg)
            self.robot.set_target_pose(position, quat)
        except (MessageError, CommandError) as error:
            self._log.warning(f"rejected target pose command ({error}); holding the last target",
                              throttle_duration_sec=1.0)
        if self.config.mode == "lockstep":
            self._step_and_publish()

    def _on_gripper(self, msg) -> None:
        try:
            self.robot.set_gripper(msg.data)
        except CommandError as error:
            self._log.warning(f"rejected gripper command ({error}); holding the last gripper target",
                              throttle_duration_sec=1.0)

    def _on_timer(self) -> None:
        self._step_and_publish()

    def _on_reset(self, request, response):
        try:
            seed = self._reset_episode()
            self._publish(with_task=False)
        except Exception as error:  # noqa: BLE001 - a failed reset is reported to the caller, not a crash
            self._log.error(f"reset failed: {error!r}")
            response.success, response.message = False, f"reset failed: {error!r}"
            return response
        response.success = True
        response.message = f"episode {self.robot.episode} reset" + ("" if seed is None else f" with seed {seed}")
        return response

    # ----- internals -------------------------------------------------------------------------------------------
    def _reset_episode(self) -> int | None:
        seed = int(self.node.get_parameter("seed").value)
        use = seed if seed >= 0 and seed != self._used_seed else None
        if seed >= 0:
            self._used_seed = seed
        self.robot.reset(seed=use)
        self._reported_episode_end = False
        return use

    def _step_and_publish(self) -> None:
        self.robot.step()
        if (self.robot.terminated or self.robot.truncated) and not self._reported_episode_end:
            self._reported_episode_end = True
            self._log.info(f"episode {self.robot.episode} ended after {self.robot.step_index} steps "
                           f"(success={self.robot.success}, truncated={self.robot.truncated}); "
                           "still stepping until the reset service is called")
        self._publish(with_task=True)

    def _stamp(self) -> float:
        from robot_rl.ros.node_util import clock_seconds

        stamp = max(clock_seconds(self.node.get_clock()), self._last_stamp + 1e-6)  # strictly increasing
        self._last_stamp = stamp
        return stamp

    def _publish(self, with_task: bool) -> None:
        from robot_rl.ros.convert import floats_to_msg, image_to_msg, joint_state_to_msg, pose_to_msg, twist_to_msg

        robot, stamp = self.robot, self._stamp()
        self._object_pub.publish(floats_to_msg(robot.object_state()))
        self._expert_pub.publish(floats_to_msg(robot.expert_action()))
        for camera, publisher in self._image_pubs.items():
            publisher.publish(image_to_msg(robot.image(camera), "rgb8", stamp=stamp, frame_id=CAMERA_FRAMES[camera]))
        self._joint_pub.publish(joint_state_to_msg(
            robot.joint_names, robot.joint_positions(), robot.joint_velocities(), stamp=stamp))
        width, velocity, effort = robot.gripper_state()
        self._gripper_pub.publish(joint_state_to_msg(
            (GRIPPER_JOINT_NAME,), [width], [velocity], [effort], stamp=stamp))
        if with_task:
            self._reward_pub.publish(self._Float32(data=float(robot.reward)))
            self._success_pub.publish(self._Bool(data=bool(robot.success)))
        linear, angular = robot.tcp_twist()
        self._twist_pub.publish(twist_to_msg(linear, angular, stamp=stamp, frame_id=BASE_FRAME))
        position, quat = robot.tcp_pose()
        self._tcp_pub.publish(pose_to_msg(position, quat, stamp=stamp, frame_id=BASE_FRAME))

    def destroy(self) -> None:
        try:
            self.node.destroy_node()
        finally:
            self.robot.close()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m robot_rl.sim.node",
        description="MuJoCo mirror of the robot behind the real drivers' ROS 2 topics. "
                    "ROS arguments go after --ros-args (e.g. -r __ns:=/robot1 -p seed:=3).")
    defaults = SimNodeConfig()
    parser.add_argument("--task", default=defaults.task)
    parser.add_argument("--obs-mode", default=defaults.obs_mode, choices=OBS_MODES)
    parser.add_argument("--image-size", type=int, default=defaults.image_size)
    parser.add_argument("--mode", default=defaults.mode, choices=MODES)
    parser.add_argument("--seed", type=int, default=defaults.seed, help=">= 0 seeds the first reset; -1 unseeded")
    parser.add_argument("--node-name", default=NODE_NAME)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the sim node until SIGINT / SIGTERM; returns the exit status."""
    from robot_rl.ros.node_util import parse_node_arguments, run_node

    argv = list(sys.argv if argv is None else argv)
    args = parse_node_arguments(_parser(), argv)
    config = SimNodeConfig(task=args.task, obs_mode=args.obs_mode, image_size=args.image_size, mode=args.mode,
                           seed=args.seed)
    return run_node(lambda: SimNode(config, node_name=args.node_name), argv, args.node_name)

if __name__ == "__main__":
    sys.exit(main())
