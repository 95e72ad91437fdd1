"""A lock-step actor when its sim goes away, and an actor that joins a resumed run, over ROS 2.

- Actor ``/a`` (a policy file, no learner) meets a stand-in sim that answers the first reset but never publishes the
  frame after it (it died right after answering), then goes silent in the middle of the next episode (it died, or
  was restarted and lost the episode). The actor logs each time, gives the episode up, resets again and goes on to
  finish its episodes.
- Actor ``/b`` (``max_weight_lag`` 2) gets weights from a stand-in learner of a resumed run, which has trained on
  1000 transitions of earlier actor runs: it takes 3 steps, then waits for weights that saw them, and goes on when
  such weights arrive.

Runs in a private network namespace with its own ROS_DOMAIN_ID (tests/ros_harness.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

DOMAIN_ID = 76
DEADLINE_S = 120.0
FRAME_TIMEOUT_S = 1.5
EPISODE_STEPS = 4
SILENT_FROM_COMMAND = 3  # sim /a drops this command of the run and every later one until the next reset
LEARNER_TRAINED = 1000  # transitions the resumed run's learner trained on before actor /b started
MAX_WEIGHT_LAG = 2


def client(weights: str) -> dict:
    from robot_rl.ros.env import ensure_ros_environment

    ensure_ros_environment()
    import rclpy
    from geometry_msgs.msg import PoseStamped
    from rclpy.executors import SingleThreadedExecutor
    from ros_harness import StandInSensors, untrained_state_agent
    from std_msgs.msg import UInt8MultiArray
    from std_srvs.srv import Trigger

    from robot_rl.policy_file import weights_message
    from robot_rl.ros import qos
    from robot_rl.ros.convert import bytes_to_msg
    from robot_rl.transport import encode_weights

    work = Path(tempfile.mkdtemp(prefix="ros-actor-recovery-"))
    actor = [sys.executable, "-m", "robot_rl.ros.actor_node", "--ros-args", "-p", "obs_mode:=state",
             "-p", "mode:=lockstep", "-p", "stream_transitions:=false"]
    logs = {name: open(work / f"{name}.log", "w+") for name in ("a", "b")}
    actors = {
        "a": subprocess.Popen(
            [*actor, "-r", "__ns:=/a", "-p", f"weights_path:={weights}", "-p", f"max_episode_steps:={EPISODE_STEPS}",
             "-p", "episodes:=2", "-p", f"frame_timeout_s:={FRAME_TIMEOUT_S}", "-p", f"stats_path:={work / 'a.json'}"],
            stdout=logs["a"], stderr=subprocess.STDOUT, start_new_session=True),
        "b": subprocess.Popen(
            [*actor, "-r", "__ns:=/b", "-p", "reset_service:=none", "-p", f"max_weight_lag:={MAX_WEIGHT_LAG}",
             "-p", "weight_wait_s:=60.0", "-p", f"stats_path:={work / 'b.json'}"],
            stdout=logs["b"], stderr=subprocess.STDOUT, start_new_session=True),
    }
    rclpy.init()
    sims = {name: rclpy.create_node(f"stand_in_sim_{name}", namespace=f"/{name}") for name in ("a", "b")}
    executor = SingleThreadedExecutor()
    for node in sims.values():
        executor.add_node(node)
    sensors = {name: StandInSensors(node) for name, node in sims.items()}
    clock = {"stamp": 100.0}
    commands = {"a": 0, "b": 0}
    resets: list[str] = []

    def frame(name: str) -> None:
        clock["stamp"] += 1.0
        sensors[name].frame(clock["stamp"])

    def on_command_a(_msg) -> None:
        commands["a"] += 1
        if commands["a"] >= SILENT_FROM_COMMAND and len(resets) < 3:
            return  # gone: no answer until the actor resets
        sensors["a"].task_result()
        frame("a")

    def on_command_b(_msg) -> None:
        commands["b"] += 1
        sensors["b"].task_result()
        frame("b")

    def on_reset_a(request, response):
        resets.append("answered without a frame" if not resets else "answered")
        if len(resets) > 1:
            frame("a")
        response.success, response.message = True, f"reset {len(resets)}"
        return response

    sims["a"].create_subscription(PoseStamped, "command/target_pose", on_command_a, qos.qos_profile(qos.COMMANDS))
    sims["b"].create_subscription(PoseStamped, "command/target_pose", on_command_b, qos.qos_profile(qos.COMMANDS))
    sims["a"].create_service(Trigger, "reset", on_reset_a)
    learner_weights = sims["b"].create_publisher(UInt8MultiArray, qos.LEARNER_WEIGHTS,
                                                 qos.topic_qos(qos.LEARNER_WEIGHTS))
    agent = untrained_state_agent()

    def publish_weights(version: int, trained: int) -> None:
        message = weights_message(agent, version=version, transitions=trained)
        learner_weights.publish(bytes_to_msg(encode_weights(message)))

    def spin(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            executor.spin_once(timeout_sec=0.02)

    def wait_for(predicate, seconds: float) -> bool:
        end = time.monotonic() + seconds
        while time.monotonic() < end and not predicate():
            spin(0.1)
        return predicate()

    def stats(name: str) -> dict:
        try:
            return json.loads((work / f"{name}.json").read_text())
        except (OSError, ValueError):
            return {}

    summary: dict = {}
    try:
        publish_weights(1, LEARNER_TRAINED)  # transient-local: actor /b gets it when it subscribes
        # actor /b starts its episode at its first frame (no reset service): offer one until it commands
        end = time.monotonic() + 60.0
        while commands["b"] == 0 and time.monotonic() < end and actors["b"].poll() is None:
            if sims["b"].count_subscribers("tcp_pose") and stats("b").get("weights_version") == 1:
                frame("b")
            spin(0.5)
        # it steps until its transitions are MAX_WEIGHT_LAG + 1 ahead of what the weights saw, then waits
        wait_for(lambda: stats("b").get("transitions", 0) > MAX_WEIGHT_LAG, 20.0)
        spin(3.0)
        summary["b_waiting"] = {"transitions": stats("b").get("transitions"), "commands": commands["b"]}
        publish_weights(2, LEARNER_TRAINED + MAX_WEIGHT_LAG + 1)  # the learner trained on those
        wait_for(lambda: stats("b").get("transitions", 0) > 2 * (MAX_WEIGHT_LAG + 1) - 1, 20.0)
        spin(3.0)
        summary["b_after_new_weights"] = {"transitions": stats("b").get("transitions"), "commands": commands["b"]}
        # actor /a: a reset answered without a frame, an episode cut short, then two whole episodes
        summary["a_exit"] = actors["a"].poll() if wait_for(lambda: actors["a"].poll() is not None, 60.0) else None
        summary["a_stats"] = stats("a")
        summary["resets"] = list(resets)
        summary["a_commands"] = commands["a"]
    finally:
        for process in actors.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGINT)
        for name, process in actors.items():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        executor.shutdown(timeout_sec=1.0)
        for node in sims.values():
            node.destroy_node()
        rclpy.try_shutdown()
        for name, log in logs.items():
            log.seek(0)
            summary[f"{name}_log"] = log.read()[-5000:]
            log.close()
        shutil.rmtree(work, ignore_errors=True)
    return summary


@pytest.fixture(scope="module")
def summary(tmp_path_factory) -> dict:
    pytest.importorskip("rclpy")
    from ros_harness import run_ros_script, untrained_state_agent

    from robot_rl.policy_file import POLICY_FILE, weights_message, write_policy_file

    policy = write_policy_file(tmp_path_factory.mktemp("run") / POLICY_FILE,
                               weights_message(untrained_state_agent(), version=1))
    result, _, _ = run_ros_script(__file__, "client", DOMAIN_ID, DEADLINE_S, args=[str(policy)])
    return result


def test_lockstep_actor_gives_up_an_episode_whose_sim_went_silent_and_resets(summary):
    context = {k: v for k, v in summary.items() if k not in ("a_log", "b_log")}, summary["a_log"][-3000:]
    stats = summary["a_stats"]
    assert summary["a_exit"] == 0, context  # it finished its 2 episodes
    assert stats["episodes"] == 2 and stats["frame_timeouts"] == 2 and stats["episodes_given_up"] == 1, context
    assert summary["resets"] == ["answered without a frame", "answered", "answered", "answered"], context
    assert [r["steps"] for r in stats["results"]] == [EPISODE_STEPS, EPISODE_STEPS], context
    log = summary["a_log"]
    assert f"no sensor frame within {FRAME_TIMEOUT_S:g} s after the reset; calling the reset again" in log, log
    assert f"no sensor frame within {FRAME_TIMEOUT_S:g} s after the command of step 2 of episode 0; giving the " \
           "episode up (2 steps)" in log, log


def test_actor_joining_a_resumed_run_waits_for_weights_that_saw_its_transitions(summary):
    context = {k: v for k, v in summary.items() if k not in ("a_log", "b_log")}, summary["b_log"][-3000:]
    # 3 transitions (commands: one more, the first step closes no transition), then no step while the weights lag
    assert summary["b_waiting"] == {"transitions": MAX_WEIGHT_LAG + 1, "commands": MAX_WEIGHT_LAG + 2}, context
    after = summary["b_after_new_weights"]
    assert after == {"transitions": 2 * (MAX_WEIGHT_LAG + 1), "commands": 2 * (MAX_WEIGHT_LAG + 1) + 1}, context


if __name__ == "__main__":
    if sys.argv[1:2] == ["client"]:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        print("RESULT " + json.dumps(client(sys.argv[2])))
