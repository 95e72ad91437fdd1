"""The actor node: sensors -> observation -> policy (or the human) -> safety -> commands, episodes, transitions out.

Run::

    python -m robot_rl.ros.actor_node --ros-args -r __ns:=/robot1 -p actor_id:=robot1 -p mode:=lockstep

Topics (relative names resolve in the node's namespace; learner topics are absolute and shared by every actor):

====================================  ===  =====================================================================
camera/<name>/image_raw, tcp_pose,    in   sensors, as published by the robot drivers or the sim node; only those
tcp_twist, gripper/state,                  the observation keys need are subscribed (see robot_rl.sensors)
sim/object_state
task/reward, task/success             in   per-step reward and success (sim task, or a reward classifier)
teleop/twist, teleop/gripper,         in   the human: while ``engaged`` is true the human's command is executed
teleop/engaged, teleop/episode             and the transition is flagged; episode keys success / failure / reset
safety/estop                          in   true latches a hold of every command until false
/learner/weights, /learner/ack        in   versioned policy weights (transient-local); cumulative acks
command/gripper, command/target_pose  out  the safe command of each step (gripper first, then the pose)
actor/episode                         out  index of each episode started
/actor/transitions                    out  msgpack batches of transitions with actor id + sequence numbers
====================================  ===  =====================================================================

Service client ``reset`` (std_srvs/Trigger) starts each episode (empty ``reset_service``: no reset call). A call
not answered within ``reset_timeout_s`` (a lost response, a sim or driver that died during the reset) is given up
and made again, with a log line each time, as is a failed one; while no server is up the actor waits for one. A
sensor frame that does not follow within ``frame_timeout_s`` (after the reset; in lock-step also after each command:
the sim died or was restarted) gives the episode up and resets again, with a log line; the learner closes the given-up
episode. The status file counts ``reset_attempts``, ``reset_timeouts``, ``reset_failures``, ``frame_timeouts`` and
``episodes_given_up`` and says what the actor is ``waiting_for``.

Weights: from the learner (``/learner/weights``), or from a policy file with ``weights_path`` (the learner's or
``robot-rl train``'s ``<run_dir>/policy.msgpack``): then the actor acts at once and never waits for a learner. A file
that is missing or is not a policy file is one error line and exit status 2, as is any invalid parameter (unknown
names included).

Modes: ``lockstep`` steps once per new sensor frame (the sim node in lock-step advances once per pose command);
``realtime`` steps on a timer at ``control_period`` with the newest readings. A stale or missing sensor (older than
``max_sensor_age``) holds the robot and is logged (throttled); a malformed message is dropped with a log line. Every
command goes through robot_rl.safety.

The actor acts with the newest weights it has; while the learner is away it keeps acting with the last ones and keeps
unacknowledged transitions in a bounded outbox (re-sent until acknowledged). ``max_weight_lag`` (lock-step only)
makes it wait, at most ``weight_wait_s`` per step, for weights that have seen all but that many of its transitions,
so a slow learner trains on the same schedule as the in-process loop (one actor per learner: the learner counts the
transitions it trained on over the whole run, so the actor measures that count's growth since its first weights).
"""

from __future__ import annotations

import collections
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from robot_rl.ros import qos
from robot_rl.ros.node_util import NodeStartupError, declare_parameters, relative_name, topic_publisher

NODE_NAME = "actor"
MODES = ("lockstep", "realtime")
POLICIES = ("learner", "none")
TELEOP_TIMEOUT_S = 0.5
OBS_MODE_KEYS = {
    "state": ("state", "object_state"),
    "pixels": ("state", "images/front", "images/wrist"),
    "state+pixels": ("state", "object_state", "images/front", "images/wrist"),
}
RESET_LOG_EVERY_S = 5.0
RESET_RETRY_AFTER_FAILURE_S = 1.0  # a server that answers "failed" is not asked again at once

PARAMETERS: tuple[tuple[str, object, str], ...] = (
    ("actor_id", "robot0", "this actor's id in transitions (letters, digits, _ . -)"),
    ("task", "PickCube-v0", "sim task whose limits configure safety and episode length"),
    ("obs_mode", "", "state | pixels | state+pixels: the observation keys of a sim run's obs mode"),
    ("observation_keys", ["state", "images/front", "images/wrist"], "policy observation keys (no obs_mode)"),
    ("mode", "lockstep", "lockstep | realtime"),
    ("control_period", 0.1, "seconds between commands in realtime mode"),
    ("max_sensor_age", 0.2, "a sensor older than this [s] holds the robot"),
    ("max_episode_steps", 0, "episode time limit in steps (0: the task's)"),
    ("episodes", 0, "stop after this many episodes (0: run until stopped)"),
    ("policy", "learner", "learner: weights from the learner or weights_path | none: hold unless the human acts "
                          "(episodes start once a teleop node is up)"),
    ("weights_path", "", "policy file (<run_dir>/policy.msgpack) to act with at once, never waiting for a learner"),
    ("deterministic", False, "act with the policy mean (evaluation)"),
    ("seed", 0, "policy sampling seed"),
    ("stream_transitions", True, "send transitions to the learner"),
    ("record_path", "", "write every finished episode to this zarr dataset (demos from teleop)"),
    ("outbox_capacity", 3000, "unacknowledged transitions kept (the oldest is dropped beyond)"),
    ("resend_after", 2.0, "re-send an unacknowledged transition after this many seconds"),
    ("max_weight_lag", 0, "lockstep: wait for weights that saw all but this many transitions (0: off)"),
    ("weight_wait_s", 5.0, "longest wait per step for such weights"),
    ("reset_service", "reset", "std_srvs/Trigger service that starts an episode ('' for none)"),
    ("reset_timeout_s", 10.0, "give up a reset call not answered within this many seconds, and call again"),
    ("frame_timeout_s", 10.0, "no sensor frame this long after a reset (lockstep: after a command): the sim or "
                              "driver is gone; the episode is given up and the reset called again"),
    ("stats_path", "", "write a JSON status file here every second"),
)
"""The node's ROS parameters (name, default, description)."""


def _choice(param, name: str, choices: tuple[str, ...]) -> str:
    value = str(param(name))
    if value not in choices:
        raise NodeStartupError(f"{name}={value!r} must be one of {', '.join(repr(c) for c in choices)}")
    return value


class ActorNode:
    """rclpy node around an `ActorSession` (see the module doc)."""

    def __init__(self, *, node_name: str = NODE_NAME, context=None, cli_args: list[str] | None = None):
        import rclpy
        from geometry_msgs.msg import PoseStamped, TwistStamped
        from rclpy.event_handler import SubscriptionEventCallbacks
        from sensor_msgs.msg import Image, JointState
        from std_msgs.msg import Bool, Float32, Float32MultiArray, Float64, String, UInt8MultiArray, UInt32
        from std_srvs.srv import Trigger

        from robot_rl.actor import ActorSession
        from robot_rl.loop import make_env
        from robot_rl.safety import Safety, sim_safety_config
        from robot_rl.sensors import SensorCache, sensors_for
        from robot_rl.transport import Outbox, make_source

        self.node = rclpy.create_node(node_name, context=context, cli_args=cli_args)
        node = self.node
        self._log = node.get_logger()
        param = declare_parameters(node, PARAMETERS)
        self.mode = _choice(param, "mode", MODES)
        self.policy_kind = _choice(param, "policy", POLICIES)
        obs_mode = _choice(param, "obs_mode", ("", *OBS_MODE_KEYS))
        self.reset_timeout_s = float(param("reset_timeout_s"))
        self.frame_timeout_s = float(param("frame_timeout_s"))
        for name, value in (("reset_timeout_s", self.reset_timeout_s), ("frame_timeout_s", self.frame_timeout_s)):
            if value <= 0:
                raise NodeStartupError(f"{name}={value} must be > 0")
        self.observation_keys = OBS_MODE_KEYS[obs_mode] if obs_mode else tuple(str(k) for k in param("observation_keys"))
        self.required = sensors_for(self.observation_keys)
        env = make_env(str(param("task")), obs_mode="state")
        base = env.unwrapped
        self.control_dt = float(base.control_dt)
        self.max_translation, self.max_rotation = float(base.max_translation), float(base.max_rotation)
        max_steps = int(param("max_episode_steps")) or int(env.spec.max_episode_steps)
        max_age = float(param("max_sensor_age"))
        safety = Safety(sim_safety_config(env, required_sensors=self.required, stale_timeout=max_age))
        env.close()
        try:
            self.source = make_source(str(param("actor_id")))
        except ValueError as error:
            raise NodeStartupError(f"actor_id: {error}") from None
        self.outbox = Outbox(int(param("outbox_capacity")), float(param("resend_after")))
        self.session = ActorSession(safety, self.source, self.outbox, max_episode_steps=max_steps)
        self.sensors = SensorCache(self.observation_keys, max_age_s=max_age)
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
        # The learner's count of trained transitions when its first weights arrived: the count is the run's (every
        # actor and every earlier run of this one), so only its growth since then is this run's share.
        self._trained_base: int | None = None
        self.results: list[dict] = []
        self.rejected: collections.Counter[str] = collections.Counter()
        self._rejected_logged: dict[str, float] = {}
        self.done = False
        self.exit_status = 0

        sensors_qos = qos.qos_profile(qos.SENSORS)
        for sensor in self.required:
            if sensor.startswith("camera/"):
                camera = sensor.split("/", 1)[1]
                node.create_subscription(Image, f"camera/{camera}/image_raw",
                                         lambda msg, s=sensor: self._on_image(s, msg), sensors_qos)
        if "tcp_pose" in self.required:
            node.create_subscription(PoseStamped, relative_name(qos.TCP_POSE), self._on_tcp_pose, sensors_qos)
            node.create_subscription(TwistStamped, relative_name(qos.TCP_TWIST), self._on_tcp_twist, sensors_qos)
            node.create_subscription(JointState, relative_name(qos.GRIPPER_STATE), self._on_gripper, sensors_qos)
        if "object_state" in self.required:
            node.create_subscription(Float32MultiArray, relative_name(qos.SIM_OBJECT_STATE), self._on_object_state,
                                     sensors_qos)
        events = qos.qos_profile(qos.EVENTS)
        node.create_subscription(Float32, relative_name(qos.TASK_REWARD), self._on_reward, events)
        node.create_subscription(Bool, relative_name(qos.TASK_SUCCESS), self._on_success, events)
        node.create_subscription(TwistStamped, relative_name(qos.TELEOP_TWIST), self._on_teleop_twist,
                                 qos.topic_qos(qos.TELEOP_TWIST))
        node.create_subscription(Float64, relative_name(qos.TELEOP_GRIPPER), self._on_teleop_gripper,
                                 qos.topic_qos(qos.TELEOP_GRIPPER))
        node.create_subscription(Bool, relative_name(qos.TELEOP_ENGAGED), self._on_teleop_engaged,
                                 qos.topic_qos(qos.TELEOP_ENGAGED))
        node.create_subscription(String, relative_name(qos.TELEOP_EPISODE), self._on_episode_key,
                                 qos.topic_qos(qos.TELEOP_EPISODE))
        node.create_subscription(Bool, relative_name(qos.SAFETY_ESTOP), self._on_estop, qos.topic_qos(qos.SAFETY_ESTOP))
        node.create_subscription(UInt8MultiArray, qos.LEARNER_WEIGHTS, self._on_weights,
                                 qos.topic_qos(qos.LEARNER_WEIGHTS))
        node.create_subscription(UInt8MultiArray, qos.LEARNER_ACK, self._on_ack, qos.topic_qos(qos.LEARNER_ACK),
                                 event_callbacks=SubscriptionEventCallbacks(matched=self._on_learner_matched))
        self._pose_pub = topic_publisher(node, PoseStamped, qos.COMMAND_TARGET_POSE)
        self._gripper_pub = topic_publisher(node, Float64, qos.COMMAND_GRIPPER)
        self._episode_pub = topic_publisher(node, UInt32, qos.ACTOR_EPISODE)
        self._transitions_pub = node.create_publisher(UInt8MultiArray, qos.ACTOR_TRANSITIONS,
                                                      qos.topic_qos(qos.ACTOR_TRANSITIONS))
        self._Float64, self._UInt32 = Float64, UInt32
        reset_service = str(param("reset_service"))
        self._reset_client = node.create_client(Trigger, reset_service) if reset_service else None
        self._reset_name = self._reset_client.service_name if self._reset_client is not None else ""
        self._Trigger = Trigger

        # per-step inputs
        self._task_events: list[tuple[float, bool]] = []
        self._last_reward = 0.0
        self._episode_key: str | None = None
        self._teleop_engaged = False
        self._teleop_seen = False  # the teleop node's latched engaged state has arrived
        self._teleop_twist: tuple[np.ndarray, np.ndarray, float] | None = None
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
        self._reset_requested_at_stamp = -math.inf
        self._pending_object_state = None
        self._last_stepped_stamp = -math.inf
        self._commanded_since_frame = False
        self._wait_started: float | None = None
        self._recorder = None
        self._episode_steps: list[tuple] = []
        self._last_stats = 0.0

        self.weights_path = str(param("weights_path"))
        if self.weights_path:
            self._load_policy_file(self.weights_path)
        # Real time steps on this timer; lock-step steps on each frame, the timer only polls waiting phases.
        node.create_timer(float(param("control_period")) if self.mode == "realtime" else 0.002, self._on_timer)
        node.create_timer(0.05, self._flush_outbox)
        self._log.info(
            f"actor up: source={self.source} mode={self.mode} policy={self.policy_kind} keys={list(self.observation_keys)} "
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
            self._log.warning(f"dropped malformed {what} message: {error} ({self.rejected[what]} so far)")

    def _on_image(self, sensor: str, msg) -> None:
        from robot_rl.ros.convert import MessageError, image_from_msg, stamp_to_seconds

        try:
            image = image_from_msg(msg, rgb=True)
            if image.ndim != 3 or image.shape[2] != 3:
                raise MessageError(f"expected a 3-channel image, got shape {image.shape}")
            self.sensors.update(sensor, np.ascontiguousarray(image), stamp_to_seconds(msg.header.stamp))
        except MessageError as error:
            self._reject(sensor, error)

    def _on_tcp_pose(self, msg) -> None:
        from robot_rl.ros.convert import MessageError, pose_from_msg, stamp_to_seconds

        try:
            self.sensors.update("tcp_pose", pose_from_msg(msg), stamp_to_seconds(msg.header.stamp))
        except MessageError as error:
            self._reject("tcp_pose", error)
            return
        if self.mode == "lockstep":  # tcp_pose closes a frame: step now rather than at the next poll
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
            self._reject("gripper/state", error)

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
        from robot_rl.ros.convert import MessageError, twist_from_msg

        try:
            linear, angular = twist_from_msg(msg)
            self._teleop_twist = (linear, angular, time.monotonic())
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

        self._load_weights(msg_to_bytes(msg), origin="learner")

    def _load_policy_file(self, path: str) -> None:
        """Act with the policy in a policy file from the start; any problem with it is a NodeStartupError."""
        from robot_rl.policy_file import PolicyFileError, read_policy_file

        try:
            weights = read_policy_file(path)
        except PolicyFileError as error:
            raise NodeStartupError(f"weights_path: {error}") from None
        if self.policy_kind == "none":
            raise NodeStartupError(f"weights_path={path!r} with policy:=none: the actor would not use it")
        problem = self._use_weights(weights, origin=path)
        if problem:
            raise NodeStartupError(f"weights_path: policy file {path}: {problem}")

    def _load_weights(self, payload: bytes, origin: str) -> None:
        from robot_rl.transport import TransportError, decode_weights

        try:
            weights = decode_weights(payload)
        except TransportError as error:
            self._log.error(f"rejected weights from {origin}: {error}", throttle_duration_sec=5.0)
            return
        if self.policy_kind == "none" or weights.version <= self.weights_version:
            return
        problem = self._use_weights(weights, origin)
        if problem:
            self._log.error(f"rejected weights from {origin}: {problem}", throttle_duration_sec=5.0)

    def _use_weights(self, weights, origin: str) -> str | None:
        """Act with `weights` from now on; returns why they cannot be used, or None."""
        from robot_rl.policy_file import actor_from_weights

        try:
            if self.session.actor is None:
                missing = [k for k in weights.observation_spec.keys if k not in self.observation_keys]
                if missing:
                    return (f"the policy needs observation keys {missing} this actor does not build (it builds "
                            f"{list(self.observation_keys)}: set obs_mode)")
                self.session.actor = actor_from_weights(weights, seed=self.seed, deterministic=self.deterministic)
            else:
                self.session.actor.update_weights(weights.policy, weights.version)
        except (ValueError, KeyError, TypeError) as error:
            return str(error)
        first = self.weights_version == 0
        self.weights_version, self.weights_transitions = weights.version, weights.transitions
        if self._trained_base is None and not self.weights_path:
            self._trained_base = weights.transitions
        if first:
            self._log.info(f"policy weights v{weights.version} loaded from {origin}")
        return None

    def _on_ack(self, msg) -> None:
        from robot_rl.ros.convert import msg_to_bytes
        from robot_rl.transport import TransportError, decode_ack

        try:
            acks = decode_ack(msg_to_bytes(msg))
        except TransportError as error:
            self._reject("learner/ack", error)
            return
        if self.source in acks:
            self.outbox.acknowledge(acks[self.source])

    def _on_learner_matched(self, info) -> None:
        """A learner's acks appeared (it started or respawned): re-send what it has not acknowledged now, rather
        than after `resend_after`, so its cumulative acks catch up at once."""
        if info.current_count_change > 0 and self.stream:
            pending = self.outbox.resend_all()
            if pending:
                self._log.info(f"a learner appeared: re-sending {pending} unacknowledged transitions")

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
                self._transitions_pub.publish(bytes_to_msg(encode_transitions(self.source, due)))
                self.outbox.mark_sent(due, now)
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

    def _on_timer(self) -> None:
        if self.done:
            return
        if self._phase == "idle":
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
                self.waiting_for = "policy weights from the learner"
                self._log.info("waiting for policy weights from the learner", throttle_duration_sec=5.0)
                return
            if self.policy_kind == "none" and not self._teleop_seen:  # recording demos: nobody would act yet
                self.waiting_for = "a teleop node (teleop/engaged)"
                self._log.info("waiting for a teleop node (teleop/engaged)", throttle_duration_sec=5.0)
                return
            self.waiting_for = None
            position, quat = self.sensors.tcp_pose()
            episode = self.session.start_episode(position, quat)
            self._episode_pub.publish(self._UInt32(data=episode % (2**32)))
            self._task_events.clear()
            self._episode_key = None
            self._episode_steps = []
            self._phase = "running"
        if self._must_wait_for_weights():
            return
        self._step(stamp)

    def _awaiting_frame(self, stamp: float | None) -> bool:
        """Whether the next step needs a sensor frame that has not arrived (after the reset; lockstep: the frame,
        reward and success that answer the last command)."""
        if self._phase == "starting" and (stamp is None or stamp <= self._reset_requested_at_stamp):
            self.waiting_for = "a sensor frame after the reset"
            return True
        if self.mode == "lockstep":
            if stamp is None or stamp <= self._last_stepped_stamp:
                return True
            if self._phase == "running" and self._commanded_since_frame and not self._task_events:
                return True  # the step's reward / success have not arrived yet
        return False

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
        if self.mode != "lockstep" or self.max_weight_lag <= 0 or self.session.actor is None or self.weights_path:
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
            return self.sensors.observation(now), ()
        except MissingSensors as missing:
            return None, missing.reasons

    def _step(self, stamp: float | None) -> None:
        # Lock-step: the world waits for us, so sensor age is measured on the frame's own clock.
        now = stamp if self.mode == "lockstep" and stamp is not None else self._now()
        obs, problems = self._observation(now)
        if obs is None:
            self._log.warning(f"holding: {', '.join(problems)}", throttle_duration_sec=1.0)
            if self.mode == "realtime":  # a real-time robot needs a steady command stream; lock-step waits for us
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
        if result.command.held:
            self._log.warning(f"safety held the command: {', '.join(result.command.reasons)}",
                              throttle_duration_sec=1.0)
        self._publish(result.command, stamp)

    def _human_action(self) -> np.ndarray | None:
        if not self._teleop_engaged:
            return None
        from robot_rl.drivers.teleop import twist_to_action

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
        from robot_rl.ros.convert import pose_to_msg

        self._gripper_pub.publish(self._Float64(data=float((1.0 - command.gripper) / 2.0)))
        self._pose_pub.publish(pose_to_msg(command.target_position, command.target_quat, stamp=self._now(),
                                           frame_id="base"))
        self._commanded_since_frame = True
        if self.mode == "lockstep":  # the sim answers each command with a frame
            self._frame_due_since = time.monotonic()

    # ----- episodes ----------------------------------------------------------------------------------------------
    def _begin_reset(self) -> None:
        """Call the reset service (phase idle -> resetting), or wait for one to come up."""
        self._commanded_since_frame = False
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
            self.waiting_for = f"the reset service {self._reset_name}"
            self._reset_log(f"waiting for the reset service {self._reset_name} ({self._reset_waited(now):.0f} s)")
            return
        self.reset_counters["reset_attempts"] += 1
        self._reset_attempt += 1
        self.waiting_for = f"a response of the reset service {self._reset_name}"
        self._reset_future = self._reset_client.call_async(self._Trigger.Request())
        self._reset_sent_at = now
        self._phase = "resetting"

    def _check_reset(self) -> None:
        """A reset call answered (-> starting), failed or not answered in time (-> idle: call again)."""
        future, now, attempt = self._reset_future, time.monotonic(), self._reset_attempt
        if not future.done():
            if now - self._reset_sent_at < self.reset_timeout_s:
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
        self._reset_attempt, self._reset_wait_started = 0, None
        self._phase = "starting"
        self._frame_due_since = now

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
                  "weights_version": self.weights_version}
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

    def _record(self, final_obs, success: bool) -> None:
        from robot_rl.data.episodes import EpisodeWriter
        from robot_rl.types import ArraySpec, ObservationSpec

        if self._recorder is None:
            first = self._episode_steps[0][0]
            obs_spec = dict(ObservationSpec.from_example(first.observation).entries)
            action_spec = ArraySpec(tuple(np.shape(first.action)), "float32")
            self._recorder = EpisodeWriter(self.record_path, obs_spec, action_spec, fps=1.0 / self.control_dt,
                                           task=str(self.node.get_parameter("task").value), robot="ros_graph")
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
        deadline = time.monotonic() + 3.0  # give the outbox a moment to deliver the last transitions
        while self.stream and len(self.outbox) and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        successes = sum(r["success"] for r in self.results)
        self._log.info(f"done: {successes}/{len(self.results)} episodes successful")

    # ----- status ------------------------------------------------------------------------------------------------
    def stats(self) -> dict:
        session = self.session
        return {
            "source": self.source, "episodes": len(self.results),
            "successes": sum(r["success"] for r in self.results), "results": self.results[-200:],
            "transitions": session.next_seq, "commands": session.counters["commands"],
            "held": session.counters["held"], "acked_through": self.outbox.acknowledged_through,
            "outbox": len(self.outbox), "dropped": self.outbox.dropped, "resent": self.outbox.resent,
            "weights_version": self.weights_version, "rejected": dict(self.rejected), "phase": self._phase,
            "waiting_for": self.waiting_for, "reset_attempts": self.reset_counters["reset_attempts"],
            "reset_timeouts": self.reset_counters["reset_timeouts"],
            "reset_failures": self.reset_counters["reset_failures"],
            "frame_timeouts": self.reset_counters["frame_timeouts"],
            "episodes_given_up": self.reset_counters["episodes_given_up"], "time": time.time(),
        }

    def write_stats(self) -> None:
        if self.stats_path is None:
            return
        tmp = self.stats_path.with_name(self.stats_path.name + ".tmp")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(self.stats()))
        os.replace(tmp, self.stats_path)

    def destroy(self) -> None:
        self.write_stats()
        if self._recorder is not None:
            self._recorder.close()  # releases the dataset for the next writer
        self.node.destroy_node()


def main(argv: list[str] | None = None) -> int:
    """Run the actor node until SIGINT / SIGTERM or until its episodes are done; returns the exit status."""
    from robot_rl.ros.node_util import run_node

    return run_node(ActorNode, list(sys.argv if argv is None else argv), NODE_NAME)

if __name__ == "__main__":
    sys.exit(main())
