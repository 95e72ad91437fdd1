"""The scripted teleop node: plays the human supervisor of a sim run over ROS 2, with the scripted expert's hands.

Run::

    python -m robot_rl.sim.scripted_teleop [--ros-args -r __ns:=/robot1 -p task:=PickCube-v0 -p takeover_steps:=5]

A thin ROS shell around :class:`robot_rl.sim.human.ScriptedSupervisor`, the one the in-process simulated human
(:class:`robot_rl.sim.human.SimulatedHuman`) runs too, fed the same things: it takes over when the TCP is stuck or
the actor keeps pushing its target against a workspace face (and, where set, when the commanded motion heads where
the expert would not, or the sim names a failure the hand is about to cause), for ``takeover_steps`` steps within a
per-episode and a total budget. While engaged it drives the robot with the sim node's expert action
(``sim/expert_action``) turned into a teleop twist, exactly as a human on a teleop device would.

Topics (names and QoS from robot_rl.ros.qos; every name relative, so a namespace remap moves the whole node):

===================  ===========================  ===  ===============================================================
name                 type                         dir  use
===================  ===========================  ===  ===============================================================
tcp_pose             geometry_msgs/PoseStamped    in   one message = one control step (stuck detection); with a
                                                       ``robot`` file whose arm state is joint_states: its JointState,
                                                       by forward kinematics (and its JointTrajectory commands)
command/target_pose  geometry_msgs/PoseStamped    in   the actor's absolute target (pushing against the workspace)
sim/expert_action    std_msgs/Float32MultiArray   in   the expert's action for the current state (the human's hands)
sim/imminent_failure std_msgs/String              in   with ``watch_hazards``: the failure the hand's target is about
                                                       to cause ('' none): a takeover at this step (the human's eyes)
actor/episode        std_msgs/UInt32              in   a new episode: resets the per-episode evidence and budget
teleop/engaged       std_msgs/Bool (latched)      out  false at start; true while taking over
teleop/twist         geometry_msgs/TwistStamped   out  on each engaged step: action_to_twist(latest expert action),
                                                       frame ``base``, stamped with the tcp_pose step it answers
teleop/gripper       std_msgs/Float64             out  while engaged: the expert's gripper opening in [0 closed, 1 open]
===================  ===========================  ===  ===============================================================

The sim node publishes ``sim/expert_action`` before ``tcp_pose`` in each step, and this node subscribes to the expert
action first, so when both wait at once the expert action of the step is taken before the step is answered.

The policy's action is not visible, so the push direction is inferred from the commanded targets
(:func:`robot_rl.sim.human.inferred_push`): an axis pushes out when the target moved towards a face by more than half
a step, or sits on the face itself (within 0.1 mm: the actor's safety layer clipped it there, so the policy asked for
more).

Parameters (:data:`PARAMETERS`, read at start-up): ``task`` (its env gives the workspace box and, where they are 0,
``max_translation``, ``max_rotation`` and ``control_dt``), ``takeover_steps``, ``episode_budget``, ``total_budget``
(-1: none), ``stuck_window``, ``stuck_distance``, ``boundary_margin``, ``boundary_steps``, ``disagreement``,
``disagreement_steps``, ``watch_hazards``, ``max_translation``, ``max_rotation``, ``control_dt``. Invalid parameters:
one log line, exit status 2. SIGINT / SIGTERM: clean exit 0.
"""

from __future__ import annotations

if __name__ == "__main__":  # a program's start, before the heavy imports below
    from robot_rl.core.startup import program_start

    program_start()

import argparse
import dataclasses
import sys

import numpy as np

from robot_rl.ros import qos
from robot_rl.ros.node_util import declare_parameters, relative_name, topic_publisher
from robot_rl.sim.human import InterventionConfig, ScriptedSupervisor

NODE_NAME = "scripted_teleop"
BASE_FRAME = "base"
EXIT_BAD_PARAMETERS = 2


@dataclasses.dataclass(frozen=True)
class ScriptedTeleopConfig:
    """The scripted teleop's rule, budgets and action scaling."""

    task: str = "PickCube-v0"
    takeover_steps: int = InterventionConfig.takeover_steps
    episode_budget: int = InterventionConfig.episode_budget
    total_budget: int = -1
    """-1: no total budget."""
    stuck_window: int = InterventionConfig.stuck_window
    stuck_distance: float = InterventionConfig.stuck_distance
    boundary_margin: float = InterventionConfig.boundary_margin
    boundary_steps: int = InterventionConfig.boundary_steps
    disagreement: float = 0.0
    """Take over when the inferred push lies farther than this from the expert action, disagreement_steps steps in a
    row (0: off); see robot_rl.sim.human.InterventionConfig."""
    disagreement_steps: int = InterventionConfig.disagreement_steps
    watch_hazards: bool = False
    """Take over at the step the sim names a failure the hand's target is about to cause (sim/imminent_failure); see
    robot_rl.sim.human.InterventionConfig."""
    max_translation: float = 0.03
    """[m] per control step at action 1 (the env's max_translation)."""
    max_rotation: float = 0.15
    """[rad] per control step at action 1 (the env's max_rotation)."""
    control_dt: float = 0.1
    """[s] control period (the env's control_dt)."""

    def __post_init__(self) -> None:
        if self.total_budget < -1:
            raise ValueError(f"total_budget={self.total_budget} must be >= 0, or -1 for no total budget")
        for name in ("max_translation", "max_rotation", "control_dt"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"{name}={value!r} must be a finite number > 0")
        self.intervention_config()  # validates the rule's fields

    def intervention_config(self) -> InterventionConfig:
        return InterventionConfig(
            takeover_steps=self.takeover_steps, episode_budget=self.episode_budget,
            total_budget=None if self.total_budget == -1 else self.total_budget, stuck_window=self.stuck_window,
            stuck_distance=self.stuck_distance, boundary_margin=self.boundary_margin,
            boundary_steps=self.boundary_steps, disagreement=self.disagreement or None,
            disagreement_steps=self.disagreement_steps, watch_hazards=self.watch_hazards)


def task_limits(task: str) -> dict[str, object]:
    """The task env's workspace box and action scaling (builds the env once and closes it)."""
    from robot_rl.sim.loop import make_env

    env = make_env(task)
    try:
        base = env.unwrapped
        return {"workspace_low": np.array(base.workspace_low, dtype=np.float64),
                "workspace_high": np.array(base.workspace_high, dtype=np.float64),
                "max_translation": float(base.max_translation), "max_rotation": float(base.max_rotation),
                "control_dt": float(base.control_dt)}
    finally:
        env.close()


ENV_DEFAULT = 0.0
"""The value of max_translation, max_rotation and control_dt that stands for "the task env's"."""
_DEFAULTS = ScriptedTeleopConfig
PARAMETERS: tuple[tuple[str, object, str], ...] = (
    ("task", _DEFAULTS.task, "task id, e.g. PickCube-v0: its env gives the workspace box"),
    ("takeover_steps", _DEFAULTS.takeover_steps, "steps the expert keeps control once it took over"),
    ("episode_budget", _DEFAULTS.episode_budget, "at most this many intervention steps per episode"),
    ("total_budget", _DEFAULTS.total_budget, "at most this many intervention steps over the whole run; -1: no limit"),
    ("stuck_window", _DEFAULTS.stuck_window, "stuck: the TCP moved less than stuck_distance over this many steps"),
    ("stuck_distance", _DEFAULTS.stuck_distance, "stuck: distance threshold [m]"),
    ("boundary_margin", _DEFAULTS.boundary_margin,
     "pushing out: target within this margin [m] of a workspace face..."),
    ("boundary_steps", _DEFAULTS.boundary_steps, "...while pushing further out this many steps in a row"),
    ("disagreement", _DEFAULTS.disagreement,
     "disagreeing: push farther than this from sim/expert_action (action units, translation; 0: off)..."),
    ("disagreement_steps", _DEFAULTS.disagreement_steps, "...this many steps in a row"),
    ("watch_hazards", _DEFAULTS.watch_hazards,
     "take over at the step sim/imminent_failure names a failure the hand's target is about to cause"),
    ("max_translation", ENV_DEFAULT, "[m] per control step at action 1 (0: the task env's)"),
    ("max_rotation", ENV_DEFAULT, "[rad] per control step at action 1 (0: the task env's)"),
    ("control_dt", ENV_DEFAULT, "[s] control period (0: the task env's)"),
    ("robot", "", "robot file of a driver-like sim (arm state from joint_states, joint commands); '': native topics"),
)
"""The node's ROS parameters (name, default, description), all read at start-up."""


class ScriptedTeleopNode:
    """One rclpy node around a :class:`ScriptedSupervisor` (see the module doc for topics and parameters)."""

    def __init__(self, *, node_name: str = NODE_NAME, context=None, cli_args: list[str] | None = None):
        import rclpy
        from geometry_msgs.msg import PoseStamped, TwistStamped
        from std_msgs.msg import Bool, Float32MultiArray, Float64, String, UInt32

        self._Bool, self._Float64 = Bool, Float64
        self.node = rclpy.create_node(node_name, context=context, cli_args=cli_args)
        node = self.node
        self._log = node.get_logger()
        try:
            param = declare_parameters(node, PARAMETERS)
            values = {name: type(default)(param(name)) for name, default, _ in PARAMETERS if name != "robot"}
            limits = task_limits(values["task"])
            for name in ("max_translation", "max_rotation", "control_dt"):
                if values[name] == ENV_DEFAULT:
                    values[name] = limits[name]
            self.config = ScriptedTeleopConfig(**values)
        except Exception:
            node.destroy_node()
            raise
        c = self.config
        self.supervisor = ScriptedSupervisor(c.intervention_config(), limits["workspace_low"], limits["workspace_high"],
                                             control_dt=c.control_dt, max_translation=c.max_translation,
                                             max_rotation=c.max_rotation)
        self._last_tcp_stamp = 0.0
        self._expert_fresh = False  # an expert action arrived since the last command
        self._command_due = False  # engaged at a step whose expert action has not arrived yet

        self._twist_pub = topic_publisher(node, TwistStamped, qos.TELEOP_TWIST)
        self._gripper_pub = topic_publisher(node, Float64, qos.TELEOP_GRIPPER)
        self._engaged_pub = topic_publisher(node, Bool, qos.TELEOP_ENGAGED)
        # Creation order is the executor's order among callbacks ready at once: step inputs before the step itself.
        for msg_type, topic, callback in (
            (Float32MultiArray, qos.SIM_EXPERT_ACTION, self._on_expert_action),
            (String, qos.SIM_IMMINENT_FAILURE, self._on_hazard),
            (PoseStamped, qos.COMMAND_TARGET_POSE, self._on_target_pose),
            (UInt32, qos.ACTOR_EPISODE, self._on_episode),
        ):
            node.create_subscription(msg_type, relative_name(topic), callback, qos.topic_qos(topic))
        self._kinematics = None
        robot = str(param("robot"))
        if robot and self._subscribe_robot(robot):
            self._arm_source = f"{self._robot.arm.joint_states_topic} (forward kinematics, robot {robot})"
        else:
            subscription = node.create_subscription(PoseStamped, relative_name(qos.TCP_POSE), self._on_tcp_pose,
                                                    qos.topic_qos(qos.TCP_POSE))
            self._arm_source = subscription.topic_name
        self._started = node.get_clock().now().nanoseconds * 1e-9
        node.create_timer(5.0, self._check_heard)
        self._engaged_pub.publish(Bool(data=False))
        c = self.config
        self._log.info(
            f"scripted teleop up: task={c.task} takeover_steps={c.takeover_steps} episode_budget={c.episode_budget} "
            f"total_budget={c.total_budget} stuck={c.stuck_window} steps < {c.stuck_distance} m "
            f"workspace={self.supervisor.workspace_low.tolist()}..{self.supervisor.workspace_high.tolist()} "
            f"namespace={node.get_namespace()}")

    def _subscribe_robot(self, name: str) -> bool:
        """A robot file whose arm state is joint_states (a driver-like sim): the TCP by forward kinematics of the
        joints, the actor's targets from its joint commands. Returns False where the native topics apply."""
        from sensor_msgs.msg import JointState
        from trajectory_msgs.msg import JointTrajectory

        from robot_rl.core.kinematics import ArmKinematics
        from robot_rl.actor.robot_config import load_robot_config

        robot = load_robot_config(name)
        if robot.arm.state != "joint_states" and robot.command.interface != "joint_trajectory":
            return False
        self._robot = robot
        self._kinematics = ArmKinematics.from_file(robot.model_path(), robot.arm.joint_names, robot.tcp_frame)
        if robot.command.interface == "joint_trajectory":
            self.node.create_subscription(JointTrajectory, robot.command.joint_trajectory_topic,
                                          self._on_joint_command, qos.qos_profile(qos.COMMANDS))
        if robot.arm.state == "joint_states":
            self.node.create_subscription(JointState, robot.arm.joint_states_topic, self._on_joint_states,
                                          qos.sensor_qos(robot.arm.qos))
            return True
        return False

    def _check_heard(self) -> None:
        """A human who never sees the arm never acts: say so (a driver-like sim needs -p robot:=...)."""
        if self._last_tcp_stamp == 0.0:
            self._log.warning(f"no arm state heard on {self._arm_source} yet: the scripted human cannot act (a robot "
                              "file whose arm state is joint_states needs -p robot:=<that file>)",
                              throttle_duration_sec=10.0)

    def _joint_tcp(self, names, positions) -> np.ndarray | None:
        joints = self._robot.arm.joint_names
        if not all(name in names for name in joints):
            return None
        q = np.asarray([positions[list(names).index(name)] for name in joints], dtype=np.float64)
        return self._kinematics.forward(q)[0] if np.isfinite(q).all() else None

    def _on_joint_states(self, msg) -> None:
        from robot_rl.ros.convert import stamp_to_seconds

        position = self._joint_tcp(msg.name, msg.position)
        if position is not None:
            self._tcp_step(position, stamp_to_seconds(msg.header.stamp))

    def _on_joint_command(self, msg) -> None:
        if msg.points:
            position = self._joint_tcp(msg.joint_names, msg.points[0].positions)
            if position is not None:
                self.supervisor.on_target(position)

    # ----- callbacks -------------------------------------------------------------------------------------------
    def _on_tcp_pose(self, msg) -> None:
        from robot_rl.ros.convert import MessageError, pose_from_msg, stamp_to_seconds

        try:
            position, _ = pose_from_msg(msg)
        except MessageError as error:
            self._log.warning(f"ignored tcp_pose ({error})", throttle_duration_sec=1.0)
            return
        self._tcp_step(position, stamp_to_seconds(msg.header.stamp))

    def _tcp_step(self, position, stamp: float) -> None:
        """One control step at a measured TCP position."""
        self._last_tcp_stamp = stamp
        rule = self.supervisor.rule
        was_engaged = self.supervisor.engaged
        engaged = self.supervisor.step(position)
        if engaged and not was_engaged:
            total = "none" if self.config.total_budget == -1 else self.config.total_budget
            self._log.info(
                f"taking over ({rule.last_trigger}) for up to {self.config.takeover_steps} steps; "
                f"episode budget used {rule.episode_steps}/{self.config.episode_budget}, "
                f"total {rule.total_steps}/{total}")
        if engaged != was_engaged:
            self._engaged_pub.publish(self._Bool(data=engaged))
        if not engaged and was_engaged:
            self._log.info(f"handing control back to the policy after {rule.episode_steps} intervention steps "
                           "this episode")
        if engaged:
            # The expert action of this step is published before its tcp_pose, but on another topic: answer the
            # step with it, once it is here (or with the last one, if a whole step passed without one).
            if self._expert_fresh or self._command_due:
                self._publish_command()
            else:
                self._command_due = True

    def _on_target_pose(self, msg) -> None:
        from robot_rl.ros.convert import MessageError, pose_from_msg

        try:
            position, _ = pose_from_msg(msg)
        except MessageError as error:
            self._log.warning(f"ignored command/target_pose ({error})", throttle_duration_sec=1.0)
            return
        self.supervisor.on_target(position)

    def _on_expert_action(self, msg) -> None:
        try:
            self.supervisor.on_expert_action(np.asarray(msg.data, dtype=np.float64))
        except ValueError as error:
            self._log.warning(f"ignored sim/expert_action ({error})", throttle_duration_sec=1.0)
            return
        self._expert_fresh = True
        if self._command_due and self.supervisor.engaged:
            self._publish_command()

    def _on_hazard(self, msg) -> None:
        self.supervisor.on_hazard(str(msg.data))

    def _on_episode(self, msg) -> None:
        was_engaged = self.supervisor.engaged
        self.supervisor.reset()
        if was_engaged:
            self._engaged_pub.publish(self._Bool(data=False))
        self._log.info(f"actor episode {msg.data}: evidence and episode budget reset"
                       + (" (handed control back)" if was_engaged else ""))

    # ----- internals -------------------------------------------------------------------------------------------
    def _publish_command(self) -> None:
        from robot_rl.ros.convert import twist_to_msg

        if self.supervisor.expert_action is None:
            self._log.warning("engaged but no sim/expert_action received yet: commanding zero velocity "
                              "(is the sim node publishing it?)", throttle_duration_sec=2.0)
        try:
            linear, angular, opening = self.supervisor.command()
        except ValueError as error:  # a non-finite expert action: hold still rather than pass it on
            self._log.warning(f"expert action unusable ({error}); commanding zero velocity",
                              throttle_duration_sec=1.0)
            linear, angular, opening = np.zeros(3), np.zeros(3), None
        self._expert_fresh = self._command_due = False
        if opening is not None:  # before the twist: an actor that waits for the step's twist has the gripper too
            self._gripper_pub.publish(self._Float64(data=float(opening)))
        self._twist_pub.publish(twist_to_msg(linear, angular, stamp=self._last_tcp_stamp, frame_id=BASE_FRAME))

    def stop(self, executor, signal_number: int | None) -> None:
        self._log.info(f"stopping (signal {signal_number})")
        self.release()

    def release(self, timeout_s: float = 0.5) -> None:
        """On shutdown: hand control back (engaged=false) if taking over, and give the middleware time to deliver."""
        from rclpy.duration import Duration

        if self.supervisor.engaged:
            self.supervisor.engaged = False
            self._engaged_pub.publish(self._Bool(data=False))
            self._engaged_pub.wait_for_all_acked(Duration(seconds=timeout_s))

    def destroy(self) -> None:
        self.node.destroy_node()


def _parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog="python -m robot_rl.sim.scripted_teleop",
        description="Scripted human supervisor for the sim mirror over ROS 2 (takes over with the expert's action). "
                    "Configure it with ROS parameters after --ros-args, e.g. -p task:=PickCube-v0 "
                    "-p takeover_steps:=5 -r __ns:=/robot1.")


def main(argv: list[str] | None = None) -> int:
    """Run the scripted teleop node until SIGINT / SIGTERM; returns the exit status."""
    from robot_rl.ros.node_util import NodeStartupError, parse_node_arguments, run_node

    argv = list(sys.argv if argv is None else argv)
    parser = _parser()
    parser.add_argument("--node-name", default=NODE_NAME)
    args = parse_node_arguments(parser, argv)
    from rclpy.exceptions import ParameterException

    def build() -> ScriptedTeleopNode:
        try:
            return ScriptedTeleopNode(node_name=args.node_name)
        except (ValueError, TypeError, ParameterException) as error:
            raise NodeStartupError(f"invalid scripted teleop configuration: {error}", EXIT_BAD_PARAMETERS) from None

    return run_node(build, argv, args.node_name)

if __name__ == "__main__":
    sys.exit(main())
