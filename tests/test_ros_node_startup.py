"""Node start-up over ROS 2, as a user meets it: a typo in a parameter name, a value of the wrong type, a wrong or
missing policy file and a corrupt transition log are each one error line naming the problem and exit status 2 (no
traceback, no run folder made); and a learner node acknowledges and logs transitions while its agent is still being
built (here: its demo dataset cannot be read until the test lets it, then the start-up fails with one line and exit
status 2, so that a launch file does not respawn it); one stopped (SIGINT) while its agent is being built exits at
once.

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

import numpy as np
import pytest

from ros_harness import allocate_domain_id

DOMAIN_ID = allocate_domain_id()
DEADLINE_S = 240.0  # a failure detector: about 40 s on 2 idle cores


def bad_starts(work: Path) -> dict[str, list[str]]:
    """Command lines that must fail at start-up, by case name."""
    checkpoint = work / "run" / "checkpoint" / "agent.msgpack"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(os.urandom(256))  # agent and optimiser state: not a policy file
    corrupt = work / "corrupt" / "transition_log" / "000000000000.msgpack"  # a run folder whose disk lost data
    corrupt.parent.mkdir(parents=True)
    corrupt.write_bytes(b"\x85\xa4kind")
    actor = [sys.executable, "-m", "robot_rl.ros.nodes.actor_node", "--ros-args", "-p", "obs_mode:=state"]
    from test_ros_actor_fuzz import untrained_pixel_agent

    from robot_rl.policies.gaussian import weights_message
    from robot_rl.wire.policy_file import write_policy_file

    sac_policy = write_policy_file(work / "sac" / "policy.msgpack", weights_message(untrained_pixel_agent(), version=1))
    real_robot = [*actor[:-2], "-p", "obs_mode:=pixels", "-p", "robot:=franka_fr3"]
    lan = ["env", "ROBOT_RL_NETWORK=lan"]  # an open network, chosen without allow_open_network
    return {
        "actor_unvalidated": [*real_robot, "-p", f"weights_path:={sac_policy}"],
        "actor_open_network": [*lan, *real_robot, "-p", f"weights_path:={sac_policy}"],
        "learner_open_network": [*lan, sys.executable, "-m", "robot_rl.ros.nodes.learner_node", "--ros-args",
                                 "-p", f"run_dir:={work / 'never'}", "-p", "obs_mode:=pixels",
                                 "-p", "robot:=franka_fr3"],
        "actor_ddim_steps_of_sac": [*actor, "-p", f"weights_path:={sac_policy}", "-p", "inference_steps:=5"],
        "actor_typo": [*actor, "-p", "episode:=3"],
        "actor_type": [*actor, "-p", "episodes:=abc"],
        "actor_checkpoint": [*actor, "-p", f"weights_path:={checkpoint}"],
        "actor_missing": [*actor, "-p", f"weights_path:={work / 'nowhere' / 'policy.msgpack'}"],
        "learner_typo": [sys.executable, "-m", "robot_rl.ros.nodes.learner_node", "--ros-args",
                         "-p", f"run_dir:={work / 'never'}", "-p", "step:=10"],
        "learner_value": [sys.executable, "-m", "robot_rl.ros.nodes.learner_node", "--ros-args",
                          "-p", f"run_dir:={work / 'never'}", "-p", "obs_mode:=pixels", "-p", "image_size:=4"],
        "learner_corrupt_log": [sys.executable, "-m", "robot_rl.ros.nodes.learner_node", "--ros-args",
                                "-p", f"run_dir:={corrupt.parent.parent}", "-p", "obs_mode:=state"],
        "sim_typo": [sys.executable, "-m", "robot_rl.sim.node", "--mode", "lockstep", "--ros-args", "-p", "sed:=3"],
        # out of range: each node parameter by its in-process twin's rule (or its own range where it has none)
        "learner_steps": [sys.executable, "-m", "robot_rl.ros.nodes.learner_node", "--ros-args",
                          "-p", f"run_dir:={work / 'never'}", "-p", "obs_mode:=state", "-p", "steps:=-5"],
        "actor_range": [*actor, "-p", "episodes:=-1", "-p", "weight_wait_s:=0.0"],
        "sim_image_size": [sys.executable, "-m", "robot_rl.sim.node", "--mode", "lockstep", "--ros-args",
                           "-p", "image_size:=4"],
        "teleop_rate": [sys.executable, "-m", "robot_rl.drivers.teleop_node", "--device", "keyboard", "--ros-args",
                        "-p", "rate_hz:=0.0"],
        # a node started by hand in a shell whose network settings cannot work
        "sim_secure_without_certs": ["env", "-u", "ROBOT_RL_CERTS", "ROBOT_RL_NETWORK=secure", sys.executable, "-m",
                                     "robot_rl.sim.node", "--mode", "lockstep"],
        "link_secure_without_certs": ["env", "-u", "ROBOT_RL_CERTS", "ROBOT_RL_NETWORK=secure", sys.executable, "-m",
                                      "robot_rl.ros.nodes.link_node"],
    }


def gated_starts(work: Path) -> dict[str, list[str]]:
    """Actors on a real robot's file that must start: a policy with a passing validation record, and one without
    it run with allow_unvalidated."""
    from test_ros_actor_fuzz import untrained_pixel_agent

    from robot_rl.policies.gaussian import weights_message
    from robot_rl.wire.policy_file import write_policy_file

    agent = untrained_pixel_agent()
    validated = write_policy_file(work / "validated" / "policy.msgpack", weights_message(agent, version=1))
    write_passing_record(validated)
    unvalidated = write_policy_file(work / "unvalidated" / "policy.msgpack", weights_message(agent, version=2))
    head = validated_head_on_a_folder_base(work)
    actor = [sys.executable, "-m", "robot_rl.ros.nodes.actor_node", "--ros-args", "-p", "obs_mode:=pixels",
             "-p", "robot:=franka_fr3"]
    return {"validated": [*actor, "-p", f"weights_path:={validated}"],
            # in the lan mode, accepted as a launch's allow_open_network:=true accepts it
            "allowed": ["env", "ROBOT_RL_NETWORK=lan", "ROBOT_RL_ALLOW_OPEN_NETWORK=1", *actor,
                        "-p", f"weights_path:={unvalidated}", "-p", "allow_unvalidated:=true"],
            "validated_head": [*actor, "-p", f"weights_path:={head}"]}


def validated_head_on_a_folder_base(work: Path) -> Path:
    """A residual head file on a diffusion policy folder, with a passing record for the head (covering its base's
    bytes) and none for the base: what `robot-rl validate` leaves after validating the head."""
    from robot_rl.agents.sac import SACAgent, SACConfig
    from robot_rl.policies.diffusion import DiffusionConfig, DiffusionPolicy
    from robot_rl.policies.normalizer import Normalizer
    from robot_rl.policies.residual import FrozenBase, ResidualPolicy, residual_observation_spec
    from robot_rl.wire.policy_file import write_policy_file
    from robot_rl.ros.nodes.learner_params import robot_task_spaces

    spec, action_dim = robot_task_spaces("franka_fr3", "pixels", 64)
    tiny = DiffusionConfig(obs_horizon=2, prediction_horizon=8, action_horizon=4, down_dims=(16, 32), groups=4,
                           step_embedding_dim=16, image_channels=(8, 8), image_features=16, state_features=16,
                           train_timesteps=20, inference_steps=3)
    rng = np.random.default_rng(0)
    data = {key: rng.normal(size=(20, int(np.prod(spec[key].shape)))) for key in spec.vector_keys}
    data["action"] = rng.uniform(-1, 1, (20, action_dim))
    diffusion = DiffusionPolicy.create(tiny, spec, action_dim, Normalizer().fit(data), seed=0)
    base = diffusion.save(work / "dp" / "policy")
    head = SACAgent.create(0, residual_observation_spec(diffusion), action_dim,
                           SACConfig(actor_hidden_dims=(16,), critic_hidden_dims=(16,), actor_zero_init_last=True))
    path = write_policy_file(work / "head" / "policy.msgpack", ResidualPolicy(
        FrozenBase(diffusion, path=str(base.resolve())), head, 0.1).weights_message(version=1))
    write_passing_record(path)
    return path


def write_passing_record(policy: Path) -> None:
    """A passing record of franka_fr3's suite (the default one) for the policy, as `robot-rl validate` writes it."""
    from robot_rl.actor.robot_config import resolve_robot_path
    from robot_rl.actor.deploy_gate import file_digest, policy_digest, write_record
    from robot_rl.sim.validation import load_suite

    suite = load_suite("default")
    write_record(policy, {"policy_sha256": policy_digest(policy), "suite": suite.name, "suite_path": suite.path,
                          "suite_sha256": suite.sha256, "thresholds": suite.thresholds, "verdict": "pass",
                          "validated_at": "2025-03-01T09:00:00+00:00",
                          "conditions": [{"condition": c.name, "successes": 50, "episodes": 50}
                                         for c in suite.conditions],
                          "robot_sha256": file_digest(resolve_robot_path("franka_fr3"))})


def client() -> dict:
    from robot_rl.ros.net.env import ensure_ros_environment

    ensure_ros_environment()
    import rclpy
    from std_msgs.msg import UInt8MultiArray

    from robot_rl.ros import qos
    from robot_rl.ros.convert import bytes_to_msg, msg_to_bytes
    from robot_rl.wire.protocol import make_source
    from robot_rl.wire.transitions import StampedTransition, decode_ack, encode_transitions

    work = Path(tempfile.mkdtemp(prefix="ros-node-startup-"))
    # Learners whose agent cannot be built yet: their demo dataset's metadata is a pipe nobody writes to. They start
    # first (the slowest to come up); the other nodes start while they do.
    demos = work / "demos.zarr"
    demos.mkdir()
    os.mkfifo(demos / "zarr.json")
    run_dir = work / "learner"
    learner_log = open(work / "learner.log", "w+")
    learner_command = [sys.executable, "-m", "robot_rl.ros.nodes.learner_node", "--ros-args", "-p", "obs_mode:=state",
                       "-p", f"demo_path:={demos}"]
    learner = subprocess.Popen([*learner_command, "-p", f"run_dir:={run_dir}"],
                               stdout=learner_log, stderr=subprocess.STDOUT, start_new_session=True)
    stopped_log = open(work / "stopped.log", "w+")  # on a domain of its own: it must not acknowledge for the other
    stopped = subprocess.Popen([*learner_command, "-p", f"run_dir:={work / 'stopped'}"],
                               env={**os.environ, "ROS_DOMAIN_ID": sys.argv[2]},
                               stdout=stopped_log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        starts = {name: subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                  for name, command in bad_starts(work).items()}
        gated_logs = {name: open(work / f"{name}.log", "w+") for name in ("validated", "allowed", "validated_head")}
        gated = {name: subprocess.Popen(command, stdout=gated_logs[name], stderr=subprocess.STDOUT, text=True,
                                        start_new_session=True)
                 for name, command in gated_starts(work).items()}
    except BaseException:  # the learners wait on their pipe for ever: not left behind
        for process in (learner, stopped):
            os.killpg(process.pid, signal.SIGKILL)
        raise

    rclpy.init()
    node = rclpy.create_node("startup_client")
    source = make_source("startup")
    acks: list[int] = []

    def on_ack(msg) -> None:
        acks.append(decode_ack(msg_to_bytes(msg)).get(source, -1))

    node.create_subscription(UInt8MultiArray, qos.LEARNER_ACK, on_ack, qos.topic_qos(qos.LEARNER_ACK))
    transitions = node.create_publisher(UInt8MultiArray, qos.ACTOR_TRANSITIONS, qos.topic_qos(qos.ACTOR_TRANSITIONS))
    obs = {"state": np.zeros(14, np.float32), "object_state": np.zeros(10, np.float32)}
    items = [StampedTransition(seq=i, episode=0, step=i, observation=obs, action=np.zeros(4, np.float32),
                               reward=0.0, terminated=False, truncated=False, next_observation=obs) for i in range(5)]
    summary: dict = {}
    try:
        # Ten processes start at once here (JAX, ROS): on 2 loaded cores the learner may take a minute to listen.
        # What is tested is that it acknowledges once it listens, while its agent is still being built.
        deadline = time.monotonic() + 120.0
        while "learner listening" not in (work / "learner.log").read_text() and time.monotonic() < deadline \
                and learner.poll() is None:
            time.sleep(0.2)
        summary["listening_after_s"] = round(time.monotonic() - (deadline - 120.0), 1)
        deadline = min(deadline, time.monotonic() + 30.0)
        while max(acks, default=-1) < items[-1].seq and time.monotonic() < deadline and learner.poll() is None:
            transitions.publish(bytes_to_msg(encode_transitions(source, items)))  # re-sent until acknowledged
            end = time.monotonic() + 0.5
            while time.monotonic() < end:
                rclpy.spin_once(node, timeout_sec=0.05)
        summary["acked_through"] = max(acks, default=-1)
        status_path = run_dir / "learner_status.json"
        end = time.monotonic() + 5.0
        status: dict = {}
        while time.monotonic() < end and status.get("acks", {}).get(source) != items[-1].seq:
            time.sleep(0.2)
            try:
                status = json.loads(status_path.read_text())
            except (OSError, ValueError):
                pass
        summary["status"] = {k: status.get(k) for k in ("learner_ready", "received", "acks", "log_entries")}
        summary["alive_while_blocked"] = learner.poll() is None
        # the other one is stopped while building: it does not wait for the build
        end = time.monotonic() + 30.0
        while "learner listening" not in (work / "stopped.log").read_text() and time.monotonic() < end:
            time.sleep(0.2)
        stopped.send_signal(signal.SIGINT)
        try:
            summary["stopped_exit"] = stopped.wait(timeout=20)
        except subprocess.TimeoutExpired:
            summary["stopped_exit"] = "still running 20 s after SIGINT"
        with open(demos / "zarr.json", "w") as pipe:  # let the build go on: it finds no usable dataset
            pipe.write("not zarr metadata")
        summary["learner_exit"] = learner.wait(timeout=60)
        summary["config_written"] = (run_dir / "config.json").exists()
    finally:
        for process in (learner, stopped):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        stopped_log.seek(0)
        summary["stopped_log"] = node_output(stopped_log.read(), 3000)
        stopped_log.close()
        node.destroy_node()
        rclpy.try_shutdown()
        learner_log.seek(0)
        summary["learner_log"] = node_output(learner_log.read(), 4000)
        learner_log.close()
        summary["bad_starts"] = {}
        for name, process in starts.items():
            try:
                output, _ = process.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                output, _ = process.communicate()
            summary["bad_starts"][name] = {"exit": process.returncode, "output": node_output(output, 3000)}
        summary["gated"] = {}
        for name, process in gated.items():  # up by now, or soon; stopped like a user would
            deadline = time.monotonic() + 60.0
            while "actor up" not in (work / f"{name}.log").read_text() and time.monotonic() < deadline \
                    and process.poll() is None:
                time.sleep(0.2)
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            gated_logs[name].seek(0)
            summary["gated"][name] = {"exit": process.returncode, "output": node_output(gated_logs[name].read(), 4000)}
            gated_logs[name].close()
        summary["never_made"] = not (work / "never").exists()
        shutil.rmtree(work, ignore_errors=True)
    return summary


@pytest.fixture(scope="module")
def summary() -> dict:
    pytest.importorskip("rclpy")
    from ros_harness import run_ros_script

    # The learner stopped while building runs on a domain of its own (the script's second argument).
    result, _, _ = run_ros_script(__file__, "client", DOMAIN_ID, DEADLINE_S, args=[str(allocate_domain_id())])
    return result


def node_output(output: str, characters: int) -> str:
    """The last `characters` of a node's output without Fast DDS's own log lines: a shared-memory port it could not
    lock printed dozens of them, which pushed the node's one error line out of the tail a test kept. A crash dump
    (faulthandler's "Fatal Python error") is kept whole: its first lines say which thread faulted ("Current thread",
    or none for a native thread such as Fast DDS's), and the main thread's stack comes last."""
    text = "\n".join(line for line in output.splitlines() if "RTPS_" not in line)
    crash = text.find("Fatal Python error")
    return text[crash:] if crash >= 0 else text[-characters:]


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if "[ERROR]" in line]


@pytest.mark.parametrize("case, words", [
    ("actor_unvalidated", ["weights_path: policy ", "sac/policy.msgpack has no validation record for robot file ",
                           "robots/franka_fr3.yaml: validate it in the sim mirror first (robot-rl validate --policy ",
                           "allow_unvalidated:=true"]),
    ("actor_open_network", ["network lan (ROBOT_RL_NETWORK=lan) with a real robot's file: any host on the network "
                            "could send this robot the weights it runs; to accept that, launch with "
                            "allow_open_network:=true (ROBOT_RL_ALLOW_OPEN_NETWORK=1), else use network:=secure"]),
    ("learner_open_network", ["network lan (ROBOT_RL_NETWORK=lan) with a real robot's file", "allow_open_network"]),
    ("actor_typo", ["unknown parameter 'episode' for node actor (did you mean 'episodes'?); known: ", "actor_id"]),
    ("actor_type", ["parameter 'episodes' of node actor must be an integer (default 0), got 'abc'"]),
    ("actor_checkpoint", ["weights_path:", "checkpoint/agent.msgpack is a learner checkpoint, not a policy file; "
                                           "pass ", "run/policy.msgpack"]),
    ("actor_missing", ["weights_path: policy file ", "nowhere/policy.msgpack does not exist"]),
    ("actor_ddim_steps_of_sac", ["inference_steps=5: ", "sac/policy.msgpack is a SAC policy file, without DDIM steps"]),
    ("learner_typo", ["unknown parameter 'step' for node learner (did you mean 'steps'?)"]),
    ("learner_value", ["image_size=4 must be in [16, 640]"]),
    ("learner_corrupt_log", ["cannot resume run_dir ", "transition_log/000000000000.msgpack is corrupt (",
                             "move that file out of the log"]),
    ("sim_typo", ["unknown parameter 'sed' for node sim (did you mean 'seed'?)"]),
    ("learner_steps", ["steps=-5 must be >= 0 (steps:=0 means run until stopped)"]),
    ("actor_range", ["invalid parameters of node actor: episodes=-1 must be >= 1 (0: run until stopped); "
                     "weight_wait_s=0.0 must be > 0"]),
    ("sim_image_size", ["image_size=4 must be an int in [16, 640]"]),
    ("teleop_rate", ["rate_hz=0.0 must be a finite number > 0"]),
    ("sim_secure_without_certs", ["ROBOT_RL_NETWORK=secure needs ROBOT_RL_CERTS="]),
    ("link_secure_without_certs", ["ROBOT_RL_NETWORK=secure needs ROBOT_RL_CERTS="]),
])
def test_bad_parameters_and_policy_files_are_one_error_line_and_exit_2(summary, case, words):
    result = summary["bad_starts"][case]
    errors = error_lines(result["output"])
    assert result["exit"] == 2, result
    assert len(errors) == 1 and "Traceback" not in result["output"], result["output"]
    for word in words:
        assert word in errors[0], errors[0]
    if case.startswith("learner"):
        assert summary["never_made"]  # no half-made run folder


def test_a_learner_stopped_while_its_agent_is_being_built_exits_at_once(summary):
    log = summary["stopped_log"]
    assert summary["stopped_exit"] == 0, (summary["stopped_exit"], log)  # its build never ends: it did not wait
    assert "stopping (signal 2) before the learner was ready" in log and "Traceback" not in log, log
    assert "terminate called" not in log, log


def test_learner_acknowledges_and_logs_while_its_agent_is_being_built(summary):
    context = {k: v for k, v in summary.items() if k != "bad_starts"}
    assert summary["acked_through"] == 4, context
    status = summary["status"]
    assert status["learner_ready"] is False and status["received"] == 0, context  # acked, logged, not yet staged
    assert status["log_entries"] >= 1 and list(status["acks"].values()) == [4], context
    assert summary["alive_while_blocked"], context
    log = summary["learner_log"]
    assert "learner listening" in log and "learner ready" not in log, log
    assert summary["learner_exit"] == 2 and len(error_lines(log)) == 1, log
    assert not summary["config_written"], context  # the settings of a run that never started are not recorded
    assert "learner start-up failed" in error_lines(log)[0] and "demos.zarr" in error_lines(log)[0], log
    assert "Traceback" not in log, log


if __name__ == "__main__":
    if sys.argv[1:2] == ["client"]:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        print("RESULT " + json.dumps(client()))


def test_a_real_robot_runs_a_validated_policy_and_an_unvalidated_one_only_when_allowed_loudly(summary):
    validated, allowed = summary["gated"]["validated"], summary["gated"]["allowed"]
    for started in (validated, summary["gated"]["validated_head"]):  # a head on a folder base: its record covers both
        assert "actor up" in started["output"] and started["exit"] == 0, started["output"]
        assert "[ERROR]" not in started["output"], started["output"]
        # the record that let it run, at start-up: suite, date, verdict and successes per condition
        assert "suite default (default.yaml), validated 2025-03-01T09:00:00+00:00, PASS: nominal 50/50, " \
               "camera_pose 50/50, " in started["output"], started["output"]
    assert "actor up" in allowed["output"] and allowed["exit"] == 0, allowed["output"]
    # lan with allow_open_network: it runs, and says once, as a warning, that the network can reach the graph
    assert allowed["output"].count("[WARN]") >= 1 and allowed["output"].count("network lan is open: any host") == 1, \
        allowed["output"]
    loud = [line for line in error_lines(allowed["output"]) if "UNVALIDATED POLICY ON A REAL ROBOT (franka_fr3)" in line]
    assert len(loud) == 1 and "has no validation record" in loud[0], allowed["output"]
