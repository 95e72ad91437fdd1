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
sim/imminent_failure    std_msgs/String            out  the failure the hand's target is about to cause, '' for none
                                                        (RobotEnv.imminent_failure; sim only; scripted teleop)
gripper/state           sensor_msgs/JointState     out  joint ``gripper``: opening [m], velocity [m/s], force [N]
task/reward             std_msgs/Float32           out  the task's per-step reward (1.0 on success)
task/success            std_msgs/Bool              out  the task's success flag of the same step
command/target_pose     geometry_msgs/PoseStamped  in   absolute TCP target, frame ``base`` (or empty)
command/gripper         std_msgs/Float64           in   gripper target in [0 closed, 1 open]
======================  =========================  ===  ==========================================================

Service ``reset`` (std_srvs/Trigger): resets the episode, publishes the new observation, then answers; the answer's
message names that frame by its header stamp: it ends with ``'; frame stamp <sec>.<nanosec>'`` (nine digits;
robot_rl.actor.runner.reset_frame_stamp reads it), so a client takes that frame or a later one as the episode's first. The
node publishes its start-up frame (after its start-up reset) before it creates its command subscriptions and the
reset service.

All sensor messages of one control step carry the same header stamp (the node clock after the step);
``tcp_pose`` is published last. The task stream is std_msgs (no bytes payload): ``task/reward`` then ``task/success``,
once per step (not after a reset).

Modes (parameter ``mode``):

- ``realtime``: a timer steps the physics at the control rate (1 / control_dt = 10 Hz) and publishes after each step;
  commands only move the controller target.
- ``lockstep``: each message on ``command/target_pose`` advances exactly one control step, then the node publishes
  (deterministic for tests). ``command/gripper`` only stores the gripper target, applied at the next step: send it
  before the pose (one waiting beside the pose, as on a busy node, is taken first). A rejected pose still advances
  one step holding the previous target, so a lock-step client always gets its step.

Commands are applied to the env's controller target: the position is clipped into the env's workspace box, the
orientation into its rotation limits around the nominal pointing-down orientation. A NaN / non-unit / wrongly framed
command is rejected with one log line (throttled) and the last target is held; the node never crashes on a command.

Parameters (:data:`PARAMETERS`): ``task``, ``obs_mode`` (pixels | state+pixels | state), ``image_size``, ``mode``
(realtime | lockstep; '': the robot file's mode, realtime without one), ``robot`` (a robot file: driver mode, below;
'': the native topics above), ``seed`` (>= 0: used by the node's start-up reset and by the first reset after each
change of the parameter; other resets continue the env's random stream, so a run is reproducible; -1: unseeded).
All but ``seed`` are read at start-up. An unknown parameter, an invalid value or an unusable robot file is one log
line and exit status 2.

Driver mode (parameter ``robot``, a robot file path or a shipped name such as ``sim_panda_driver``): the node publishes
and accepts what that file describes, as a real robot's drivers would, so the actor, ``doctor`` and the launch files
can be tested against a "foreign" robot without one (``robots/sim_panda_driver.yaml``: ros2_control / RealSense style).

- cameras: each ``cameras.<name>`` is rendered from its sim camera (``sim_camera``, by default the sim camera of the
  same name: ``front`` or ``wrist``; at its ``sim_mount`` when given) at its ``width`` x
  ``height`` (non-square; 0: ``image_size``) and published on its ``topic`` as a sensor_msgs/Image in its
  ``encoding`` (rgb8, bgr8, rgba8, bgra8, mono8, mono16) or a CompressedImage (``encoding`` jpeg or png), with the
  reliability named by its ``qos`` (best_effort: like SensorDataQoS, a reliable subscriber does not match), frame
  ``<name>_camera``. In realtime mode a camera whose ``rate_hz`` differs from the control rate is rendered on its own
  timer at that rate; otherwise once per control step. ``obs_mode`` state publishes no cameras.
- arm: sensor_msgs/JointState on ``arm.joint_states_topic`` with the 7 arm joints under ``arm.joint_names`` (base to
  tip, joint1..joint7 if the file names none; position, velocity) and, with ``gripper.state: joint_states``, the two
  ``gripper.finger_joints`` (each finger's travel / ``opening_per_unit``). PoseStamped ``tcp_pose`` only with
  ``arm.state: tcp_pose``, TwistStamped only with ``arm.twist: topic``, the ``gripper/state`` JointState only with
  ``gripper.state: topic``; frames ``frames.base``.
  The arm state message (``tcp_pose`` or ``joint_states``) is published last in each step.
- commands: ``command.interface: pose`` -> PoseStamped on ``command.pose_topic`` (as natively);
  ``joint_trajectory`` -> trajectory_msgs/JointTrajectory on ``command.joint_trajectory_topic``: the first point's
  positions for ``arm.joint_names`` (any order; every arm joint, no other joint, finite, within the joint limits)
  become a TCP target by forward kinematics of the sim's own model, applied like a pose command (clipped into the
  sim's workspace and rotation limits); its ``time_from_start`` is not used (the controller tracks at its own speed).
  Gripper: Float64 in [0 closed, 1 open] on ``gripper.command_topic``, or a JointTrajectory whose
  ``gripper.command_joints`` positions give the opening ``opening_per_unit * sum`` [m]. A malformed command is
  rejected with a throttled log line and the last target is held; in lock-step an arm command (even a rejected one)
  advances one step.
- reset: the Trigger service ``reset.service`` (``reset.kind: service``); with another kind the sim still serves
  ``reset`` (the sim's own way to place new objects, like its sim/* topics).
- mode: the ``mode`` parameter when given, else the robot file's ``mode``. sim/object_state, sim/expert_action,
  sim/imminent_failure, task/reward and task/success are published as natively.

SIGINT / SIGTERM stop the node cleanly (exit status 0).
"""

from __future__ import annotations

if __name__ == "__main__":  # a program's start, before the heavy imports below
    from robot_rl.core.startup import program_start

    program_start()

import argparse
import dataclasses
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from robot_rl.ros import qos
from robot_rl.ros.node_util import NodeStartupError, declare_parameters, relative_name
from robot_rl.sim.node_robot import COMPRESSED_FORMATS, RAW_ENCODINGS, CommandError, SimRobot, rgb_to_encoding


NODE_NAME = "sim"
MODES = ("realtime", "lockstep")
OBS_MODES = ("pixels", "state+pixels", "state")
BASE_FRAME = "base"
CAMERA_FRAMES = {"front": "front_camera", "wrist": "wrist_camera"}
CAMERA_TOPICS = {"front": qos.CAMERA_FRONT_IMAGE, "wrist": qos.CAMERA_WRIST_IMAGE}
GRIPPER_JOINT_NAME = "gripper"
RESET_SERVICE = "reset"
ACCEPTED_COMMAND_FRAMES = ("", BASE_FRAME)
SIM_ARM_JOINTS = 7
SIM_FINGER_JOINTS = 2


@dataclass(frozen=True)
class SimNodeConfig:
    """The sim node's start-up settings (see PARAMETERS)."""

    task: str = "PickCube-v0"
    obs_mode: str = "pixels"
    image_size: int = 64
    mode: str = ""
    seed: int = -1
    robot: str = ""

    def __post_init__(self) -> None:
        if self.mode not in ("", *MODES):
            raise ValueError(f"mode={self.mode!r} must be one of {MODES} (or '': the robot file's, else realtime)")
        if self.obs_mode not in OBS_MODES:
            raise ValueError(f"obs_mode={self.obs_mode!r} must be one of {OBS_MODES}")
        if not isinstance(self.seed, int) or self.seed < -1:
            raise ValueError(f"seed={self.seed!r} must be an int >= 0, or -1 for unseeded")


# ----- what the node publishes and accepts (native topics, or a robot file's) ------------------------------------


@dataclass(frozen=True)
class CameraStream:
    """One published camera: the sim camera it shows, its topic, message, encoding, size, reliability and rate."""

    sim_camera: str
    topic: str
    message: str = "Image"
    """Image | CompressedImage."""
    encoding: str = "rgb8"
    """Image encoding, or the CompressedImage format (jpeg | png)."""
    width: int = 64
    height: int = 64
    reliability: str = "reliable"
    rate_hz: float = 0.0
    """0: once per control step."""
    frame_id: str = ""
    rendered: bool = True
    """False: the env observation's square image (native topics), True: rendered at width x height."""
    mount: Any = None
    """The robot file's sim_mount of the camera (robot_rl.actor.robot_config.SimMount), or None: the sim camera's pose."""


@dataclass(frozen=True)
class DriverProfile:
    """What the sim node publishes and accepts: its native topics, or what a robot file describes (a real driver's).

    Topic names are relative (resolved in the node's namespace) unless the robot file gives absolute ones.
    """

    robot_file: str = ""
    mode: str = ""
    """The robot file's mode ('' with the native topics)."""
    base_frame: str = BASE_FRAME
    cameras: tuple[CameraStream, ...] = ()
    arm_state: str = "tcp_pose"
    joint_states_topic: str = relative_name(qos.JOINT_STATES)
    arm_joint_names: tuple[str, ...] = tuple(f"joint{i}" for i in range(1, SIM_ARM_JOINTS + 1))
    finger_joint_names: tuple[str, ...] = ()
    """Finger joints published in joint_states (with the arm joints); () for none."""
    opening_per_unit: float = 1.0
    tcp_pose_topic: str = relative_name(qos.TCP_POSE)
    """'' for none."""
    twist_topic: str = relative_name(qos.TCP_TWIST)
    """'' for none."""
    gripper_state_topic: str = relative_name(qos.GRIPPER_STATE)
    """'' for none."""
    arm_reliability: str = "reliable"
    gripper_reliability: str = "reliable"
    command_interface: str = "pose"
    pose_topic: str = relative_name(qos.COMMAND_TARGET_POSE)
    joint_trajectory_topic: str = ""
    gripper_command: str = "Float64"
    gripper_command_topic: str = relative_name(qos.COMMAND_GRIPPER)
    gripper_command_joints: tuple[str, ...] = ()
    reset_service: str = RESET_SERVICE

    @classmethod
    def native(cls, obs_mode: str = "pixels", image_size: int = 64) -> DriverProfile:
        """The node's own topics (module table): square rgb8 cameras, tcp_pose, tcp_twist, gripper/state."""
        cameras = tuple(
            CameraStream(camera, relative_name(topic), "Image", "rgb8", image_size, image_size, "reliable", 0.0,
                         CAMERA_FRAMES[camera], rendered=False)
            for camera, topic in CAMERA_TOPICS.items()) if "pixels" in obs_mode else ()
        return cls(cameras=cameras)

    @classmethod
    def from_robot(cls, robot, obs_mode: str = "pixels", image_size: int = 64) -> DriverProfile:
        """What the `RobotConfig` `robot` describes, served by the sim; RobotConfigError (naming the file and the key)
        for what the sim cannot serve."""
        from robot_rl.actor.robot_config import RobotConfigError

        def fail(message: str):
            raise RobotConfigError(f"{robot.path or robot.name}: {message}")

        if not robot.sim:
            fail("sim: false: this robot file describes a real robot, and the sim node serves only files with "
                 "`sim: true` (next to the robot's drivers it would publish on their topics); start the robot's "
                 "drivers instead, or set sim: true in a copy made for a stand-in")

        cameras = []
        for name, camera in robot.cameras if "pixels" in obs_mode else ():
            where = f"cameras.{name}"
            sim_camera = robot.sim_camera(name)
            if sim_camera is None:
                fail(f"{where}: no sim camera: add \"sim_camera: front\" (the sim renders "
                     f"{' and '.join(CAMERA_FRAMES)}) under {where}")
            if camera.type == "Image":
                encoding = camera.encoding or "rgb8"
                if encoding not in RAW_ENCODINGS:
                    fail(f"{where}.encoding: {encoding!r} is not one the sim renders ({', '.join(RAW_ENCODINGS)})")
            else:
                encoding = {"jpg": "jpeg"}.get(camera.encoding.lower(), camera.encoding.lower()) or "jpeg"
                if encoding not in COMPRESSED_FORMATS:
                    fail(f"{where}.encoding: {camera.encoding!r} is not a CompressedImage format the sim writes "
                         f"({', '.join(COMPRESSED_FORMATS)})")
            if bool(camera.width) != bool(camera.height):
                fail(f"{where}: give both width and height (or neither: image_size x image_size)")
            width, height = (camera.width, camera.height) if camera.width else (image_size, image_size)
            if not (16 <= width <= 4096 and 16 <= height <= 4096):
                fail(f"{where}: {width}x{height} must be within 16..4096 pixels per side")
            cameras.append(CameraStream(sim_camera, camera.topic, camera.type, encoding, width, height, camera.qos,
                                        camera.rate_hz, f"{name}_camera", mount=camera.sim_mount))
        arm, gripper, command = robot.arm, robot.gripper, robot.command
        joint_names = tuple(arm.joint_names) or cls.arm_joint_names  # none given (a TCP pose arm): the sim's own
        if len(joint_names) != SIM_ARM_JOINTS:
            fail(f"arm.joint_names: the sim arm has {SIM_ARM_JOINTS} joints (base to tip), "
                 f"got {len(joint_names)} names")
        fingers = ()
        if gripper.state == "joint_states":
            fingers = tuple(gripper.finger_joints)
            if len(fingers) != SIM_FINGER_JOINTS:
                fail(f"gripper.finger_joints: the sim gripper has {SIM_FINGER_JOINTS} finger joints, "
                     f"got {len(fingers)} names")
        names = (*joint_names, *fingers)
        if len(set(names)) != len(names):
            fail("arm.joint_names / gripper.finger_joints: a joint name appears twice")
        if len(set(gripper.command_joints)) != len(gripper.command_joints):
            fail("gripper.command_joints: a joint name appears twice")
        return cls(
            robot_file=robot.path, mode=robot.mode, base_frame=robot.base_frame, cameras=tuple(cameras),
            arm_state=arm.state, joint_states_topic=arm.joint_states_topic, arm_joint_names=joint_names,
            finger_joint_names=fingers, opening_per_unit=gripper.opening_per_unit,
            tcp_pose_topic=arm.tcp_pose_topic if arm.state == "tcp_pose" else "",
            twist_topic=arm.twist_topic if arm.twist == "topic" else "",
            gripper_state_topic=gripper.topic if gripper.state == "topic" else "",
            arm_reliability=arm.qos, gripper_reliability=gripper.qos, command_interface=command.interface,
            pose_topic=command.pose_topic, joint_trajectory_topic=command.joint_trajectory_topic,
            gripper_command=gripper.command, gripper_command_topic=gripper.command_topic,
            gripper_command_joints=tuple(gripper.command_joints),
            reset_service=robot.reset.service if robot.reset.kind == "service" else RESET_SERVICE)

    def arm_positions(self, names, positions) -> np.ndarray:
        """The sim arm's 7 joint positions (base to tip) from a command's joint names and positions (any order);
        CommandError for an unknown, missing or repeated joint."""
        return _ordered_positions(names, positions, self.arm_joint_names, "arm")

    def gripper_opening(self, names, positions) -> float:
        """Opening [m] commanded by a JointTrajectory gripper command: opening_per_unit * sum of its joints."""
        values = _ordered_positions(names, positions, self.gripper_command_joints, "gripper")
        return float(self.opening_per_unit * values.sum())

    def summary(self) -> str:
        """One line: the streams and commands served."""
        cameras = ", ".join(
            f"{c.sim_camera} {c.width}x{c.height} {c.encoding} {c.message} {c.reliability} on {c.topic}"
            for c in self.cameras) or "no cameras"
        arm = [f"joint_states on {self.joint_states_topic}" + (" with fingers" if self.finger_joint_names else "")]
        arm += [f"{what} on {topic}" for what, topic in (("tcp_pose", self.tcp_pose_topic),
                                                        ("twist", self.twist_topic),
                                                        ("gripper state", self.gripper_state_topic)) if topic]
        command = self.pose_topic if self.command_interface == "pose" else self.joint_trajectory_topic
        return (f"cameras: {cameras}; arm: {', '.join(arm)} ({self.arm_reliability}); commands: "
                f"{self.command_interface} on {command}, gripper {self.gripper_command} on "
                f"{self.gripper_command_topic}; reset service {self.reset_service}")


def _ordered_positions(names, positions, expected: tuple[str, ...], what: str) -> np.ndarray:
    names = [str(n) for n in names]
    positions = np.asarray(positions, dtype=np.float64).reshape(-1)
    if len(names) != len(positions):
        raise CommandError(f"{what} command has {len(names)} joint names and {len(positions)} positions")
    unknown = [n for n in names if n not in expected]
    if unknown:
        raise CommandError(f"{what} command names unknown joint {unknown[0]!r} (expected {', '.join(expected)})")
    if len(set(names)) != len(names):
        raise CommandError(f"{what} command names a joint twice: {names}")
    missing = [n for n in expected if n not in names]
    if missing:
        raise CommandError(f"{what} command lacks joint {missing[0]!r} (expected {', '.join(expected)})")
    if not np.isfinite(positions).all():
        raise CommandError(f"{what} command positions are not finite: {positions.tolist()}")
    index = {name: i for i, name in enumerate(names)}
    return positions[[index[n] for n in expected]]


PARAMETERS: tuple[tuple[str, object, str], ...] = (
    ("task", SimNodeConfig.task, "task id, e.g. PickCube-v0 (read at start-up)"),
    ("obs_mode", SimNodeConfig.obs_mode, "pixels | state+pixels | state (no cameras; read at start-up)"),
    ("image_size", SimNodeConfig.image_size, "camera image side [px] (read at start-up)"),
    ("mode", SimNodeConfig.mode, "realtime | lockstep; '' = the robot file's mode, else realtime (read at start-up)"),
    ("seed", SimNodeConfig.seed, ">= 0 seeds the next reset (first one and after each change); -1 unseeded"),
    ("robot", SimNodeConfig.robot, "robot file (path or shipped name) whose topics, types, QoS and commands the node "
                                   "serves like a real driver; '' = the native topics (read at start-up)"),
)
"""The node's ROS parameters (name, default, description); the command line's options give their defaults."""


def parameter_table(config: SimNodeConfig) -> list[tuple[str, object, str]]:
    """PARAMETERS with the defaults of `config` (the command line's options)."""
    return [(name, getattr(config, name), description) for name, _, description in PARAMETERS]


def node_config(values) -> SimNodeConfig:
    """The node's settings from its parameter values (`values`: name -> value), checked by SimNodeConfig's rules and
    the env's image_size rule (robot_rl.sim.env.image_size_problem); NodeStartupError for a bad one."""
    from robot_rl.sim.env import image_size_problem

    try:
        config = SimNodeConfig(
            task=str(values("task")), obs_mode=str(values("obs_mode")), image_size=int(values("image_size")),
            mode=str(values("mode")), seed=int(values("seed")), robot=str(values("robot")))
    except ValueError as error:
        raise NodeStartupError(str(error)) from None
    problem = image_size_problem("image_size", config.image_size)
    if problem:
        raise NodeStartupError(problem)
    return config


def check_parameters(node_name: str, values) -> None:
    """NodeStartupError for a bad parameter value; run_node applies it to the command line's values first."""
    node_config(values)


class SimNode:
    """The ROS 2 side: one rclpy node around a :class:`SimRobot` (see the module doc for topics and modes)."""

    def __init__(self, config: SimNodeConfig = SimNodeConfig(), *, node_name: str = NODE_NAME, context=None,
                 cli_args: list[str] | None = None):
        import rclpy
        from geometry_msgs.msg import PoseStamped, TwistStamped
        from sensor_msgs.msg import CompressedImage, Image, JointState
        from std_msgs.msg import Bool, Float32, Float32MultiArray, Float64, String
        from std_srvs.srv import Trigger

        self._Float32, self._Bool = Float32, Bool
        self.node = rclpy.create_node(node_name, context=context, cli_args=cli_args)
        node = self.node
        param = declare_parameters(node, parameter_table(config))
        config = node_config(param)
        self.profile = self._profile(config)
        self.config = dataclasses.replace(config, mode=config.mode or self.profile.mode or "realtime")
        self._used_seed: int | None = None
        self._log = node.get_logger()
        profile = self.profile

        driver_mode = bool(self.config.robot)
        # Driver mode renders each camera at its own size: the env's square observation images are not needed.
        env_obs_mode = "state" if driver_mode else self.config.obs_mode
        try:  # the env's own checks of the task and image_size (those of in-process training)
            self.robot = SimRobot(self.config.task, env_obs_mode, self.config.image_size)
        except ValueError as error:
            raise NodeStartupError(str(error)) from None
        from robot_rl.sim.robot_cameras import mount_cameras

        mount_cameras(self.robot.base, profile.cameras)  # the robot file's camera mounts, as validation renders them
        sensors = qos.qos_profile(qos.SENSORS)
        self._image_pubs = []  # (stream, publisher) published with every control step
        realtime = self.config.mode == "realtime"
        for stream in profile.cameras:
            message = Image if stream.message == "Image" else CompressedImage
            publisher = node.create_publisher(message, stream.topic, qos.sensor_qos(stream.reliability))
            own_rate = realtime and stream.rate_hz > 0 and \
                abs(stream.rate_hz * self.robot.control_dt - 1.0) > 1e-3
            if own_rate:
                node.create_timer(1.0 / stream.rate_hz,
                                  lambda s=stream, p=publisher: self._publish_camera(s, p, self._stamp()))
            else:
                self._image_pubs.append((stream, publisher))
        arm_qos, gripper_qos = qos.sensor_qos(profile.arm_reliability), qos.sensor_qos(profile.gripper_reliability)
        self._joint_pub = node.create_publisher(JointState, profile.joint_states_topic, arm_qos)
        self._gripper_pub = node.create_publisher(JointState, profile.gripper_state_topic, gripper_qos) \
            if profile.gripper_state_topic else None
        self._tcp_pub = node.create_publisher(PoseStamped, profile.tcp_pose_topic, arm_qos) \
            if profile.tcp_pose_topic else None
        self._twist_pub = node.create_publisher(TwistStamped, profile.twist_topic, arm_qos) \
            if profile.twist_topic else None
        self._object_pub = node.create_publisher(Float32MultiArray, relative_name(qos.SIM_OBJECT_STATE), sensors)
        self._expert_pub = node.create_publisher(Float32MultiArray, relative_name(qos.SIM_EXPERT_ACTION), sensors)
        self._hazard_pub = node.create_publisher(String, relative_name(qos.SIM_IMMINENT_FAILURE), sensors)
        self._String = String
        events = qos.qos_profile(qos.EVENTS)
        self._reward_pub = node.create_publisher(Float32, relative_name(qos.TASK_REWARD), events)
        self._success_pub = node.create_publisher(Bool, relative_name(qos.TASK_SUCCESS), events)
        self._last_stamp = 0.0
        self._reported_episode_end = False

        self._resets_served = 0
        self._reset_episode()
        # The start-up frame goes out before the node offers its inputs (commands, the reset service): a client that
        # sees the reset service has every stream's start-up message published before the reset's, each stamped
        # earlier than anything the node publishes later; the reset's reply names its own frame (_on_reset).
        self._publish(with_task=False)
        commands = qos.qos_profile(qos.COMMANDS)
        from trajectory_msgs.msg import JointTrajectory

        # The gripper's subscription first: the executor runs ready callbacks in creation order, so a gripper command
        # that waits beside the arm command of its step (a busy node) is stored before that arm command steps.
        if profile.gripper_command == "Float64":
            node.create_subscription(Float64, profile.gripper_command_topic, self._on_gripper, commands)
        else:
            node.create_subscription(JointTrajectory, profile.gripper_command_topic, self._on_gripper_trajectory,
                                     commands)
        if profile.command_interface == "pose":
            node.create_subscription(PoseStamped, profile.pose_topic, self._on_target_pose, commands)
        else:
            node.create_subscription(JointTrajectory, profile.joint_trajectory_topic, self._on_joint_trajectory,
                                     commands)
        node.create_service(Trigger, profile.reset_service, self._on_reset)
        if realtime:
            node.create_timer(self.robot.control_dt, self._on_timer)
        self._log.info(
            f"sim node up: task={self.config.task} mode={self.config.mode} obs_mode={self.config.obs_mode} "
            f"image_size={self.config.image_size} control_dt={self.robot.control_dt:.3f}s "
            f"namespace={node.get_namespace()}" + (f" robot={profile.robot_file}" if driver_mode else ""))
        if driver_mode:
            self._log.info(f"driver mode: {profile.summary()}")

    @staticmethod
    def _profile(config: SimNodeConfig) -> DriverProfile:
        if not config.robot:
            return DriverProfile.native(config.obs_mode, config.image_size)
        from robot_rl.actor.robot_config import RobotConfigError, load_robot_config

        try:
            return DriverProfile.from_robot(load_robot_config(config.robot), config.obs_mode, config.image_size)
        except RobotConfigError as error:
            raise NodeStartupError(f"parameter 'robot': {error}") from None

    # ----- callbacks -------------------------------------------------------------------------------------------
    def _on_target_pose(self, msg) -> None:
        from robot_rl.ros.convert import MessageError, pose_from_msg

        try:
            frame = msg.header.frame_id
            if frame not in ("", self.profile.base_frame):
                raise CommandError(f"frame {frame!r} is not {self.profile.base_frame!r}")
            position, quat = pose_from_msg(msg)
            self.robot.set_target_pose(position, quat)
        except (MessageError, CommandError) as error:
            self._log.warning(f"rejected target pose command ({error}); holding the last target",
                              throttle_duration_sec=1.0)
        if self.config.mode == "lockstep":
            self._step_and_publish()

    def _on_joint_trajectory(self, msg) -> None:
        from robot_rl.ros.convert import MessageError, joint_trajectory_from_msg

        try:
            names, positions, _ = joint_trajectory_from_msg(msg)
            self.robot.set_target_joints(self.profile.arm_positions(names, positions))
        except (MessageError, CommandError) as error:
            self._log.warning(f"rejected joint trajectory command on {self.profile.joint_trajectory_topic} "
                              f"({error}); holding the last target", throttle_duration_sec=1.0)
        if self.config.mode == "lockstep":
            self._step_and_publish()

    def _on_gripper(self, msg) -> None:
        try:
            self.robot.set_gripper(msg.data)
        except CommandError as error:
            self._log.warning(f"rejected gripper command ({error}); holding the last gripper target",
                              throttle_duration_sec=1.0)

    def _on_gripper_trajectory(self, msg) -> None:
        from robot_rl.ros.convert import MessageError, joint_trajectory_from_msg

        try:
            names, positions, _ = joint_trajectory_from_msg(msg)
            self.robot.set_gripper(self.profile.gripper_opening(names, positions) / self.robot.max_opening)
        except (MessageError, CommandError) as error:
            self._log.warning(f"rejected gripper trajectory command on {self.profile.gripper_command_topic} "
                              f"({error}); holding the last gripper target", throttle_duration_sec=1.0)

    def _on_timer(self) -> None:
        self._step_and_publish()

    def _on_reset(self, request, response):
        from robot_rl.actor.runner import frame_stamp_text
        from robot_rl.ros.convert import stamp_from_seconds

        try:
            seed = self._reset_episode(requested=True)
            stamp = stamp_from_seconds(self._publish(with_task=False))
        except Exception as error:  # noqa: BLE001 - a failed reset is reported to the caller, not a crash
            self._log.error(f"reset failed: {error!r}")
            response.success, response.message = False, f"reset failed: {error!r}"
            return response
        response.success = True
        # The reply names the frame just published (its header stamp): the first frame of the new episode.
        response.message = f"episode {self.robot.episode} reset" + ("" if seed is None else f" with seed {seed}") \
            + frame_stamp_text(stamp.sec, stamp.nanosec)
        return response

    # ----- internals -------------------------------------------------------------------------------------------
    def _reset_episode(self, requested: bool = False) -> int | None:
        """Reset the scene: at start-up, or for the next episode when a client asked (the first asked is episode 0,
        as the actor counts them)."""
        seed = int(self.node.get_parameter("seed").value)
        use = seed if seed >= 0 and seed != self._used_seed else None
        if seed >= 0:
            self._used_seed = seed
        self.robot.reset(seed=use, episode=self._resets_served)
        self._resets_served += requested
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

    def _publish_camera(self, stream: CameraStream, publisher, stamp: float) -> None:
        from robot_rl.ros.convert import compressed_image_to_msg, image_to_msg

        if not stream.rendered:
            publisher.publish(image_to_msg(self.robot.image(stream.sim_camera), "rgb8", stamp=stamp,
                                           frame_id=stream.frame_id))
            return
        rgb = self.robot.render(stream.sim_camera, stream.width, stream.height)
        if stream.message == "Image":
            msg = image_to_msg(rgb_to_encoding(rgb, stream.encoding), stream.encoding, stamp=stamp,
                               frame_id=stream.frame_id)
        else:
            msg = compressed_image_to_msg(rgb, format=stream.encoding, stamp=stamp, frame_id=stream.frame_id)
        publisher.publish(msg)

    def _publish_joints(self, stamp: float) -> None:
        from robot_rl.ros.convert import joint_state_to_msg

        robot, profile = self.robot, self.profile
        positions, velocities = robot.joint_positions(), robot.joint_velocities()
        if profile.finger_joint_names:
            scale = 1.0 / profile.opening_per_unit
            positions = np.concatenate([positions, robot.finger_positions() * scale])
            velocities = np.concatenate([velocities, robot.finger_velocities() * scale])
        self._joint_pub.publish(joint_state_to_msg(
            (*profile.arm_joint_names, *profile.finger_joint_names), positions, velocities, stamp=stamp))

    def _publish(self, with_task: bool) -> float:
        """One step's sensor messages with one stamp; the arm state message (tcp_pose, or joint_states) last.
        Returns the stamp."""
        from robot_rl.ros.convert import floats_to_msg, joint_state_to_msg, pose_to_msg, twist_to_msg

        robot, stamp = self.robot, self._stamp()
        base_frame = self.profile.base_frame
        joints_last = self.profile.arm_state == "joint_states"
        self._object_pub.publish(floats_to_msg(robot.object_state()))
        self._expert_pub.publish(floats_to_msg(robot.expert_action()))
        self._hazard_pub.publish(self._String(data=robot.imminent_failure()))
        for stream, publisher in self._image_pubs:
            self._publish_camera(stream, publisher, stamp)
        if not joints_last:
            self._publish_joints(stamp)
        if self._gripper_pub is not None:
            width, velocity, effort = robot.gripper_state()
            self._gripper_pub.publish(joint_state_to_msg(
                (GRIPPER_JOINT_NAME,), [width], [velocity], [effort], stamp=stamp))
        if with_task:
            self._reward_pub.publish(self._Float32(data=float(robot.reward)))
            self._success_pub.publish(self._Bool(data=bool(robot.success)))
        if self._twist_pub is not None:
            linear, angular = robot.tcp_twist()
            self._twist_pub.publish(twist_to_msg(linear, angular, stamp=stamp, frame_id=base_frame))
        if self._tcp_pub is not None:
            position, quat = robot.tcp_pose()
            self._tcp_pub.publish(pose_to_msg(position, quat, stamp=stamp, frame_id=base_frame))
        if joints_last:
            self._publish_joints(stamp)
        return stamp

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
    parser.add_argument("--mode", default=defaults.mode, choices=MODES,
                        help="default: the robot file's mode, else realtime")
    parser.add_argument("--seed", type=int, default=defaults.seed, help=">= 0 seeds the first reset; -1 unseeded")
    parser.add_argument("--robot", default=defaults.robot,
                        help="robot file (path or shipped name, e.g. sim_panda_driver): publish and accept its "
                             "topics, types and QoS like a real driver; default: the native topics")
    parser.add_argument("--node-name", default=NODE_NAME)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the sim node until SIGINT / SIGTERM; returns the exit status."""
    from robot_rl.ros.node_util import parse_node_arguments, run_node

    argv = list(sys.argv if argv is None else argv)
    parser = _parser()
    args = parse_node_arguments(parser, argv)
    try:
        config = SimNodeConfig(task=args.task, obs_mode=args.obs_mode, image_size=args.image_size, mode=args.mode,
                               seed=args.seed, robot=args.robot)
    except ValueError as error:  # as a bad parameter: one line, exit status 2
        parser.exit(2, f"error: {error}\n")
    return run_node(lambda: SimNode(config, node_name=args.node_name), argv, args.node_name, parameter_table(config),
                    check_parameters)

if __name__ == "__main__":
    sys.exit(main())
