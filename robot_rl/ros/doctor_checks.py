"""What `robot-rl doctor` checks, as pure functions of what was heard (tested without ROS): the streams a robot file
names (:func:`stream_specs`), what arrived on each (:class:`Heard`), the checks of each stream, of the TCP pose, the
gripper reading, the command topics' subscribers and the reset, the :class:`Report` they make (:func:`evaluate`) with
its first thing to fix, and the report printed as a table (:func:`render`). Listening on the ROS graph is
robot_rl.ros.doctor's."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np

from robot_rl.actor.robot_config import SIM_CAMERAS, RobotConfig

RATE_TOLERANCE = 0.8  # a stream slower than this fraction of its expected rate is a problem
GRIPPER_TOLERANCE = 0.05  # fraction of max_opening a gripper reading may lie outside [0, max_opening]
POSITION_TOLERANCE = 1e-3  # [m] outside the workspace box by less than this counts as inside (clipping)

# Problem priorities: the first thing to fix is the problem of the lowest priority, then of the earliest row.
MISSING, WIRING, CONTENT, CONTROLLER, TIMING, STATE = range(6)

TYPES = {
    "Image": "sensor_msgs/msg/Image",
    "CompressedImage": "sensor_msgs/msg/CompressedImage",
    "PoseStamped": "geometry_msgs/msg/PoseStamped",
    "TwistStamped": "geometry_msgs/msg/TwistStamped",
    "JointState": "sensor_msgs/msg/JointState",
    "Float64": "std_msgs/msg/Float64",
    "JointTrajectory": "trajectory_msgs/msg/JointTrajectory",
    "Trigger": "std_srvs/srv/Trigger",
}


# ----------------------------------------------------------------------------------------------------- what to hear


@dataclasses.dataclass(frozen=True)
class StreamSpec:
    """One stream the robot file names: where it is, what it should carry and which robot file keys describe it."""

    label: str
    """Row name, e.g. "camera front", "arm joint_states", "gripper"."""
    key: str
    """Robot file section that sets it (cameras.front, arm, gripper), for the fix hints."""
    topic: str
    type: str
    """Short message type name (a key of TYPES)."""
    qos: str
    """Robot file reliability: reliable | best_effort."""
    kind: str
    """image | compressed | pose | twist | joint_states | gripper_state | fingers (finger joints in joint_states)."""
    joints: tuple[str, ...] = ()
    """Joint names the JointState must contain (arm joints, or the gripper's finger joints)."""
    width: int = 0
    height: int = 0
    encoding: str = ""
    rate_hz: float = 0.0


def stream_specs(robot: RobotConfig) -> list[StreamSpec]:
    """The rows of the report, in the order they are shown: cameras, arm state, TCP twist, gripper."""
    specs = []
    for name, camera in robot.cameras:
        specs.append(StreamSpec(
            f"camera {name}", f"cameras.{name}", camera.topic, camera.type, camera.qos,
            "image" if camera.type == "Image" else "compressed", width=camera.width, height=camera.height,
            encoding=camera.encoding, rate_hz=camera.rate_hz))
    arm, gripper = robot.arm, robot.gripper
    if arm.state == "tcp_pose":
        specs.append(StreamSpec("arm tcp_pose", "arm", arm.tcp_pose_topic, "PoseStamped", arm.qos, "pose"))
    else:
        specs.append(StreamSpec("arm joint_states", "arm", arm.joint_states_topic, "JointState", arm.qos,
                                "joint_states", joints=arm.joint_names))
    if arm.twist == "topic":
        specs.append(StreamSpec("arm twist", "arm", arm.twist_topic, "TwistStamped", arm.qos, "twist"))
    if gripper.state == "topic":
        specs.append(StreamSpec("gripper", "gripper", gripper.topic, "JointState", gripper.qos, "gripper_state"))
    else:
        specs.append(StreamSpec("gripper", "gripper", arm.joint_states_topic, "JointState", arm.qos, "fingers",
                                joints=gripper.finger_joints))
    return specs


@dataclasses.dataclass(frozen=True)
class EndpointInfo:
    """A publisher or subscriber found in the ROS graph."""

    node: str
    type: str
    reliability: str
    """reliable | best_effort | other."""
    durability: str
    """volatile | transient_local | other."""


@dataclasses.dataclass
class Heard:
    """What arrived on one topic: receive times, stamp delays, the newest message's content, decode results."""

    topic: str = ""
    messages: int = 0
    first_receive: float = 0.0
    last_receive: float = 0.0
    delays: list[float] = dataclasses.field(default_factory=list)
    zero_stamps: int = 0
    frame_ids: set[str] = dataclasses.field(default_factory=set)
    encoding: str = ""
    width: int = 0
    height: int = 0
    decode_error: str = ""
    decoded: int = 0
    last_decode: float = -math.inf
    names: tuple[str, ...] = ()
    positions: tuple[float, ...] = ()
    position: tuple[float, float, float] | None = None
    quat: tuple[float, float, float, float] | None = None
    probe: bool = False
    """True if the data came from a best-effort probe (the robot file's QoS did not match)."""

    def receive(self, now: float, stamp: float | None) -> None:
        if self.messages == 0:
            self.first_receive = now
        self.messages += 1
        self.last_receive = now
        if stamp is not None:
            if stamp == 0.0:
                self.zero_stamps += 1
            else:
                self.delays.append(now - stamp)

    @property
    def rate_hz(self) -> float | None:
        span = self.last_receive - self.first_receive
        return (self.messages - 1) / span if self.messages >= 2 and span > 0 else None

    @property
    def delay_p50(self) -> float | None:
        return statistics.median(self.delays) if self.delays else None


# -------------------------------------------------------------------------------------------------------- the report


@dataclasses.dataclass
class Problem:
    """One thing a check found wrong: how urgent (the priorities above) and what to do."""

    priority: int
    text: str
    measured: bool = False
    """A rate, stamp delay or reading age as this machine measured it, loaded as it is now (--timing warn)."""


@dataclasses.dataclass
class Row:
    """One line of the report and its problems."""

    label: str
    topic: str
    detail: dict[str, Any] = dataclasses.field(default_factory=dict)
    problems: list[Problem] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    def fail(self, priority: int, text: str, measured: bool = False) -> None:
        self.problems.append(Problem(priority, text, measured))

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {"name": self.label, "topic": self.topic, **self.detail, "ok": self.ok,
                "problems": [p.text for p in self.problems], "notes": list(self.notes)}


@dataclasses.dataclass
class Report:
    """Everything the doctor found, in the order it is printed."""

    robot: RobotConfig
    namespace: str
    duration_s: float
    streams: list[Row]
    checks: list[Row]
    """TCP pose, gripper reading, command subscribers, reset."""
    timing: str = "fail"
    """"fail": measured timing problems (rate, delay, age) fail the check; "warn": they are warnings."""

    def fails(self, problem: Problem) -> bool:
        return not problem.measured or self.timing == "fail"

    def warnings(self) -> list[tuple[Row, Problem]]:
        return [(row, problem) for row in self.streams + self.checks for problem in row.problems
                if not self.fails(problem)]

    def row_ok(self, row: Row) -> bool:
        return not any(self.fails(problem) for problem in row.problems)

    def first_problem(self) -> tuple[Row, Problem] | None:
        found = [(problem.priority, index, row, problem)
                 for index, row in enumerate(self.streams + self.checks) for problem in row.problems
                 if self.fails(problem)]
        if not found:
            return None
        _, _, row, problem = min(found, key=lambda item: item[:2])
        return row, problem

    @property
    def ok(self) -> bool:
        return self.first_problem() is None

    def first_thing_to_fix(self) -> str | None:
        found = self.first_problem()
        if found is None:
            return None
        row, problem = found
        where = f"{row.label} ({row.topic})" if row.topic else row.label
        return f"{where}: {problem.text}"

    def to_json(self) -> dict[str, Any]:
        return {"robot": self.robot.name, "robot_file": self.robot.path, "namespace": self.namespace,
                "mode": self.robot.mode, "duration_s": self.duration_s, "ok": self.ok, "timing": self.timing,
                "warnings": [f"{row.label}: {problem.text}" for row, problem in self.warnings()],
                "streams": [row.to_json() for row in self.streams],
                "checks": [row.to_json() for row in self.checks],
                "sim_cameras": {name: {"sim_camera": sim, "text": text}
                                for name, sim, text in sim_camera_notes(self.robot)},
                "first_thing_to_fix": self.first_thing_to_fix()}


# ---------------------------------------------------------------------------------------------------------- checks


def _short(type_name: str) -> str:
    return type_name.rsplit("/", 1)[-1]


def _fmt_seconds(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if abs(seconds) < 1.0 else f"{seconds:.2f} s"


def check_stream(spec: StreamSpec, robot: RobotConfig, heard: Heard, publishers: Sequence[EndpointInfo],
                 duration_s: float, similar_topics: Sequence[str] = ()) -> Row:
    """One stream's row: the publishers' type and QoS against the robot file, then what arrived."""
    row = Row(spec.label, heard.topic or spec.topic)
    expected_type = TYPES[spec.type]
    offered_types = sorted({p.type for p in publishers})
    offered_qos = sorted({p.reliability for p in publishers})
    rate, delay = heard.rate_hz, heard.delay_p50
    row.detail = {
        "type": expected_type, "publishers": [dataclasses.asdict(p) for p in publishers],
        "messages": heard.messages, "seen": heard.messages > 0, "qos": spec.qos,
        "rate_hz": None if rate is None else round(rate, 2),
        "delay_p50_s": None if delay is None else round(delay, 4)}
    if spec.kind in ("image", "compressed"):
        row.detail.update(encoding=heard.encoding or None, width=heard.width or None, height=heard.height or None)
    lockstep = robot.mode == "lockstep"

    if not publishers:
        hint = f"; topics of that type: {', '.join(similar_topics)}" if similar_topics else ""
        row.fail(MISSING, f"no publisher: is the driver running (in this namespace and ROS domain)?{hint}")
        return row
    wrong_types = [t for t in offered_types if t != expected_type]
    if wrong_types:
        fix = f"set {spec.key}.type: {_short(wrong_types[0])}" if spec.kind in ("image", "compressed") \
            and _short(wrong_types[0]) in ("Image", "CompressedImage") else f"the robot file expects {spec.type}"
        row.fail(WIRING, f"publishers send {', '.join(wrong_types)}, not {expected_type}: {fix}")
    if spec.qos == "reliable" and "best_effort" in offered_qos:
        row.fail(WIRING, f"incompatible QoS: publisher best_effort, robot file reliable: set {spec.key}.qos: "
                         "best_effort")
    if heard.messages == 0:
        if not row.problems:
            if lockstep:
                row.notes.append("no message: in lock-step mode the sim node publishes only after a command (start "
                                 "it with mode realtime to check the streams)")
            else:
                row.fail(WIRING, f"{len(publishers)} publisher(s) but no message in {duration_s:g} s")
        return row
    if heard.probe:
        row.notes.append("heard through a best-effort probe: the robot file's QoS receives nothing")

    if spec.kind in ("image", "compressed"):
        _check_image(spec, heard, row)
    elif spec.kind in ("joint_states", "fingers"):
        missing = [name for name in spec.joints if name not in heard.names]
        if missing:
            which = "arm.joint_names" if spec.kind == "joint_states" else "gripper.finger_joints"
            row.fail(CONTENT, f"joint_states has no joint(s) {', '.join(missing)} ({which}); it has "
                              f"{', '.join(heard.names) or 'none'}")
    elif spec.kind == "gripper_state" and not heard.positions:
        row.fail(CONTENT, "gripper state has no position (expected one: the opening [m])")
    if spec.kind in ("pose", "twist") and heard.frame_ids - {"", robot.base_frame}:
        frames = ", ".join(sorted(heard.frame_ids - {""}))
        row.fail(CONTENT, f"frame_id {frames}, but the robot file's frames.base is {robot.base_frame!r}: set "
                          "frames.base (or publish in the base frame)")

    if heard.zero_stamps and not heard.delays:
        row.fail(TIMING, "header stamps are 0: the driver does not stamp its messages (the actor would see them as "
                         "stale)")
    age_limit = robot.sensor_age_limit
    if delay is not None and abs(delay) > age_limit:
        side = "behind" if delay > 0 else "ahead of"
        row.fail(TIMING, f"stamps are {_fmt_seconds(abs(delay))} {side} the receive time (p50), more than "
                         f"max_sensor_age_s {age_limit:g} s: synchronise the clocks (chrony / PTP) or stamp at capture",
                 measured=True)
    if not lockstep:
        if spec.rate_hz and (rate is None or rate < RATE_TOLERANCE * spec.rate_hz):
            got = f"{rate:.1f} Hz" if rate is not None else f"one message in {duration_s:g} s"
            row.fail(TIMING, f"{got}, the robot file expects {spec.rate_hz:g} Hz ({spec.key}.rate_hz)", measured=True)
        elif rate is None:
            row.fail(TIMING, f"one message in {duration_s:g} s: the actor would hold (max_sensor_age_s "
                             f"{age_limit:g} s)", measured=True)
        elif delay is None or abs(delay) <= age_limit:
            oldest = 1.0 / rate + max(delay or 0.0, 0.0)
            if oldest > age_limit:
                row.fail(TIMING, f"at {rate:.1f} Hz a reading is up to {_fmt_seconds(oldest)} old before the next "
                                 f"one, more than max_sensor_age_s {age_limit:g} s: the actor would hold between "
                                 "readings (raise the driver's rate or max_sensor_age_s)", measured=True)
    return row


def _check_image(spec: StreamSpec, heard: Heard, row: Row) -> None:
    if heard.decode_error:
        row.fail(CONTENT, f"frames cannot be converted: {heard.decode_error}")
    if spec.encoding and heard.encoding and heard.encoding != spec.encoding.lower():
        row.fail(TIMING, f"encoding {heard.encoding}, the robot file expects {spec.encoding} ({spec.key}.encoding)")
    if heard.width and ((spec.width and heard.width != spec.width) or (spec.height and heard.height != spec.height)):
        want = f"{spec.width or '*'}x{spec.height or '*'}"
        row.fail(TIMING, f"frames are {heard.width}x{heard.height}, the robot file expects {want} "
                         f"({spec.key}.width / height)")


def check_tcp(robot: RobotConfig, position: Sequence[float] | None, source: str, error: str = "") -> Row:
    """The TCP position against the workspace box (per axis: inside, or outside by how much)."""
    row = Row("TCP pose", "", {"source": source})
    if error:
        row.fail(CONTENT, error)
        return row
    if position is None:
        row.detail["checked"] = False
        row.notes.append("not checked: no arm state heard")
        return row
    row.detail["position"] = [round(float(v), 4) for v in position]
    outside = []
    for axis, value, low, high in zip("xyz", position, robot.workspace_low, robot.workspace_high):
        if value < low - POSITION_TOLERANCE:
            outside.append(f"{axis} {value:.3f} is {low - value:.3f} m below {low:g}")
        elif value > high + POSITION_TOLERANCE:
            outside.append(f"{axis} {value:.3f} is {value - high:.3f} m above {high:g}")
    row.detail["inside_workspace"] = not outside
    if outside:
        row.fail(STATE, f"outside the workspace box: {'; '.join(outside)} (move the arm into the box, or check "
                        "workspace / frames.base)")
    return row


def check_gripper_reading(robot: RobotConfig, opening: float | None, error: str = "") -> Row:
    """The gripper opening against [0, max_opening]."""
    row = Row("gripper reading", "")
    if error:
        row.fail(CONTENT, error)
        return row
    if opening is None:
        row.detail["checked"] = False
        row.notes.append("not checked: no gripper state heard")
        return row
    top = robot.gripper.max_opening
    row.detail.update(opening=round(float(opening), 5), max_opening=top)
    slack = GRIPPER_TOLERANCE * top
    if not -slack <= opening <= top + slack:
        row.fail(STATE, f"opening {opening:.4f} m is outside [0, {top:g}]: check gripper.opening_per_unit and "
                        "gripper.max_opening")
    return row


def check_command(label: str, key: str, topic: str, type_name: str, subscribers: Sequence[EndpointInfo],
                  similar_topics: Sequence[str] = ()) -> Row:
    """A command topic must have a subscriber of the right type that accepts the actor's reliable, volatile QoS."""
    row = Row(label, topic, {"type": TYPES[type_name], "subscribers": [dataclasses.asdict(s) for s in subscribers]})
    if not subscribers:
        hint = f"; topics with a {type_name} subscriber: {', '.join(similar_topics)}" if similar_topics else ""
        row.fail(CONTROLLER, f"no subscriber: the controller is not running, or listens elsewhere (set {key}){hint}")
        return row
    wrong = sorted({s.type for s in subscribers if s.type != TYPES[type_name]})
    if wrong:
        row.fail(CONTROLLER, f"subscribers take {', '.join(wrong)}, not {TYPES[type_name]}")
    if any(s.durability == "transient_local" for s in subscribers):
        row.fail(CONTROLLER, "incompatible QoS: the subscriber asks for transient_local durability, the actor "
                             "publishes commands volatile")
    return row


def check_reset(robot: RobotConfig, service: str, available: bool | None, offered_types: Sequence[str] = ()) -> Row:
    """The reset: a Trigger service must be available; move_home and human need nothing running."""
    reset = robot.reset
    row = Row("reset", service if reset.kind == "service" else "", {"kind": reset.kind})
    if reset.kind == "move_home":
        row.notes.append("moves home through the command interface")
    elif reset.kind == "human":
        row.notes.append("waits for the human's reset key (teleop/episode)")
    elif offered_types and TYPES["Trigger"] not in offered_types:
        row.fail(CONTROLLER, f"service type {', '.join(offered_types)}, not {TYPES['Trigger']}")
    elif not available:
        row.fail(CONTROLLER, f"service {service} ({TYPES['Trigger']}) not available: is the driver that resets "
                             "the robot running? (reset.service)")
    row.detail["available"] = available
    return row


def tcp_from_joints(robot: RobotConfig, names: Sequence[str], positions: Sequence[float]) -> np.ndarray:
    """Forward kinematics of the arm's joints in `names`/`positions` -> TCP position (KinematicsError, KeyError)."""
    from robot_rl.core.kinematics import ArmKinematics

    model = robot.model_path()
    if model is None:
        raise ValueError("arm.model is not set")
    kinematics = ArmKinematics.from_file(model, robot.arm.joint_names, robot.tcp_frame)
    index = {name: i for i, name in enumerate(names)}
    q = np.array([positions[index[name]] for name in robot.arm.joint_names], dtype=np.float64)
    position, _ = kinematics.forward(q)
    return np.asarray(position, dtype=np.float64)


def evaluate(robot: RobotConfig, heard: dict[str, Heard], publishers: dict[str, list[EndpointInfo]],
             commands: list[Row], reset: Row, duration_s: float, namespace: str = "/",
             similar: dict[str, list[str]] | None = None) -> Report:
    """The report from what was heard (keys: StreamSpec.label), pure."""
    similar = similar or {}
    specs = stream_specs(robot)
    streams = [check_stream(spec, robot, heard.get(spec.label, Heard()), publishers.get(spec.label, []),
                            duration_s, similar.get(spec.label, [])) for spec in specs]
    arm_spec = next(s for s in specs if s.label.startswith("arm ") and s.kind != "twist")
    arm = heard.get(arm_spec.label, Heard())
    tcp_error, tcp_position = "", None
    if arm.messages:
        if arm_spec.kind == "pose":
            tcp_position = arm.position
        elif all(name in arm.names for name in robot.arm.joint_names):
            try:
                tcp_position = tuple(tcp_from_joints(robot, arm.names, arm.positions))
            except Exception as error:  # noqa: BLE001 - any model problem is reported, never a crash
                tcp_error = f"cannot compute the TCP from joint_states with {robot.model_path()}: {error}"
    tcp = check_tcp(robot, tcp_position, arm_spec.kind if arm_spec.kind == "pose" else "forward kinematics",
                    tcp_error)

    gripper_spec = next(s for s in specs if s.label == "gripper")
    gripper = heard.get(gripper_spec.label, Heard())
    opening, gripper_error = None, ""
    if gripper.messages:
        if gripper_spec.kind == "gripper_state":
            opening = gripper.positions[0] if gripper.positions else None
        elif all(name in gripper.names for name in robot.gripper.finger_joints):
            from robot_rl.actor.sensors import finger_opening

            try:
                opening = float(finger_opening(gripper.names, gripper.positions, robot.gripper.finger_joints,
                                               robot.gripper.opening_per_unit))
            except ValueError as error:
                gripper_error = f"cannot read the finger joints: {error}"
    grip = check_gripper_reading(robot, opening, gripper_error)
    return Report(robot, namespace, duration_s, streams, [tcp, grip, *commands, reset])


# ------------------------------------------------------------------------------------------------------- rendering


def render(report: Report, console=None) -> None:
    """Print the report as a table (rich), the other checks, and the verdict as the last line."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console(soft_wrap=True)
    robot = report.robot
    console.print(f"robot {robot.name} ({robot.path or 'built in'}), namespace {report.namespace}, mode "
                  f"{robot.mode}, listened {report.duration_s:g} s", highlight=False)
    table = Table("stream", "topic", "seen", "type", "encoding", "size", "rate Hz", "delay p50", "QoS", "",
                  highlight=False)
    for row in report.streams:
        d = row.detail
        offered = sorted({p["type"] for p in d.get("publishers", [])})
        kind = _short(d.get("type", ""))
        if offered and offered != [d.get("type")]:
            kind += f" (pub: {', '.join(_short(t) for t in offered)})"
        size = f"{d['width']}x{d['height']}" if d.get("width") else "-"
        rate = f"{d['rate_hz']:.1f}" if d.get("rate_hz") is not None else "-"
        delay = _fmt_seconds(d["delay_p50_s"]) if d.get("delay_p50_s") is not None else "-"
        pub_qos = sorted({p["reliability"] for p in d.get("publishers", [])})
        qos = d.get("qos", "") + (f" (pub: {', '.join(pub_qos)})" if pub_qos else "")
        seen = f"yes ({d['messages']})" if d.get("seen") else "no"
        table.add_row(row.label, row.topic, seen, kind, d.get("encoding") or "-", size, rate, delay, qos,
                      "[green]ok[/green]" if row.ok else "[yellow]warn[/yellow]" if report.row_ok(row)
                      else "[red]FAIL[/red]")
    console.print(table)
    for row in report.checks:
        status = "[red]FAIL[/red]" if not row.ok else "[green]ok[/green]" if row.detail.get("checked", True) \
            else "[yellow]skip[/yellow]"
        console.print(f"{status}  {escape(row.label)}{' ' + escape(row.topic) if row.topic else ''}: "
                      f"{escape(_check_summary(row))}", highlight=False)
    for row in report.streams + report.checks:
        for problem in row.problems:
            kind = "[red]problem[/red] " if report.fails(problem) else "[yellow]warning[/yellow] "
            console.print(f"{kind} {escape(row.label)}: {escape(problem.text)}", highlight=False)
        for note in row.notes if row in report.streams else ():
            console.print(f"note     {escape(row.label)}: {escape(note)}", highlight=False)
    for _, sim, text in sim_camera_notes(robot):
        kind = "sim     " if sim else "[yellow]warning[/yellow] "
        console.print(f"{kind} {escape(text)}", highlight=False)
    verdict = report.first_thing_to_fix()
    warned = len(report.warnings())
    passed = "all checks passed" + (f" ({warned} timing warning(s) above: --timing warn)" if warned else "")
    console.print(f"first thing to fix: {escape(verdict)}" if verdict else passed, highlight=False)


def sim_camera_notes(robot: RobotConfig) -> list[tuple[str, str | None, str]]:
    """(camera, its sim camera or None, one line) per camera of the robot file: what `robot-rl validate` renders it
    from, or what to add so that validation can look through it."""
    notes = []
    for name, camera in robot.cameras:
        sim = robot.sim_camera(name)
        if sim is None:
            notes.append((name, None, f"camera {name}: no sim camera, so robot-rl validate cannot look through it: "
                                      f"add \"sim_camera: {SIM_CAMERAS[0]}\" (the mirror has {', '.join(SIM_CAMERAS)}) "
                                      f"under cameras.{name}"))
            continue
        size = f"{camera.width}x{camera.height}" if camera.width and camera.height else "the policy's image size"
        mount = ", at its sim_mount" if camera.sim_mount is not None else ""
        notes.append((name, sim, f"camera {name}: validation renders it from sim camera {sim}{mount} at {size}, "
                                 f"{camera.fit}"))
    return notes


def _check_summary(row: Row) -> str:
    d = row.detail
    if row.label == "TCP pose":
        if "position" not in d:
            return "; ".join(row.notes) or "not checked"
        where = "inside the workspace box" if d["inside_workspace"] else "OUTSIDE the workspace box"
        return f"[{', '.join(f'{v:.3f}' for v in d['position'])}] m ({d['source']}), {where}"
    if row.label == "gripper reading":
        return f"{d['opening']:.4f} m of [0, {d['max_opening']:g}]" if "opening" in d else \
            "; ".join(row.notes) or "not checked"
    if "subscribers" in d:
        nodes = ", ".join(s["node"] for s in d["subscribers"])
        return f"{len(d['subscribers'])} subscriber(s) ({nodes})" if nodes else "no subscriber"
    if row.label == "reset":
        if d["kind"] != "service":
            return f"{d['kind']}: {'; '.join(row.notes)}"
        return "service available" if d.get("available") else "service not available"
    return ""
