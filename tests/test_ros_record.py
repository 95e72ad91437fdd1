"""`robot-rl record --source ros` records teleoperated demos from a running graph: the sim node (real time, cameras), the
scripted teleop node as the human (it takes over at once and keeps control), and the recorder. The dataset must hold
the episodes with camera frames, intervention flags and increasing timestamps. Runs in a private network namespace
with its own ROS_DOMAIN_ID (tests/ros_harness.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

DOMAIN_ID = 72
DEADLINE_S = 150.0
EPISODES = 2
IMAGE_SIZE = 32


def client() -> dict:
    out = Path(tempfile.mkdtemp(prefix="ros-record-")) / "demos.zarr"
    python = sys.executable
    nodes = [
        subprocess.Popen([python, "-m", "robot_rl.sim.node", "--task", "PickCube-v0", "--mode", "realtime",
                          "--obs-mode", "pixels", "--image-size", str(IMAGE_SIZE), "--seed", "0"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True),
        subprocess.Popen([python, "-m", "robot_rl.sim.scripted_teleop", "--ros-args", "-p", "stuck_window:=2",
                          "-p", "stuck_distance:=10.0", "-p", "takeover_steps:=1000", "-p", "episode_budget:=1000"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True),
    ]
    start = time.monotonic()
    try:
        for line in nodes[1].stderr:  # the human must be watching before the first episode starts
            if "scripted teleop up" in line or time.monotonic() - start > DEADLINE_S / 2:
                break
        threading.Thread(target=nodes[1].stderr.read, daemon=True).start()  # keep its pipe from filling up
        recorder = subprocess.run(
            [python, "-m", "robot_rl.cli", "record", "--source", "ros", "--mode", "realtime", "--obs-mode", "pixels",
             "--episodes", str(EPISODES), "--out", str(out)],
            capture_output=True, text=True, timeout=DEADLINE_S)
    finally:
        for node in nodes:
            os.killpg(node.pid, signal.SIGTERM)
        for node in nodes:
            try:
                node.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(node.pid, signal.SIGKILL)
    summary = {"rc": recorder.returncode, "seconds": time.monotonic() - start, "log": recorder.stderr[-2500:]}
    if recorder.returncode == 0:
        from robot_rl.data.episodes import EpisodeDataset

        dataset = EpisodeDataset(out)
        summary["episodes"] = dataset.num_episodes
        summary["per_episode"] = []
        for index in range(dataset.num_episodes):
            episode = dataset.episode(index)
            summary["per_episode"].append({
                "steps": int(len(episode["action"])), "success": bool(episode["success"]),
                "interventions": int(np.sum(episode["intervention"])),
                # the human's recorded actions move the arm (a hold would be all-zero translation)
                "human_moves": int(np.sum(np.abs(episode["action"][episode["intervention"], :3]).max(axis=-1) > 1e-3)),
                "timestamps_increase": bool(np.all(np.diff(episode["timestamp"]) > 0)),
                "image_shape": list(episode["obs"]["images/front"].shape[1:]),
                "keys": sorted(episode["obs"]),
            })
    return summary


def test_record_teleoperated_demos_from_a_running_graph():
    from ros_harness import run_ros_script

    summary, stderr, _ = run_ros_script(__file__, "client", DOMAIN_ID, DEADLINE_S + 30)
    assert summary["rc"] == 0, summary
    assert summary["episodes"] == EPISODES, summary
    for episode in summary["per_episode"]:
        assert episode["keys"] == ["images/front", "images/wrist", "state"], summary
        assert episode["image_shape"] == [IMAGE_SIZE, IMAGE_SIZE, 3], summary
        assert episode["timestamps_increase"], summary
        # the human takes over after a few steps (the stuck rule needs two frames) and keeps control: most are flagged
        assert episode["interventions"] >= episode["steps"] / 2 > 0, summary
        assert episode["human_moves"] >= episode["interventions"] / 2, summary
    # Whether the scripted human finishes the task in 50 steps depends on how its replies fall between the actor's
    # and the sim's unsynchronised 10 Hz ticks: success is reported, not required.


if __name__ == "__main__":
    if sys.argv[1:] == ["client"]:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        print("RESULT " + json.dumps(client()))
