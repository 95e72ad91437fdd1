"""Teleop nodes over ROS 2: the scripted teleop takes over a stuck or out-pushing actor within its budgets, and the
device teleop node exits with status 2 and one clear line when its device is missing.

The test starts this file as a client script (``python test_ros_teleop.py client``) in a private network namespace
(only ``lo``) where the kernel allows it, with ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST and a test-specific
ROS_DOMAIN_ID. The client starts ``python -m robot_rl.sim.scripted_teleop`` and ``python -m
robot_rl.drivers.teleop_node --device gamepad`` (namespaced ``/teleoptest``), plays the sim node and the actor with
fake messages (tcp_pose, sim/expert_action, command/target_pose, actor/episode) and stops the scripted teleop with
SIGTERM. Then it runs the gamepad teleop node on a FIFO standing in for /dev/input/js0 (namespaced ``/padtest``),
writes joystick events into it, stops it with SIGTERM and prints a JSON summary.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

from ros_harness import allocate_domain_id

DEADLINE_S = 60.0  # a failure detector: the test takes ~20 s on 2 idle cores
NAMESPACE = "/teleoptest"
PAD_NAMESPACE = "/padtest"
DOMAIN_ID = allocate_domain_id()  # test-specific; isolated anyway inside a private network namespace
STEP_S = 0.12
PARAMS = {"takeover_steps": 2, "episode_budget": 3, "stuck_window": 4, "boundary_steps": 2}
# Episode 0: the TCP never moves. Stuck at step 3 (a full window of 4), 2 takeover steps; the window refills by step
# 7 and the third step spends the episode budget. Episode 1 (after actor/episode): the budget is back.
# Episode 2: the TCP moves, but the actor's target sits on the +x workspace face: pushing out from step 1.
EPISODES = ((0, 12, "stuck"), (1, 6, "stuck"), (2, 3, "push"))
EXPECTED_ENGAGED_STEPS = {0: [3, 4, 7], 1: [3, 4], 2: [1, 2]}
SCALE = {"control_dt": 0.1, "max_translation": 0.03, "max_rotation": 0.15}


def step_stamp(episode: int, step: int) -> float:
    return 1000.0 + 100.0 * episode + step


def expert_action(episode: int, step: int) -> list[float]:
    """A different expert action every step, so each twist can be matched to the action it came from."""
    return [0.1 * step - 0.5, -0.25 * episode, 0.75, 0.6 if step % 2 else -0.8]


# --------------------------------------------------------------------------------------------- client script


def _client() -> int:
    from robot_rl.ros.net.env import ensure_ros_environment

    ensure_ros_environment()
    import rclpy
    from geometry_msgs.msg import PoseStamped, TwistStamped
    from std_msgs.msg import Bool, Float32MultiArray, Float64, UInt32

    from robot_rl.ros import qos
    from robot_rl.ros.convert import pose_to_msg, stamp_to_seconds, twist_from_msg

    summary: dict = {"timings": {}}
    started = time.monotonic()

    def mark(what: str) -> None:
        summary["timings"][what] = round(time.monotonic() - started, 2)

    params = [arg for name, value in PARAMS.items() for arg in ("-p", f"{name}:={value}")]
    scripted = subprocess.Popen(
        [sys.executable, "-m", "robot_rl.sim.scripted_teleop", "--ros-args", "-r", f"__ns:={NAMESPACE}", *params])
    gamepad = subprocess.Popen(
        [sys.executable, "-m", "robot_rl.drivers.teleop_node", "--device", "gamepad", "--ros-args", "-r",
         f"__ns:={NAMESPACE}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    fake_gamepad = FakeGamepad()
    rclpy.init()
    node = rclpy.create_node("test_teleop_client")
    engaged: list[bool] = []
    twists: dict[float, list] = {}
    grippers: list[float] = []

    def topic(name: str) -> str:
        return NAMESPACE + name

    def on_twist(msg) -> None:
        linear, angular = twist_from_msg(msg)
        twists.setdefault(stamp_to_seconds(msg.header.stamp), []).append(
            {"linear": linear.tolist(), "angular": angular.tolist(), "frame": msg.header.frame_id})

    # A deeper reader history than the node's depth 1: a client stalled by a loaded machine must not lose a command
    # (nor an engaged / released change).
    node.create_subscription(Bool, topic(qos.TELEOP_ENGAGED), lambda m: engaged.append(bool(m.data)),
                             qos.topic_qos(qos.TELEOP_ENGAGED, depth=32))
    command_subs = (
        node.create_subscription(TwistStamped, topic(qos.TELEOP_TWIST), on_twist,
                                 qos.topic_qos(qos.TELEOP_TWIST, depth=32)),
        node.create_subscription(Float64, topic(qos.TELEOP_GRIPPER), lambda m: grippers.append(float(m.data)),
                                 qos.topic_qos(qos.TELEOP_GRIPPER, depth=32)),
    )
    tcp_pub = node.create_publisher(PoseStamped, topic(qos.TCP_POSE), qos.topic_qos(qos.TCP_POSE))
    expert_pub = node.create_publisher(Float32MultiArray, topic(qos.SIM_EXPERT_ACTION),
                                       qos.topic_qos(qos.SIM_EXPERT_ACTION))
    target_pub = node.create_publisher(PoseStamped, topic(qos.COMMAND_TARGET_POSE),
                                       qos.topic_qos(qos.COMMAND_TARGET_POSE))
    episode_pub = node.create_publisher(UInt32, topic(qos.ACTOR_EPISODE), qos.topic_qos(qos.ACTOR_EPISODE))
    deadline = time.monotonic() + DEADLINE_S
    quat = [0.0, 1.0, 0.0, 0.0]

    def spin_for(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.01)

    def spin_until(predicate, what: str) -> None:
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            if scripted.poll() is not None:
                raise RuntimeError(f"scripted teleop exited with {scripted.returncode} while waiting for {what}")
            rclpy.spin_once(node, timeout_sec=0.05)

    try:
        try:
            _, gamepad_stderr = gamepad.communicate(timeout=30)
            summary["gamepad"] = {"exit_code": gamepad.returncode, "stderr": gamepad_stderr}
            mark("gamepad exited")
        except subprocess.TimeoutExpired:
            gamepad.kill()
            summary["gamepad"] = {"exit_code": "still running after 30 s", "stderr": gamepad.communicate()[1]}

        spin_until(lambda: engaged == [False], "the latched engaged=false at start")
        spin_until(lambda: min(p.get_subscription_count() for p in (tcp_pub, expert_pub, target_pub, episode_pub))
                   >= 1, "the scripted teleop's subscriptions")
        # Its command publishers too: a twist sent before discovery matched it with our subscription would be lost.
        spin_until(lambda: min(sub.get_publisher_count() for sub in command_subs) >= 1,
                   "the scripted teleop's twist and gripper publishers")
        mark("scripted teleop ready")
        spin_for(0.3)
        face = np.array([0.65, 0.0, 0.2])  # the env's workspace_high x
        for episode, steps, scenario in EPISODES:
            if episode > 0:
                episode_pub.publish(UInt32(data=episode))
                spin_for(0.3)
            for step in range(steps):
                if scenario == "push":
                    target_pub.publish(pose_to_msg(face, quat, stamp=time.time(), frame_id="base"))
                    tcp = np.array([0.5, -0.1 + 0.02 * step, 0.2])  # moving: never stuck
                else:
                    tcp = np.array([0.5, 0.0, 0.2])
                spin_for(0.02)
                expert_pub.publish(Float32MultiArray(data=expert_action(episode, step)))
                spin_for(0.02)
                tcp_pub.publish(pose_to_msg(tcp, quat, stamp=step_stamp(episode, step), frame_id="base"))
                spin_for(STEP_S)
        # The node answers the steps in order: once the last engaged step's twist and every step's gripper command
        # are here, so is everything it sent before them.
        last_episode, last_steps = max(EXPECTED_ENGAGED_STEPS.items())
        engaged_steps = sum(len(steps) for steps in EXPECTED_ENGAGED_STEPS.values())
        spin_until(lambda: step_stamp(last_episode, last_steps[-1]) in twists and len(grippers) >= engaged_steps,
                   "the last engaged step's twist and gripper command")
        summary["engaged_before_stop"] = list(engaged)
        summary["twists"] = {str(k): v for k, v in sorted(twists.items())}
        summary["grippers"] = grippers
    except Exception as error:  # noqa: BLE001 - reported in the summary
        summary["error"] = repr(error)
    finally:
        if scripted.poll() is None:
            scripted.send_signal(signal.SIGTERM)
        try:
            stop_deadline = time.monotonic() + 10
            while scripted.poll() is None and time.monotonic() < stop_deadline:
                rclpy.spin_once(node, timeout_sec=0.05)
            summary["scripted_exit_code"] = scripted.wait(timeout=1)
        except subprocess.TimeoutExpired:
            scripted.kill()
            scripted.wait()
            summary["scripted_exit_code"] = "killed after SIGTERM timeout"
        # what it published on its way out (control handed back), however long this client takes to see it
        before_stop = summary.get("engaged_before_stop", [])
        while len(engaged) <= len(before_stop) and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.05)
        summary["engaged_after_stop"] = list(engaged)
        mark("scripted teleop stopped")
    try:
        summary["pad"] = fake_gamepad.run(node, deadline)
        mark("gamepad node on a FIFO done")
    except Exception as error:  # noqa: BLE001 - reported in the summary
        summary["error"] = "gamepad phase: " + repr(error)
    finally:
        fake_gamepad.close()
        node.destroy_node()
        rclpy.shutdown()
    print("RESULT " + json.dumps(summary), flush=True)
    return 0


class FakeGamepad:
    """The gamepad teleop node on a FIFO standing in for /dev/input/js0 (started early: node start-up overlaps)."""

    def __init__(self) -> None:
        self.fifo = os.path.join(tempfile.mkdtemp(prefix="teleop_test_"), "js0")
        os.mkfifo(self.fifo)
        # Hold a write end from the start (O_RDWR never blocks on Linux): a FIFO without a writer reads as end of
        # file, which the node would rightly take for an unplugged gamepad.
        self.writer = os.open(self.fifo, os.O_RDWR | os.O_NONBLOCK)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "robot_rl.drivers.teleop_node", "--device", "gamepad", "--path", self.fifo,
             "--ros-args", "-r", f"__ns:={PAD_NAMESPACE}", "-p", "rate_hz:=20.0"])

    def close(self) -> None:
        os.close(self.writer)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.unlink(self.fifo)
        os.rmdir(os.path.dirname(self.fifo))

    def run(self, node, deadline: float) -> dict:
        """Feed joystick events, stop the node with SIGTERM; return what it published and its exit code."""
        import rclpy
        from geometry_msgs.msg import TwistStamped
        from std_msgs.msg import Bool, String

        from robot_rl.drivers.teleop import JS_EVENT, JS_EVENT_AXIS, JS_EVENT_BUTTON, JS_EVENT_INIT
        from robot_rl.ros import qos
        from robot_rl.ros.convert import twist_from_msg

        result: dict = {}
        engaged: list[bool] = []
        episodes: list[str] = []
        twists: list[list[float]] = []
        pad = self.process
        topic = lambda name: PAD_NAMESPACE + name  # noqa: E731
        node.create_subscription(Bool, topic(qos.TELEOP_ENGAGED), lambda m: engaged.append(bool(m.data)),
                                 qos.topic_qos(qos.TELEOP_ENGAGED))
        node.create_subscription(String, topic(qos.TELEOP_EPISODE), lambda m: episodes.append(m.data),
                                 qos.topic_qos(qos.TELEOP_EPISODE))
        node.create_subscription(TwistStamped, topic(qos.TELEOP_TWIST),
                                 lambda m: twists.append(twist_from_msg(m)[0].tolist()),
                                 qos.topic_qos(qos.TELEOP_TWIST))

        def spin_until(predicate, what: str) -> None:
            while not predicate():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"timed out waiting for {what}; engaged={engaged} episodes={episodes}")
                if pad.poll() is not None:
                    raise RuntimeError(f"gamepad teleop node exited with {pad.returncode} while waiting for {what}")
                rclpy.spin_once(node, timeout_sec=0.05)

        def write(*events: tuple[int, int, int]) -> None:
            os.write(self.writer, b"".join(JS_EVENT.pack(0, value, kind, number) for kind, number, value in events))

        spin_until(lambda: engaged == [False], "the latched engaged=false at start")
        write((JS_EVENT_BUTTON | JS_EVENT_INIT, 4, 0), (JS_EVENT_AXIS | JS_EVENT_INIT, 1, 0))
        write((JS_EVENT_BUTTON, 4, 1), (JS_EVENT_AXIS, 1, -32767))  # dead-man held, stick forward
        spin_until(lambda: engaged[-1:] == [True] and twists and twists[-1][0] > 0.29, "engaged and moving")
        result["twist_engaged"] = twists[-1]
        write((JS_EVENT_BUTTON, 3, 1), (JS_EVENT_BUTTON, 3, 0))  # Y: success
        spin_until(lambda: episodes == ["success"], "the success key")
        write((JS_EVENT_BUTTON, 4, 0))  # dead-man released
        spin_until(lambda: engaged[-1:] == [False], "release of the dead-man switch")
        write((JS_EVENT_BUTTON, 4, 1))
        spin_until(lambda: engaged[-1:] == [True], "engaged again")
        pad.send_signal(signal.SIGTERM)
        stop = time.monotonic() + 10
        while pad.poll() is None and time.monotonic() < stop:
            rclpy.spin_once(node, timeout_sec=0.05)
        result["exit_code"] = pad.wait(timeout=1)
        while engaged[-1:] == [True] and time.monotonic() < deadline:  # control handed back on its way out
            rclpy.spin_once(node, timeout_sec=0.02)
        result["engaged"], result["episodes"] = engaged, episodes
        return result


# --------------------------------------------------------------------------------------------- the test


def test_scripted_teleop_and_missing_gamepad_over_ros():
    pytest.importorskip("rclpy")
    from ros_harness import run_ros_script

    from robot_rl.actor.teleop_mapping import action_to_twist

    summary, stderr, returncode = run_ros_script(__file__, "client", DOMAIN_ID, DEADLINE_S + 15)
    context = (summary, stderr[-3000:])
    assert "error" not in summary, context

    gamepad = summary["gamepad"]
    assert gamepad["exit_code"] == 2, gamepad
    errors = [line for line in gamepad["stderr"].splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "no gamepad found" in errors[0] and "/dev/input/js*" in errors[0], gamepad
    assert "--device keyboard" in errors[0], gamepad

    # engaged: false at start, then one true/false pair per takeover: ep 0 (steps 3-4, 7), ep 1 (3-4), ep 2 (1-2);
    # ep 2 is still engaged when the node is stopped, and SIGTERM hands control back.
    assert summary["engaged_before_stop"] == [False, True, False, True, False, True, False, True], context
    assert summary["engaged_after_stop"] == summary["engaged_before_stop"] + [False], context
    assert summary["scripted_exit_code"] == 0, context

    expected_stamps = {step_stamp(e, s): (e, s) for e, steps in EXPECTED_ENGAGED_STEPS.items() for s in steps}
    twists = {float(k): v for k, v in summary["twists"].items()}
    assert sorted(twists) == sorted(expected_stamps), context  # one twist per engaged step, none otherwise
    openings = []
    for stamp, published in twists.items():
        assert len(published) == 1, (stamp, published)
        linear, angular, opening = action_to_twist(expert_action(*expected_stamps[stamp]), **SCALE)
        np.testing.assert_allclose(published[0]["linear"], linear, atol=1e-5)
        np.testing.assert_allclose(published[0]["angular"], angular, atol=1e-5)
        assert published[0]["frame"] == "base"
        openings.append((stamp, opening))
    np.testing.assert_allclose(summary["grippers"], [o for _, o in sorted(openings)], atol=1e-5)

    pad = summary["pad"]  # the gamepad node on a FIFO standing in for /dev/input/js0
    np.testing.assert_allclose(pad["twist_engaged"], [0.3, 0.0, 0.0], atol=1e-6)
    assert pad["episodes"] == ["success"], pad
    assert pad["engaged"] == [False, True, False, True, False], pad  # ... and SIGTERM hands control back
    assert pad["exit_code"] == 0, pad
    assert returncode == 0, stderr[-3000:]


if __name__ == "__main__":
    sys.exit({"client": _client}[sys.argv[1]]())
