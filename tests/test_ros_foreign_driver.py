"""The actor against drivers that publish like real ones: the sim node in driver mode (robots/sim_panda_driver.yaml:
640x480 bgr8 best-effort camera, JPEG CompressedImage wrist camera, joint_states with finger joints, no TCP pose or
twist, JointTrajectory commands), configured by the robot file alone: the scripted human (the expert's hands) records
demos through it (in lock-step): its twist becomes the actor's safe target, the target becomes joint commands by
differential IK, the sim follows them, and the task is solved.

A pixel policy driving it at 10 Hz from the first step of its episode to the last without a hold is tested with the
launch file that does it on a robot: tests/test_launch.py::test_robot_run_acts_with_a_saved_policy_on_stand_in_drivers.

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

from ros_harness import allocate_domain_id

DOMAIN_ID = allocate_domain_id()
DEADLINE_S = 200.0
ROBOT = "sim_panda_driver"
SEED = 3


def client() -> dict:
    from robot_rl.ros.net.env import ensure_ros_environment

    ensure_ros_environment()
    from robot_rl.data.episodes import EpisodeDataset

    work = Path(tempfile.mkdtemp(prefix="ros-foreign-"))
    python = sys.executable
    logs = {name: open(work / f"{name}.log", "w+") for name in ("sim", "human", "recorder")}

    def start(name: str, argv: list[str]) -> subprocess.Popen:
        return subprocess.Popen([python, "-m", *argv], stdout=logs[name], stderr=subprocess.STDOUT,
                                start_new_session=True)

    def status(path: Path) -> dict:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return {}

    nodes = {
        # demos in lock-step: the scripted human answers each frame with that step's expert displacement; in real
        # time both demos failed in some full-suite runs (suspected: the answer lands before or after the actor's
        # tick depending on the two timers' phase)
        "sim": start("sim", ["robot_rl.sim.node", "--task", "PickCube-v0", "--seed", str(SEED), "--mode", "lockstep",
                             "--ros-args", "-p", f"robot:={ROBOT}"]),
        "human": start("human", ["robot_rl.sim.scripted_teleop", "--ros-args", "-p", f"robot:={ROBOT}",
                                 "-p", "stuck_window:=2", "-p", "stuck_distance:=10.0", "-p", "takeover_steps:=1000",
                                 "-p", "episode_budget:=1000"]),
    }
    summary: dict = {}
    try:
        # 1. demos through the foreign interfaces, the human at the controls
        demos, recorder_stats = work / "demos.zarr", work / "recorder.json"
        nodes["recorder"] = start("recorder", [
            "robot_rl.ros.nodes.actor_node", "--ros-args", "-r", "__node:=recorder", "-p", f"robot:={ROBOT}",
            "-p", "obs_mode:=pixels", "-p", "mode:=lockstep", "-p", "policy:=none", "-p", "stream_transitions:=false",
            "-p", "episodes:=2",
            "-p", f"record_path:={demos}", "-p", f"stats_path:={recorder_stats}"])
        summary["recorder_exit"] = nodes["recorder"].wait(timeout=DEADLINE_S / 2)
        summary["recorder"] = status(recorder_stats)
        if demos.exists():
            dataset = EpisodeDataset(demos)
            summary["demo_episodes"] = dataset.num_episodes
            summary["demo_success"] = [bool(dataset.episode(i)["success"]) for i in range(dataset.num_episodes)]
            episode = dataset.episode(0)
            summary["demo_image_shape"] = list(episode["obs"]["images/front"].shape[1:])
            summary["demo_intervention"] = float(episode["intervention"].mean())
            attrs = dataset.attrs
            summary["demo_robot"] = attrs.get("robot_config", {}).get("name")
            summary["demo_transform"] = attrs.get("image_transforms", {}).get("images/front")
    finally:
        for process in nodes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGINT)
        for name, process in nodes.items():
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


def test_actor_drives_a_foreign_driver_from_the_robot_file():
    from ros_harness import run_ros_script

    summary, stderr, _ = run_ros_script(__file__, "client", DOMAIN_ID, DEADLINE_S + 60)
    assert summary["recorder_exit"] == 0, summary["recorder_log"]
    assert summary["demo_episodes"] == 2, summary
    # the expert's twist, through IK and joint commands, solved it (on failure: what each node said, in full)
    assert any(summary["demo_success"]), "\n\n".join(
        [json.dumps(summary["recorder"])] + [f"--- {name} log ---\n{summary[f'{name}_log']}"
                                            for name in ("recorder", "human", "sim")])
    assert summary["demo_image_shape"] == [64, 64, 3], summary  # 640x480 frames cropped and resized
    assert summary["demo_intervention"] >= 0.5, summary
    assert summary["demo_robot"] == ROBOT, summary
    assert summary["demo_transform"]["fit"] == "crop", summary


if __name__ == "__main__":
    if sys.argv[1:] == ["client"]:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        print("RESULT " + json.dumps(client()))
