"""`robot-rl doctor ROBOT`: check the running drivers against a robot file before a run.

Listens for a few seconds to every stream the robot file names (each camera, the arm state, the TCP twist topic if
any, the gripper) and prints one row per stream: seen or not, the message type (and the type the publishers offer),
encoding and size, rate, stamp delay (receive time - header stamp, p50) and whether the robot file's QoS matches the
publishers'. Then the current TCP pose against the workspace box, the gripper reading against [0, max_opening], the
command topics' subscribers (none: the controller is not running) and the reset service, and per camera the sim
camera `robot-rl validate` renders it from (a camera without one is a warning naming what to add: the doctor checks
the live drivers, not the sim mirror). Ends with ``first thing to fix: ...`` when a check fails.

Run::

    robot-rl doctor robots/my_robot.yaml [--duration 3] [--wait 30] [--json] [--namespace /robot1] [--timing warn]
    python -m robot_rl.ros.doctor robots/my_robot.yaml   # the same (launch files run it as a preflight check)

Exit status: 0 every check passed; 1 a check failed (the last line names the first thing to fix); 2 the robot file
or an option cannot be used (one line).

Timing (a stream's rate against the robot file's, its stamp delay and the age of its readings against
max_sensor_age_s) is measured on this machine as it is loaded now. ``--timing warn`` reports timing problems as
warnings that do not fail the check (a driver stand-in on a busy development machine, where what matters is the
wiring and the content); the default, ``--timing fail``, fails on them, as a robot run needs.

The doctor listens the way the actor does: with the robot file's QoS. When a reliable subscription meets a best-effort
publisher (which never matches), it listens again best-effort so that the row still shows what the driver sends.
The checks and the report, pure functions of what was heard, are robot_rl.ros.doctor_checks' (tested without ROS).
"""

from __future__ import annotations

if __name__ == "__main__":  # a program's start, before the heavy imports below
    from robot_rl.core.startup import program_start

    program_start()

import argparse
import dataclasses
import json
import math
import sys
import time
from collections.abc import Sequence

from robot_rl.actor.robot_config import RobotConfig, RobotConfigError, load_robot_config
from robot_rl.ros.doctor_checks import (
    TYPES,
    EndpointInfo,
    Heard,
    Report,
    StreamSpec,
    check_command,
    check_reset,
    evaluate,
    render,
    stream_specs,
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
TIMING_MODES = ("fail", "warn")
DEFAULT_DURATION_S = 3.0
DECODE_EVERY_S = 0.5  # decode one image per this many seconds (a full decode of every frame is not needed)


class DoctorError(ValueError):
    """The doctor cannot run as asked (bad option); one line."""


# ------------------------------------------------------------------------------------------------------ ROS shell


def _reliability(profile) -> str:
    from rclpy.qos import ReliabilityPolicy

    return {ReliabilityPolicy.RELIABLE: "reliable", ReliabilityPolicy.BEST_EFFORT: "best_effort"}.get(
        profile.reliability, str(profile.reliability).rsplit(".", 1)[-1].lower())


def _durability(profile) -> str:
    from rclpy.qos import DurabilityPolicy

    return {DurabilityPolicy.VOLATILE: "volatile", DurabilityPolicy.TRANSIENT_LOCAL: "transient_local"}.get(
        profile.durability, str(profile.durability).rsplit(".", 1)[-1].lower())


def _endpoints(infos) -> list[EndpointInfo]:
    out = []
    for info in infos:
        node = info.node_name if info.node_namespace in ("", "/") else f"{info.node_namespace}/{info.node_name}"
        out.append(EndpointInfo(node.replace("//", "/"), info.topic_type, _reliability(info.qos_profile),
                                _durability(info.qos_profile)))
    return out


def _message_class(type_name: str):
    if type_name in ("Image", "CompressedImage", "JointState"):
        import sensor_msgs.msg as module
    elif type_name in ("PoseStamped", "TwistStamped"):
        import geometry_msgs.msg as module
    elif type_name == "Float64":
        import std_msgs.msg as module
    else:
        import trajectory_msgs.msg as module
    return getattr(module, type_name)


class _Listener:
    """Subscriptions for one topic, feeding one Heard."""

    def __init__(self, node, spec: StreamSpec, qos_depth: int = 10):
        self.node, self.spec, self.depth = node, spec, qos_depth
        self.heard = Heard()
        self.subscription = self._subscribe(spec.qos)
        self.heard.topic = self.subscription.topic_name
        self.incompatible_events = 0

    def _subscribe(self, reliability: str):
        from rclpy.event_handler import SubscriptionEventCallbacks
        from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

        profile = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=self.depth,
                             reliability=ReliabilityPolicy.RELIABLE if reliability == "reliable"
                             else ReliabilityPolicy.BEST_EFFORT)
        callbacks = SubscriptionEventCallbacks(incompatible_qos=self._on_incompatible)  # replaces rcl's warning
        return self.node.create_subscription(_message_class(self.spec.type), self.spec.topic, self._on_message,
                                             profile, event_callbacks=callbacks)

    def _on_incompatible(self, event) -> None:
        self.incompatible_events += 1

    def probe(self) -> None:
        """Listen best-effort instead (a reliable subscription never matches a best-effort publisher)."""
        if self.heard.probe:
            return
        self.node.destroy_subscription(self.subscription)
        self.subscription = self._subscribe("best_effort")
        self.heard.probe = True

    def _on_message(self, msg) -> None:
        from robot_rl.ros.convert import stamp_to_seconds

        now = time.time()
        heard, kind = self.heard, self.spec.kind
        header = getattr(msg, "header", None)
        heard.receive(now, stamp_to_seconds(header.stamp) if header is not None else None)
        if header is not None:
            heard.frame_ids.add(header.frame_id)
        if kind in ("image", "compressed"):
            if now - heard.last_decode >= DECODE_EVERY_S:
                heard.last_decode = now
                self._decode(msg)
        elif kind in ("joint_states", "fingers", "gripper_state"):
            heard.names, heard.positions = tuple(msg.name), tuple(float(p) for p in msg.position)
        elif kind == "pose":
            p, q = msg.pose.position, msg.pose.orientation
            heard.position, heard.quat = (p.x, p.y, p.z), (q.w, q.x, q.y, q.z)

    def _decode(self, msg) -> None:
        heard = self.heard
        try:
            if self.spec.kind == "image":
                from robot_rl.ros.convert import image_from_msg
                from robot_rl.core.vision import to_rgb

                heard.encoding = msg.encoding
                rgb = to_rgb(image_from_msg(msg), msg.encoding)
            else:
                from robot_rl.ros.convert import compressed_image_from_msg

                text = msg.format.lower()
                heard.encoding = "png" if "png" in text else "jpeg" if ("jpeg" in text or "jpg" in text) else text
                rgb = compressed_image_from_msg(msg)
            heard.height, heard.width = int(rgb.shape[0]), int(rgb.shape[1])
            heard.decoded += 1
        except Exception as error:  # noqa: BLE001 - a bad frame is a finding, never a crash
            heard.decode_error = str(error).splitlines()[0] if str(error) else type(error).__name__
            if self.spec.kind == "image":
                heard.height, heard.width = int(msg.height), int(msg.width)


def _similar_topics(node, type_name: str, exclude: str) -> list[str]:
    """Published topics of this type (a topic name that is almost right shows up here)."""
    wanted = TYPES[type_name]
    return sorted(name for name, types in node.get_topic_names_and_types()
                  if wanted in types and name != exclude and node.get_publishers_info_by_topic(name))


def listen(robot: RobotConfig, duration_s: float, namespace: str = "/", wait_s: float = 0.0) -> Report:
    """Join the ROS graph (rclpy must be initialised), listen `duration_s` seconds, and evaluate. With `wait_s`, first
    wait up to that long for every stream, command subscriber and the reset service to appear (drivers starting)."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from std_srvs.srv import Trigger

    node = rclpy.create_node("robot_rl_doctor", namespace=namespace, start_parameter_services=False)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        listeners: dict[str, _Listener] = {}
        by_topic: dict[tuple[str, str], _Listener] = {}
        for spec in stream_specs(robot):
            shared = by_topic.get((spec.topic, spec.type))
            listener = shared if shared is not None else _Listener(node, spec)
            by_topic[(spec.topic, spec.type)] = listener
            listeners[spec.label] = listener
        reset_client = node.create_client(Trigger, robot.reset.service) if robot.reset.kind == "service" else None
        command_topics = [node.resolve_topic_name(topic) for _, (_, topic, _) in _command_specs(robot)]

        def spin(seconds: float, done=lambda: False) -> None:
            deadline, next_graph = time.monotonic() + seconds, 0.0
            while time.monotonic() < deadline:
                executor.spin_once(timeout_sec=0.05)
                if time.monotonic() < next_graph:
                    continue
                next_graph = time.monotonic() + 0.25
                for listener in set(by_topic.values()):
                    if listener.spec.qos == "reliable" and not listener.heard.probe and not listener.heard.messages \
                            and any(p.reliability == "best_effort" for p in
                                    _endpoints(node.get_publishers_info_by_topic(listener.heard.topic))):
                        listener.probe()
                if done():
                    return

        def everything_up() -> bool:
            streams = all(listener.heard.messages or (robot.mode == "lockstep" and
                                                      node.get_publishers_info_by_topic(listener.heard.topic))
                          for listener in by_topic.values())
            commands = all(node.get_subscriptions_info_by_topic(topic) for topic in command_topics)
            return streams and commands and (reset_client is None or reset_client.service_is_ready())

        if wait_s > 0:
            spin(wait_s, everything_up)
            for listener in by_topic.values():  # measure from here on
                listener.heard = Heard(topic=listener.heard.topic, probe=listener.heard.probe)
        spin(duration_s)

        heard, publishers, similar = {}, {}, {}
        for label, listener in listeners.items():
            heard[label] = listener.heard
            publishers[label] = _endpoints(node.get_publishers_info_by_topic(listener.heard.topic))
            if not publishers[label]:
                similar[label] = _similar_topics(node, listener.spec.type, listener.heard.topic)
        commands = []
        for label, (key, topic, type_name) in _command_specs(robot):
            resolved = node.resolve_topic_name(topic)
            subscribers = _endpoints(node.get_subscriptions_info_by_topic(resolved))
            hint = [] if subscribers else sorted(
                name for name, types in _subscribed_topics(node) if TYPES[type_name] in types and name != resolved)
            commands.append(check_command(label, key, resolved, type_name, subscribers, hint))
        if reset_client is not None:
            service = node.resolve_service_name(robot.reset.service)
            offered = [t for name, types in node.get_service_names_and_types() if name == service for t in types]
            reset = check_reset(robot, service, reset_client.service_is_ready(), offered)
        else:
            reset = check_reset(robot, "", None)
        return evaluate(robot, heard, publishers, commands, reset, duration_s, namespace, similar)
    finally:
        executor.shutdown(timeout_sec=1.0)
        node.destroy_node()


def _command_specs(robot: RobotConfig) -> list[tuple[str, tuple[str, str, str]]]:
    """(row label, (robot file key, topic, short type)) of the arm's and the gripper's command topics."""
    arm = ("command.pose_topic", robot.command.pose_topic, "PoseStamped") if robot.command.interface == "pose" else \
        ("command.joint_trajectory_topic", robot.command.joint_trajectory_topic, "JointTrajectory")
    return [("arm command", arm), ("gripper command", ("gripper.command_topic", robot.gripper.command_topic,
                                                       robot.gripper.command))]


def _subscribed_topics(node) -> list[tuple[str, list[str]]]:
    """Topics with at least one subscriber other than this node."""
    mine = node.get_fully_qualified_name()
    out = []
    for name, types in node.get_topic_names_and_types():
        subscribers = node.get_subscriptions_info_by_topic(name)
        if any(f"{s.node_namespace.rstrip('/')}/{s.node_name}" != mine for s in subscribers):
            out.append((name, types))
    return out


def run_doctor(robot: str, duration_s: float = DEFAULT_DURATION_S, as_json: bool = False, namespace: str = "/",
               domain_id: int | None = None, wait_s: float = 0.0, out=None, timing: str = "fail") -> int:
    """What `robot-rl doctor` does: load the robot file, listen, print the report; returns the exit status.

    RobotConfigError / DoctorError (bad input) propagate for the caller to print as one line (exit 2).
    """
    if not math.isfinite(duration_s) or not 0.5 <= duration_s <= 600:
        raise DoctorError(f"--duration {duration_s:g} must be in [0.5, 600] seconds")
    if not math.isfinite(wait_s) or not 0 <= wait_s <= 3600:
        raise DoctorError(f"--wait {wait_s:g} must be in [0, 3600] seconds")
    if timing not in TIMING_MODES:
        raise DoctorError(f"--timing {timing!r} must be one of {', '.join(TIMING_MODES)}")
    if not namespace.startswith("/"):
        namespace = "/" + namespace
    config = load_robot_config(robot)
    from robot_rl.ros.net.env import RosEnvironmentError, ensure_ros_environment

    try:
        ensure_ros_environment(domain_id=domain_id)
    except RosEnvironmentError as error:
        raise DoctorError(f"cannot join ROS: {error}") from None
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    rclpy.init(args=[], signal_handler_options=SignalHandlerOptions.NO)  # Ctrl-C: KeyboardInterrupt, cleaned up
    try:
        if wait_s > 0 and not as_json:
            print(f"waiting up to {wait_s:g} s for the streams, command subscribers and reset of robot "
                  f"{config.name}, then listening {duration_s:g} s", file=out or sys.stdout, flush=True)
        report = dataclasses.replace(listen(config, duration_s, namespace, wait_s), timing=timing)
    finally:
        rclpy.try_shutdown()
    out = out or sys.stdout
    if as_json:
        print(json.dumps(report.to_json()), file=out, flush=True)
    else:
        from rich.console import Console

        console = Console(file=out, soft_wrap=True, width=None if out.isatty() else 200)
        render(report, console)
    return EXIT_OK if report.ok else EXIT_FAILED


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m robot_rl.ros.doctor", description=__doc__.splitlines()[0])
    parser.add_argument("robot", help="robot file (robots/x.yaml) or the name of a shipped one")
    parser.add_argument("--duration", type=float, default=DEFAULT_DURATION_S, help="seconds to listen")
    parser.add_argument("--wait", type=float, default=0.0,
                        help="first wait up to this many seconds for every stream to appear (drivers starting)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--namespace", default="/", help="the robot's namespace (relative topics resolve in it)")
    parser.add_argument("--domain-id", type=int, default=None, help="ROS_DOMAIN_ID (default: $ROS_DOMAIN_ID, else 0)")
    parser.add_argument("--timing", choices=TIMING_MODES, default="fail",
                        help="fail (default): a stream's rate, stamp delay or reading age outside the robot file's "
                             "limits fails the check; warn: reported as warnings (a busy development machine)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m robot_rl.ros.doctor`: the same as `robot-rl doctor` (bad input: one line, exit status 2)."""
    args = _parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        return run_doctor(args.robot, args.duration, args.json, args.namespace, args.domain_id, args.wait,
                          timing=args.timing)
    except (RobotConfigError, DoctorError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:  # SIGINT / SIGTERM: one line, 130 / 143
        from robot_rl.core import interrupts

        interrupts.exit_stopped(exc)


if __name__ == "__main__":
    from robot_rl.core import interrupts

    interrupts.install_for_process()  # SIGINT and SIGTERM raise: rclpy is shut down before the process ends
    sys.exit(main())
