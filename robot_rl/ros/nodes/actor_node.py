"""The actor node: robot topics in, safe commands and transitions out, around the pure core.

Run::

    python -m robot_rl.ros.nodes.actor_node --ros-args -r __ns:=/robot1 -p actor_id:=robot1 -p robot:=robots/my_arm.yaml

The robot file (``robot``, robot_rl.actor.robot_config; default ``sim_panda``, the sim node's own topics) names the
robot's topics, message types and QoS, its rate, limits, episode length, command interface and reset; the node knows
no robot of its own. This module only speaks ROS: it decodes each message into the pure core and publishes what the
core decides. The core: robot_rl.actor.robot_io (sensor frames, observations, command interfaces, FK / IK),
robot_rl.actor.runner (the one episode loop: resets, waits, holds, timeouts), robot_rl.actor.session (the session: policy or
human -> safety -> command -> transition), robot_rl.actor.policy_slot (loading, the deployment gate, learner weights,
a lost learner) and robot_rl.actor.outputs (recording); its eval.json is robot_rl.sim.evaluate's. Topics, parameters
(robot_rl.ros.nodes.actor_params) and the status file are described in docs/ros.md.

No message can crash the node: each subscription is guarded, and a message that cannot be used is dropped with a
log line naming the topic and the reason (counted in the status file's ``rejected``). A publisher whose QoS does not
match the robot file's (a reliable subscription and a best-effort camera driver) is logged with the fix. A missing
or invalid policy file, or any invalid parameter, is one error line and exit status 2.
"""

from __future__ import annotations

if __name__ == "__main__":  # a program's start, before the heavy imports below
    from robot_rl.core.startup import program_start

    program_start()

import json
import sys
import time
from pathlib import Path

import numpy as np

from robot_rl.core.files import atomic_write_text
from robot_rl.learner.evaluations import RateWindow
from robot_rl.ros import qos
from robot_rl.ros.nodes.actor_params import NODE_NAME, PARAMETERS, check_parameters
from robot_rl.ros.node_util import GuardedSubscriptions, NodeStartupError, TriggerReset, declare_parameters, \
    publish_refused, relative_name, topic_publisher


LOCKSTEP_POLL_S = 0.002
LOCKSTEP_IDLE_POLL_S = 0.05
LOCKSTEP_IDLE_AFTER_S = 0.5


class ActorNode:
    """rclpy node around the episode runner and its `ActorSession` (see the module doc)."""

    def __init__(self, *, node_name: str = NODE_NAME, context=None, cli_args: list[str] | None = None):
        import rclpy

        self.node = rclpy.create_node(node_name, context=context, cli_args=cli_args)
        self._log = self.node.get_logger()
        self._param = declare_parameters(self.node, PARAMETERS)
        check_parameters(self.node.get_name(), self._param)
        self.transitions_out_bytes = self.transitions_out_messages = self.transitions_refused_messages = 0
        self.exit_status = 0
        self._last_stats = 0.0
        self._rate_window = RateWindow()
        self._configure()
        self._make_core()
        self.subscriptions = GuardedSubscriptions(self.node, self.link.topics)
        self._subscribe_all()
        if self.weights_path:
            from robot_rl.policies.base import PolicyError

            try:
                self.policy.load_file(self.weights_path)
            except PolicyError as error:
                raise NodeStartupError(f"weights_path: {error}") from None
        if self.mode == "realtime":
            self.node.create_timer(self.control_dt, self.runner.tick)
        else:  # lock-step steps on each frame (_frame_done); the timers only poll the waiting phases
            self._progress_mark, self._progress_at = None, time.monotonic()
            self._poll = self.node.create_timer(LOCKSTEP_POLL_S, self._poll_lockstep)
            self.node.create_timer(LOCKSTEP_IDLE_POLL_S, self._poll_idle)
        self.node.create_timer(0.05, self._flush_outbox)
        self._log.info(
            f"actor up: source={self.source} mode={self.mode} "
            f"policy={'saved ' + self.weights_path if self.weights_path else self.policy_source} "
            f"keys={list(self.observation_keys)} sensors={list(self.required)} "
            f"max_episode_steps={self.session.max_episode_steps} namespace={self.node.get_namespace()}")

    # ----- set-up ------------------------------------------------------------------------------------------------
    def _configure(self) -> None:
        """Read the parameters (checked by check_parameters) and check them against the robot file."""
        from robot_rl.actor.robot_config import RobotConfigError, load_robot_config
        from robot_rl.actor.robot_io import observed_sensors
        from robot_rl.ros.net.env import open_network_problem

        param = self._param
        try:
            self.robot = robot = load_robot_config(str(param("robot")))
        except RobotConfigError as error:
            raise NodeStartupError(f"robot: {error}") from None
        problem = open_network_problem(robot.sim)
        if problem:
            raise NodeStartupError(problem)
        self.mode = str(param("mode")) or robot.mode
        self.policy_source = str(param("policy"))
        obs_mode = str(param("obs_mode"))
        try:
            self.observation_keys, self.required = observed_sensors(robot, obs_mode, param("observation_keys"))
        except ValueError as error:
            raise NodeStartupError(str(error)) from None
        self.action_dim = int(param("action_dim"))
        self.control_dt = float(param("control_period")) or robot.control_period
        self.task = str(param("task"))
        self.stream = bool(param("stream_transitions"))
        self.stats_path = Path(param("stats_path")) if param("stats_path") else None
        self.weights_path = str(param("weights_path"))
        self.eval_out = str(param("eval_out"))
        reset_service = str(param("reset_service"))
        self.reset_kind = "none" if reset_service == "none" else "service" if reset_service else robot.reset.kind
        self.reset_name = reset_service or robot.reset.service if self.reset_kind == "service" else ""

    def _make_core(self) -> None:
        """The pure core: the driver link, the session, the policy slot and the episode runner."""
        import dataclasses

        from robot_rl.actor.session import ActorSession
        from robot_rl.actor.policy_slot import PolicySettings, PolicySlot
        from robot_rl.actor.runner import EpisodeRunner, HomePose, RunnerConfig
        from robot_rl.actor.robot_io import DriverLink
        from robot_rl.actor.safety import Safety
        from robot_rl.wire.learner_contact import RunBinding
        from robot_rl.wire.outbox import AckGaps, Outbox
        from robot_rl.wire.protocol import make_source

        param, robot = self._param, self.robot
        max_steps = int(param("max_episode_steps"))
        if not max_steps:  # a real robot's file decides; a sim task's length applies in the sim mirror only
            from robot_rl.sim.loop import run_episode_steps

            max_steps = run_episode_steps(robot, self.task)
        max_age = float(param("max_sensor_age")) or robot.sensor_age_limit
        safety = Safety(dataclasses.replace(robot.safety_config(action_dim=self.action_dim,
                                                                required_sensors=self.required),
                                            stale_timeout=max_age))
        try:
            self.source = make_source(str(param("actor_id")))
        except ValueError as error:
            raise NodeStartupError(f"actor_id: {error}") from None
        try:  # the twins' own checks
            self.outbox = Outbox(int(param("outbox_capacity")), float(param("resend_after")))
        except ValueError as error:
            raise NodeStartupError(f"outbox_capacity / resend_after: {error}") from None
        try:
            self.run_binding = RunBinding(str(param("run_id")), follow_new_run=bool(param("follow_new_run")),
                                          log=self._log.info, warn=self._log.warning)
        except ValueError as error:
            raise NodeStartupError(f"run_id / follow_new_run: {error}") from None
        self.ack_gaps = AckGaps()
        self.session = ActorSession(safety, self.source, self.outbox, max_episode_steps=max_steps)
        self.link = DriverLink(
            robot, self.observation_keys, self.required, now=self._now, publish_gripper=self._publish_gripper,
            publish_arm=self._publish_arm, announce=self._announce_episode,
            reset_service=TriggerReset(self.node, self.reset_name) if self.reset_kind == "service" else None,
            max_age_s=max_age, lockstep=self.mode == "lockstep", control_dt=self.control_dt,
            image_size=int(param("image_size")), kinematics=self._kinematics())
        settings = PolicySettings(
            source=self.policy_source, observation_keys=self.observation_keys, action_dim=self.action_dim,
            stream=self.stream, realtime=self.mode == "realtime", control_dt=self.control_dt,
            weights_from=f"the learner ({qos.LEARNER_WEIGHTS}; is the learner node up?)",
            **{name: param(name) for name in PolicySettings.PARAMETERS})
        self.policy = PolicySlot(self.session, robot, settings, log=self._log, control_clock=self._now,
                                 image_sizes=self.link.policy_image_sizes)
        home = HomePose(robot.home_position, robot.home_quat, robot.home_gripper, robot.reset.home_tolerance)
        config = RunnerConfig(mode=self.mode, control_dt=self.control_dt, reset=self.reset_kind,
                              reset_timeout_s=float(param("reset_timeout_s")) or robot.reset.timeout_s,
                              frame_timeout_s=float(param("frame_timeout_s")), episodes=int(param("episodes")),
                              home=home, max_translation=robot.max_translation, max_rotation=robot.max_rotation)
        self.runner = EpisodeRunner(self.session, self.link, config, log=self._log, gate=self.policy,
                                    on_episode_end=self._episode_ended)
        self.inputs = self.runner.inputs
        self.recorder = None
        if param("record_path"):
            from robot_rl.actor.outputs import EpisodeRecorder

            self.recorder = EpisodeRecorder(Path(param("record_path")), robot=robot, task=self.task,
                                            fps=1.0 / self.control_dt, image_transform=self.link.image_transform)
        self._policy_files = None  # robot_rl.ros.nodes.file_share_node.PolicyFiles, made for the first weights naming a base

    def _kinematics(self):
        robot = self.robot
        if robot.arm.state != "joint_states" and robot.command.interface != "joint_trajectory":
            return None
        from robot_rl.core.kinematics import ArmKinematics, KinematicsError

        try:
            return ArmKinematics.from_file(robot.model_path(), robot.arm.joint_names, robot.tcp_frame)
        except (KinematicsError, OSError, ValueError) as error:
            raise NodeStartupError(f"robot {robot.path}: arm.model / arm.joint_names / frames.tcp: {error}") from None

    def _subscribe_all(self) -> None:
        from geometry_msgs.msg import PoseStamped, TwistStamped
        from sensor_msgs.msg import CompressedImage, Image, JointState
        from std_msgs.msg import Bool, Float32, Float32MultiArray, Float64, String, UInt8MultiArray, UInt32
        from trajectory_msgs.msg import JointTrajectory

        robot, arm, gripper = self.robot, self.robot.arm, self.robot.gripper
        subscribe = self.subscriptions.subscribe
        # The sim's object state first: it carries no stamp, it is published before each frame's stamped streams,
        # and callbacks ready at once run in creation order, so a frame completed by tcp_pose finds its own.
        if "object_state" in self.required:
            subscribe(Float32MultiArray, relative_name(qos.SIM_OBJECT_STATE), self._on_object_state,
                      qos.qos_profile(qos.SENSORS), "object_state")
        for sensor in self.required:
            if sensor.startswith("camera/"):
                camera = robot.camera(sensor[len("camera/"):])
                message_type = CompressedImage if camera.type == "CompressedImage" else Image
                subscribe(message_type, camera.topic, lambda msg, s=sensor: self._on_image(s, msg),
                                qos.sensor_qos(camera.qos), sensor)
        if arm.state == "tcp_pose":
            subscribe(PoseStamped, arm.tcp_pose_topic, self._on_tcp_pose, qos.sensor_qos(arm.qos), "tcp_pose")
        if arm.twist == "topic":
            subscribe(TwistStamped, arm.twist_topic, self._on_tcp_twist, qos.sensor_qos(arm.qos), "tcp_twist")
        if gripper.state == "topic":
            subscribe(JointState, gripper.topic, self._on_gripper, qos.sensor_qos(gripper.qos), "gripper")
        if self.link.kinematics is not None or gripper.state == "joint_states":
            subscribe(JointState, arm.joint_states_topic, self._on_joint_states, qos.sensor_qos(arm.qos),
                            "joint_states")
        events = qos.qos_profile(qos.EVENTS)
        for message_type, topic, callback, profile, what in (
                (Float32, qos.TASK_REWARD, lambda m: self.inputs.reward(m.data), events, "task/reward"),
                (Bool, qos.TASK_SUCCESS, self._on_success, events, "task/success"),
                # engaged and gripper before the twist: callbacks ready at once run in creation order, and a lock-step
                # human's twist completes their command for the frame
                (Bool, qos.TELEOP_ENGAGED, self._on_teleop_engaged, None, "teleop/engaged"),
                (Float64, qos.TELEOP_GRIPPER, lambda m: self.inputs.teleop_gripper(m.data), None, "teleop/gripper"),
                (TwistStamped, qos.TELEOP_TWIST, self._on_teleop_twist, None, "teleop/twist"),
                (String, qos.TELEOP_EPISODE, lambda m: self.inputs.key(m.data), None, "teleop/episode"),
                (Bool, qos.SAFETY_ESTOP, self._on_estop, None, "safety/estop")):
            subscribe(message_type, relative_name(topic), callback, profile or qos.topic_qos(topic), what)
        subscribe(UInt8MultiArray, qos.LEARNER_WEIGHTS, self._on_weights, qos.topic_qos(qos.LEARNER_WEIGHTS),
                        "learner/weights")
        subscribe(UInt8MultiArray, qos.LEARNER_ACK, self._on_ack, qos.topic_qos(qos.LEARNER_ACK), "learner/ack",
                        matched=self._on_learner_matched)
        commands = qos.qos_profile(qos.COMMANDS)
        if robot.command.interface == "pose":
            self._arm_pub = self.node.create_publisher(PoseStamped, robot.command.pose_topic, commands)
        else:
            self._arm_pub = self.node.create_publisher(JointTrajectory, robot.command.joint_trajectory_topic, commands)
        self._gripper_pub = self.node.create_publisher(
            Float64 if gripper.command == "Float64" else JointTrajectory, gripper.command_topic, commands)
        self._episode_pub = topic_publisher(self.node, UInt32, qos.ACTOR_EPISODE)
        self._transitions_pub = self.node.create_publisher(UInt8MultiArray, qos.ACTOR_TRANSITIONS,
                                                           qos.topic_qos(qos.ACTOR_TRANSITIONS))
        self._Float64, self._UInt32 = Float64, UInt32

    # ----- messages -> the core (a MessageError or ValueError drops the message, see _subscribe) -------------------
    def _now(self) -> float:
        from robot_rl.ros.node_util import clock_seconds

        return clock_seconds(self.node.get_clock())

    def _frame_done(self) -> None:
        """Lock-step: the arm state closes a frame, so step now rather than at the next poll."""
        if self.mode == "lockstep":
            self.runner.tick()
            self._note_progress()

    # A lock-step actor polls its waiting phases (a reset service's answer, a chunk from the planner thread) every
    # LOCKSTEP_POLL_S while it is getting on; once nothing has moved for LOCKSTEP_IDLE_AFTER_S (no learner weights
    # yet, no reset service, the training budget done) only every LOCKSTEP_IDLE_POLL_S: polling a 2 ms timer kept an
    # idle actor at about 45 % of a core.
    def _poll_lockstep(self) -> None:
        self.runner.tick()
        if not self._note_progress() and time.monotonic() - self._progress_at > LOCKSTEP_IDLE_AFTER_S:
            self._poll.cancel()

    def _poll_idle(self) -> None:
        if self._poll.is_canceled():
            self.runner.tick()
            self._note_progress()

    def _note_progress(self) -> bool:
        """Whether the runner moved since the last look (phase, wait, transitions); re-arms the fast poll if so."""
        runner = self.runner
        mark = (runner.phase, runner.waiting_for, runner.done, self.session.next_seq, len(runner.results))
        if mark == self._progress_mark:
            return False
        self._progress_mark, self._progress_at = mark, time.monotonic()
        if self._poll.is_canceled():
            self._poll.reset()
        return True

    def _on_image(self, sensor: str, msg) -> None:
        from robot_rl.ros.convert import compressed_image_from_msg, image_from_msg, stamp_to_seconds
        from robot_rl.core.vision import to_rgb

        if hasattr(msg, "format"):  # sensor_msgs/CompressedImage
            image = compressed_image_from_msg(msg)
        else:
            image = to_rgb(image_from_msg(msg), msg.encoding)
        self.link.image(sensor, image, stamp_to_seconds(msg.header.stamp))

    def _on_tcp_pose(self, msg) -> None:
        from robot_rl.ros.convert import pose_from_msg, stamp_to_seconds

        position, quat = pose_from_msg(msg)
        self.link.check_frame(msg.header.frame_id)
        self.link.set_tcp_pose(position, quat, stamp_to_seconds(msg.header.stamp))
        self._frame_done()

    def _on_tcp_twist(self, msg) -> None:
        from robot_rl.ros.convert import stamp_to_seconds, twist_from_msg

        self.link.tcp_twist(*twist_from_msg(msg), stamp_to_seconds(msg.header.stamp))

    def _on_gripper(self, msg) -> None:
        from robot_rl.ros.convert import joint_state_from_msg

        state = joint_state_from_msg(msg)
        self.link.gripper(state.positions, state.stamp)

    def _on_joint_states(self, msg) -> None:
        from robot_rl.ros.convert import joint_state_from_msg

        if self.link.joint_states(joint_state_from_msg(msg)):
            self._frame_done()  # the arm and the fingers of this frame are in

    def _on_object_state(self, msg) -> None:
        from robot_rl.ros.convert import floats_from_msg

        self.link.object_state(floats_from_msg(msg))

    def _on_success(self, msg) -> None:
        self.inputs.success(bool(msg.data))
        self._frame_done()

    def _on_teleop_twist(self, msg) -> None:
        from robot_rl.ros.convert import stamp_to_seconds, twist_from_msg

        self.inputs.teleop_twist(*twist_from_msg(msg), stamp_to_seconds(msg.header.stamp))

    def _on_teleop_engaged(self, msg) -> None:
        if self.inputs.teleop_engaged(bool(msg.data)):
            self._log.info(f"human {'took over' if msg.data else 'released control'}")

    def _on_estop(self, msg) -> None:
        if msg.data:
            self.session.safety.engage_estop("safety/estop topic")
        else:
            self.session.safety.clear_estop()

    # ----- the core -> messages (robot_rl.actor.robot_io.DriverLink) ---------------------------------------------------
    def _publish_gripper(self, value) -> None:
        from robot_rl.ros.convert import joint_trajectory_to_msg

        if np.ndim(value) == 0:
            self._gripper_pub.publish(self._Float64(data=float(value)))
        else:
            self._gripper_pub.publish(joint_trajectory_to_msg(self.robot.gripper.command_joints, value,
                                                              self.link.time_from_start, stamp=self._now()))

    def _publish_arm(self, position_or_joints, quat=None) -> None:
        from robot_rl.ros.convert import joint_trajectory_to_msg, pose_to_msg

        if quat is not None:
            self._arm_pub.publish(pose_to_msg(position_or_joints, quat, stamp=self._now(),
                                              frame_id=self.robot.base_frame))
        else:
            self._arm_pub.publish(joint_trajectory_to_msg(self.robot.arm.joint_names, position_or_joints,
                                                          self.link.time_from_start, stamp=self._now()))

    def _announce_episode(self, episode: int) -> None:
        self._episode_pub.publish(self._UInt32(data=episode % (2**32)))

    # ----- the learner -------------------------------------------------------------------------------------------
    def _on_weights(self, msg) -> None:
        from robot_rl.ros.convert import msg_to_bytes
        from robot_rl.wire.protocol import TransportError
        from robot_rl.wire.weights import decode_weights

        try:
            weights = decode_weights(msg_to_bytes(msg))
        except TransportError as error:
            self.subscriptions.rejected["learner/weights"] += 1
            self.policy.weights_heard["malformed"] += 1
            self._log.error(f"rejected weights from learner: {error}", throttle_duration_sec=5.0)
            return
        if not self._heard_served_run(weights.run, weights.incarnation):
            self.policy.weights_heard["of a run or learner start this actor does not serve"] += 1
            return
        if not self.policy.wants(weights):
            self.policy.weights_heard["not newer than those in use"] += 1
            return
        if self.session.actor is None and (weights.policy_config or {}).get("base"):
            weights = self._base_here(weights)
            if weights is None:
                self.policy.weights_heard["waiting for their base"] += 1
                return  # its base is being checked or fetched; used once it is here (_use_learner_weights)
        self._use_learner_weights(weights)

    def _base_here(self, weights):
        """`weights` naming this host's copy of their base (the learner's bytes, by sha256; fetched from the learner
        if this host has none), or None until it is here (robot_rl.ros.nodes.file_share_node)."""
        if self._policy_files is None:
            from robot_rl.wire.file_share import FileShareError
            from robot_rl.ros.nodes.file_share_node import PolicyFiles

            try:
                self._policy_files = PolicyFiles(self.node, ready=self._use_learner_weights, failed=self._files_failed)
            except FileShareError as error:  # its settings in the environment
                self._files_failed(str(error))
                return None
        return self._policy_files.local(weights)

    def _use_learner_weights(self, weights) -> None:
        if self.policy.wants(weights):
            problem = self.policy.use_weights(weights, "learner")
            if problem:
                self.policy.weights_heard["refused"] += 1
                self._log.error(f"rejected weights from learner: {problem}", throttle_duration_sec=5.0)

    def _files_failed(self, problem: str) -> None:
        """The base differs from the learner's, or cannot be fetched: one line, and the node stops (status 2)."""
        self._log.error(problem)
        self.exit_status, self.runner.done = 2, True

    def _on_ack(self, msg) -> None:
        from robot_rl.ros.convert import msg_to_bytes
        from robot_rl.wire.transitions import decode_ack_message

        ack = decode_ack_message(msg_to_bytes(msg))
        if self._heard_served_run(ack.run, ack.incarnation):
            now = time.monotonic()
            self.outbox.apply_ack(ack, self.source, now)
            self.ack_gaps.heard(now, time.time())

    def _heard_served_run(self, run: str | None, incarnation: int | None) -> bool:
        """Whether a learner message belongs to the run this actor serves (robot_rl.wire.learner_contact.RunBinding);
        only those count as hearing the learner. A run switched to gets every unacknowledged transition at once."""
        from robot_rl.wire.learner_contact import Heard

        heard = self.run_binding.hear(run, incarnation)
        if not heard.admitted:
            return False
        if heard is Heard.SWITCHED and self.stream:
            self.outbox.resend_all()
        self.policy.heard_learner()
        return True

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

        now = time.monotonic()
        if self.stream:
            images = any(k.startswith("images/") for k in self.observation_keys)
            for payload in self.outbox.due_messages(self.source, now, max_items=8 if images else 64,
                                                    run=self.run_binding.run):
                if publish_refused(self._transitions_pub, bytes_to_msg(payload)):
                    # A full channel: the rest waits too; unacknowledged, they are all sent again (resend_after).
                    self.transitions_refused_messages += 1
                    self._log.warning("the middleware refused a transitions message (channel full); sending it "
                                      "again later", throttle_duration_sec=5.0)
                    break
                self.transitions_out_bytes += len(payload)
                self.transitions_out_messages += 1
        else:
            self._forget_unstreamed()
        if self.stats_path is not None and now - self._last_stats >= 1.0:
            self._last_stats = now
            self.write_stats()

    # ----- episodes ----------------------------------------------------------------------------------------------
    def _episode_ended(self, end) -> None:
        if self.recorder is not None and end.steps:
            index = self.recorder.record(end)
            self._log.info(f"recorded episode {index} ({len(end.steps)} steps) to {self.recorder.path}")
        if self.runner.done:
            self.write_stats()
            if self.eval_out:
                self._write_eval()

    def _write_eval(self) -> None:
        from robot_rl.sim.evaluate import write_actor_eval

        try:
            path, line = write_actor_eval(
                self.runner.results, weights_path=self.weights_path, eval_out=self.eval_out,
                policy=self.session.actor.policy, task=self.task, obs_mode=str(self._param("obs_mode")),
                inference_steps=int(self._param("inference_steps")), mode=self.mode,
                deterministic=bool(self._param("deterministic")))
        except OSError as error:
            self._log.error(f"cannot write eval.json: {error}")
            self.exit_status = 1
            return
        self._log.info(f"eval: {line}; {path}")

    # ----- lifecycle (robot_rl.ros.node_util.run_node) -----------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self.runner.done

    def stop(self, executor, signal_number: int | None) -> None:
        if not self.runner.done:
            self._log.info(f"stopping (signal {signal_number})")
            return
        if not self.stream:
            self._forget_unstreamed()
        deadline = time.monotonic() + 3.0  # give the outbox a moment to deliver the last transitions
        while self.stream and len(self.outbox) and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        results = self.runner.results
        self._log.info(f"done: {sum(r['success'] for r in results)}/{len(results)} episodes successful")

    def stats(self) -> dict:
        session, policy, outbox = self.session, self.policy, self.outbox
        rates = self._rate_window.add(time.monotonic(), transitions_per_s=session.next_seq,
                                      commands_per_s=session.counters["commands"])
        return {
            "source": self.source, **self.runner.status(), "rates": rates, "learner_done": policy.training_done,
            "transitions": session.next_seq, "commands": session.counters["commands"],
            "held": session.counters["held"], "policy_late": session.counters["policy_late"],
            "chunks": dict(getattr(getattr(session.actor, "planner", None), "counters", {}) or {}),
            "acked_through": outbox.acknowledged_through, "outbox": len(outbox), "dropped": outbox.dropped,
            "resent": outbox.resent, "resend_after_s": round(outbox.resend_timeout(), 2),
            "weights_version": policy.weights_version, "rejected": dict(self.subscriptions.rejected), "robot": self.robot.name,
            "incompatible_qos": dict(self.subscriptions.incompatible_qos), "time": time.time(), "unvalidated": policy.unvalidated,
            "transitions_out_bytes": self.transitions_out_bytes,
            "transitions_out_messages": self.transitions_out_messages,
            "transitions_refused_messages": self.transitions_refused_messages,
            "weights_used_at": list(policy.weights_used_at),
            "learner": policy.learner_watch.to_json(time.monotonic()),
            "run": self.run_binding.to_json(),
            "ack_gaps": self.ack_gaps.to_json(),
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
        if self.recorder is not None:
            self.recorder.close()
        if self._policy_files is not None:
            self._policy_files.share.close()
        self.node.destroy_node()


def main(argv: list[str] | None = None) -> int:
    """Run the actor node until SIGINT / SIGTERM or until its episodes are done; returns the exit status."""
    from robot_rl.ros.node_util import run_node

    return run_node(ActorNode, list(sys.argv if argv is None else argv), NODE_NAME, PARAMETERS, check_parameters)


if __name__ == "__main__":
    sys.exit(main())
