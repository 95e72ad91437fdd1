"""The actor's reset service calls over ROS 2: no reset server yet, a lost response, a failed reset, and a server that
dies during a reset and comes back. The actor logs, counts and calls again until an episode starts, and then
commands. It acts with a policy file (weights_path) and no learner at all, and never waits for one (max_weight_lag is
set; weight_wait_s is given as an integer where a float is declared, which is accepted).

A stand-in robot in this script plays a lock-step sim: the reset service (std_srvs/Trigger) and a sensor frame after
every reset and every command. Its reset service goes through the `PLAN` by what the actor made of the last request,
not by how many came: an answer that reaches the actor after its reset timeout is a timeout to the actor, and the
stand-in then answers the next request the same way. So the outcome does not depend on how fast the stand-in answers;
the test asserts on the outcomes the actor logged, in order. Runs in a private network namespace with its own
ROS_DOMAIN_ID (tests/ros_harness.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ros_harness import allocate_domain_id

DOMAIN_ID = allocate_domain_id()
DEADLINE_S = 90.0
RESET_TIMEOUT_S = 1.5
# What the stand-in does with reset requests, in order: drop = the response is lost (one request); fail = it answers
# that the reset failed (until the actor has logged the failure); answer = reset and answer (until the actor has
# started the episode: it commanded); die = the server goes away without answering and comes back after a while;
# answer (the rest).
PLAN = ("drop", "fail", "answer", "die", "answer")
FAILURE = "the arm is not homed"


def client(weights: str) -> dict:
    from robot_rl.ros.net.env import ensure_ros_environment

    ensure_ros_environment()
    import rclpy
    from geometry_msgs.msg import PoseStamped
    from rclpy.callback_groups import ReentrantCallbackGroup
    from rclpy.task import Future
    from ros_harness import StandInSensors
    from std_msgs.msg import UInt32
    from std_srvs.srv import Trigger

    from robot_rl.ros import qos

    run_dir = Path(tempfile.mkdtemp(prefix="ros-reset-"))
    stats_path = run_dir / "actor_status.json"
    log = open(run_dir / "actor.log", "w+")
    actor = subprocess.Popen(
        [sys.executable, "-m", "robot_rl.ros.nodes.actor_node", "--ros-args", "-p", "obs_mode:=state",
         "-p", "mode:=lockstep", "-p", f"weights_path:={weights}", "-p", "stream_transitions:=false",
         "-p", "max_episode_steps:=3", "-p", "episodes:=2", "-p", "max_weight_lag:=2", "-p", "weight_wait_s:=60",
         "-p", f"reset_timeout_s:={RESET_TIMEOUT_S}", "-p", f"stats_path:={stats_path}"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    rclpy.init()
    node = rclpy.create_node("reset_stand_in")
    sensors = StandInSensors(node)
    clock = {"stamp": 100.0}

    def frame() -> None:
        clock["stamp"] += 1.0
        sensors.frame(clock["stamp"])

    commands: list[float] = []
    episodes: list[int] = []

    def on_command(_msg) -> None:  # lock-step: the step's task result, then the next frame
        commands.append(time.monotonic())
        sensors.task_result()
        frame()

    node.create_subscription(PoseStamped, "command/target_pose", on_command, qos.qos_profile(qos.COMMANDS))
    node.create_subscription(UInt32, "actor/episode", lambda msg: episodes.append(int(msg.data)),
                             qos.topic_qos(qos.ACTOR_EPISODE))
    requests: list[str] = []
    plan = {"step": 0, "commands_at_answer": 0}
    never = Future()  # awaited by a request whose response is lost
    reentrant = ReentrantCallbackGroup()  # a request left waiting must not block the other callbacks

    def actor_logged(text: str) -> bool:
        """The actor logs a reset's outcome (stderr, unbuffered) before it calls again."""
        return text in (run_dir / "actor.log").read_text(errors="replace")

    def step_done(behaviour: str) -> bool:
        """Whether the actor made of the last request what `behaviour` is there for (asked at the next request)."""
        if behaviour == "drop":  # a lost response is a timeout to the actor, however fast the stand-in
            return True
        if behaviour == "fail":  # not a timeout: an answer that came too late
            return actor_logged(f"reset failed: {FAILURE}")
        if behaviour == "answer":  # the episode started: it commanded (a step needs a command and its frame)
            return len(commands) > plan["commands_at_answer"]
        return False  # die: until the server is gone; the test starts the last step when it comes back

    async def on_reset(request, response):
        if requests and plan["step"] < len(PLAN) - 1 and step_done(PLAN[plan["step"]]):
            plan["step"] += 1
        behaviour = PLAN[plan["step"]]
        requests.append(behaviour)
        if behaviour == "fail":
            response.success, response.message = False, FAILURE
            return response
        if behaviour != "answer":
            await never
        plan["commands_at_answer"] = len(commands)
        frame()
        response.success, response.message = True, f"reset {len(requests)}"
        return response

    def spin(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.02)

    def wait_for(predicate, seconds: float) -> bool:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if predicate():
                return True
            if actor.poll() is not None:
                return False
            spin(0.1)
        return predicate()

    def stats() -> dict:
        try:
            return json.loads(stats_path.read_text())
        except (OSError, ValueError):
            return {}

    summary: dict = {}
    try:
        # no reset server yet: the actor waits for one and says so
        summary["waiting_for_server"] = wait_for(
            lambda: stats().get("waiting_for") == "the reset service /reset", 40.0)
        summary["attempts_without_server"] = stats().get("reset_attempts")
        service = node.create_service(Trigger, "reset", on_reset, callback_group=reentrant)
        # the first response is lost: after reset_timeout_s the actor calls again, starts the episode, commands
        summary["first_episode"] = wait_for(lambda: len(episodes) >= 1 and len(commands) >= 1, 20.0)
        # the server dies during the next reset and comes back later
        summary["died"] = wait_for(lambda: "die" in requests, 20.0)
        node.destroy_service(service)
        summary["waiting_again"] = wait_for(
            lambda: stats().get("waiting_for") == "the reset service /reset", 20.0)
        before = len(commands)
        plan["step"] = len(PLAN) - 1  # it comes back: answer
        node.create_service(Trigger, "reset", on_reset, callback_group=reentrant)
        summary["second_episode"] = wait_for(lambda: len(episodes) >= 2 and len(commands) > before, 20.0)
        summary["finished"] = wait_for(lambda: stats().get("episodes") == 2, 20.0)  # then the actor exits
        summary["stats"] = stats()
        summary["requests"] = list(requests)
        summary["exit"] = actor.wait(timeout=20)
    finally:
        if actor.poll() is None:
            os.killpg(actor.pid, signal.SIGKILL)
            summary["exit"] = "killed"
            actor.wait()
        node.destroy_node()
        rclpy.try_shutdown()
        log.seek(0)
        summary["actor_log"] = log.read()
        log.close()
        shutil.rmtree(run_dir, ignore_errors=True)
    return summary


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory) -> Path:
    """A policy file for the state observations of PickCube (untrained weights)."""
    from ros_harness import untrained_state_agent

    from robot_rl.policies.gaussian import weights_message
    from robot_rl.wire.policy_file import POLICY_FILE, write_policy_file

    message = weights_message(untrained_state_agent(), version=1)
    return write_policy_file(tmp_path_factory.mktemp("run") / POLICY_FILE, message)


def test_reset_calls_time_out_are_retried_and_wait_for_the_server(policy_file):
    pytest.importorskip("rclpy")
    from ros_harness import run_ros_script

    summary, stderr, _ = run_ros_script(__file__, "client", DOMAIN_ID, DEADLINE_S, args=[str(policy_file)])
    log = summary["actor_log"]
    context = {k: v for k, v in summary.items() if k != "actor_log"}, log[-3000:]
    assert summary["waiting_for_server"] and summary["attempts_without_server"] == 0, context
    assert summary["first_episode"], context
    assert summary["died"] and summary["waiting_again"], context
    assert summary["second_episode"] and summary["finished"], context
    # the stand-in went through its plan (a step repeats where the actor timed out on a late answer)
    requests = summary["requests"]
    assert [b for i, b in enumerate(requests) if i == 0 or b != requests[i - 1]] == list(PLAN), context
    stats = summary["stats"]
    # the calls the server saw, plus any made while the dead server was still listed
    assert stats["reset_attempts"] >= 5 and stats["reset_timeouts"] >= 2 and stats["reset_failures"] == 1, stats
    assert stats["reset_attempts"] == stats["reset_timeouts"] + stats["reset_failures"] + 2, stats  # 2 episodes
    assert stats["weights_version"] == 1 and stats["transitions"] >= 3, stats  # the file's policy, no learner
    # what the actor made of it, in order: it waited for the server, took the lost response for a timeout and called
    # again, retried after the failure, started the episode on an answer; timed out on the call the server died in
    outcomes = [re.escape("waiting for the reset service /reset"),
                re.escape(f"did not answer within {RESET_TIMEOUT_S:g} s (attempt 1,"),
                re.escape(f"reset failed: {FAILURE} (attempt ") + r"([2-9]|\d\d+),",
                r"answered attempt ([3-9]|\d\d+),",
                re.escape("did not answer within"),  # the call the server died in (then it waited: waiting_again)
                r"answered attempt ([2-9]|\d\d+),"]
    at = 0
    for outcome in outcomes:
        found = re.compile(outcome).search(log, at)
        assert found, (outcome, log[at:][-3000:])
        at = found.end()
    assert "waiting for policy weights" not in log and "no fresh weights" not in log, log
    assert summary["exit"] == 0, context


if __name__ == "__main__":
    if sys.argv[1:2] == ["client"]:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        print("RESULT " + json.dumps(client(sys.argv[2])))
