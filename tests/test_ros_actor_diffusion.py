"""The ROS actor runs a diffusion policy folder end to end against the sim mirror publishing like real drivers
(robots/sim_panda_driver.yaml: real time at 10 Hz, 640x480 cameras, joint_states, JointTrajectory commands).

Chunks are computed in a worker thread while the current one executes: after the first chunk (the episode's first
step holds for it) no step holds, no stale action is executed, and each chunk starts at the action due when it arrived.
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
from pathlib import Path

DOMAIN_ID = 57
DEADLINE_S = 150.0
ROBOT = "sim_panda_driver"


def diffusion_policy_folder(folder: Path) -> Path:
    """An untrained pixel diffusion policy (default network) for the robot file's two cameras and the state."""
    import numpy as np

    from robot_rl.policies.config import DiffusionConfig
    from robot_rl.policies.diffusion import DiffusionPolicy
    from robot_rl.policies.normalizer import Normalizer
    from robot_rl.ros.learner_node import robot_task_spaces

    spec, action_dim = robot_task_spaces(ROBOT, "pixels", 64)
    rng = np.random.default_rng(0)
    normalizer = Normalizer().fit({"state": rng.standard_normal((50, spec["state"].shape[0])).astype(np.float32),
                                   "action": rng.uniform(-0.3, 0.3, (50, action_dim)).astype(np.float32)})
    policy = DiffusionPolicy.create(DiffusionConfig(), spec, action_dim, normalizer)
    return policy.save(folder)


def client() -> dict:
    from robot_rl.ros.env import ensure_ros_environment

    ensure_ros_environment()
    work = Path(tempfile.mkdtemp(prefix="ros-diffusion-"))
    policy = diffusion_policy_folder(work / "policy")
    logs = {name: open(work / f"{name}.log", "w+") for name in ("sim", "actor")}

    def start(name: str, argv: list[str]) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", *argv], stdout=logs[name], stderr=subprocess.STDOUT,
                                start_new_session=True)

    nodes = {"sim": start("sim", ["robot_rl.sim.node", "--task", "PickCube-v0", "--seed", "1", "--ros-args",
                                  "-p", f"robot:={ROBOT}"])}
    summary: dict = {}
    stats = work / "actor.json"
    try:
        nodes["actor"] = start("actor", [
            "robot_rl.ros.actor_node", "--ros-args", "-p", f"robot:={ROBOT}", "-p", "obs_mode:=pixels",
            "-p", f"weights_path:={policy}", "-p", "device:=cpu", "-p", "inference_steps:=3", "-p", "deterministic:=true",
            "-p", "stream_transitions:=false", "-p", "episodes:=1", "-p", f"stats_path:={stats}"])
        summary["actor_exit"] = nodes["actor"].wait(timeout=DEADLINE_S)
        summary["actor"] = json.loads(stats.read_text()) if stats.exists() else {}
    finally:
        for process in nodes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGINT)
        for process in nodes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        for name, log in logs.items():
            log.seek(0)
            summary[f"{name}_log"] = log.read()[-3000:]
            log.close()
        shutil.rmtree(work, ignore_errors=True)
    return summary


def test_the_ros_actor_runs_a_diffusion_policy_in_real_time():
    from ros_harness import run_ros_script

    summary, stderr, _ = run_ros_script(__file__, "client", DOMAIN_ID, DEADLINE_S + 60)
    actor = summary["actor"]
    assert summary["actor_exit"] == 0, summary["actor_log"]
    log = summary["actor_log"]
    assert "policy diffusion (DDIM-3) loaded from" in log and "worker thread" in log
    assert actor["episodes"] == 1 and actor["transitions"] >= 45, actor  # 50 steps (PickCube-v0)
    chunks = actor["chunks"]
    assert chunks["added"] >= 6 and chunks["executed"] >= 45, chunks  # 8-action chunks, planned ahead
    # only the episode's first step(s) waited for a chunk; nothing else held the robot
    assert actor["policy_late"] <= 3 and actor["held"] == actor["policy_late"], actor
    assert actor["rejected"] == {} and actor["incompatible_qos"] == {}, actor


if __name__ == "__main__":
    if sys.argv[1:] == ["client"]:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        print("RESULT " + json.dumps(client()))
