"""The actor node: sensors -> observation -> policy (or the human) -> safety -> commands, episodes, transitions out.

Run::

    python -m robot_rl.ros.actor_node --ros-args -r __ns:=/robot1 -p actor_id:=robot1 -p robot:=robots/my_arm.yaml

The robot file (``robot``, robot_rl.robot_config; default ``sim_panda``, the sim node's own topics) names the robot's
topics, message types and QoS, its rate, limits, episode length, command interface and reset; the node knows no
robot of its own. Topics (relative names resolve in the node's namespace; learner topics are absolute and shared by
every actor):

====================================  ===  =====================================================================
cameras.<name>.topic                  in   sensor_msgs/Image (any size, rgb8 / bgr8 / rgba8 / bgra8 / mono8 / mono16
                                           / yuv422) or CompressedImage; cropped / resized to the policy's size
arm.tcp_pose_topic or                 in   the TCP pose (PoseStamped), or forward kinematics of the arm's model from
arm.joint_states_topic                     sensor_msgs/JointState; the twist from arm.twist_topic or derived
gripper.topic or finger joints        in   the gripper opening (its own JointState, or finger joints of joint_states)
sim/object_state                      in   privileged task state (sim only; observation key object_state)
task/reward, task/success             in   per-step reward and success (sim task, or a reward classifier)
teleop/twist, teleop/gripper,         in   the human: while ``engaged`` is true the human's command is executed
teleop/engaged, teleop/episode             and the transition is flagged; episode keys success / failure / reset
safety/estop                          in   true latches a hold of every command until false
/learner/weights, /learner/ack        in   versioned policy weights (transient-local); cumulative acks
gripper.command_topic,                out  the safe command of each step (gripper first, then the arm): a
command.pose_topic or                      PoseStamped target, or a one-point JointTrajectory by differential IK
command.joint_trajectory_topic
actor/episode                         out  index of each episode started
/actor/transitions                    out  msgpack batches of transitions with actor id + sequence numbers
====================================  ===  =====================================================================

No message can crash the node: each subscription is guarded, and a message that cannot be used is dropped with a
log line naming the topic and the reason (counted in the status file's ``rejected``). A publisher whose QoS does not
match the robot file's (a reliable subscription and a best-effort camera driver) is logged with the fix. Every reason
the node waits (weights, the reset, a lock-step frame, the human's command in lock-step) or holds (stale sensors,
safety) is logged once it lasts and counted in the status file (``waits_s`` in seconds, ``holds`` by reason).

Resets (the robot file's ``reset``): ``service``: the std_srvs/Trigger client ``reset.service`` starts each episode
(``reset_service`` overrides it; ``none``: no reset call); ``move_home``: the actor drives the TCP to the home pose
through the command interface within the safety limits; ``human``: it waits for the human's reset key. A call
not answered within ``reset_timeout_s`` (a lost response, a sim or driver that died during the reset) is given up
and made again, with a log line each time, as is a failed one; while no server is up the actor waits for one. A
sensor frame that does not follow within ``frame_timeout_s`` (after the reset; in lock-step also after each command:
the sim died or was restarted) gives the episode up and resets again, with a log line; the learner closes the given-up
episode. The status file counts ``reset_attempts``, ``reset_timeouts``, ``reset_failures``, ``frame_timeouts`` and
``episodes_given_up`` and says what the actor is ``waiting_for``.

The frozen base a learner's head names comes from this host if it has the same bytes (the weights carry its
sha256), else once over the wire from the learner, into the file cache (robot_rl.ros.file_share); a copy here that
differs stops the node with one line naming the base and both hashes (exit status 2).

Weights: from the learner (``/learner/weights``), or from a policy file with ``weights_path`` (the learner's or
``robot-rl train``'s ``<run_dir>/policy.msgpack``): then the actor acts at once and never waits for a learner. A file
that is missing or is not a policy file is one error line and exit status 2, as is any invalid parameter (unknown
names included).

The deployment gate: on a real robot (a robot file without ``sim: true``) a saved policy (``weights_path``), or the
frozen base a learner's residual / noise head names, must have a passing validation record for this robot file
(``robot-rl validate``, robot_rl.validate): without one the node exits with status 2 and a line saying how to validate
it (learner weights naming such a base are refused, logged). ``allow_unvalidated:=true`` runs it anyway, logged as an
error at start-up and at every episode (and in the status file's ``unvalidated``). A plain SAC policy trained online by
the learner changes with every update: no record applies to it (the safety layer and the human supervise).

Modes: ``lockstep`` steps once per new sensor frame (the sim node in lock-step advances once per pose command);
``realtime`` steps on a timer at ``control_period`` with the newest readings. A stale or missing sensor (older than
``max_sensor_age``) holds the robot and is logged (throttled); a malformed message is dropped with a log line. Every
command goes through robot_rl.safety.

The actor acts with the newest weights it has. The learner is away when nothing of it (acks, weights) arrived for the
robot file's ``learner_lost.after_s``: the actor then keeps acting with the last weights (``learner_lost.action:
act``) or holds the policy's commands until it is back (``hold``; a human who takes over still moves the robot), and
either way keeps unacknowledged transitions in a bounded outbox (re-sent until acknowledged). ``max_weight_lag``
(lock-step only) makes it wait, at most ``weight_wait_s`` per step, for weights that have seen all but that many of
its transitions, so a slow learner trains on the same schedule as the in-process loop (one actor per learner: the learner counts the
transitions it trained on over the whole run, so the actor measures that count's growth since its first weights).
"""

from __future__ import annotations

import collections
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from robot_rl.files import atomic_write_text
from robot_rl.ros import qos
from robot_rl.ros.node_util import NodeStartupError, Range, check_ranges, declare_parameters, relative_name, \
    topic_publisher

NODE_NAME = "actor"
MODES = ("", "lockstep", "realtime")
POLICIES = ("learner", "none")
TELEOP_TIMEOUT_S = 0.5
OBS_MODES = ("state", "pixels", "state+pixels")
DEFAULT_IMAGE_SIZE = 64  # the record / train default; a policy's own observation spec wins
RESET_LOG_EVERY_S = 5.0
RESET_RETRY_AFTER_FAILURE_S = 1.0  # a server that answers "failed" is not asked again at once

PARAMETERS: tuple[tuple[str, object, str], ...] = (
    ("actor_id", "robot0", "this actor's id in transitions (letters, digits, _ . -)"),
    ("robot", "sim_panda", "robot file (path, or a shipped name such as sim_panda): rate, limits, sensors, "
                           "commands, reset"),
    ("task", "PickCube-v0", "task name recorded with episodes; a sim task's registered episode length applies"),
    ("obs_mode", "", "state | pixels | state+pixels: state (+ object_state) and/or every camera of the robot"),
    ("observation_keys", ["state", "images/front", "images/wrist"], "policy observation keys (no obs_mode)"),
    ("image_size", 0, "policy image side [px] (0: the policy's own; 64 without a policy)"),
    ("action_dim", 4, "4: (dx, dy, dz, gripper) | 7: with rotations"),
    ("mode", "", "lockstep | realtime ('': the robot file's)"),
    ("control_period", 0.0, "seconds between commands in realtime mode (0: the robot file's rate)"),
    ("max_sensor_age", 0.0, "a sensor older than this [s] holds the robot (0: the robot file's)"),
    ("max_episode_steps", 0, "episode time limit in steps (0: the sim task's, else the robot file's)"),
    ("episodes", 0, "stop after this many episodes (0: run until stopped)"),
    ("policy", "learner", "learner: weights from the learner or weights_path | none: hold unless the human acts "
                          "(episodes start once a teleop node is up)"),
    ("weights_path", "", "policy to act with at once, never waiting for a learner: a SAC policy.msgpack, a policy "
                         "folder (train-bc, distill) or a run folder holding either"),
    ("device", "auto", "torch device of a torch policy: auto | cpu | cuda | cuda:N"),
    ("inference_steps", 0, "DDIM steps per chunk of a diffusion policy (0: as saved in its policy.json)"),
    ("chunk_execute", 0, "actions of each chunk executed before the next is used (0: the policy's chunk length)"),
    ("ensemble_decay", -1.0, "realtime: temporal ensembling of overlapping chunks, weight exp(-decay * i) "
                             "(< 0: off, the newest chunk wins)"),
    ("deterministic", False, "act with the policy mean (evaluation)"),
    ("seed", 0, "policy sampling seed"),
    ("stream_transitions", True, "send transitions to the learner"),
    ("record_path", "", "write every finished episode to this zarr dataset (demos from teleop)"),
    ("outbox_capacity", 3000, "unacknowledged transitions kept (the oldest is dropped beyond)"),
    ("resend_after", 2.0, "re-send an unacknowledged transition after this many seconds at least (longer when "
                          "the learner's acknowledgements are measured to take longer)"),
    ("max_weight_lag", 0, "lockstep: wait for weights that saw all but this many transitions (0: off)"),
    ("weight_wait_s", 5.0, "longest wait per step for such weights"),
    ("reset_service", "", "std_srvs/Trigger service that starts an episode ('': the robot file's reset; none: "
                          "no reset, episodes follow each other)"),
    ("reset_timeout_s", 0.0, "give up a reset not done within this many seconds, and try again (0: the robot "
                             "file's)"),
    ("frame_timeout_s", 10.0, "no sensor frame this long after a reset (lockstep: after a command): the sim or "
                              "driver is gone; the episode is given up and the reset called again"),
    ("stats_path", "", "write a JSON status file here every second (`robot-rl status` reads it)"),
    ("eval_out", "", "with weights_path and episodes: when they are done, write `robot-rl eval`'s eval.json to this "
                     "folder (auto: an eval folder next to the policy, as robot-rl eval)"),
    ("allow_unvalidated", False, "real robot: run a policy (weights_path, or the base of a learner's head) that has "
                                 "no passing validation record for this robot file (logged at every episode)"),
)
"""The node's ROS parameters (name, default, description)."""

PARAMETER_RANGES: dict[str, Range] = {
    "image_size": Range(16, high=640, also={0: "the policy's own"}),  # the sim's, train's and record's range
    "control_period": Range(above=0, also={0: "the robot file's rate"}),
    "max_sensor_age": Range(above=0, also={0: "the robot file's"}),
    "max_episode_steps": Range(1, also={0: "the sim task's, else the robot file's"}),
    "episodes": Range(1, also={0: "run until stopped"}),
    "inference_steps": Range(1, also={0: "as saved in its policy.json"}),
    "chunk_execute": Range(1, also={0: "the policy's chunk length"}),
    "ensemble_decay": Range(),
    "seed": Range(0),
    "max_weight_lag": Range(0),
    "weight_wait_s": Range(above=0),
    "reset_timeout_s": Range(above=0, also={0: "the robot file's"}),
    "frame_timeout_s": Range(above=0),
}
"""Ranges of the numeric parameters (checked at start-up: one error line, exit status 2). outbox_capacity and
resend_after are checked by their twin, robot_rl.transport.Outbox; a policy checks chunk_execute and
inference_steps against itself when it is loaded."""


def _choice(param, name: str, choices: tuple[str, ...]) -> str:
    value = str(param(name))
    if value not in choices:
        raise NodeStartupError(f"{name}={value!r} must be one of {', '.join(repr(c) for c in choices)}")
    return value


class ActorNode:
    """rclpy node around an `ActorSession` (see the module doc)."""

    def __init__(self, *, node_name: str = NODE_NAME, context=None, cli_args: list[str] | None = None):
        import dataclasses

        import rclpy
        from geometry_msgs.msg import PoseStamped, TwistStamped
        from sensor_msgs.msg import CompressedImage, Image, JointState
        from std_msgs.msg import Bool, Float32, Float32MultiArray, Float64, String, UInt8MultiArray, UInt32
        from std_srvs.srv import Trigger
        from trajectory_msgs.msg import JointTrajectory

        from robot_rl.actor import ActorSession
        from robot_rl.robot_config import RobotConfigError, load_robot_config
        from robot_rl.safety import Safety
        from robot_rl.sensors import SensorCache, TwistEstimator, sensors_for
        from robot_rl.transport import LearnerWatch, Outbox, make_source

        self.node = rclpy.create_node(node_name, context=context, cli_args=cli_args)
        node = self.node
        self._log = node.get_logger()
        param = declare_parameters(node, PARAMETERS)
        self._param = param
        check_ranges(node.get_name(), param, PARAMETER_RANGES)
        try:
            self.robot = load_robot_config(str(param("robot")))
        except RobotConfigError as error:
            raise NodeStartupError(f"robot: {error}") from None
        robot = self.robot
        self.mode = _choice(param, "mode", MODES) or robot.mode
        self.policy_kind = _choice(param, "policy", POLICIES)
        obs_mode = _choice(param, "obs_mode", ("", *OBS_MODES))
        self.reset_timeout_s = float(param("reset_timeout_s")) or robot.reset.timeout_s
        self.frame_timeout_s = float(param("frame_timeout_s"))
        if obs_mode:
            self.observation_keys = ("state", *(("object_state",) if obs_mode != "pixels" else ()),
                                     *((f"images/{c}" for c in robot.camera_names) if "pixels" in obs_mode else ()))
        else:
            self.observation_keys = tuple(str(k) for k in param("observation_keys"))
        try:
            self.required = sensors_for(self.observation_keys)
        except ValueError as error:
            raise NodeStartupError(f"observation_keys: {error}") from None
        for sensor in self.required:
            if sensor.startswith("camera/") and sensor[len("camera/"):] not in robot.camera_names:
                raise NodeStartupError(f"observation key images/{sensor[len('camera/'):]}: robot {robot.name} "
                                       f"({robot.path}) has no such camera (cameras: {list(robot.camera_names)})")
        self.action_dim = int(param("action_dim"))
        if self.action_dim not in (4, 7):
            raise NodeStartupError(f"action_dim={self.action_dim} must be 4 (dx, dy, dz, gripper) or 7 (with rotations)")
        self.image_size = int(param("image_size"))
        self.control_dt = float(param("control_period")) or robot.control_period
        self.max_translation, self.max_rotation = robot.max_translation, robot.max_rotation
        self.task = str(param("task"))
        max_steps = int(param("max_episode_steps"))
        if not max_steps:
            from robot_rl.loop import sim_task_episode_steps

            max_steps = sim_task_episode_steps(self.task) or robot.max_episode_steps
        max_age = float(param("max_sensor_age")) or robot.sensor_age_limit
        safety_config = robot.safety_config(action_dim=self.action_dim, required_sensors=self.required)
        safety = Safety(dataclasses.replace(safety_config, stale_timeout=max_age))
        self.kinematics = None
        if robot.arm.state == "joint_states" or robot.command.interface == "joint_trajectory":
            from robot_rl.kinematics import ArmKinematics, KinematicsError

            try:
                self.kinematics = ArmKinematics.from_file(robot.model_path(), robot.arm.joint_names, robot.tcp_frame)
            except (KinematicsError, OSError, ValueError) as error:
                raise NodeStartupError(f"robot {robot.path}: arm.model / arm.joint_names / frames.tcp: {error}") from None
        try:
            self.source = make_source(str(param("actor_id")))
        except ValueError as error:
            raise NodeStartupError(f"actor_id: {error}") from None
        try:  # the twins' own checks
            self.outbox = Outbox(int(param("outbox_capacity")), float(param("resend_after")))
        except ValueError as error:
            raise NodeStartupError(f"outbox_capacity / resend_after: {error}") from None
        self.session = ActorSession(safety, self.source, self.outbox, max_episode_steps=max_steps)
        self.learner_watch = LearnerWatch(robot.learner_lost.after_s)
        self.sensors = SensorCache(self.observation_keys, max_age_s=max_age)
        self._twist_estimator = TwistEstimator() if robot.arm.twist == "derived" else None
        self._last_pose_stamp, self._lockstep_clock = -math.inf, 0.0
        self._image_transforms: dict[tuple[str, int], object] = {}
        self._policy_image_sizes: dict[str, int] = {}
        self._joint_positions: np.ndarray | None = None  # measured arm joints, robot.arm.joint_names order
        self._ik_seed: np.ndarray | None = None  # the last commanded joints (joint_trajectory commands)
        self.episodes_wanted = int(param("episodes"))
        self.deterministic = bool(param("deterministic"))
        self.seed = int(param("seed"))
        self.stream = bool(param("stream_transitions"))
        self.max_weight_lag = int(param("max_weight_lag"))
        self.weight_wait_s = float(param("weight_wait_s"))
        self.stats_path = Path(param("stats_path")) if param("stats_path") else None
        self.record_path = Path(param("record_path")) if param("record_path") else None
        self.weights_version = 0
        self.weights_transitions = 0
        self._tick_expected: float | None = None
        self._tick_late: collections.deque[float] = collections.deque(maxlen=100_000)
        self.ticks_missed = 0
        # The learner's count of trained transitions when its first weights arrived: the count is the run's (every
        # actor and every earlier run of this one), so only its growth since then is this run's share.
        self._trained_base: int | None = None
        self.results: list[dict] = []
        self._episode_started = time.monotonic()
        self.learner_done = False  # the learner's newest weights are its final ones (budget reached)
        self._policy_files = None  # robot_rl.ros.file_share.PolicyFiles, made for the first weights naming a base
        self.weights_used_at: collections.deque[tuple[int, float]] = collections.deque(maxlen=200)
        self.transitions_out_bytes = 0
        self.transitions_out_messages = 0
        from robot_rl.learner_evals import RateWindow

        self._rate_window = RateWindow()
        self.rejected: collections.Counter[str] = collections.Counter()
        self._rejected_logged: dict[str, float] = {}
        self.waits: collections.Counter[str] = collections.Counter()  # timer ticks spent waiting, by reason
        self.holds: collections.Counter[str] = collections.Counter()  # commands held, by reason
        self._wait_logged: dict[str, float] = {}
        self.incompatible_qos: collections.Counter[str] = collections.Counter()
        self.done = False
        self.exit_status = 0

        self._sensor_topics: dict[str, str] = {}  # sensor -> topic (log lines name the topic)
        for sensor in self.required:
            if sensor.startswith("camera/"):
                camera = robot.camera(sensor[len("camera/"):])
                message_type = CompressedImage if camera.type == "CompressedImage" else Image
                self._subscribe(message_type, camera.topic, lambda msg, s=sensor: self._on_image(s, msg),
                                qos.sensor_qos(camera.qos), sensor)
        arm, gripper = robot.arm, robot.gripper
        if arm.state == "tcp_pose":
            self._subscribe(PoseStamped, arm.tcp_pose_topic, self._on_tcp_pose, qos.sensor_qos(arm.qos), "tcp_pose")
        if arm.twist == "topic":
            self._subscribe(TwistStamped, arm.twist_topic, self._on_tcp_twist, qos.sensor_qos(arm.qos), "tcp_twist")
        if gripper.state == "topic":
            self._subscribe(JointState, gripper.topic, self._on_gripper, qos.sensor_qos(gripper.qos), "gripper")
        if self.kinematics is not None or gripper.state == "joint_states":
            self._subscribe(JointState, arm.joint_states_topic, self._on_joint_states, qos.sensor_qos(arm.qos),
                            "joint_states")
        if "object_state" in self.required:
            self._subscribe(Float32MultiArray, relative_name(qos.SIM_OBJECT_STATE), self._on_object_state,
                            qos.qos_profile(qos.SENSORS), "object_state")
        events = qos.qos_profile(qos.EVENTS)
        for message_type, topic, callback, profile, what in (
                (Float32, qos.TASK_REWARD, self._on_reward, events, "task/reward"),
                (Bool, qos.TASK_SUCCESS, self._on_success, events, "task/success"),
                (TwistStamped, qos.TELEOP_TWIST, self._on_teleop_twist, None, "teleop/twist"),
                (Float64, qos.TELEOP_GRIPPER, self._on_teleop_gripper, None, "teleop/gripper"),
                (Bool, qos.TELEOP_ENGAGED, self._on_teleop_engaged, None, "teleop/engaged"),
                (String, qos.TELEOP_EPISODE, self._on_episode_key, None, "teleop/episode"),
                (Bool, qos.SAFETY_ESTOP, self._on_estop, None, "safety/estop")):
            self._subscribe(message_type, relative_name(topic), callback, profile or qos.topic_qos(topic), what)
        self._subscribe(UInt8MultiArray, qos.LEARNER_WEIGHTS, self._on_weights, qos.topic_qos(qos.LEARNER_WEIGHTS),
                        "learner/weights")
        self._subscribe(UInt8MultiArray, qos.LEARNER_ACK, self._on_ack, qos.topic_qos(qos.LEARNER_ACK), "learner/ack",
                        matched=self._on_learner_matched)
        commands_qos = qos.qos_profile(qos.COMMANDS)
        command = robot.command
        if command.interface == "pose":
            self._pose_pub = node.create_publisher(PoseStamped, command.pose_topic, commands_qos)
        else:
            self._trajectory_pub = node.create_publisher(JointTrajectory, command.joint_trajectory_topic, commands_qos)
        self._gripper_pub = node.create_publisher(
            Float64 if gripper.command == "Float64" else JointTrajectory, gripper.command_topic, commands_qos)
        self._episode_pub = topic_publisher(node, UInt32, qos.ACTOR_EPISODE)
        self._transitions_pub = node.create_publisher(UInt8MultiArray, qos.ACTOR_TRANSITIONS,
                                                      qos.topic_qos(qos.ACTOR_TRANSITIONS))
        self._Float64, self._UInt32 = Float64, UInt32
        reset_service = str(param("reset_service"))
        self.reset_kind = "none" if reset_service == "none" else "service" if reset_service else robot.reset.kind
        if self.reset_kind == "service":
            reset_service = reset_service or robot.reset.service
        self._reset_client = node.create_client(Trigger, reset_service) if self.reset_kind == "service" else None
        self._reset_name = self._reset_client.service_name if self._reset_client is not None else ""
        self._Trigger = Trigger

        # per-step inputs
        self._task_events: list[tuple[float, bool]] = []
        self._last_reward = 0.0
        self._episode_key: str | None = None
        self._teleop_engaged = False
        self._teleop_seen = False  # the teleop node's latched engaged state has arrived
        self._teleop_twist: tuple[np.ndarray, np.ndarray, float] | None = None
        self._teleop_twist_stamp = -math.inf  # header stamp of the newest teleop twist
        self._human_wait: tuple[float, float] | None = None  # (frame stamp, monotonic start) of a wait for the human
        self._teleop_gripper: float | None = None
        # episode state machine: "idle" -> "resetting" -> "starting" -> "running" -> "idle"
        self._phase = "idle"
        self._reset_future = None
        self._reset_sent_at = 0.0  # monotonic time of the pending reset call
        self._reset_wait_started: float | None = None  # monotonic time this episode's reset began
        self._reset_attempt = 0  # calls made for this episode's reset
        self._reset_retry_at = 0.0  # monotonic time before which no reset call is made (after a failed one)
        self._reset_logged = -math.inf
        self.reset_counters: collections.Counter[str] = collections.Counter()
        self._frame_due_since: float | None = None  # monotonic time since which a sensor frame is awaited
        self.waiting_for: str | None = None
        self._wait_since: float | None = None
        self._wait_last = 0.0
        self._reset_requested_at_stamp = -math.inf
        self._pending_object_state = None
        self._last_stepped_stamp = -math.inf
        self._commanded_since_frame = False
        self._wait_started: float | None = None
        self._recorder = None
        self._episode_steps: list[tuple] = []
        self._last_stats = 0.0

        self.allow_unvalidated = bool(param("allow_unvalidated"))
        self.unvalidated: str | None = None  # why the policy acting on this real robot is not validated, if it is not
        self.weights_path = str(param("weights_path"))
        self.eval_out = str(param("eval_out"))
        if self.eval_out and not (self.weights_path and self.episodes_wanted):
            raise NodeStartupError(f"eval_out={self.eval_out!r} evaluates a saved policy over a number of episodes: "
                                   "give weights_path and episodes too")
        if self.weights_path:
            problem = self._deployment_problem(self.weights_path)
            if problem:
                raise NodeStartupError(f"weights_path: {problem}")
            self._load_policy_file(self.weights_path)
        # Real time steps on this timer; lock-step steps on each frame, the timer only polls waiting phases.
        node.create_timer(self.control_dt if self.mode == "realtime" else 0.002, self._on_timer)
        node.create_timer(0.05, self._flush_outbox)
        self._log.info(
            f"actor up: source={self.source} mode={self.mode} "
            f"policy={'saved ' + self.weights_path if self.weights_path else self.policy_kind} "
            f"keys={list(self.observation_keys)} "
            f"sensors={list(self.required)} max_episode_steps={max_steps} namespace={node.get_namespace()}")

    # ----- clock / sensors ---------------------------------------------------------------------------------------
    def _now(self) -> float:
        from robot_rl.ros.node_util import clock_seconds

        return clock_seconds(self.node.get_clock())

    def _reject(self, what: str, error: Exception) -> None:
        """Log a dropped message, at most once a second per topic (rclpy throttles per call site, not per topic)."""
        self.rejected[what] += 1
        now = time.monotonic()
        if now - self._rejected_logged.get(what, -math.inf) >= 1.0:
            self._rejected_logged[what] = now
            topic = self._sensor_topics.get(what)
            where = f" on {topic}" if topic else ""
            self._log.warning(f"dropped malformed {what} message{where}: {error} ({self.rejected[what]} so far)")

    def _subscribe(self, message_type, topic: str, callback, profile, what: str, matched=None) -> None:
        """Subscribe with a guard: no message can crash the node (any error drops the message with a log line),
        and an incompatible QoS offer is logged with what to change."""
        from rclpy.event_handler import SubscriptionEventCallbacks

        def guarded(msg) -> None:
            try:
                callback(msg)
            except Exception as error:  # noqa: BLE001 - a message must never take the actor down
                self._reject(what, error)

        events = SubscriptionEventCallbacks(
            incompatible_qos=lambda info: self._on_incompatible_qos(what, topic, profile, info), matched=matched)
        subscription = self.node.create_subscription(message_type, topic, guarded, profile, event_callbacks=events)
        self._sensor_topics[what] = subscription.topic_name

    def _on_incompatible_qos(self, what: str, topic: str, profile, info) -> None:
        from rclpy.qos import ReliabilityPolicy

        self.incompatible_qos[what] += 1
        policy = getattr(getattr(info, "last_policy_kind", None), "name", str(getattr(info, "last_policy_kind", "")))
        hint = ""
        if profile.reliability == ReliabilityPolicy.RELIABLE and "RELIABILITY" in policy.upper():
            hint = ": the publisher is best-effort (most camera drivers are); set qos: best_effort in the robot file"
        self._log.error(f"incompatible QoS on {self._sensor_topics.get(what, topic)} ({what}): a publisher's offer "
                        f"does not match this subscription ({policy}){hint}", throttle_duration_sec=5.0)

    def _on_image(self, sensor: str, msg) -> None:
        from robot_rl.ros.convert import MessageError, compressed_image_from_msg, image_from_msg, stamp_to_seconds
        from robot_rl.vision import ImageError, to_rgb

        try:
            if hasattr(msg, "format"):  # sensor_msgs/CompressedImage
                image = compressed_image_from_msg(msg)
            else:
                image = to_rgb(image_from_msg(msg), msg.encoding)
            self.sensors.update(sensor, image, stamp_to_seconds(msg.header.stamp))
        except (MessageError, ImageError) as error:
            self._reject(sensor, error)

    def _on_tcp_pose(self, msg) -> None:
        from robot_rl.ros.convert import MessageError, pose_from_msg, stamp_to_seconds

        try:
            position, quat = pose_from_msg(msg)
            self._check_frame(msg.header.frame_id)
        except MessageError as error:
            self._reject("tcp_pose", error)
            return
        self._set_tcp_pose(position, quat, stamp_to_seconds(msg.header.stamp))

    def _check_frame(self, frame_id: str) -> None:
        from robot_rl.ros.convert import MessageError

        if frame_id not in ("", self.robot.base_frame):
            raise MessageError(f"pose in frame {frame_id!r}, expected the robot's base frame "
                               f"{self.robot.base_frame!r} (frames.base in the robot file)")

    def _joint_twist(self, q: np.ndarray, state, index: list[int]) -> tuple[np.ndarray, np.ndarray] | None:
        """The derived TCP twist J(q) qdot where the JointState carries finite velocities of every arm joint (exact
        and instantaneous, like a measured twist); None otherwise (finite differences of poses then)."""
        if self._twist_estimator is None or len(state.velocities) != len(state.names):
            return None
        qdot = np.asarray(state.velocities, dtype=np.float64)[index]
        return self.kinematics.twist(q, qdot) if np.isfinite(qdot).all() else None

    def _set_tcp_pose(self, position, quat, stamp: float, step: bool = True, twist=None) -> None:
        """A new TCP pose (measured, or forward kinematics of the joints); a derived twist follows it (`twist` from
        joint velocities when given, else finite differences of successive poses). Lock-step: the arm state closes
        a frame, so `step` now rather than at the next poll."""
        self.sensors.update("tcp_pose", (np.asarray(position, np.float64), np.asarray(quat, np.float64)), stamp)
        if self._twist_estimator is not None:
            clock = stamp
            if self.mode == "lockstep":  # frames carry the sim's wall-clock stamps: one frame is one control period
                if stamp != self._last_pose_stamp:
                    self._lockstep_clock += self.control_dt
                clock = self._lockstep_clock
            self._last_pose_stamp = stamp
            estimate = self._twist_estimator.update(clock, position, quat)
            twist = twist if twist is not None else estimate
            self.sensors.update("tcp_twist", twist if twist is not None else (np.zeros(3), np.zeros(3)), stamp)
        if step and self.mode == "lockstep":
            self._on_timer()

    def _on_tcp_twist(self, msg) -> None:
        from robot_rl.ros.convert import MessageError, stamp_to_seconds, twist_from_msg

        try:
            self.sensors.update("tcp_twist", twist_from_msg(msg), stamp_to_seconds(msg.header.stamp))
        except MessageError as error:
            self._reject("tcp_twist", error)

    def _on_gripper(self, msg) -> None:
        from robot_rl.ros.convert import MessageError, joint_state_from_msg

        try:
            state = joint_state_from_msg(msg)
            if state.positions.shape != (1,) or not np.isfinite(state.positions[0]):
                raise MessageError(f"gripper state needs one finite position, got {state.positions.tolist()}")
            self.sensors.update("gripper", float(state.positions[0]), state.stamp)
        except MessageError as error:
            self._reject("gripper", error)

    def _on_joint_states(self, msg) -> None:
        """Arm joints -> TCP pose by forward kinematics (arm.state joint_states; also the IK seed for joint
        commands); finger joints -> gripper opening (gripper.state joint_states). Drivers may split the joints over
        several messages on one topic: each message is used for what it has."""
        from robot_rl.ros.convert import MessageError, joint_state_from_msg
        from robot_rl.sensors import finger_opening

        try:
            state = joint_state_from_msg(msg)
        except MessageError as error:
            self._reject("joint_states", error)
            return
        names, used = state.names, False
        arm, gripper = self.robot.arm, self.robot.gripper
        if self.kinematics is not None and all(name in names for name in arm.joint_names):
            index = [names.index(name) for name in arm.joint_names]
            q = np.asarray(state.positions, dtype=np.float64)[index]
            if not np.isfinite(q).all():
                self._reject("joint_states", ValueError(f"arm joint positions are not finite: {q.tolist()}"))
                return
            self._joint_positions, used = q.copy(), True
            if arm.state == "joint_states":
                position, quat = self.kinematics.forward(q)
                self._set_tcp_pose(position, quat, state.stamp, step=False,  # the fingers below are of this frame
                                   twist=self._joint_twist(q, state, index))
        if gripper.state == "joint_states" and all(name in names for name in gripper.finger_joints):
            try:
                opening = gripper.opening_offset + finger_opening(names, state.positions, gripper.finger_joints,
                                                                  gripper.opening_per_unit)
            except ValueError as error:
                self._reject("joint_states", error)
                return
            self.sensors.update("gripper", opening, state.stamp)
            used = True
        if not used:
            wanted = [*(arm.joint_names if self.kinematics is not None else ()),
                      *(gripper.finger_joints if gripper.state == "joint_states" else ())]
            self._reject("joint_states", ValueError(f"none of the robot file's joints {wanted} (all of the arm's or "
                                                    f"all fingers) in a JointState with {list(names)}"))
            return
        if self.mode == "lockstep" and arm.state == "joint_states":
            self._on_timer()  # the arm and the fingers of this frame are in: step now, not at the next poll

    def _on_object_state(self, msg) -> None:
        from robot_rl.ros.convert import MessageError, floats_from_msg

        try:
            # Float32MultiArray has no header: it belongs to the frame whose tcp_pose follows it (published last).
            self._pending_object_state = floats_from_msg(msg).copy()
        except MessageError as error:
            self._reject("sim/object_state", error)

    def _on_reward(self, msg) -> None:
        self._last_reward = float(msg.data) if math.isfinite(msg.data) else 0.0

    def _on_success(self, msg) -> None:
        self._task_events.append((self._last_reward, bool(msg.data)))
        if self.mode == "lockstep":
            self._on_timer()

    def _on_teleop_twist(self, msg) -> None:
        from robot_rl.ros.convert import MessageError, stamp_to_seconds, twist_from_msg

        try:
            linear, angular = twist_from_msg(msg)
            self._teleop_twist = (linear, angular, time.monotonic())
            self._teleop_twist_stamp = stamp_to_seconds(msg.header.stamp)
        except MessageError as error:
            self._reject("teleop/twist", error)

    def _on_teleop_gripper(self, msg) -> None:
        if math.isfinite(msg.data):
            self._teleop_gripper = min(max(float(msg.data), 0.0), 1.0)
        else:
            self._reject("teleop/gripper", ValueError(f"gripper {msg.data} is not finite"))

    def _on_teleop_engaged(self, msg) -> None:
        self._teleop_seen = True
        if bool(msg.data) != self._teleop_engaged:
            self._log.info(f"human {'took over' if msg.data else 'released control'}")
        self._teleop_engaged = bool(msg.data)

    def _on_episode_key(self, msg) -> None:
        from robot_rl.actor import EPISODE_KEYS

        if msg.data in EPISODE_KEYS:
            self._episode_key = msg.data
        else:
            self._reject("teleop/episode", ValueError(f"unknown key {msg.data!r}; expected one of {EPISODE_KEYS}"))

    def _on_estop(self, msg) -> None:
        if msg.data:
            self.session.safety.engage_estop("safety/estop topic")
        else:
            self.session.safety.clear_estop()

    # ----- learner -----------------------------------------------------------------------------------------------
    def _on_weights(self, msg) -> None:
        from robot_rl.ros.convert import msg_to_bytes

        self._heard_learner()
        self._load_weights(msg_to_bytes(msg), origin="learner")

    def _load_policy_file(self, path: str) -> None:
        """Act with a saved policy from the start; any problem with it is a NodeStartupError."""
        from pathlib import Path

        from robot_rl.policies.base import PolicyError
        from robot_rl.policies.checkpoint import load_policy, policy_folder
        from robot_rl.policy_file import PolicyFileError, read_policy_file

        if self.policy_kind == "none":
            raise NodeStartupError(f"weights_path={path!r} with policy:=none: the actor would not use it")
        folder = policy_folder(path) or (policy_folder(Path(path) / "policy") if Path(path).is_dir() else None)
        if folder is None:  # the learner's weights format (SAC): later weights from a learner may follow
            try:
                weights = read_policy_file(path)
            except PolicyFileError as error:
                raise NodeStartupError(f"weights_path: {error}") from None
            if int(self._param("inference_steps")):
                raise NodeStartupError(f"inference_steps={int(self._param('inference_steps'))}: {path} is a SAC "
                                       "policy file, without DDIM steps to set (only diffusion policies have)")
            problem = self._use_weights(weights, origin=path)
            if problem:
                raise NodeStartupError(f"weights_path: policy file {path}: {problem}")
            return
        try:
            policy = load_policy(folder, device=str(self._param("device")), seed=self.seed)
        except PolicyError as error:
            raise NodeStartupError(f"weights_path: {error}") from None
        problem = self._use_policy(policy)
        if problem:
            raise NodeStartupError(f"weights_path: policy {folder}: {problem}")
        ddim = f" (DDIM-{policy.config.inference_steps})" if hasattr(policy, "set_inference_steps") else ""
        self._log.info(f"policy {policy.kind}{ddim} loaded from {folder} on {policy.device}: obs horizon "
                       f"{policy.obs_horizon}, chunks of {policy.chunk_length}, executing "
                       f"{self.session.actor.execute} per chunk"
                       + (" in a worker thread" if self.session.actor.planner is not None else ""))

    def _check_policy_spec(self, spec, action_dim: int) -> str | None:
        """Why a policy with this observation spec and action size cannot run on this actor, or None."""
        missing = [k for k in spec.keys if k not in self.observation_keys]
        if missing:
            return (f"the policy needs observation keys {missing} this actor does not build (it builds "
                    f"{list(self.observation_keys)}: set obs_mode)")
        if int(action_dim) != self.action_dim:
            return f"the policy has {action_dim} actions, the actor action_dim={self.action_dim}"
        for key in spec.image_keys:
            height, width = spec[key].shape[:2]
            if height != width:
                return f"the policy's {key} is {height}x{width}; the actor makes square images"
            if self.image_size and self.image_size != height:
                self._log.warning(f"image_size={self.image_size} but the policy sees {height} px {key}: "
                                  f"using {height}")
            self._policy_image_sizes[key] = int(height)
        return None

    def _use_policy(self, policy) -> str | None:
        """Act with a frozen policy of any kind (chunks in a worker thread in real time); why not, or None."""
        from robot_rl.actor import Actor
        from robot_rl.policies.base import PolicyError, set_inference_steps
        from robot_rl.policies.chunking import ChunkPlanner

        problem = self._check_policy_spec(policy.observation_spec, policy.action_dim)
        if problem:
            return problem
        execute = int(self._param("chunk_execute")) or policy.chunk_length
        if not 1 <= execute <= policy.chunk_length:
            return f"chunk_execute={execute} must be in [1, the policy's chunk length {policy.chunk_length}]"
        decay = float(self._param("ensemble_decay"))
        steps = int(self._param("inference_steps"))
        if steps:
            try:
                set_inference_steps(policy, steps)
            except PolicyError as error:
                return str(error)
        warm = {key: np.zeros(entry.shape, entry.dtype) for key, entry in policy.observation_spec.entries}
        try:
            policy.act_chunk([warm] * policy.obs_horizon, deterministic=True)  # load and compile before any episode
        except (ValueError, RuntimeError) as error:
            return str(error)
        planner = None
        if self.mode == "realtime" and policy.chunk_length > 1:
            planner = ChunkPlanner(policy, self.control_dt, deterministic=self.deterministic,
                                   ensemble_decay=None if decay < 0 else decay, clock=self._now)
        self.session.actor = Actor(policy, seed=self.seed, deterministic=self.deterministic, execute=execute,
                                   planner=planner)
        self.weights_version = 1
        return None

    def _load_weights(self, payload: bytes, origin: str) -> None:
        from robot_rl.transport import TransportError, decode_weights

        try:
            weights = decode_weights(payload)
        except TransportError as error:
            self.rejected["learner/weights"] += 1
            self._log.error(f"rejected weights from {origin}: {error}", throttle_duration_sec=5.0)
            return
        if self.policy_kind == "none" or weights.version <= self.weights_version:
            return
        if self.session.actor is None and origin == "learner" and (weights.policy_config or {}).get("base"):
            weights = self._base_here(weights)
            if weights is None:
                return  # its base is being checked or fetched; used once it is here (_use_learner_weights)
        problem = self._use_weights(weights, origin)
        if problem:
            self._log.error(f"rejected weights from {origin}: {problem}", throttle_duration_sec=5.0)

    def _base_here(self, weights):
        """`weights` naming this host's copy of their base (the learner's bytes, by sha256; fetched from the learner
        if this host has none), or None until it is here (robot_rl.ros.file_share)."""
        if self._policy_files is None:
            from robot_rl.file_share import FileShareError
            from robot_rl.ros.file_share import PolicyFiles

            try:
                self._policy_files = PolicyFiles(self.node, ready=self._use_learner_weights, failed=self._files_failed)
            except FileShareError as error:  # its settings in the environment
                self._files_failed(str(error))
                return None
        return self._policy_files.local(weights)

    def _use_learner_weights(self, weights) -> None:
        if self.session.actor is None and weights.version > self.weights_version:
            problem = self._use_weights(weights, "learner")
            if problem:
                self._log.error(f"rejected weights from learner: {problem}", throttle_duration_sec=5.0)

    def _files_failed(self, problem: str) -> None:
        """The base differs from the learner's, or cannot be fetched: one line, and the node stops (status 2)."""
        self._log.error(problem)
        self.exit_status, self.done = 2, True

    def _deployment_problem(self, policy: str) -> str | None:
        """The deployment gate for `policy` on this robot: why it may not run (None: it may, or it runs anyway with
        allow_unvalidated, logged)."""
        if self.robot.sim:
            return None
        from robot_rl.policies.base import PolicyError
        from robot_rl.policy_file import PolicyFileError
        from robot_rl.validate import deployment_problem

        try:
            problem = deployment_problem(policy, self.robot.path or self.robot.name, self.task)
        except (PolicyError, PolicyFileError, OSError) as error:
            return str(error)
        if problem and self.allow_unvalidated:
            self.unvalidated = problem
            self._log.error(f"UNVALIDATED POLICY ON A REAL ROBOT ({self.robot.name}), allow_unvalidated is set: "
                            f"{problem}")
            return None
        return problem

    def _use_weights(self, weights, origin: str) -> str | None:
        """Act with `weights` from now on; returns why they cannot be used, or None."""
        from robot_rl.policy_file import actor_from_weights

        base = (weights.policy_config or {}).get("base")
        # A learner's head on a frozen base: the base must pass the gate (a head from weights_path passed it whole,
        # its record covering the base's bytes too).
        if base and self.session.actor is None and origin == "learner":
            problem = self._deployment_problem(str(base))
            if problem:
                return f"its base: {problem}"
        try:
            if self.session.actor is None:
                if weights.policy_kind == "gaussian":  # checked before building (a head on a base loads its base)
                    problem = self._check_policy_spec(weights.observation_spec, weights.action_dim)
                    if problem:
                        return problem
                actor = actor_from_weights(weights, seed=self.seed, deterministic=self.deterministic)
                spec = actor.policy.observation_spec  # what the robot gives (a residual head adds its base action)
                problem = self._check_policy_spec(spec, actor.policy.action_dim)
                if problem:
                    return problem
                # Compile the policy now: a first call inside an episode would stall the node for its compile time
                # and leave every sensor stale at the next step (a hold).
                actor.policy_action(actor.observe({key: np.zeros(entry.shape, entry.dtype)
                                                   for key, entry in spec.entries}))
                self.session.actor = actor
            else:
                self.session.actor.update_weights(weights.policy, weights.version)
        except (ValueError, KeyError, TypeError) as error:
            return str(error)
        first = self.weights_version == 0
        self.weights_version, self.weights_transitions = weights.version, weights.transitions
        # unix time: for a bench on hosts that share a clock (learner publish -> acting with it); nothing compares it
        self.weights_used_at.append((weights.version, round(time.time(), 4)))
        if self._trained_base is None and not self.weights_path:
            self._trained_base = weights.transitions
        if first:
            self._log.info(f"policy weights v{weights.version} loaded from {origin}")
        if weights.training_done and not self.learner_done:
            self._log.info(f"the learner reached its training budget: final weights v{weights.version}; this actor "
                           "finishes its episode and starts no new one")
        self.learner_done = weights.training_done
        return None

    def _on_ack(self, msg) -> None:
        from robot_rl.ros.convert import msg_to_bytes
        from robot_rl.transport import TransportError, decode_ack, decode_ack_above

        try:
            payload = msg_to_bytes(msg)
            acks, above = decode_ack(payload), decode_ack_above(payload)
        except TransportError as error:
            self._reject("learner/ack", error)
            return
        self._heard_learner()
        now = time.monotonic()
        if self.source in acks:
            self.outbox.acknowledge(acks[self.source], now)
        if self.source in above:  # what the learner has above a gap: re-send only the gap
            self.outbox.acknowledge_ranges(above[self.source], now)

    def _heard_learner(self) -> None:
        away = self.learner_watch.heard(time.monotonic())
        if away is not None:
            self._log.info(f"the learner is back after {away:.1f} s away")

    def _learner_away(self) -> bool:
        """The learner went silent (robot file learner_lost.after_s); logs the start of each outage. Only for
        weights from a learner: a saved policy or a finished learner has nothing more to send."""
        if not self.stream or self.weights_path or self.learner_done or self.session.actor is None:
            return False
        outages = self.learner_watch.outages
        away = self.learner_watch.away(time.monotonic())
        if self.learner_watch.outages > outages:
            what = ("holding the policy's commands until it is back" if self.robot.learner_lost.action == "hold"
                    else f"acting with weights v{self.weights_version}")
            self._log.warning(f"the learner is away (nothing of it for {self.learner_watch.after_s:g} s): {what} "
                              f"(learner_lost.action: {self.robot.learner_lost.action} in the robot file); "
                              f"{len(self.outbox)} transitions kept for it")
        return away

    def _on_learner_matched(self, info) -> None:
        """A learner's acks appeared (it started or respawned): re-send what it has not acknowledged now, rather
        than after `resend_after`, so its cumulative acks catch up at once."""
        if info.current_count_change > 0 and self.stream:
            pending = self.outbox.resend_all()
            if pending:
                self._log.info(f"a learner appeared: re-sending {pending} unacknowledged transitions")

    def _forget_unstreamed(self) -> None:
        """Without streaming no learner acknowledges anything: keep no transition (recording has its own copy)."""
        self.outbox.acknowledge(self.session.next_seq - 1)

    def _flush_outbox(self) -> None:
        from robot_rl.ros.convert import bytes_to_msg
        from robot_rl.transport import encode_transitions

        now = time.monotonic()
        if self.stream:
            max_items = 8 if any(k.startswith("images/") for k in self.observation_keys) else 64
            for _ in range(8):
                due = self.outbox.due(now, max_items)
                if not due:
                    break
                payload = encode_transitions(self.source, due)
                self._transitions_pub.publish(bytes_to_msg(payload))
                self.transitions_out_bytes += len(payload)
                self.transitions_out_messages += 1
                self.outbox.mark_sent(due, now)
        else:
            self._forget_unstreamed()
        if self.stats_path is not None and now - self._last_stats >= 1.0:
            self._last_stats = now
            self.write_stats()

    # ----- control loop ------------------------------------------------------------------------------------------
    def _frame_stamp(self) -> float | None:
        """Stamp of the newest complete sensor frame (lock-step: every required sensor carries the same stamp)."""
        stamp = self.sensors.stamp("tcp_pose")
        if stamp is None:
            return None
        if self.mode == "lockstep":
            for sensor in self.required:
                if sensor != "object_state" and self.sensors.stamp(sensor) != stamp:
                    return None
        return stamp

    def _note_tick(self) -> None:
        """Real time: how late this timer callback runs after its period's start (status: tick_late_ms)."""
        now = time.monotonic()
        if self._tick_expected is None:
            self._tick_expected = now
        else:
            self._tick_expected += self.control_dt
            if now - self._tick_expected >= self.control_dt:  # whole periods without a callback
                missed = int((now - self._tick_expected) // self.control_dt)
                self.ticks_missed += missed
                self._tick_expected += missed * self.control_dt
            elif now < self._tick_expected:  # earlier than any tick so far: the timer's phase is this one
                self._tick_expected = now
        self._tick_late.append(now - self._tick_expected)

    def tick_lateness(self) -> dict:
        if not self._tick_late:
            return {}
        late = 1e3 * np.asarray(self._tick_late)
        return {"n": int(late.size), "p50": round(float(np.median(late)), 2),
                "p99": round(float(np.percentile(late, 99)), 2), "max": round(float(late.max()), 2),
                "missed": self.ticks_missed}

    def _on_timer(self) -> None:
        if self.mode == "realtime":
            self._note_tick()
        if self.done:
            return
        if self._phase == "idle":
            if self.learner_done:  # nothing would train on another episode (said once, when the weights came)
                self._wait("the learner (its training budget is done)", "", after_s=math.inf)
                self._hold_between_episodes()
                return
            self._begin_reset()
            return
        if self._phase == "resetting":
            self._check_reset()
            return
        stamp = self._frame_stamp()
        if self._awaiting_frame(stamp):
            self._check_frame_timeout()
            return
        self._frame_due_since = None
        if self._phase == "starting":
            if self.policy_kind == "learner" and self.session.actor is None and not self._teleop_engaged:
                self._wait("policy weights from the learner", "for policy weights from the learner "
                           f"({qos.LEARNER_WEIGHTS}; is the learner node up?)", after_s=0.0)
                return
            if self.policy_kind == "none" and not self._teleop_seen:  # recording demos: nobody would act yet
                self._wait("a teleop node (teleop/engaged)", "for a teleop node (teleop/engaged)", after_s=0.0)
                return
            self._waited()
            self._ik_seed = None  # joint commands start from the measured joints
            position, quat = self.sensors.tcp_pose()
            episode = self.session.start_episode(position, quat)
            self._episode_started = time.monotonic()
            self._episode_pub.publish(self._UInt32(data=episode % (2**32)))
            if self.unvalidated:
                self._log.error(f"episode {episode} on {self.robot.name} with an UNVALIDATED policy "
                                "(allow_unvalidated)")
            self._task_events.clear()
            self._episode_key = None
            self._episode_steps = []
            self._phase = "running"
        if self._must_wait_for_weights():
            self._wait("fresher policy weights (max_weight_lag)", "for weights that trained on all but "
                       f"{self.max_weight_lag} of this actor's transitions (max_weight_lag)")
            return
        self._waited()
        self._step(stamp)

    def _awaiting_frame(self, stamp: float | None) -> bool:
        """Whether the next step needs a sensor frame that has not arrived (after the reset; lockstep: the frame,
        reward and success that answer the last command)."""
        if self._phase == "starting" and (stamp is None or stamp <= self._reset_requested_at_stamp):
            self._wait("a sensor frame after the reset", "for a sensor frame after the reset: "
                       f"{self._missing_sensors_text()}")
            return True
        if self.mode == "lockstep":
            if stamp is None or stamp <= self._last_stepped_stamp:
                self._wait("a lock-step frame", "for a frame whose sensors all carry one stamp, newer than the last "
                           f"step ({self._missing_sensors_text()}); only the sim node in lock-step mode sends such "
                           "frames: a real driver needs mode: realtime in the robot file")
                return True
            if self._phase == "running" and self._commanded_since_frame and not self._task_events:
                self._wait("the step's reward and success", "for task/reward and task/success of the last step "
                           "(lock-step: the sim task publishes them; a real robot needs mode: realtime)")
                return True  # the step's reward / success have not arrived yet
            if self._phase == "running" and self._awaiting_human(stamp):
                return True
        return False

    def _awaiting_human(self, stamp: float) -> bool:
        """Lock-step with an engaged human: the world waits for us, and the human (the scripted teleop node, which
        stamps its twist with the frame it answers) is part of it; wait up to TELEOP_TIMEOUT_S for their command for
        this frame rather than act on the previous one."""
        if not self._teleop_engaged or self._teleop_twist_stamp >= stamp:
            self._human_wait = None
            return False
        now = time.monotonic()
        if self._human_wait is None or self._human_wait[0] != stamp:
            self._human_wait = (stamp, now)
        if now - self._human_wait[1] >= TELEOP_TIMEOUT_S:
            return False  # a device that does not stamp per frame: act on its newest command
        self._wait("the human's command for this frame", "for the teleop node's command answering this frame")
        return True

    def _missing_sensors_text(self) -> str:
        stamps = self.sensors.stamps()
        parts = [f"{sensor} {'never received' if sensor not in stamps else f'stamp {stamps[sensor]:.3f}'} "
                 f"from {self._sensor_topics.get(sensor) or self._sensor_topics.get('joint_states', '?')}"
                 for sensor in self.required if sensor != "object_state"]
        return "; ".join(parts)

    def _check_frame_timeout(self) -> None:
        """No frame for `frame_timeout_s` (the sim or driver died, or restarted and lost the episode): give the
        episode up and reset again. Its transitions sent so far stay with the learner, which closes the episode."""
        now = time.monotonic()
        if self._frame_due_since is None or now - self._frame_due_since < self.frame_timeout_s:
            return
        self.reset_counters["frame_timeouts"] += 1
        if self._phase == "running":
            self.reset_counters["episodes_given_up"] += 1
            what = (f"after the command of step {self.session.episode_step} of episode {self.session.episode}; "
                    f"giving the episode up ({self.session.episode_step} steps) and resetting")
        else:
            what = "after the reset; calling the reset again"
        self._log.warning(f"no sensor frame within {self.frame_timeout_s:g} s {what} (is the sim or robot driver "
                          f"running?)")
        self._frame_due_since = None
        self._phase = "idle"
        self._commanded_since_frame = False
        self._task_events.clear()

    def _must_wait_for_weights(self) -> bool:
        if (self.mode != "lockstep" or self.max_weight_lag <= 0 or self.session.actor is None or self.weights_path
                or self.learner_done):  # the final weights: no newer ones will come
            return False
        trained = self.weights_transitions - (self._trained_base or 0)
        if self.session.next_seq - trained <= self.max_weight_lag:
            self._wait_started = None
            return False
        now = time.monotonic()
        if self._wait_started is None:
            self._wait_started = now
        if now - self._wait_started < self.weight_wait_s:
            return True
        self._wait_started = None
        self._log.warning(f"no fresh weights for {self.weight_wait_s:.1f}s (learner away?): acting with "
                          f"v{self.weights_version}", throttle_duration_sec=10.0)
        return False

    def _observation(self, now: float):
        from robot_rl.sensors import MissingSensors

        pending = self._pending_object_state
        if "object_state" in self.required and pending is not None:
            self.sensors.update("object_state", pending, self.sensors.stamp("tcp_pose"))
        try:
            obs = self.sensors.observation(now)
        except MissingSensors as missing:
            return None, missing.reasons
        for key in obs:
            if key.startswith("images/"):
                try:
                    obs[key] = self._image_transform(key)(obs[key])
                except ValueError as error:  # vision.ImageError: e.g. a region of interest outside the frame
                    return None, (f"image:{key[len('images/'):]}: {error}",)
        return obs, ()

    def _image_transform(self, key: str):
        """The camera's transform to the policy's image size (the policy's spec; `image_size`; 64)."""
        from robot_rl.vision import ImageTransform

        size = self._policy_image_sizes.get(key) or self.image_size or DEFAULT_IMAGE_SIZE
        transform = self._image_transforms.get((key, size))
        if transform is None:
            transform = ImageTransform.from_camera(self.robot.camera(key[len("images/"):]), size)
            self._image_transforms[(key, size)] = transform
        return transform

    def _wait(self, reason: str, message: str, every_s: float = 5.0, after_s: float = 1.0) -> None:
        """The actor cannot step now: add the time to `waits[reason]` [s] (the status file) and, once a wait has
        lasted `after_s`, log why (at most every `every_s` per reason)."""
        now = time.monotonic()
        if self.waiting_for == reason and self._wait_since is not None:
            self.waits[reason] += now - self._wait_last
        else:
            self._wait_since = now
        self.waiting_for, self._wait_last = reason, now
        if now - self._wait_since >= after_s and now - self._wait_logged.get(reason, -math.inf) >= every_s:
            self._wait_logged[reason] = now
            self._log.warning(f"waiting {message} ({now - self._wait_since:.1f} s so far)")

    def _waited(self) -> None:
        self.waiting_for, self._wait_since = None, None

    def _step(self, stamp: float | None) -> None:
        # Lock-step: the world waits for us, so sensor age is measured on the frame's own clock.
        now = stamp if self.mode == "lockstep" and stamp is not None else self._now()
        obs, problems = self._observation(now)
        if obs is None:
            self.holds.update(problems)
            self._log.warning(f"holding: {', '.join(problems)} ({self._missing_sensors_text()}; older than "
                              f"{self.sensors.max_age_s:g} s counts as stale: is every driver running?)",
                              throttle_duration_sec=2.0)
            if self.mode == "realtime":  # a real-time robot needs a steady command stream; lock-step waits for us
                command = self.session.hold(now, self.sensors.stamps())
                if command is not None:
                    self._publish(command, stamp)
            return
        if self._learner_away() and self.robot.learner_lost.action == "hold" and not self._teleop_engaged:
            self.holds["learner_away"] += 1
            if self.mode == "realtime":
                command = self.session.hold(now, self.sensors.stamps())
                if command is not None:
                    self._publish(command, stamp)
            return
        reward, success = 0.0, False
        if self._task_events:
            reward = max(r for r, _ in self._task_events)
            success = any(s for _, s in self._task_events)
            self._task_events.clear()
        key, self._episode_key = self._episode_key, None
        human_action = self._human_action()
        result = self.session.step(obs, reward=reward, success=success, now=now,
                                   sensor_stamps=self.sensors.stamps(), human_action=human_action, episode_key=key)
        self._last_stepped_stamp = stamp if stamp is not None else now
        if result.transition is not None:
            self._episode_steps.append((result.transition, time.time()))
        if result.episode_over:
            self._end_episode(result, obs)
            return
        if result.policy_late:
            self.holds["policy_late"] += 1
            self._log.warning("holding: the policy's next chunk is not ready yet", throttle_duration_sec=2.0)
        elif result.command.held:
            self.holds.update(result.command.reasons)
            self._log.warning(f"safety held the command: {', '.join(result.command.reasons)}",
                              throttle_duration_sec=1.0)
        self._publish(result.command, stamp)

    def _human_action(self) -> np.ndarray | None:
        if not self._teleop_engaged:
            return None
        from robot_rl.teleop_mapping import twist_to_action

        linear, angular = np.zeros(3), np.zeros(3)
        if self._teleop_twist is not None and time.monotonic() - self._teleop_twist[2] <= TELEOP_TIMEOUT_S:
            linear, angular = self._teleop_twist[0], self._teleop_twist[1]
        gripper = self._teleop_gripper
        if gripper is None:  # keep the current gripper until the human sends one
            gripper = (1.0 - self.session.safety.last_gripper) / 2.0
        return twist_to_action(linear, angular, gripper, control_dt=self.control_dt,
                               max_translation=self.max_translation, max_rotation=self.max_rotation,
                               action_dim=self.session.safety.config.action_dim)

    def _publish(self, command, stamp: float | None) -> None:
        """Send a safe command through the robot file's interfaces (gripper first, then the arm)."""
        from robot_rl.ros.convert import joint_trajectory_to_msg, pose_to_msg

        robot, now = self.robot, self._now()
        opening = float((1.0 - command.gripper) / 2.0)  # [0 closed, 1 open]
        gripper = robot.gripper
        if gripper.command == "Float64":
            self._gripper_pub.publish(self._Float64(data=opening))
        else:
            per_joint = ((opening * gripper.max_opening - gripper.opening_offset) / len(gripper.command_joints)
                         / gripper.opening_per_unit)
            self._gripper_pub.publish(joint_trajectory_to_msg(
                gripper.command_joints, [per_joint] * len(gripper.command_joints), self._time_from_start(), stamp=now))
        if robot.command.interface == "pose":
            self._pose_pub.publish(pose_to_msg(command.target_position, command.target_quat, stamp=now,
                                               frame_id=robot.base_frame))
        else:
            seed = self._ik_seed if self._ik_seed is not None else self._joint_positions
            if seed is None:
                self._wait("joint_states", f"for arm joints ({robot.arm.joint_names[0]}, ...) on "
                           f"{self._sensor_topics.get('joint_states')}: a joint command needs them", every_s=1.0)
                return
            q = self.kinematics.solve(seed, command.target_position, command.target_quat)
            self._ik_seed = np.asarray(q, dtype=np.float64)
            self._trajectory_pub.publish(joint_trajectory_to_msg(robot.arm.joint_names, q, self._time_from_start(),
                                                                 stamp=now))
        self._commanded_since_frame = True
        if self.mode == "lockstep":  # the sim answers each command with a frame
            self._frame_due_since = time.monotonic()

    def _time_from_start(self) -> float:
        return self.robot.command.time_from_start_s or self.control_dt

    # ----- episodes ----------------------------------------------------------------------------------------------
    def _begin_reset(self) -> None:
        """Call the reset service (phase idle -> resetting), or wait for one to come up; start homing or waiting
        for the human's reset key."""
        self._commanded_since_frame = False
        if self._twist_estimator is not None:  # no finite difference across the reset's jump
            self._twist_estimator.reset()
        if self.reset_kind in ("human", "move_home"):
            stamp = self.sensors.stamp("tcp_pose")
            self._reset_requested_at_stamp = -math.inf if stamp is None else stamp
            self._reset_wait_started = time.monotonic()
            self._episode_key = None
            self._phase = "resetting"
            return
        if self._reset_client is None:  # no reset: the episode starts at the first frame not stepped on yet
            self._reset_requested_at_stamp = self._last_stepped_stamp
            self._phase = "starting"
            self._frame_due_since = time.monotonic()
            return
        stamp = self.sensors.stamp("tcp_pose")  # the episode starts at a frame taken after the reset
        self._reset_requested_at_stamp = -math.inf if stamp is None else stamp
        now = time.monotonic()
        if self._reset_wait_started is None:
            self._reset_wait_started = now
        if now < self._reset_retry_at:
            return
        if not self._reset_client.service_is_ready():
            self._wait(f"the reset service {self._reset_name}", "", after_s=math.inf)  # logged by _reset_log
            self._reset_log(f"waiting for the reset service {self._reset_name} ({self._reset_waited(now):.0f} s)")
            return
        self.reset_counters["reset_attempts"] += 1
        self._reset_attempt += 1
        self._wait(f"a response of the reset service {self._reset_name}", "", after_s=math.inf)
        self._reset_future = self._reset_client.call_async(self._Trigger.Request())
        self._reset_sent_at = now
        self._phase = "resetting"

    def _check_reset(self) -> None:
        """A reset call answered (-> starting), failed or not answered in time (-> idle: call again)."""
        if self.reset_kind == "human":
            if self._episode_key == "reset":
                self._episode_key = None
                self._reset_done(time.monotonic())
            else:
                self._hold_between_episodes()
                self._wait("the human's reset key", f"for the human to reset the scene and press the reset key "
                           f"({qos.TELEOP_EPISODE} 'reset')", after_s=0.0, every_s=15.0)
            return
        if self.reset_kind == "move_home":
            self._move_home()
            return
        future, now, attempt = self._reset_future, time.monotonic(), self._reset_attempt
        if not future.done():
            if now - self._reset_sent_at < self.reset_timeout_s:
                self._wait(f"a response of the reset service {self._reset_name}", "", after_s=math.inf)
                return
            # A lost response, or a sim / driver that died during the reset: this future would never complete.
            self._reset_client.remove_pending_request(future)
            future.cancel()
            self.reset_counters["reset_timeouts"] += 1
            self._reset_future, self._phase = None, "idle"
            self._reset_log(f"reset service {self._reset_name} did not answer within {self.reset_timeout_s:g} s "
                            f"(attempt {attempt}, {self._reset_waited(now):.1f} s since the reset began); calling "
                            "again", warning=True, force=True)
            return
        response = future.result()
        self._reset_future = None
        if response is None or not response.success:
            self.reset_counters["reset_failures"] += 1
            self._phase, self._reset_retry_at = "idle", now + RESET_RETRY_AFTER_FAILURE_S
            self._reset_log(f"reset failed: {getattr(response, 'message', 'no response')} (attempt {attempt}, "
                            f"{self._reset_waited(now):.1f} s since the reset began); retrying in "
                            f"{RESET_RETRY_AFTER_FAILURE_S:g} s", warning=True, force=True)
            return
        if attempt > 1:
            self._log.info(f"reset service {self._reset_name} answered attempt {attempt}, "
                           f"{self._reset_waited(now):.1f} s after the reset began")
        self._reset_done(now)

    def _reset_done(self, now: float) -> None:
        self._reset_attempt, self._reset_wait_started = 0, None
        self._phase = "starting"
        self._frame_due_since = now

    def _hold_between_episodes(self) -> None:
        """Realtime: keep the command stream going (the last target) while no episode runs."""
        if self.mode == "realtime" and self.session.target is not None:
            command = self.session.hold(self._now(), self.sensors.stamps())
            if command is not None:
                self._publish(command, None)

    def _move_home(self) -> None:
        """Drive the TCP to the robot file's home pose through the command interface, within the safety limits;
        done when it is within home_tolerance. A homing that takes longer than the reset timeout is logged and
        goes on."""
        now = time.monotonic()
        pose = self.sensors.tcp_pose()
        if pose is None:
            self._wait("the arm state (homing)",
                       f"for the arm state to home the robot ({self._missing_sensors_text()})")
            return
        robot = self.robot
        position, quat = pose
        home = np.asarray(robot.home_position)
        if float(np.linalg.norm(np.asarray(position) - home)) <= robot.reset.home_tolerance:
            self._log.info(f"at home after {self._reset_waited(now):.1f} s")
            self._reset_done(now)
            return
        if self._reset_waited(now) > self.reset_timeout_s * (1 + self.reset_counters["reset_timeouts"]):
            self.reset_counters["reset_timeouts"] += 1
            self._log.warning(f"homing takes longer than {self.reset_timeout_s:g} s (TCP {np.round(position, 3)}, "
                              f"home {list(robot.home_position)}): is the arm's controller running?")
        command = self.session.safety.filter_absolute(home, robot.home_quat, robot.home_gripper, position, quat,
                                                      self._now(), self.sensors.stamps())
        self._publish(command, None)
        self._wait("homing", f"for the TCP to reach home ({np.linalg.norm(np.asarray(position) - home):.3f} m to go)")

    def _reset_waited(self, now: float) -> float:
        return now - (self._reset_wait_started if self._reset_wait_started is not None else now)

    def _reset_log(self, message: str, warning: bool = False, force: bool = False) -> None:
        """Log about the reset at most every RESET_LOG_EVERY_S (each timeout and failure is logged)."""
        now = time.monotonic()
        if force or now - self._reset_logged >= RESET_LOG_EVERY_S:
            self._reset_logged = now
            if warning:  # rclpy wants one severity per call site
                self._log.warning(message)
            else:
                self._log.info(message)

    def _end_episode(self, result, final_obs) -> None:
        session = self.session
        steps = session.episode_step
        record = {"episode": session.episode, "success": bool(result.success), "steps": steps,
                  "return": session.episode_return, "interventions": session.episode_interventions,
                  "weights_version": self.weights_version,
                  "seconds": round(time.monotonic() - self._episode_started, 3)}
        self.results.append(record)
        self._log.info(f"episode {session.episode}: success={record['success']} steps={steps} "
                       f"return={record['return']:.2f} interventions={record['interventions']} "
                       f"weights=v{self.weights_version}")
        if self.record_path is not None and self._episode_steps:
            self._record(final_obs, bool(result.success))
        self._phase = "idle"
        self._commanded_since_frame = False
        self._task_events.clear()
        if self.episodes_wanted and len(self.results) >= self.episodes_wanted:
            self.done = True
            self.write_stats()
            if self.eval_out:
                try:
                    self._write_eval()
                except OSError as error:
                    self._log.error(f"cannot write eval.json: {error}")
                    self.exit_status = 1

    def _write_eval(self) -> None:
        """`robot-rl eval`'s eval.json (robot_rl.sim.evaluate: the same statistics) for the episodes run here; the
        sim node's random stream places the objects, so episodes carry no seed."""
        from robot_rl.loop import EpisodeResult
        from robot_rl.report import success_text
        from robot_rl.sim.evaluate import Evaluation, env_settings_for, evaluation_summary, saved_policy_fields

        located, fields = saved_policy_fields(self.weights_path)
        out = located.parent / "eval" if self.eval_out == "auto" else Path(self.eval_out)
        policy = self.session.actor.policy
        evaluation = Evaluation(tuple(EpisodeResult(None, r["steps"], float(r["return"]), r["success"], r["seconds"])
                                      for r in self.results))
        obs_mode = str(self._param("obs_mode")) or env_settings_for(policy.observation_spec)[0]
        summary = {"policy": fields.pop("policy"),
                   **({"inference_steps": int(self._param("inference_steps"))}
                      if int(self._param("inference_steps")) else {}),
                   **fields, **evaluation_summary(evaluation, task=self.task, obs_mode=obs_mode,
                                                  policy_kind=policy.kind, first_seed=None),
                   "mode": self.mode, "deterministic": self.deterministic}
        out.mkdir(parents=True, exist_ok=True)
        (out / "eval.json").write_text(json.dumps(summary, indent=2))
        self._log.info(f"eval: success {success_text(evaluation.successes, len(evaluation))}, return "
                       f"{evaluation.mean_return:.2f}, length {evaluation.mean_length:.1f}; {out / 'eval.json'}")

    def _record(self, final_obs, success: bool) -> None:
        from robot_rl.data.episodes import EpisodeWriter
        from robot_rl.types import ArraySpec, ObservationSpec

        if self._recorder is None:
            first = self._episode_steps[0][0]
            obs_spec = dict(ObservationSpec.from_example(first.observation).entries)
            action_spec = ArraySpec(tuple(np.shape(first.action)), "float32")
            attrs = {"robot_config": self.robot.to_json(),
                     "image_transforms": {key: self._image_transform(key).to_json() for key in obs_spec
                                          if key.startswith("images/")}}
            self._recorder = EpisodeWriter(self.record_path, obs_spec, action_spec, fps=1.0 / self.control_dt,
                                           task=self.task, robot=self.robot.name, attrs=attrs)
        for transition, wall_time in self._episode_steps:
            self._recorder.add_step(transition.observation, transition.action, transition.reward,
                                    transition.terminated, transition.truncated, transition.intervention, wall_time)
        index = self._recorder.end_episode(final_obs, success=success)
        self._log.info(f"recorded episode {index} ({len(self._episode_steps)} steps) to {self.record_path}")

    # ----- lifecycle (robot_rl.ros.node_util.run_node) -------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self.done

    def stop(self, executor, signal_number: int | None) -> None:
        if not self.done:
            self._log.info(f"stopping (signal {signal_number})")
            return
        if not self.stream:
            self._forget_unstreamed()
        deadline = time.monotonic() + 3.0  # give the outbox a moment to deliver the last transitions
        while self.stream and len(self.outbox) and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        successes = sum(r["success"] for r in self.results)
        self._log.info(f"done: {successes}/{len(self.results)} episodes successful")

    # ----- status ------------------------------------------------------------------------------------------------
    def stats(self) -> dict:
        session = self.session
        rates = self._rate_window.add(time.monotonic(), transitions_per_s=session.next_seq,
                                      commands_per_s=session.counters["commands"])
        return {
            "source": self.source, "episodes": len(self.results),
            "successes": sum(r["success"] for r in self.results), "results": self.results[-200:],
            "steps": sum(r["steps"] for r in self.results),
            "interventions": sum(r["interventions"] for r in self.results), "rates": rates, "done": self.done,
            "learner_done": self.learner_done,
            "transitions": session.next_seq, "commands": session.counters["commands"],
            "held": session.counters["held"], "policy_late": session.counters["policy_late"],
            "chunks": dict(getattr(getattr(session.actor, "planner", None), "counters", {}) or {}),
            "tick_late_ms": self.tick_lateness(),
            "acked_through": self.outbox.acknowledged_through,
            "outbox": len(self.outbox), "dropped": self.outbox.dropped, "resent": self.outbox.resent,
            "resend_after_s": round(self.outbox.resend_timeout(), 2),
            "weights_version": self.weights_version, "rejected": dict(self.rejected), "phase": self._phase,
            "waiting_for": self.waiting_for, "reset_attempts": self.reset_counters["reset_attempts"],
            "reset_timeouts": self.reset_counters["reset_timeouts"],
            "reset_failures": self.reset_counters["reset_failures"],
            "frame_timeouts": self.reset_counters["frame_timeouts"],
            "episodes_given_up": self.reset_counters["episodes_given_up"], "robot": self.robot.name,
            "waits_s": {reason: round(seconds, 3) for reason, seconds in self.waits.items()},
            "holds": dict(self.holds), "incompatible_qos": dict(self.incompatible_qos), "time": time.time(),
            "unvalidated": self.unvalidated, "transitions_out_bytes": self.transitions_out_bytes,
            "transitions_out_messages": self.transitions_out_messages,
            "weights_used_at": list(self.weights_used_at),
            "learner": self.learner_watch.to_json(time.monotonic()),
        }

    def write_stats(self) -> None:
        if self.stats_path is None:
            return
        if not self.stats_path.parent.is_dir():
            if not self.session.counters["commands"]:
                # Nothing done yet: no folder made for the status alone (a launch that never got going, e.g. the
                # learner refused its parameters, leaves no run_dir holding only actor_status.json).
                return
            self.stats_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.stats_path, json.dumps(self.stats()))

    def destroy(self) -> None:
        planner = getattr(self.session.actor, "planner", None)
        if planner is not None:
            planner.close()
        self.write_stats()
        if self._recorder is not None:
            self._recorder.close()  # releases the dataset for the next writer
        if self._policy_files is not None:
            self._policy_files.share.close()
        self.node.destroy_node()


def main(argv: list[str] | None = None) -> int:
    """Run the actor node until SIGINT / SIGTERM or until its episodes are done; returns the exit status."""
    from robot_rl.ros.node_util import run_node

    return run_node(ActorNode, list(sys.argv if argv is None else argv), NODE_NAME)

if __name__ == "__main__":
    sys.exit(main())
