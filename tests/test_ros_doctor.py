"""`robot-rl doctor`: the checks as pure functions of what was heard, and end to end over ROS 2.

End to end: the test starts this file as a client script (``python test_ros_doctor.py client``) in a private network
namespace (only ``lo``) with its own ROS_DOMAIN_ID. The client runs ``robot-rl doctor`` as a user would: with no driver
running, against the sim node with its native topics (robots/sim_panda.yaml), and against the sim node publishing like
foreign drivers (robots/sim_panda_driver.yaml: best-effort bgr8 and JPEG cameras, joint_states with finger joints,
JointTrajectory commands) with a copy of that file whose front camera asks for reliable QoS. The doctor passing that
driver with the file itself is checked where a launch file runs it as its preflight check:
tests/test_launch.py::test_robot_run_acts_with_a_saved_policy_on_stand_in_drivers.
"""

from __future__ import annotations

import dataclasses
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from robot_rl.actor.robot_config import load_robot_config
from robot_rl.ros.doctor_checks import (
    TYPES,
    EndpointInfo,
    Heard,
    check_command,
    check_reset,
    evaluate,
    stream_specs,
)
from ros_harness import allocate_domain_id

REPO = Path(__file__).resolve().parents[1]
DOMAIN_ID = allocate_domain_id()
BEST_EFFORT = EndpointInfo("driver", "sensor_msgs/msg/Image", "best_effort", "volatile")


# ------------------------------------------------------------------------------------------------ pure checks


def _heard(topic: str, messages: int = 30, rate: float = 10.0, delay: float = 0.005, **content) -> Heard:
    heard = Heard(topic=topic, **content)
    start = 1000.0
    for i in range(messages):
        heard.receive(start + i / rate, start + i / rate - delay)
    return heard


def _healthy(robot):
    """What a sim_panda_driver graph sends when everything is right."""
    specs = {s.label: s for s in stream_specs(robot)}
    image = EndpointInfo("sim", "sensor_msgs/msg/Image", "best_effort", "volatile")
    compressed = dataclasses.replace(image, type="sensor_msgs/msg/CompressedImage")
    joints = dataclasses.replace(image, type="sensor_msgs/msg/JointState")
    names = (*robot.arm.joint_names, *robot.gripper.finger_joints)
    q = (0.0, 0.2, 0.0, -2.4, 0.0, 2.6, 0.785, 0.04, 0.04)  # TCP at (0.50, 0, 0.13)
    heard = {
        "camera front": _heard(specs["camera front"].topic, encoding="bgr8", width=640, height=480),
        "camera wrist": _heard(specs["camera wrist"].topic, encoding="jpeg", width=640, height=480),
        "arm joint_states": _heard("joint_states", names=names, positions=q),
    }
    heard["gripper"] = heard["arm joint_states"]
    publishers = {"camera front": [image], "camera wrist": [compressed], "arm joint_states": [joints],
                  "gripper": [joints]}
    trajectory = EndpointInfo("controller", "trajectory_msgs/msg/JointTrajectory", "reliable", "volatile")
    gripper = EndpointInfo("gripper", "std_msgs/msg/Float64", "reliable", "volatile")
    commands = [check_command("arm command", "command.joint_trajectory_topic", "/joint_trajectory", "JointTrajectory",
                              [trajectory]),
                check_command("gripper command", "gripper.command_topic", "/command/gripper", "Float64", [gripper])]
    return heard, publishers, commands, check_reset(robot, "/reset", True)


def test_a_healthy_graph_passes_with_the_tcp_from_forward_kinematics():
    robot = load_robot_config("sim_panda_driver")
    heard, publishers, commands, reset = _healthy(robot)
    report = evaluate(robot, heard, publishers, commands, reset, duration_s=3.0)
    assert report.ok, report.first_thing_to_fix()
    tcp, gripper = report.checks[:2]
    assert tcp.detail["source"] == "forward kinematics" and tcp.detail["inside_workspace"]
    assert gripper.detail["opening"] == pytest.approx(0.08)
    assert json.loads(json.dumps(report.to_json()))["first_thing_to_fix"] is None


def test_a_reliable_robot_file_against_a_best_effort_camera_says_which_key_to_set():
    robot = load_robot_config("sim_panda_driver")
    robot = dataclasses.replace(robot, cameras=(
        ("front", dataclasses.replace(robot.camera("front"), qos="reliable")), *robot.cameras[1:]))
    heard, publishers, commands, reset = _healthy(robot)
    heard["camera front"] = Heard(topic="/camera/front/image_raw")  # nothing arrives on the reliable subscription
    report = evaluate(robot, heard, publishers, commands, reset, duration_s=3.0)
    assert report.first_thing_to_fix() == (
        "camera front (/camera/front/image_raw): incompatible QoS: publisher best_effort, robot file reliable: set "
        "cameras.front.qos: best_effort")


def test_the_first_thing_to_fix_is_the_most_basic_problem_not_the_first_row():
    robot = load_robot_config("sim_panda_driver")
    heard, publishers, commands, reset = _healthy(robot)
    heard["camera front"] = _heard("/camera/front/image_raw", rate=4.0, encoding="bgr8", width=320, height=240)
    publishers["camera wrist"] = []  # no wrist camera driver
    heard["camera wrist"] = Heard(topic="/camera/wrist/image_raw/compressed")
    report = evaluate(robot, heard, publishers, commands, reset, duration_s=3.0,
                      similar={"camera wrist": ["/camera/wrist/image_raw"]})
    front, wrist = report.streams[:2]
    assert [p.text for p in front.problems] == [
        "frames are 320x240, the robot file expects 640x480 (cameras.front.width / height)",
        "4.0 Hz, the robot file expects 10 Hz (cameras.front.rate_hz)"]
    assert report.first_thing_to_fix() == (
        "camera wrist (/camera/wrist/image_raw/compressed): no publisher: is the driver running (in this namespace "
        "and ROS domain)?; topics of that type: /camera/wrist/image_raw")


def test_wrong_type_missing_joints_stale_stamps_and_slow_sensors():
    robot = load_robot_config("sim_panda_driver")
    heard, publishers, commands, reset = _healthy(robot)
    publishers["camera wrist"] = [dataclasses.replace(BEST_EFFORT, type="sensor_msgs/msg/Image")]
    heard["arm joint_states"] = _heard("/joint_states", names=robot.arm.joint_names[:6],
                                       positions=(0.0,) * 6, delay=2.5)
    heard["gripper"] = heard["arm joint_states"]
    report = evaluate(robot, heard, publishers, commands, reset, duration_s=3.0)
    problems = {row.label: [p.text for p in row.problems] for row in report.streams}
    assert problems["camera wrist"] == ["publishers send sensor_msgs/msg/Image, not "
                                        "sensor_msgs/msg/CompressedImage: set cameras.wrist.type: Image"]
    assert problems["arm joint_states"][0] == ("joint_states has no joint(s) joint7 (arm.joint_names); it has "
                                               "joint1, joint2, joint3, joint4, joint5, joint6")
    assert problems["arm joint_states"][1].startswith("stamps are 2.50 s behind the receive time (p50)")
    assert problems["gripper"][0].startswith("joint_states has no joint(s) finger_joint1, finger_joint2")
    assert report.checks[0].detail.get("checked") is False  # no TCP without every arm joint

    heard, publishers, commands, reset = _healthy(robot)
    heard["camera front"] = _heard("/camera/front/image_raw", rate=4.0, encoding="bgr8", width=640, height=480)
    robot_any_rate = dataclasses.replace(robot, cameras=(
        ("front", dataclasses.replace(robot.camera("front"), rate_hz=0.0)), *robot.cameras[1:]))
    (front, *_) = evaluate(robot_any_rate, heard, publishers, commands, reset, duration_s=3.0).streams
    assert [p.text for p in front.problems] == [
        "at 4.0 Hz a reading is up to 255 ms old before the next one, more than max_sensor_age_s 0.2 s: the actor "
        "would hold between readings (raise the driver's rate or max_sensor_age_s)"]


def test_timing_warn_keeps_wiring_and_content_problems_and_turns_timing_ones_into_warnings():
    """--timing warn (a stand-in driver on a busy machine): a slow stream is a warning that passes; a frame of the
    wrong size still fails, and is the first thing to fix."""
    robot = load_robot_config("sim_panda_driver")
    heard, publishers, commands, reset = _healthy(robot)
    heard["camera front"] = _heard("/camera/front/image_raw", rate=4.0, encoding="bgr8", width=640, height=480)
    slow = evaluate(robot, heard, publishers, commands, reset, duration_s=3.0)
    assert not slow.ok and "4.0 Hz" in slow.first_thing_to_fix()
    warned = dataclasses.replace(slow, timing="warn")
    assert warned.ok and warned.first_thing_to_fix() is None
    assert [problem.text for _, problem in warned.warnings()] == [p.text for p in slow.streams[0].problems]
    assert warned.to_json()["warnings"][0].startswith("camera front: 4.0 Hz")
    heard["camera front"] = _heard("/camera/front/image_raw", rate=4.0, encoding="bgr8", width=320, height=240)
    wrong_size = dataclasses.replace(evaluate(robot, heard, publishers, commands, reset, duration_s=3.0),
                                     timing="warn")
    assert not wrong_size.ok and "frames are 320x240" in wrong_size.first_thing_to_fix()


def test_tcp_outside_the_workspace_gripper_out_of_range_and_missing_controller():
    robot = load_robot_config("sim_panda")
    specs = {s.label: s for s in stream_specs(robot)}
    assert list(specs) == ["camera front", "camera wrist", "arm tcp_pose", "arm twist", "gripper"]
    publishers = {label: [EndpointInfo("sim", TYPES[spec.type], "reliable", "volatile")]
                  for label, spec in specs.items()}
    heard = {label: _heard(spec.topic) for label, spec in specs.items()}
    heard["arm tcp_pose"].position = (0.30, 0.0, 0.40)
    heard["arm tcp_pose"].frame_ids = {"base"}
    heard["gripper"].positions = (0.2,)
    commands = [check_command("arm command", "command.pose_topic", "/command/target_pose", "PoseStamped", [],
                              ["/other/target_pose"]),
                check_command("gripper command", "gripper.command_topic", "/command/gripper", "Float64", [])]
    reset = check_reset(robot, "/reset", False)
    report = evaluate(robot, heard, publishers, commands, reset, duration_s=3.0)
    tcp, gripper, arm_command, _, reset_row = report.checks
    assert [p.text for p in tcp.problems] == [
        "outside the workspace box: x 0.300 is 0.050 m below 0.35; z 0.400 is 0.100 m above 0.3 (move the arm into "
        "the box, or check workspace / frames.base)"]
    assert gripper.problems[0].text.startswith("opening 0.2000 m is outside [0, 0.08]")
    assert arm_command.problems[0].text == ("no subscriber: the controller is not running, or listens elsewhere (set "
                                            "command.pose_topic); topics with a PoseStamped subscriber: "
                                            "/other/target_pose")
    assert reset_row.problems[0].text.startswith("service /reset (std_srvs/srv/Trigger) not available")
    # The controller comes before the robot's pose: without it nothing can move the arm into the box.
    assert report.first_thing_to_fix().startswith("arm command (/command/target_pose): no subscriber")


# ------------------------------------------------------------------------------------------------ over ROS 2


def _doctor(*args: str) -> dict:
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "robot_rl.apps.cli", "doctor", *args], cwd=REPO, capture_output=True,
                            text=True, timeout=90)
    return {"rc": result.returncode, "stdout": result.stdout, "stderr": result.stderr[-3000:],
            "seconds": round(time.monotonic() - started, 1)}


def _sim(log: Path, *args: str) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable, "-m", "robot_rl.sim.node", "--task", "PickCube-v0", "--obs-mode",
                                 "pixels", *args], cwd=REPO, stdout=out, stderr=subprocess.STDOUT)


def _stop(process: subprocess.Popen, log: Path, results: dict, name: str) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    results[name] = {"rc": process.returncode, "log": log.read_text()[-3000:]}


def _client(tmp: str) -> int:
    results = {"none": _doctor("sim_panda", "--duration", "1")}
    log = Path(tmp) / "sim_native.log"
    sim = _sim(log, "--mode", "realtime")
    try:
        results["native"] = _doctor("robots/sim_panda.yaml", "--wait", "40", "--duration", "2", "--json")
    finally:
        _stop(sim, log, results, "sim_native")
    reliable = Path(tmp) / "reliable_front.yaml"
    text = (REPO / "robots" / "sim_panda_driver.yaml").read_text()
    reliable.write_text(text.replace("model: models/sim_panda.xml", f"model: {REPO}/robots/models/sim_panda.xml")
                        .replace("qos: best_effort           # SensorDataQoS", "qos: reliable  # SensorDataQoS", 1))
    log = Path(tmp) / "sim_driver.log"
    sim = _sim(log, "--robot", "sim_panda_driver")
    try:
        results["reliable"] = _doctor(str(reliable), "--wait", "40", "--duration", "2")
    finally:
        _stop(sim, log, results, "sim_driver")
    print("RESULT " + json.dumps(results), flush=True)
    return 0


@pytest.fixture(scope="module")
def doctor_runs(tmp_path_factory):
    from ros_harness import run_ros_script

    result, stderr, code = run_ros_script(__file__, "client", domain_id=DOMAIN_ID, timeout=240,
                                          args=[str(tmp_path_factory.mktemp("doctor"))])
    assert code == 0, stderr[-3000:]
    return result


def _last_line(run: dict) -> str:
    return run["stdout"].strip().splitlines()[-1]


def test_no_drivers_running_names_the_first_missing_stream(doctor_runs):
    run = doctor_runs["none"]
    assert run["rc"] == 1, run
    assert _last_line(run) == ("first thing to fix: camera front (/camera/front/image_raw): no publisher: is the "
                               "driver running (in this namespace and ROS domain)?"), run["stdout"]


# What the doctor says of a stream's timing (its rate and how old its readings are when they arrive): on a loaded
# machine the sim node may publish slower than its robot file's rate, and the doctor rightly says so. A test of the
# doctor's other checks allows these; their figures are the benches'.
TIMING_PROBLEMS = re.compile(r"(\d+\.\d Hz, the robot file expects |one message in "
                             r"|stamps are .* (behind|ahead of) the receive time|at \d+\.\d Hz a reading is up to )")


def test_the_sim_node_with_its_native_topics_passes(doctor_runs):
    run = doctor_runs["native"]
    report = json.loads(run["stdout"])
    problems = [problem for row in report["streams"] + report["checks"] for problem in row["problems"]]
    assert all(TIMING_PROBLEMS.match(problem) for problem in problems), problems  # every other check passed
    assert run["rc"] == (1 if problems else 0) and report["ok"] == (not problems), run
    assert [row["name"] for row in report["streams"]] == ["camera front", "camera wrist", "arm tcp_pose",
                                                         "arm twist", "gripper"]
    assert all(row["seen"] for row in report["streams"]), report["streams"]
    front = report["streams"][0]
    assert (front["encoding"], front["width"], front["height"]) == ("rgb8", 64, 64)
    checks = {row["name"]: row for row in report["checks"]}
    assert checks["TCP pose"]["inside_workspace"] and checks["reset"]["available"]
    assert checks["arm command"]["subscribers"][0]["node"] == "sim"


def test_a_reliable_camera_against_a_best_effort_driver_fails_naming_the_qos(doctor_runs):
    run = doctor_runs["reliable"]
    assert run["rc"] == 1, (run, doctor_runs["sim_driver"])
    assert _last_line(run) == ("first thing to fix: camera front (/camera/front/image_raw): incompatible QoS: "
                               "publisher best_effort, robot file reliable: set cameras.front.qos: best_effort"), \
        run["stdout"]
    # The best-effort probe still shows what the driver sends.
    front = next(line for line in run["stdout"].splitlines() if "camera front" in line and "/camera/front" in line)
    assert "bgr8" in front and "640x480" in front, run["stdout"]


def test_an_unreadable_robot_file_is_one_line_and_status_2(tmp_path):
    bad = tmp_path / "robot.yaml"
    bad.write_text("name: x\ncameras: {front: {topic: t, qos: maybe}}\n")
    for argument, fragment in ((str(bad), "cameras.front.qos: 'maybe' must be one of reliable, best_effort"),
                               (str(tmp_path / "missing.yaml"), "cannot read it")):
        result = subprocess.run([sys.executable, "-m", "robot_rl.apps.cli", "doctor", argument], cwd=REPO,
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 2, result
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], result.stderr


if __name__ == "__main__":
    if sys.argv[1] == "client":
        sys.exit(_client(sys.argv[2]))
    raise SystemExit(f"unknown mode {sys.argv[1]!r}")
