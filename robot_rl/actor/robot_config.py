"""The robot file: one YAML file describes a robot (its drivers' topics, message types and QoS, limits, commands,
reset) so a real arm and its cameras are a configuration, not a code change. Pure Python (no ROS, no MuJoCo).

``load_robot_config(path_or_name)`` reads ``robots/<name>.yaml`` or a path, validates every key against the schema
below and raises :class:`RobotConfigError` naming the file and the key (``robots/x.yaml: cameras.front.qos: ...``).
Unknown keys are errors (a typo must not silently fall back to a default).

Schema (see ``robots/*.yaml`` for documented examples; lengths [m], angles [rad], the robot base frame)::

    name: str                       # recorded with datasets and runs
    sim: bool                       # true only for the MuJoCo mirror's files (the sim node refuses any other)
    control_rate_hz: float          # commands per second (the policy's step rate)
    mode: realtime | lockstep       # lockstep only for the sim node, which steps once per command
    max_episode_steps: int          # episode time limit in control steps
    max_sensor_age_s: float         # a sensor older than this holds the robot (default: 2 control periods)
    frames: {base: str, tcp: str}   # frame_id of commands / expected on poses; the TCP's name in the model
    workspace: {low: [x, y, z], high: [x, y, z]}           # box for the TCP target
    limits: {max_translation, max_rotation, step_bound: per_axis | norm, nominal_quat: [w, x, y, z],
             rotation_low: [rx, ry, rz], rotation_high: [rx, ry, rz]}   # per-step and orientation limits
    home: {position: [x, y, z], quat: [w, x, y, z], gripper: open | closed | -1..1}
    cameras: {<name>: {topic, type: Image | CompressedImage, qos: reliable | best_effort,
                       fit: crop | resize, roi: [x, y, width, height] | null,
                       width, height, encoding, rate_hz,      # width .. rate_hz: what the driver is expected to send
                       sim_camera: front | wrist,             # the sim camera validation renders it from (default:
                                                              # the one of the same name; other names: none)
                       sim_mount: {position: [x, y, z], quat: [w, x, y, z]}}}
                                    # sim_mount: its pose in the sim camera's parent body (front: the world, wrist:
                                    # the hand; MuJoCo camera axes: looks along -z, y up) where the real mount
                                    # differs; an omitted part keeps the sim camera's
    arm: {state: tcp_pose | joint_states, tcp_pose_topic, joint_states_topic, joint_names: [...],
          model: MJCF/URDF path (relative to the robot file), twist: topic | derived, twist_topic,
          qos: reliable | best_effort}
    gripper: {state: topic | joint_states, topic, finger_joints: [...], opening_per_unit, opening_offset, max_opening,
              command: Float64 | JointTrajectory, command_topic, command_joints: [...]}
    command: {interface: pose | joint_trajectory, pose_topic, joint_trajectory_topic, time_from_start_s}
    reset: {kind: service | move_home | human, service, timeout_s, home_tolerance}
    learner_lost: {action: act | hold, after_s}   # the learner away (nothing of it for after_s): the policy
                                                 # keeps acting with its last weights, or its commands are held
    validation: {suite, min_success, max_drop, min_episodes}   # the suite a policy must PASS (robot-rl validate)
                                    # before the actor runs it on this robot: a shipped suite's name (default) or a
                                    # YAML file relative to the robot file; the thresholds may only tighten the
                                    # suite's (a higher min_success or min_episodes, a lower max_drop)

Topic names without a leading ``/`` resolve in the actor's namespace (one robot per namespace).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from robot_rl.core.rotations import ScalarOps, quat_conjugate, quat_multiply, rotvec_from_quat


def _robots_dir() -> Path:
    try:
        import robot_rl.robots

        return Path(robot_rl.robots.__file__).resolve().parent
    except ImportError:  # a source tree on sys.path without the package mapping
        return Path(__file__).resolve().parents[2] / "robots"


ROBOTS_DIR = _robots_dir()
"""Shipped robot files (``load_robot_config("sim_panda")`` reads ``robots/sim_panda.yaml``)."""

SIM_CAMERAS = ("front", "wrist")
"""The sim mirror's cameras (robot_rl.sim.env.CAMERA_NAMES, kept here so this module needs no MuJoCo)."""
GRIPPER_WORDS = {"open": -1.0, "closed": 1.0}  # the action convention: -1 fully open, +1 fully closed
NOMINAL_QUAT = (0.0, 1.0, 0.0, 0.0)  # wxyz: TCP pointing down


class RobotConfigError(ValueError):
    """A robot file cannot be used; the message names the file and the key."""


@dataclasses.dataclass(frozen=True)
class SimMount:
    """A camera's pose on the sim mirror, where the real mount differs from its sim camera's."""

    position: tuple[float, float, float] | None = None
    """Position [m] in the sim camera's parent body frame (front: the world, wrist: the hand); None: the sim
    camera's own."""
    quat: tuple[float, float, float, float] | None = None
    """Orientation wxyz in that frame, MuJoCo camera axes (the camera looks along its -z axis, y up); normalised on
    load; None: the sim camera's own."""

    def __post_init__(self) -> None:
        norm = math.sqrt(sum(q * q for q in self.quat)) if self.quat is not None else 0.0
        if norm > 0:
            object.__setattr__(self, "quat", tuple(q / norm for q in self.quat))


@dataclasses.dataclass(frozen=True)
class CameraConfig:
    """One camera stream: where it comes from and how its frames become the policy's square image."""

    topic: str
    """Image topic (relative names resolve in the actor's namespace)."""
    type: Literal["Image", "CompressedImage"] = "Image"
    """sensor_msgs message type: raw Image (rgb8, bgr8, rgba8, bgra8, mono8, mono16) or a JPEG / PNG CompressedImage."""
    qos: Literal["reliable", "best_effort"] = "best_effort"
    """Subscription reliability; best_effort also receives from reliable publishers (most camera drivers use
    best-effort SensorDataQoS)."""
    fit: Literal["crop", "resize"] = "crop"
    """crop: centre-crop to a square, then resize (keeps the aspect); resize: squash the whole frame."""
    roi: tuple[int, int, int, int] | None = None
    """Region of interest [x, y, width, height] in pixels, cut before the fit."""
    width: int = 0
    """Frame width the driver is expected to send (checked by doctor; 0: any)."""
    height: int = 0
    """Frame height the driver is expected to send (checked by doctor; 0: any)."""
    encoding: str = ""
    """Encoding the driver is expected to send (Image: rgb8 / bgr8 / ...; CompressedImage: jpeg / png; '': any)."""
    rate_hz: float = 0.0
    """Frame rate the driver is expected to send (checked by doctor; 0: any)."""
    sim_camera: str = ""
    """The sim mirror's camera (front | wrist) validation renders this camera from, at width x height; '': the
    sim camera of the same name, if there is one."""
    sim_mount: SimMount | None = None
    """This camera's pose on the sim mirror when the real mount differs from its sim camera's (None: the sim
    camera's pose)."""


@dataclasses.dataclass(frozen=True)
class ArmConfig:
    """Where the arm's TCP pose and velocity come from."""

    state: Literal["tcp_pose", "joint_states"] = "tcp_pose"
    """tcp_pose: a PoseStamped topic; joint_states: forward kinematics of `model` from a JointState topic."""
    tcp_pose_topic: str = "tcp_pose"
    """geometry_msgs/PoseStamped of the TCP in the base frame (state: tcp_pose)."""
    joint_states_topic: str = "joint_states"
    """sensor_msgs/JointState with the arm joints (and, often, the gripper's finger joints)."""
    joint_names: tuple[str, ...] = ()
    """Arm joint names in the JointState and the model, base to tip (state: joint_states, or joint commands)."""
    model: str = ""
    """MJCF or URDF of the arm loaded with MuJoCo (relative to the robot file), for forward / inverse kinematics."""
    twist: Literal["topic", "derived"] = "derived"
    """topic: a TwistStamped topic; derived (most drivers have none): J(q) q' from the joint_states velocities where
    the driver publishes them, else finite differences of successive TCP poses (restarted at each reset)."""
    twist_topic: str = "tcp_twist"
    """geometry_msgs/TwistStamped of the TCP in the base frame (twist: topic)."""
    qos: Literal["reliable", "best_effort"] = "best_effort"
    """Subscription reliability of the arm's state topics."""


@dataclasses.dataclass(frozen=True)
class GripperConfig:
    """How the gripper's opening is read and how it is commanded."""

    state: Literal["topic", "joint_states"] = "topic"
    """topic: a JointState on `topic` whose one position is the opening [m]; joint_states: `finger_joints` of the
    arm's JointState mapped to an opening."""
    topic: str = "gripper/state"
    """sensor_msgs/JointState with one position, the opening [m] (state: topic)."""
    finger_joints: tuple[str, ...] = ()
    """Finger joint names in the JointState (state: joint_states)."""
    opening_per_unit: float = 1.0
    """Opening [m] = opening_offset + opening_per_unit * sum of the finger joint positions (two prismatic fingers:
    1.0; a knuckle joint that closes with a growing angle: negative)."""
    opening_offset: float = 0.0
    """Opening [m] at finger joint positions of zero."""
    max_opening: float = 0.08
    """Fully open [m]; gripper commands map [closed, open] to [0, max_opening]."""
    command: Literal["Float64", "JointTrajectory"] = "Float64"
    """Float64: a target in [0 closed, 1 open] on `command_topic`; JointTrajectory: finger positions for
    `command_joints` on `command_topic`."""
    command_topic: str = "command/gripper"
    """Where gripper commands go."""
    command_joints: tuple[str, ...] = ()
    """Joint names of a JointTrajectory gripper command (each gets (opening - opening_offset) / len /
    opening_per_unit)."""
    qos: Literal["reliable", "best_effort"] = "best_effort"
    """Subscription reliability of the gripper state topic."""


@dataclasses.dataclass(frozen=True)
class CommandConfig:
    """The arm's command interface."""

    interface: Literal["pose", "joint_trajectory"] = "pose"
    """pose: a PoseStamped TCP target for a Cartesian impedance controller; joint_trajectory: a one-point
    trajectory_msgs/JointTrajectory for a ros2_control joint trajectory controller, by differential IK on `arm.model`."""
    pose_topic: str = "command/target_pose"
    """geometry_msgs/PoseStamped TCP target in the base frame (interface: pose)."""
    joint_trajectory_topic: str = "joint_trajectory_controller/joint_trajectory"
    """trajectory_msgs/JointTrajectory topic (interface: joint_trajectory)."""
    time_from_start_s: float = 0.0
    """time_from_start of the trajectory point (0: one control period)."""


@dataclasses.dataclass(frozen=True)
class ResetConfig:
    """How an episode starts."""

    kind: Literal["service", "move_home", "human"] = "service"
    """service: call a std_srvs/Trigger service; move_home: drive the TCP to `home` through the command interface;
    human: wait for the human's reset key (teleop/episode 'reset')."""
    service: str = "reset"
    """std_srvs/Trigger service name (kind: service)."""
    timeout_s: float = 10.0
    """A reset not done within this many seconds is tried again, with a log line."""
    home_tolerance: float = 0.01
    """move_home is done when the TCP is within this distance [m] of home."""


@dataclasses.dataclass(frozen=True)
class LearnerLostConfig:
    """What the actor does while its learner is away (a lost link, a learner that died or is restarting)."""

    action: Literal["act", "hold"] = "act"
    """act: the policy keeps acting with the last weights it has (the human and the safety layer supervise as
    always); hold: the policy's commands are held (the robot stays where it is; a human who takes over still
    moves it) until the learner is heard again. Transitions are kept either way (the actor's bounded outbox)."""
    after_s: float = 5.0
    """The learner counts as away when nothing of it (acknowledgements, weights) arrived for this long [s]; it
    acknowledges every 0.5 s while it runs."""


@dataclasses.dataclass(frozen=True)
class ValidationConfig:
    """The validation a policy needs before the actor runs it on this robot (the deployment gate)."""

    suite: str = "default"
    """Suite: a shipped suite's name (sim/suites/<name>.yaml) or a suite YAML file (relative to the robot file)."""
    min_success: float | None = None
    """Success rate every condition must reach: the suite's, or higher (None: the suite's)."""
    max_drop: float | None = None
    """Largest success-rate loss against nominal a condition may have: the suite's, or lower (None: the suite's)."""
    min_episodes: int | None = None
    """Fewest episodes per condition a passing verdict may rest on: the suite's, or more (None: the suite's)."""


@dataclasses.dataclass(frozen=True)
class RobotConfig:
    """A robot as the actor sees it: rate, limits, sensors, commands and reset (one YAML robot file)."""

    name: str
    """Robot name, recorded with datasets and runs."""
    sim: bool = False
    """True for a file that describes the MuJoCo mirror (the sim node serves only such files, so it never publishes
    on a real robot's topics)."""
    control_rate_hz: float = 10.0
    """Commands per second (the policy's step rate)."""
    mode: Literal["realtime", "lockstep"] = "realtime"
    """realtime: step on a timer at the control rate (real robots); lockstep: step once per sensor frame (the sim
    node in lock-step mode, which advances once per command)."""
    max_episode_steps: int = 100
    """Episode time limit in control steps."""
    max_sensor_age_s: float = 0.0
    """A required sensor older than this [s] holds the robot (0: two control periods)."""
    base_frame: str = "base"
    """frame_id of pose commands and of the TCP pose."""
    tcp_frame: str = "tcp"
    """The TCP's site (MJCF) or body (URDF) name in `arm.model`."""
    workspace_low: tuple[float, float, float] = (0.35, -0.22, 0.015)
    """Workspace box lower corner [m] for the TCP target."""
    workspace_high: tuple[float, float, float] = (0.65, 0.22, 0.30)
    """Workspace box upper corner [m]."""
    max_translation: float = 0.03
    """Largest TCP translation per step [m] (an action component of 1)."""
    max_rotation: float = 0.15
    """Largest TCP rotation per step [rad]."""
    step_bound: Literal["per_axis", "norm"] = "per_axis"
    """per_axis: each step component is bounded; norm: the step's Euclidean norm."""
    nominal_quat: tuple[float, float, float, float] = NOMINAL_QUAT
    """The orientation limits' centre, wxyz (the TCP pointing down)."""
    rotation_low: tuple[float, float, float] = (-0.3, -0.3, -math.pi / 4)
    """Orientation box: rotation vector [rad] from nominal_quat, lower bound."""
    rotation_high: tuple[float, float, float] = (0.3, 0.3, math.pi / 4)
    """Orientation box upper bound [rad]."""
    home_position: tuple[float, float, float] = (0.45, 0.0, 0.25)
    """Home TCP position [m] (reset kind move_home; inside the workspace)."""
    home_quat: tuple[float, float, float, float] = NOMINAL_QUAT
    """Home TCP orientation, wxyz."""
    home_gripper: float = -1.0
    """Home gripper command, -1 open .. +1 closed."""
    cameras: tuple[tuple[str, CameraConfig], ...] = ()
    """Cameras by name (the policy's images/<name>)."""
    arm: ArmConfig = ArmConfig()
    """Arm state source."""
    gripper: GripperConfig = GripperConfig()
    """Gripper state and command."""
    command: CommandConfig = CommandConfig()
    """Arm command interface."""
    reset: ResetConfig = ResetConfig()
    """Episode reset."""
    learner_lost: LearnerLostConfig = LearnerLostConfig()
    """What the actor does while the learner is away."""
    validation: ValidationConfig = ValidationConfig()
    """The suite (and thresholds) a policy must pass before the actor runs it on this robot."""
    path: str = ""
    """The file this was loaded from ('' if built in code)."""

    def __post_init__(self) -> None:
        problems = _check_robot(self)
        if problems:
            raise RobotConfigError(f"{self.path or 'robot config'}: {problems[0]}")

    @property
    def control_period(self) -> float:
        return 1.0 / self.control_rate_hz

    @property
    def sensor_age_limit(self) -> float:
        return self.max_sensor_age_s or 2.0 * self.control_period

    @property
    def camera_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.cameras)

    def camera(self, name: str) -> CameraConfig:
        for camera_name, camera in self.cameras:
            if camera_name == name:
                return camera
        raise KeyError(f"robot {self.name!r} has no camera {name!r} (cameras: {list(self.camera_names)})")

    def sim_camera(self, name: str) -> str | None:
        """The sim camera validation renders camera `name` from (its sim_camera, else the sim camera of the same
        name), or None."""
        mapped = self.camera(name).sim_camera or name
        return mapped if mapped in SIM_CAMERAS else None

    def model_path(self) -> Path | None:
        """The arm model's path (relative paths resolve next to the robot file), or None."""
        if not self.arm.model:
            return None
        model = Path(self.arm.model).expanduser()
        if not model.is_absolute() and self.path:
            model = Path(self.path).resolve().parent / model
        return model

    def suite_location(self) -> str | Path:
        """The robot's validation suite as robot_rl.sim.validation.load_suite takes it: a shipped suite's name, or a file
        (a relative path resolves next to the robot file)."""
        return suite_location(self.validation, self.path)

    def safety_config(self, *, action_dim: int, required_sensors: tuple[str, ...] = ()):
        """The `SafetyConfig` of this robot for a policy with `action_dim` actions."""
        from robot_rl.actor.safety import SafetyConfig

        return SafetyConfig(
            workspace_low=self.workspace_low, workspace_high=self.workspace_high,
            max_translation=self.max_translation, max_rotation=self.max_rotation, step_bound=self.step_bound,
            nominal_quat=self.nominal_quat, rotation_low=self.rotation_low, rotation_high=self.rotation_high,
            action_dim=action_dim, control_period=self.control_period, stale_timeout=self.sensor_age_limit,
            required_sensors=tuple(required_sensors), initial_gripper=self.home_gripper)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (recorded with datasets and runs); `robot_config_from_dict` reads it back."""
        data = dataclasses.asdict(self)
        data["cameras"] = {name: dataclasses.asdict(camera) for name, camera in self.cameras}
        return data


# ----- loading ------------------------------------------------------------------------------------------------------

# YAML layout -> flat RobotConfig fields (the file groups them; the dataclass is flat where the actor reads them).
_GROUPS = {
    "frames": {"base": "base_frame", "tcp": "tcp_frame"},
    "workspace": {"low": "workspace_low", "high": "workspace_high"},
    "limits": {"max_translation": "max_translation", "max_rotation": "max_rotation", "step_bound": "step_bound",
               "nominal_quat": "nominal_quat", "rotation_low": "rotation_low", "rotation_high": "rotation_high"},
    "home": {"position": "home_position", "quat": "home_quat", "gripper": "home_gripper"},
}
_SECTIONS = {"arm": ArmConfig, "gripper": GripperConfig, "command": CommandConfig, "reset": ResetConfig,
             "learner_lost": LearnerLostConfig, "validation": ValidationConfig}
_TOP_LEVEL = ("name", "description", "sim", "control_rate_hz", "mode", "max_episode_steps", "max_sensor_age_s", "cameras",
              *_GROUPS, *_SECTIONS)


def resolve_robot_path(path_or_name: str | Path) -> Path:
    """A robot file path, or the name of a shipped one (``sim_panda`` -> ``robots/sim_panda.yaml``)."""
    text = str(path_or_name)
    candidate = Path(text).expanduser()
    if candidate.suffix in (".yaml", ".yml") or candidate.exists() or "/" in text:
        return candidate
    shipped = ROBOTS_DIR / f"{text}.yaml"
    if shipped.exists():
        return shipped
    known = sorted(p.stem for p in ROBOTS_DIR.glob("*.yaml")) if ROBOTS_DIR.is_dir() else []
    raise RobotConfigError(f"robot {text!r}: no such file, and not a shipped robot (shipped: {', '.join(known)})")


def load_robot_config(path_or_name: str | Path) -> RobotConfig:
    """Read and validate a robot file; any problem is a RobotConfigError naming the file and the key."""
    path = resolve_robot_path(path_or_name)
    data = _read_robot_file(path)
    try:
        robot = robot_config_from_dict(data, path=str(path))
    except RobotConfigError as error:
        message = str(error)
        raise RobotConfigError(message if message.startswith(str(path)) else f"{path}: {message}") from None
    problem = _validation_problem(robot.validation, robot.path)
    if problem:
        raise RobotConfigError(f"{path}: {problem}")
    return robot


def load_validation_config(path_or_name: str | Path) -> tuple[ValidationConfig, str | Path]:
    """A robot file's `validation` section and its suite as robot_rl.sim.validation.load_suite takes it, checked without
    the rest of the file (what the deployment gate needs); RobotConfigError names the file and the key."""
    path = resolve_robot_path(path_or_name)
    data = _read_robot_file(path)
    body = data.get("validation") if isinstance(data, Mapping) else None
    try:
        validation = ValidationConfig() if body is None else _section(ValidationConfig, body, "validation")
    except RobotConfigError as error:
        raise RobotConfigError(f"{path}: {error}") from None
    problem = next(iter(_check_validation(validation)), None) or _validation_problem(validation, str(path))
    if problem:
        raise RobotConfigError(f"{path}: {problem}")
    return validation, suite_location(validation, str(path))


def suite_location(validation: ValidationConfig, robot_path: str) -> str | Path:
    """The suite of a `validation` section as robot_rl.sim.validation.load_suite takes it: a shipped suite's name, or a
    file (a relative path resolves next to the robot file at `robot_path`)."""
    if not Path(validation.suite).suffix:
        return validation.suite
    path = Path(validation.suite).expanduser()
    if not path.is_absolute() and robot_path:
        path = Path(robot_path).resolve().parent / path
    return path


def _read_robot_file(path: Path) -> Any:
    """A robot file's YAML; RobotConfigError names the file (and line) when it cannot be read or parsed."""
    import yaml

    try:
        text = path.read_text()
    except OSError as error:
        raise RobotConfigError(f"robot file {path}: cannot read it ({error.strerror or error})") from None
    try:
        _check_duplicate_keys(yaml.compose(text, Loader=yaml.SafeLoader), path)
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise RobotConfigError(f"{path}{where}: YAML syntax error: {problem}") from None
    return data


def _validation_problem(validation: ValidationConfig, robot_path: str) -> str | None:
    """Why a robot file's `validation` section cannot be used (its suite unreadable, a threshold looser than the
    suite's), or None."""
    if validation == ValidationConfig():
        return None
    from robot_rl.actor.deploy_gate import looser, suite_thresholds

    try:
        thresholds = suite_thresholds(suite_location(validation, robot_path))
    except ValueError as error:
        return f"validation.suite: {error}"
    for key, reference in thresholds.items():
        value = getattr(validation, key)
        if value is not None and looser(key, value, reference):
            way = "lower" if key == "max_drop" else "higher"
            return (f"validation.{key}: {value:g} is looser than suite {validation.suite}'s {reference:g} (the "
                    f"robot file may only tighten the suite's thresholds: a {way} {key})")
    return None


def _check_duplicate_keys(node, path: Path) -> None:
    """A key given twice in one mapping is an error (YAML would silently keep the last one)."""
    import yaml

    if isinstance(node, yaml.nodes.MappingNode):
        seen = set()
        for key, value in node.value:
            name = getattr(key, "value", None)
            if name in seen:
                mark = key.start_mark
                raise RobotConfigError(f"{path}:{mark.line + 1}:{mark.column + 1}: duplicate key {name!r} (the "
                                       "first one would be ignored)")
            seen.add(name)
            _check_duplicate_keys(value, path)
    elif isinstance(node, yaml.nodes.SequenceNode):
        for item in node.value:
            _check_duplicate_keys(item, path)


def robot_config_from_dict(data: Any, path: str = "") -> RobotConfig:
    """Build a RobotConfig from the robot file's YAML layout (or `RobotConfig.to_json()`'s flat one)."""
    if not isinstance(data, Mapping):
        raise RobotConfigError(f"the robot file must be a mapping of keys, got {type(data).__name__}")
    flat_fields = {f.name for f in dataclasses.fields(RobotConfig)}
    if "workspace_low" in data:  # to_json()'s flat layout
        unknown = sorted(set(data) - flat_fields)
        if unknown:
            raise RobotConfigError(f"{unknown[0]}: unknown key")
        values = {k: v for k, v in data.items() if k not in ("cameras", *_SECTIONS, "path")}
    else:
        unknown = [k for k in data if k not in _TOP_LEVEL]
        if unknown:
            raise RobotConfigError(f"{unknown[0]}: unknown key (known: {', '.join(_TOP_LEVEL)})")
        values = {k: data[k] for k in ("name", "sim", "control_rate_hz", "mode", "max_episode_steps",
                                        "max_sensor_age_s") if k in data}
        for group, mapping in _GROUPS.items():
            body = data.get(group)
            if body is None:
                continue
            if not isinstance(body, Mapping):
                raise RobotConfigError(f"{group}: must be a mapping, got {_kind(body)}")
            for key, value in body.items():
                if key not in mapping:
                    raise RobotConfigError(f"{group}.{key}: unknown key (known: {', '.join(mapping)})")
                if mapping[key] is not None:
                    values[mapping[key]] = value
    if "name" not in values:
        raise RobotConfigError("name: missing (every robot file names its robot)")
    home_gripper = values.get("home_gripper")
    if isinstance(home_gripper, str):
        if home_gripper not in GRIPPER_WORDS:
            raise RobotConfigError(f"home.gripper: {home_gripper!r} must be open, closed or a number in [-1, 1]")
        values["home_gripper"] = GRIPPER_WORDS[home_gripper]
    hints = typing.get_type_hints(RobotConfig)
    converted: dict[str, Any] = {}
    for name, value in values.items():
        converted[name] = _convert(value, hints[name], _yaml_key(name))
    for section, cls in _SECTIONS.items():
        body = data.get(section)
        if body is not None:
            converted[section] = _section(cls, body, section)
    cameras = data.get("cameras")
    if cameras is not None:
        if not isinstance(cameras, Mapping):
            raise RobotConfigError(f"cameras: must be a mapping of camera name -> settings, got {_kind(cameras)}")
        converted["cameras"] = tuple((str(name), _section(CameraConfig, body, f"cameras.{name}"))
                                     for name, body in cameras.items())
    try:
        return RobotConfig(**converted, path=path)
    except RobotConfigError as error:
        prefix = f"{path}: " if path else "robot config: "
        message = str(error)
        raise RobotConfigError(message[len(prefix):] if message.startswith(prefix) else message) from None


def _yaml_key(field: str) -> str:
    for group, mapping in _GROUPS.items():
        for key, target in mapping.items():
            if target == field:
                return f"{group}.{key}"
    return field


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


def _section(cls: type, body: Any, where: str):
    if not isinstance(body, Mapping):
        raise RobotConfigError(f"{where}: must be a mapping, got {_kind(body)}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    values = {}
    for key, value in body.items():
        if key not in hints:
            raise RobotConfigError(f"{where}.{key}: unknown key (known: {', '.join(names)})")
        values[key] = _convert(value, hints[key], f"{where}.{key}")
    required = [f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    for name in required:
        if name not in values:
            raise RobotConfigError(f"{where}.{name}: missing")
    return cls(**values)


def _convert(value: Any, hint: Any, key: str) -> Any:
    """Check `value` against a field's type hint (str, int, float, bool, Literal, tuples, Optional)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union or (origin is not None and str(origin) == "<class 'types.UnionType'>") or \
            type(hint).__name__ == "UnionType":
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(value, inner[0], key)
    if origin is Literal:
        if value not in args:
            raise RobotConfigError(f"{key}: {value!r} must be one of {', '.join(str(a) for a in args)}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise RobotConfigError(f"{key}: must be a list, got {_kind(value)} {value!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(v, args[0], f"{key}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise RobotConfigError(f"{key}: must have {len(args)} values, got {len(value)}")
        return tuple(_convert(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise RobotConfigError(f"{key}: must be a finite number, got {value!r}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise RobotConfigError(f"{key}: must be an integer, got {value!r}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise RobotConfigError(f"{key}: must be true or false, got {value!r}")
        return value
    if dataclasses.is_dataclass(hint):
        return _section(hint, value, key)
    if hint is str:
        if not isinstance(value, str):
            raise RobotConfigError(f"{key}: must be a string, got {_kind(value)} {value!r}")
        return value
    return value


def _check_robot(robot: RobotConfig) -> list[str]:
    """Range and consistency checks; returns problems as 'key: what is wrong'."""
    problems = []
    if not robot.name or not isinstance(robot.name, str):
        problems.append("name: must be a non-empty string")
    if not 0 < robot.control_rate_hz <= 1000:
        problems.append(f"control_rate_hz: {robot.control_rate_hz} must be in (0, 1000]")
    if robot.max_episode_steps < 1:
        problems.append(f"max_episode_steps: {robot.max_episode_steps} must be >= 1")
    if robot.max_sensor_age_s < 0:
        problems.append(f"max_sensor_age_s: {robot.max_sensor_age_s} must be >= 0 (0: two control periods)")
    low, high = robot.workspace_low, robot.workspace_high
    if not all(a < b for a, b in zip(low, high)):
        problems.append(f"workspace: low {list(low)} must be below high {list(high)} on every axis")
    elif not all(a <= p <= b for a, p, b in zip(low, robot.home_position, high)):
        problems.append(f"home.position: {list(robot.home_position)} is outside the workspace box")
    if not 0 < robot.max_translation <= 0.2:
        problems.append(f"limits.max_translation: {robot.max_translation} must be in (0, 0.2] m per step")
    if not 0 < robot.max_rotation <= 1.0:
        problems.append(f"limits.max_rotation: {robot.max_rotation} must be in (0, 1] rad per step")
    if not all(a <= b for a, b in zip(robot.rotation_low, robot.rotation_high)):
        problems.append("limits: rotation_low must not exceed rotation_high")
    for key, quat in (("limits.nominal_quat", robot.nominal_quat), ("home.quat", robot.home_quat)):
        if abs(math.sqrt(sum(q * q for q in quat)) - 1.0) > 1e-3:
            problems.append(f"{key}: {list(quat)} is not a unit quaternion (w, x, y, z)")
    # r with home = exp(r) * nominal: the safety layer's orientation convention
    home_rotation = rotvec_from_quat(ScalarOps, quat_multiply(robot.home_quat, quat_conjugate(robot.nominal_quat)))
    if not all(a - 1e-6 <= r <= b + 1e-6 for a, r, b in zip(robot.rotation_low, home_rotation, robot.rotation_high)):
        problems.append(f"home.quat: {list(robot.home_quat)} is {[round(r, 3) for r in home_rotation]} rad from "
                        f"limits.nominal_quat, outside the orientation box [{list(robot.rotation_low)}, "
                        f"{list(robot.rotation_high)}]")
    if not -1.0 <= robot.home_gripper <= 1.0:
        problems.append(f"home.gripper: {robot.home_gripper} must be in [-1 open, 1 closed]")
    names = [name for name, _ in robot.cameras]
    for name, camera in robot.cameras:
        if not name.replace("_", "").isalnum():
            problems.append(f"cameras.{name}: camera names are letters, digits and _ (they become images/<name>)")
        if not camera.topic:
            problems.append(f"cameras.{name}.topic: must not be empty")
        if camera.roi is not None and (camera.roi[2] <= 0 or camera.roi[3] <= 0 or min(camera.roi[:2]) < 0):
            problems.append(f"cameras.{name}.roi: {list(camera.roi)} needs x, y >= 0 and width, height > 0")
        if camera.width < 0 or camera.height < 0 or camera.rate_hz < 0:
            problems.append(f"cameras.{name}: width, height and rate_hz must be >= 0")
    if len(set(names)) != len(names):
        problems.append("cameras: duplicate camera names")
    problems += _check_sim_cameras(robot)
    arm, gripper, command, reset = robot.arm, robot.gripper, robot.command, robot.reset
    needs_model = arm.state == "joint_states" or command.interface == "joint_trajectory"
    if needs_model and not arm.model:
        why = "arm.state joint_states" if arm.state == "joint_states" else "command.interface joint_trajectory"
        problems.append(f"arm.model: {why} needs the arm's MJCF or URDF for kinematics")
    model = robot.model_path()
    if needs_model and arm.model and robot.path and not model.is_file():
        problems.append(f"arm.model: {model} {'is a folder' if model.is_dir() else 'does not exist'} (the arm's MJCF "
                        "or URDF, relative to the robot file; make a URDF from the robot's description, e.g. with "
                        "xacro)")
    if needs_model and not arm.joint_names:
        problems.append("arm.joint_names: needed for joint_states / joint_trajectory (base to tip)")
    if arm.state == "tcp_pose" and not arm.tcp_pose_topic:
        problems.append("arm.tcp_pose_topic: must not be empty with arm.state tcp_pose")
    if arm.twist == "topic" and not arm.twist_topic:
        problems.append("arm.twist_topic: must not be empty with arm.twist topic")
    if gripper.state == "joint_states" and not gripper.finger_joints:
        problems.append("gripper.finger_joints: gripper.state joint_states needs the finger joint names")
    if gripper.opening_per_unit == 0 or gripper.max_opening <= 0:
        problems.append("gripper: opening_per_unit must not be 0 and max_opening must be > 0")
    if gripper.command == "JointTrajectory" and not gripper.command_joints:
        problems.append("gripper.command_joints: a JointTrajectory gripper command needs the joint names")
    if command.time_from_start_s < 0:
        problems.append(f"command.time_from_start_s: {command.time_from_start_s} must be >= 0")
    if reset.kind == "service" and not reset.service:
        problems.append("reset.service: must not be empty with reset.kind service")
    if reset.timeout_s <= 0 or reset.home_tolerance <= 0:
        problems.append("reset: timeout_s and home_tolerance must be > 0")
    if not (math.isfinite(robot.learner_lost.after_s) and robot.learner_lost.after_s > 0):
        problems.append(f"learner_lost.after_s: {robot.learner_lost.after_s!r} must be > 0")
    problems += _check_validation(robot.validation)
    if robot.mode == "lockstep" and reset.kind == "move_home":
        problems.append("mode: lockstep steps once per frame of the sim node; reset.kind move_home needs realtime")
    return problems


def _check_validation(validation: ValidationConfig) -> list[str]:
    """Range checks of the `validation` section; returns problems as 'key: what is wrong'."""
    problems = []
    if not validation.suite:
        problems.append("validation.suite: must not be empty (a shipped suite's name or a suite YAML file)")
    for key in ("min_success", "max_drop"):
        value = getattr(validation, key)
        if value is not None and not 0 <= value <= 1:
            problems.append(f"validation.{key}: {value} must be in [0, 1]")
    if validation.min_episodes is not None and validation.min_episodes < 1:
        problems.append(f"validation.min_episodes: {validation.min_episodes} must be >= 1")
    return problems


def _check_sim_cameras(robot: RobotConfig) -> list[str]:
    """The cameras' sim mappings: known sim cameras, usable mounts, one pose per sim camera."""
    problems, poses = [], {}
    for name, camera in robot.cameras:
        key, mount = f"cameras.{name}", camera.sim_mount
        if camera.sim_camera and camera.sim_camera not in SIM_CAMERAS:
            problems.append(f"{key}.sim_camera: {camera.sim_camera!r} is not a camera of the sim mirror (it has "
                            f"{', '.join(SIM_CAMERAS)})")
            continue
        if mount is not None and mount.position is None and mount.quat is None:
            problems.append(f"{key}.sim_mount: give position [x, y, z], quat [w, x, y, z] or both")
        if mount is not None and mount.quat is not None and not any(mount.quat):
            problems.append(f"{key}.sim_mount.quat: [0, 0, 0, 0] is not a rotation (w, x, y, z, non-zero)")
        sim = camera.sim_camera or name
        if sim not in SIM_CAMERAS:
            if mount is not None:
                problems.append(f"{key}.sim_mount: camera {name} has no sim camera to mount: add sim_camera "
                                f"({' or '.join(SIM_CAMERAS)})")
        elif poses.setdefault(sim, (name, mount))[1] != mount:
            problems.append(f"{key}.sim_mount: cameras {poses[sim][0]} and {name} both render from sim camera {sim} "
                            "with different sim_mount (one sim camera has one pose)")
    return problems
